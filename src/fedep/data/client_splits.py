"""Federated training protocols on a loaded dataset, with a validation split.

:func:`make_client_split` partitions the *training* rows of a
:class:`~fedep.data.datasets.Dataset` among clients, carves a labelled validation set
out of each client's training rows (never out of the test set, so thresholds and model
choices can be made without touching test data, cf. the paper notes' evaluation
pitfalls), and applies a training protocol:

``clean``
    Each client trains on the *normal* rows of its training part only (the usual
    one-class anomaly-detection setting: labels are used to select normal traffic).
``contaminated``
    Each client trains on *all* rows of its training part, attacks included, and no
    label is used in training (robust/unsupervised setting).

In both protocols the validation rows keep both classes and their labels.

Validation split: per client, ``validation_size`` of the client's rows, stratified by
the 0/1 label when the client holds at least two rows of each class (otherwise a plain
seeded random split); a client with fewer than 2 rows keeps them all for training.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedep._names import PARTITIONS
from fedep.data.datasets import Dataset
from fedep.data.partition import partition_dirichlet, partition_iid, partition_sorted

__all__ = ["ClientSplit", "make_client_split"]

PROTOCOLS = ("clean", "contaminated")


@dataclass
class ClientSplit:
    """Federated training data, validation and test sets.

    Attributes
    ----------
    X_train : ndarray of shape (n_train, n_features)
        Training rows after the protocol (clean: normal rows only).
    groups_train : ndarray of int, shape (n_train,)
        Client of each training row.
    X_val, y_val, groups_val : ndarrays
        Labelled validation rows carved from the training rows, with their clients.
    X_test, y_test, category_test : ndarrays
        The dataset's test set, untouched.
    groups_test : ndarray of int or None
        For ``partition="sorted"``: the client whose key range covers each test row
        (the upper key bound of each training chunk); None otherwise.
    y_train : ndarray of int
        Labels of the training rows (all 0 under ``clean``); not for training under
        ``contaminated``, kept for diagnostics.
    info : dict
        Parameters and per-client counts.
    """

    X_train: np.ndarray
    groups_train: np.ndarray
    X_val: np.ndarray
    y_val: np.ndarray
    groups_val: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    category_test: np.ndarray
    groups_test: np.ndarray | None
    y_train: np.ndarray
    feature_names: list[str]
    info: dict[str, Any] = field(default_factory=dict)


def _split_client(
    rows: np.ndarray, y: np.ndarray, validation_size: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    n = len(rows)
    n_val = int(round(validation_size * n))
    if n < 2 or n_val == 0:
        return rows, rows[:0]
    n_val = min(n_val, n - 1)
    yc = y[rows]
    counts = np.bincount(yc, minlength=2)
    if counts.min() >= 2:
        val_parts = []
        for c in (0, 1):
            rc = rng.permutation(rows[yc == c])
            k = int(round(validation_size * len(rc)))
            k = min(max(k, 1), len(rc) - 1)
            val_parts.append(rc[:k])
        val = np.concatenate(val_parts)
    else:
        val = rng.permutation(rows)[:n_val]
    train = np.setdiff1d(rows, val, assume_unique=True)
    return train, np.sort(val)


def make_client_split(
    dataset: Dataset,
    n_clients: int,
    partition: str = "sorted",
    partition_key: str = "dst_bytes",
    protocol: str = "clean",
    validation_size: float = 0.2,
    random_state: int = 0,
    *,
    concentration: float = 0.5,
    min_train_rows: int = 10,
) -> ClientSplit:
    """Partition a dataset's training rows among clients and apply a protocol.

    Parameters
    ----------
    dataset : Dataset
        From :func:`~fedep.data.datasets.load_dataset`.
    n_clients : int
    partition : {"sorted", "dirichlet", "iid"}, default="sorted"
        ``sorted``: by ``partition_key`` (the paper's split); ``dirichlet``: label skew
        over ``dataset.category_train`` with concentration ``concentration``; ``iid``.
    partition_key : str, default="dst_bytes"
        Column of ``dataset.raw_train`` for ``sorted`` (must be numeric).
    protocol : {"clean", "contaminated"}, default="clean"
        See module docstring.
    validation_size : float, default=0.2
        Fraction of each client's training rows held out for validation, in [0, 1).
    random_state : int, default=0
    concentration : float, default=0.5
        Dirichlet concentration.
    min_train_rows : int, default=10
        Each client must keep at least this many training rows after the protocol.

    Returns
    -------
    ClientSplit

    Raises
    ------
    ValueError
        Bad parameters, or a client with fewer than ``min_train_rows`` training rows
        (the message names the client).
    """
    if partition not in PARTITIONS:
        raise ValueError(f"partition must be one of {PARTITIONS}; got {partition!r}")
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {PROTOCOLS}; got {protocol!r}")
    if not 0.0 <= validation_size < 1.0:
        raise ValueError(f"validation_size must be in [0, 1); got {validation_size!r}")
    n = len(dataset.y_train)
    groups_test = None
    if partition == "sorted":
        if partition_key not in dataset.raw_train.columns:
            raise ValueError(
                f"partition_key {partition_key!r} is not a raw column of {dataset.name}"
            )
        key = dataset.raw_train[partition_key].to_numpy()
        if key.dtype.kind not in "fiub":
            raise ValueError(f"partition_key {partition_key!r} must be numeric")
        groups = partition_sorted(key, n_clients)
        upper = np.array([key[groups == k].max() for k in range(n_clients)], dtype=float)
        tkey = dataset.raw_test[partition_key].to_numpy(dtype=float)
        groups_test = np.searchsorted(upper[:-1], tkey, side="left").astype(np.int64)
    elif partition == "dirichlet":
        groups = partition_dirichlet(dataset.category_train, n_clients, concentration, random_state)
    else:
        groups = partition_iid(n, n_clients, random_state)

    rng = np.random.default_rng(random_state)
    y = np.asarray(dataset.y_train, dtype=np.int64)
    train_rows, val_rows = [], []
    for k in range(n_clients):
        tr, va = _split_client(np.flatnonzero(groups == k), y, validation_size, rng)
        if protocol == "clean":
            tr = tr[y[tr] == 0]
        if len(tr) < min_train_rows:
            raise ValueError(
                f"client {k} has only {len(tr)} training rows under protocol {protocol!r} "
                f"(partition {partition!r}, {int((groups == k).sum())} rows before the "
                f"validation split); need at least {min_train_rows}: use fewer clients or "
                "another partition"
            )
        train_rows.append(tr)
        val_rows.append(va)
    tr_idx = np.concatenate(train_rows)
    va_idx = np.concatenate(val_rows)
    return ClientSplit(
        X_train=dataset.X_train[tr_idx],
        groups_train=groups[tr_idx],
        X_val=dataset.X_train[va_idx],
        y_val=y[va_idx],
        groups_val=groups[va_idx],
        X_test=dataset.X_test,
        y_test=dataset.y_test,
        category_test=dataset.category_test,
        groups_test=groups_test,
        y_train=y[tr_idx],
        feature_names=list(dataset.feature_names),
        info={
            "n_clients": n_clients,
            "partition": partition,
            "partition_key": partition_key if partition == "sorted" else None,
            "protocol": protocol,
            "validation_size": validation_size,
            "random_state": random_state,
            "concentration": concentration if partition == "dirichlet" else None,
            "train_rows_per_client": [len(t) for t in train_rows],
            "val_rows_per_client": [len(v) for v in val_rows],
            "train_row_index": tr_idx,
            "val_row_index": va_idx,
        },
    )

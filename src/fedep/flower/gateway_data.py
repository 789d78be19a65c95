"""A gateway's own records, loaded from its node configuration.

A gateway (a Flower SuperNode) holds either a raw table (``data-path``: the user's
file, any format :func:`fedep.data.readers.read_table` reads; or a partition of an
official dataset with ``feature-set='generic'``), for the federated feature pipeline,
or numeric features (a partition with ``feature-set`` ``'rich'`` or ``'paper'``, or a
synthetic gateway drawn from ``synthetic-seed``, for tests and demos). The records
never leave the gateway; every error is a one-line :class:`GatewayDataError`.

The readers (pandas, :mod:`fedep.data`) are imported when a gateway reads its records:
Flower starts a ClientApp process per message, and most messages read none.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from fedep._errors import one_line
from fedep._names import DATASET_FEATURE_SETS, DEFAULT_FEATURE_SET

__all__ = [
    "GatewayDataError",
    "holds_table",
    "load_gateway_data",
    "load_gateway_table",
    "sort_labels",
]


class GatewayDataError(ValueError):
    """The gateway's records cannot be loaded; the message is one line naming the problem."""


def load_gateway_data(node_config: dict) -> tuple[np.ndarray, str, list[str] | None]:
    """The gateway's own training records, from its node configuration.

    Either ``data-path`` (a CSV/Parquet table read by :func:`fedep.data.load_csv`;
    optional ``label-column`` + ``normal-label`` keep the normal rows only,
    ``client-label`` names the gateway, default the file stem), or ``dataset``
    (``nsl-kdd``, ``unsw-nb15``, ``ton-iot``) with ``partition-id`` and
    ``num-partitions``: the normal training rows of the official split, shuffled with
    ``seed`` (default 0), cut to ``max-rows`` (optional, before partitioning) and split
    into ``num-partitions`` contiguous parts (``data-dir`` optional, else
    ``FEDEP_DATA_DIR``), as numeric features when ``feature-set`` is ``'rich'`` or
    ``'paper'`` (``'generic'``, the default, is a raw table: :func:`load_gateway_table`).
    ``synthetic-seed`` with ``partition-id`` draws a synthetic gateway (tests, demos).

    Returns
    -------
    X : ndarray of shape (n_rows, n_features)
    label : str
        The client id used to order clients on the server (partition ids sort
        numerically).
    feature_names : list of str or None

    Raises
    ------
    GatewayDataError
        (a ``ValueError``) with a one-line message naming the file, dataset or node
        config key and the problem: a missing or unreadable file, a malformed table, no
        rows, non-finite values, a bad node config.
    """
    try:
        X, label, names = _load_gateway_data(dict(node_config))
    except GatewayDataError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise GatewayDataError(f"gateway data: {one_line(exc)}") from exc
    where = node_config.get("data-path") or node_config.get("dataset") or "synthetic"
    if X.ndim != 2 or X.shape[0] == 0 or X.shape[1] == 0:
        raise GatewayDataError(f"gateway data: {where}: no records ({X.shape[0]} rows)")
    if not np.isfinite(X).all():
        raise GatewayDataError(f"gateway data: {where}: non-finite values (NaN or inf)")
    return X, label, names


def holds_table(node_config: dict) -> bool:
    """Whether the gateway's records are a raw table (``data-path``, or a partition of an
    official dataset with ``feature-set='generic'``, the default) rather than numeric
    features (a partition with ``feature-set`` ``'rich'`` or ``'paper'``, a synthetic
    gateway)."""
    cfg = dict(node_config)
    return "data-path" in cfg or (_is_partition(cfg) and _feature_set(cfg) == "generic")


def _is_partition(cfg: dict) -> bool:
    """A partition of an official dataset (not a file, not a synthetic gateway)."""
    return "data-path" not in cfg and "partition-id" in cfg and "synthetic-seed" not in cfg


def _feature_set(cfg: dict) -> str:
    fs = str(cfg.get("feature-set", DEFAULT_FEATURE_SET))
    if fs not in DATASET_FEATURE_SETS:
        raise GatewayDataError(
            f"gateway data: feature-set must be one of {', '.join(DATASET_FEATURE_SETS)}; "
            f"got {fs!r}"
        )
    return fs


def _table_label(cfg: dict, path: str) -> str:
    from fedep.data.readers import gateway_id  # start-up time: see the module docstring

    return str(cfg.get("client-label", gateway_id(path)))


def load_gateway_table(node_config: dict):
    """The gateway's raw training table (``data-path``, or an official dataset's
    partition with ``feature-set='generic'``: the rows :func:`load_gateway_data` would
    give, every column but the labels), for the feature pipeline.

    The file is read by :func:`fedep.data.read_table` (CSV/TSV, Zeek TSV or JSON logs,
    Parquet, Arrow; node config ``format``, ``delimiter`` and ``infinity`` as its
    options). With ``label-column`` the rows labelled as attacks are dropped (labels 0/1,
    or every value but ``normal-label``) and the column is removed: it is never a
    feature. The table stays on the gateway.

    Returns
    -------
    frame : DataFrame of shape (n_rows, n_columns)
        Index ``0 .. n_rows-1``.
    label : str
        The client id (``client-label``, default the file name without its suffixes).

    Raises
    ------
    GatewayDataError
        One line naming the file and the problem (missing or unreadable file, no rows,
        a bad label column, a file that is not a table).
    """
    cfg = dict(node_config)
    path = str(cfg.get("data-path", ""))
    key = _partition_key(cfg) if _is_partition(cfg) else _table_key(cfg, [path])
    hit = _TABLE_CACHE.get("table")
    if key is not None and hit is not None and hit[0] == key:
        return hit[1].copy(), hit[2]
    if _is_partition(cfg):
        df, label = _partition_table(cfg)
        if key is not None:
            _TABLE_CACHE["table"] = (key, df.copy(), label)
        return df, label
    try:
        df = _load_gateway_table(cfg, path)
    except GatewayDataError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise GatewayDataError(f"gateway data: {one_line(exc)}") from exc
    if df.shape[0] == 0 or df.shape[1] == 0:
        raise GatewayDataError(
            f"gateway data: {path}: no records ({df.shape[0]} rows, {df.shape[1]} columns)"
        )
    label = _table_label(cfg, path)
    if key is not None:
        _TABLE_CACHE["table"] = (key, df.copy(), label)
    return df, label


#: The last table read, kept by a long-running ClientApp process
#: (:mod:`fedep.flower.executor`) between the messages of a run: ``(key, frame, label)``.
_TABLE_CACHE: dict[str, tuple] = {}


def _table_key(cfg: dict, paths: list) -> tuple | None:
    """What identifies a read of ``paths`` with ``cfg``: the node config and each file's
    identity (device, inode, size, modification time in ns); None when one cannot be
    stat'ed (the read then fails with its own message)."""
    stats = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            return None
        stats.append((str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(sorted((k, str(v)) for k, v in cfg.items())), tuple(stats)


def _partition_key(cfg: dict) -> tuple | None:
    """:func:`_table_key` of an official dataset's partition: its files in the data
    directory (those present)."""
    # start-up time: see the module docstring
    from fedep.data.dataset_files import KNOWN_FILES, resolve_data_dir

    try:
        root = Path(cfg.get("data-dir") or resolve_data_dir(None))
    except (OSError, ValueError):
        return None
    name = str(cfg.get("dataset", "nsl-kdd"))
    files = [root / rel for rel, (ds, _) in KNOWN_FILES.items() if ds == name]
    return _table_key(cfg, [f for f in files if f.is_file()] or [root])


def _load_gateway_table(cfg: dict, path: str):
    from fedep.data.readers import read_table  # start-up time: see the module docstring

    if not Path(path).is_file():
        raise GatewayDataError(f"gateway data: {path}: no such file")
    kw = {k.replace("-", "_"): str(cfg[k]) for k in ("format", "delimiter", "infinity") if k in cfg}
    df = read_table(path, **kw)
    # A binary file read as text gives control characters in the header: not a table.
    bad = [c for c in map(str, df.columns) if any(ord(ch) < 32 for ch in c)]
    if bad:
        raise GatewayDataError(
            f"gateway data: {path}: not a flow table (control characters in column {bad[0]!r})"
        )
    col = cfg.get("label-column") or None
    if "normal-label" in cfg and col is None:
        raise GatewayDataError(f"gateway data: {path}: normal-label needs label-column")
    if col is not None:
        col = str(col)
        if col not in df.columns:
            raise GatewayDataError(
                f"gateway data: {path}: label-column {col!r} is not a column "
                f"(columns: {[str(c) for c in df.columns]})"
            )
        from fedep.data.labels import labels_of  # start-up time: see the module docstring

        y = labels_of(df[col], cfg.get("normal-label"), path, col)
        df = df.loc[y == 0].drop(columns=[col]).reset_index(drop=True)
    return df


def _load_gateway_data(cfg: dict) -> tuple[np.ndarray, str, list[str] | None]:
    if "data-path" in cfg:
        from fedep.data import load_csv  # start-up time: see the module docstring

        path = str(cfg["data-path"])
        if not Path(path).is_file():
            raise GatewayDataError(f"gateway data: {path}: no such file")
        tab = load_csv(
            path,
            label_column=cfg.get("label-column") or None,
            normal_label=cfg.get("normal-label") if "normal-label" in cfg else None,
        )
        X = tab.X if tab.y is None else tab.X[tab.y == 0]
        label = _table_label(cfg, path)
        return np.asarray(X, dtype=float), label, list(tab.feature_names)
    if "partition-id" not in cfg:
        raise GatewayDataError(
            "gateway data: node config needs data-path='file.csv' or partition-id=i "
            f"num-partitions=d (with dataset='nsl-kdd' or synthetic-seed=s); got {sorted(cfg)}"
        )
    pid = int(cfg["partition-id"])
    label = str(cfg.get("client-label", pid))
    if "synthetic-seed" in cfg:
        return _synthetic_records(cfg, pid), label, None
    _partition_index(cfg)
    fs = _feature_set(cfg)
    if fs == "generic":
        raise GatewayDataError(
            f"gateway data: dataset {cfg.get('dataset', 'nsl-kdd')}: feature-set 'generic' "
            "is the raw table through the feature pipeline (run config features='auto', "
            "the default); feature-set 'rich' or 'paper' gives numeric features"
        )
    ds, rows = _partition_rows(cfg, fs)
    return ds.X_train[rows], label, list(ds.feature_names)


def _partition_rows(cfg: dict, feature_set: str):
    """The official dataset and the training rows of partition ``partition-id``: the
    normal rows, shuffled with ``seed``, cut to ``max-rows``, split into
    ``num-partitions`` contiguous parts (in file order within a part)."""
    from fedep.data import load_dataset  # start-up time: see the module docstring

    pid, d = _partition_index(cfg)
    ds = load_dataset(
        str(cfg.get("dataset", "nsl-kdd")), cfg.get("data-dir") or None, feature_set=feature_set
    )
    normal = np.flatnonzero(ds.y_train == 0)
    order = np.random.default_rng(int(cfg.get("seed", 0))).permutation(normal.size)
    if "max-rows" in cfg:
        order = order[: int(cfg["max-rows"])]
    return ds, normal[np.sort(np.array_split(order, d)[pid])]


def _partition_index(cfg: dict) -> tuple[int, int]:
    """``(partition-id, num-partitions)``, checked."""
    if "num-partitions" not in cfg:
        raise GatewayDataError("gateway data: partition-id needs num-partitions")
    pid, d = int(cfg["partition-id"]), int(cfg["num-partitions"])
    if not 0 <= pid < d:
        raise GatewayDataError(f"gateway data: partition-id must be in [0, {d}); got {pid}")
    return pid, d


def _partition_table(cfg: dict):
    """The raw training table of an official dataset's partition (``feature-set``
    ``'generic'``): the same rows as :func:`_partition_rows`, every column but the labels,
    as the gateway's own file would hold them."""
    try:
        # the cheap paper matrix carries the labels and the row order of the raw table
        ds, rows = _partition_rows(cfg, "paper")
    except GatewayDataError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise GatewayDataError(f"gateway data: {one_line(exc)}") from exc
    df = ds.raw_inputs()[0].iloc[rows].reset_index(drop=True)
    return df, str(cfg.get("client-label", cfg["partition-id"]))


def sort_labels(labels: list[str]) -> list[str]:
    """Client order: numeric labels numerically, else as strings (like ``np.unique``)."""
    try:
        return sorted(labels, key=lambda s: float(s))
    except ValueError:
        return sorted(labels)


def _synthetic_records(cfg: dict, pid: int) -> np.ndarray:
    """A synthetic gateway's records (tests, demos): ``n-rows`` (default ``60 + 17 *
    partition-id``) rows of ``n-features`` (default 12) features near a rank-3 subspace
    shared by every gateway of ``synthetic-seed``, shifted by ``0.5 * partition-id``."""
    seed = int(cfg["synthetic-seed"])
    rng = np.random.default_rng([seed, pid])
    n = int(cfg.get("n-features", 12))
    rows = int(cfg.get("n-rows", 60 + 17 * pid))
    basis = np.linalg.qr(np.random.default_rng(seed).normal(size=(n, 3)))[0]
    X = rng.normal(size=(rows, 3)) @ basis.T * 3.0 + 0.3 * rng.normal(size=(rows, n))
    return X + 0.5 * pid

"""Data access of the reproduction: datasets, client splits, the synthetic fallback.

Splits are built only when a cell must be computed (a fully cached run reads no
split); :func:`split_info` is itself stored as a cell so that a report regenerated
from the cache still describes every split.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pandas as pd

from fedep._names import DATASET_FEATURE_SETS as FEATURE_SETS
from fedep.data import (
    ClientSplit,
    Dataset,
    DatasetNotFoundError,
    load_dataset,
    make_federated_data,
)
from fedep.evaluation.experiment import prepare_split, subsample_split

__all__ = ["FEATURE_SETS", "Data", "synthetic_split", "split_info"]


def synthetic_split(seed: int, n_clients: int = 20, rank: int = 5) -> ClientSplit:
    """Synthetic federation as a ClientSplit: validation = a disjoint half of the
    generated labelled hold-out (per client), test = the other half."""
    fed = make_federated_data(
        n_clients=n_clients,
        n_features=30,
        n_components=rank,
        n_samples=(150, 300),
        n_test_per_client=100,
        anomaly_scale=0.4,
        random_state=seed,
    )
    rng = np.random.default_rng(seed + 1000)
    val = np.zeros(len(fed.y_test), dtype=bool)
    for g in np.unique(fed.groups_test):
        rows = np.flatnonzero(fed.groups_test == g)
        val[rng.permutation(rows)[: rows.size // 2]] = True
    te = ~val
    return ClientSplit(
        X_train=fed.X_train,
        groups_train=fed.groups_train,
        X_val=fed.X_test[val],
        y_val=fed.y_test[val],
        groups_val=fed.groups_test[val],
        X_test=fed.X_test[te],
        y_test=fed.y_test[te],
        category_test=np.where(fed.y_test[te] == 1, "anomaly", "normal").astype(object),
        groups_test=fed.groups_test[te],
        y_train=np.zeros(len(fed.X_train), dtype=np.int64),
        feature_names=[f"x{j}" for j in range(fed.X_train.shape[1])],
        info={
            "n_clients": n_clients,
            "partition": "synthetic",
            "protocol": "synthetic",
            "fallback": None,
        },
    )


#: Feature sets of the reproduction: the dataset loader's two hand-written
#: specifications, and ``"generic"``, the raw tables through the automatic feature
#: pipeline as a user's files (:meth:`fedep.data.Dataset.raw_inputs`).


def _row_ids(ds: Dataset) -> Dataset:
    """``ds`` with one feature, the row number, so that the numeric split machinery
    (partition, protocol, subsampling) picks rows that :func:`_raw_split` then takes
    from the raw tables."""
    return dataclasses.replace(
        ds,
        X_train=np.arange(len(ds.y_train), dtype=float)[:, None],
        X_test=np.arange(len(ds.y_test), dtype=float)[:, None],
        feature_names=["row"],
    )


def _raw_split(sp: ClientSplit, ds: Dataset) -> ClientSplit:
    """A split of row numbers (from :func:`_row_ids`) as raw DataFrames."""
    train, test = ds.raw_inputs()

    def rows(frame: pd.DataFrame, ids: np.ndarray) -> pd.DataFrame:
        return frame.iloc[np.asarray(ids[:, 0], dtype=np.int64)].reset_index(drop=True)

    return dataclasses.replace(
        sp,
        X_train=rows(train, sp.X_train),
        X_val=rows(train, sp.X_val),
        X_test=rows(test, sp.X_test),
        feature_names=list(train.columns),
        info={**sp.info, "feature_set": "generic"},
    )


class Data:
    """Lazy access to datasets and splits (loaded only when a cell must be computed).

    ``feature_set="generic"`` splits hold the raw tables (DataFrames, label columns
    removed) on the same rows as the other feature sets' splits of the same seed.
    """

    def __init__(self, data_dir, names, cfg, feature_set: str = "paper"):
        if feature_set not in FEATURE_SETS:
            raise ValueError(f"feature_set must be one of {FEATURE_SETS}; got {feature_set!r}")
        self.data_dir = data_dir
        self.cfg = cfg
        self.feature_set = feature_set
        self._ds: dict[str, Any] = {}
        self._splits: dict[tuple, ClientSplit] = {}
        self.missing: dict[str, str] = {}
        self.names: list[str] = []
        # The generic path encodes the raw tables itself: load the cheap spec for the
        # labels and frames.
        spec = "paper" if feature_set == "generic" else feature_set
        for n in names:
            try:
                self._ds[n] = load_dataset(n, data_dir, feature_set=spec)
                self.names.append(n)
            except DatasetNotFoundError as e:
                self.missing[n] = str(e).splitlines()[0]
        self.source = "real" if self.names else "synthetic"
        if not self.names:
            self.names = ["synthetic"]

    def dataset(self, name):
        return self._ds.get(name)

    def split(self, name, protocol, seed, *, n_clients=None, max_train_rows="cfg"):
        n_clients = n_clients or self.cfg["n_clients"]
        mtr = self.cfg["max_train_rows"] if max_train_rows == "cfg" else max_train_rows
        key = (name, protocol, seed, n_clients, mtr)
        if key in self._splits:
            return self._splits[key]
        generic = self.feature_set == "generic" and name != "synthetic"
        if name == "synthetic":
            sp = synthetic_split(seed, n_clients, self.cfg["rank"])
        else:
            ds = _row_ids(self._ds[name]) if generic else self._ds[name]
            sp = prepare_split(ds, n_clients, protocol, seed)
            sp = subsample_split(sp, mtr, self.cfg["max_val_rows"], seed)
            mt = self.cfg.get("max_test_rows")
            if mt is not None and len(sp.y_test) > mt:
                rng = np.random.default_rng(seed)
                keep = np.sort(rng.choice(len(sp.y_test), size=mt, replace=False))
                sp.X_test, sp.y_test = sp.X_test[keep], sp.y_test[keep]
                sp.category_test = sp.category_test[keep]
                if sp.groups_test is not None:
                    sp.groups_test = sp.groups_test[keep]
                sp.info["n_test_used"] = mt
            if generic:
                sp = _raw_split(sp, self._ds[name])
        self._splits[key] = sp
        return sp


def split_info(sp: ClientSplit) -> dict[str, Any]:
    """Sizes and attack shares of a split, for the report's setup lines."""
    return {
        "fallback": sp.info.get("fallback"),
        "n_train": int(len(sp.X_train)),
        "n_val": int(len(sp.X_val)),
        "val_attack_share": float(np.mean(sp.y_val)),
        "n_test": int(len(sp.y_test)),
        "test_attack_share": float(np.mean(sp.y_test)),
        "n_features": int(sp.X_train.shape[1]),
    }

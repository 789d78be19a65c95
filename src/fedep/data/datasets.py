"""Loaders for the official NSL-KDD, UNSW-NB15 and TON-IoT files.

:func:`load_dataset` returns a :class:`Dataset` with transformed but *not standardised*
features (the estimators standardise, federatedly). Train/test partitions:

``nsl-kdd``
    The official split: ``KDDTrain+.txt`` (or ``KDDTrain+_20Percent.txt`` with
    ``variant="20percent"``) for training, ``KDDTest+.txt`` for testing. Attack names
    map to DoS / Probe / R2L / U2R with :data:`NSL_KDD_ATTACK_CATEGORIES` (which also
    covers the 17 attack names that occur only in the test file); a name outside the
    table gets category ``"unknown"`` and is listed in ``info["unknown_attack_names"]``.
``unsw-nb15``
    When both official files (``UNSW_NB15_training-set.csv`` and
    ``UNSW_NB15_testing-set.csv``) are present they are the split. With only the
    testing-set file (the shared copy), that file is split with a seeded split
    stratified by ``attack_cat``: ``test_size`` (default 0.3) of every class goes to
    test, the rest to training, rows kept in file order.
``ton-iot``
    ``train_test_network.csv`` split the same way, stratified by ``type``
    (default ``test_size`` 0.3).

No row is ever dropped (``info["dropped_rows"] == 0``); a malformed file raises
:class:`~fedep.data.errors.DataError`. Files are parsed with pandas'
``engine="pyarrow"`` (falling back to the C engine when pyarrow cannot read the file).
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedep._names import DATASETS
from fedep.data.dataset_files import DATASET_URLS, resolve_data_dir
from fedep.data.errors import DataError, DatasetNotFoundError
from fedep.data.feature_sets import (
    FEATURE_SETS,
    FEATURE_SPECS,
    NSL_KDD_COLUMNS,
    TARGET_COLUMNS,
    TON_IOT_COLUMNS,
    UNSW_NB15_COLUMNS,
    FeatureTransformer,
)

__all__ = ["ALIAS_COLUMNS", "DATASETS", "NSL_KDD_ATTACK_CATEGORIES", "Dataset", "load_dataset"]

DEFAULT_TEST_SIZE = 0.3
#: Columns the loader adds to the raw frames (alias -> source column), so that every
#: dataset has the paper's ``src_bytes`` / ``dst_bytes`` partition keys. They are copies:
#: the generic path drops them.
ALIAS_COLUMNS: dict[str, dict[str, str]] = {
    "unsw-nb15": {"src_bytes": "sbytes", "dst_bytes": "dbytes"},
}

#: NSL-KDD attack name -> category (the usual KDD'99 / NSL-KDD mapping).
NSL_KDD_ATTACK_CATEGORIES: dict[str, str] = {
    **dict.fromkeys(
        "back land neptune pod smurf teardrop apache2 mailbomb processtable udpstorm".split(),
        "DoS",
    ),
    **dict.fromkeys("ipsweep nmap portsweep satan mscan saint".split(), "Probe"),
    **dict.fromkeys(
        (
            "ftp_write guess_passwd imap multihop phf spy warezclient warezmaster sendmail "
            "named snmpgetattack snmpguess xlock xsnoop worm"
        ).split(),
        "R2L",
    ),
    **dict.fromkeys(
        "buffer_overflow loadmodule perl rootkit ps sqlattack xterm httptunnel".split(), "U2R"
    ),
}


@dataclass
class Dataset:
    """A loaded dataset, split into training and test rows.

    Attributes
    ----------
    name : str
    X_train, X_test : ndarray of shape (n, n_features), float64
        Transformed, not standardised, features.
    y_train, y_test : ndarray of int
        0 normal, 1 attack.
    category_train, category_test : ndarray of str
        Attack class per row, ``"normal"`` for normal rows.
    feature_names : list of str
    raw_train, raw_test : DataFrame
        The raw columns of the same rows (index: 0-based row number in the source
        file), for partitioners; UNSW-NB15 frames also carry ``src_bytes`` /
        ``dst_bytes`` aliases of ``sbytes`` / ``dbytes``.
    info : dict
        Files read, split, seed, test size, dropped rows (0), feature sources, timing.
    """

    name: str
    X_train: np.ndarray
    X_test: np.ndarray
    y_train: np.ndarray
    y_test: np.ndarray
    category_train: np.ndarray
    category_test: np.ndarray
    feature_names: list[str]
    raw_train: pd.DataFrame
    raw_test: pd.DataFrame
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def n_features(self) -> int:
        """Number of features."""
        return self.X_train.shape[1]

    def raw_inputs(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The raw training and test tables as a user's own files would hold them.

        Every column of ``raw_train`` / ``raw_test`` except the label and attack-class
        columns (:data:`~fedep.data.feature_sets.TARGET_COLUMNS`) and the loader's aliases
        (:data:`ALIAS_COLUMNS`): identifiers, addresses and text stay, for the feature
        pipeline (``features="auto"``) to decide about, as it would on a user's file.
        """
        drop = set(TARGET_COLUMNS.get(self.name, ())) | set(ALIAS_COLUMNS.get(self.name, {}))
        keep = [c for c in self.raw_train.columns if c not in drop]
        return self.raw_train[keep], self.raw_test[keep]


def _require(root: Path, dataset: str, rel: str) -> Path:
    path = root / rel
    if not path.is_file():
        raise DatasetNotFoundError(rel, root, DATASET_URLS[dataset])
    return path


def _read_csv(path: Path, names: tuple[str, ...], header: bool) -> pd.DataFrame:
    kwargs: dict[str, Any] = {"header": None, "names": list(names)} if not header else {}
    try:
        df = pd.read_csv(path, engine="pyarrow", **kwargs)
    except ImportError:  # pragma: no cover - pyarrow is a dependency
        df = pd.read_csv(path, engine="c", encoding="utf-8-sig", **kwargs)
    except Exception as exc:  # pyarrow cannot parse it: let the C engine say where
        try:
            df = pd.read_csv(path, engine="c", encoding="utf-8-sig", **kwargs)
        except Exception as exc2:
            raise DataError(path, f"cannot parse CSV: {exc2}") from exc
    if header:
        df.columns = [str(c).lstrip("\ufeff").strip() for c in df.columns]
        if list(df.columns) != list(names):
            missing = [c for c in names if c not in df.columns]
            extra = [c for c in df.columns if c not in names]
            raise DataError(
                path,
                f"unexpected header: missing {missing}, unexpected {extra}",
                line=1,
                column=(missing or extra or [None])[0],
            )
    if len(df) == 0:
        raise DataError(path, "file holds no data rows")
    return df


def _stratified_split(
    strata: np.ndarray, test_size: float, random_state: int
) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.model_selection import train_test_split

    idx = np.arange(len(strata))
    tr, te = train_test_split(idx, test_size=test_size, random_state=random_state, stratify=strata)
    return np.sort(tr), np.sort(te)


def _check_labels(path: Path, df: pd.DataFrame, col: str) -> np.ndarray:
    lab = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    bad = ~np.isin(lab, (0.0, 1.0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DataError(
            path, f"label must be 0 or 1, got {df[col].iloc[i]!r}", line=i + 2, column=col
        )
    return lab.astype(np.int64)


def _load_nsl(root: Path, variant: str | None) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    if variant not in (None, "full", "20percent"):
        raise ValueError(
            f"variant must be None, 'full' or '20percent' for nsl-kdd; got {variant!r}"
        )
    train_rel = (
        "nsl-kdd/KDDTrain+_20Percent.txt" if variant == "20percent" else "nsl-kdd/KDDTrain+.txt"
    )
    ptr = _require(root, "nsl-kdd", train_rel)
    pte = _require(root, "nsl-kdd", "nsl-kdd/KDDTest+.txt")
    parts = []
    unknown: set[str] = set()
    for p in (ptr, pte):
        df = _read_csv(p, NSL_KDD_COLUMNS, header=False)
        name = df["attack_type"].astype(str).str.strip()
        df["attack_type"] = name
        y = (name != "normal").to_numpy(dtype=np.int64)
        cat = name.map(NSL_KDD_ATTACK_CATEGORIES)
        cat = cat.where(name != "normal", "normal")
        unknown |= set(name[cat.isna()])
        cat = cat.fillna("unknown")
        parts.append((df, y, cat.to_numpy(dtype=object)))
    info = {
        "files": [str(ptr), str(pte)],
        "split": "official",
        "line_offset": 1,
        "unknown_attack_names": sorted(unknown),
    }
    return parts[0], parts[1], info


def _load_split_file(
    path: Path, names: tuple[str, ...], cat_col: str, test_size: float, random_state: int
) -> tuple[tuple, tuple]:
    df = _read_csv(path, names, header=True)
    y = _check_labels(path, df, "label")
    cat = df[cat_col].astype(str).str.strip()
    cat = cat.where(cat.str.lower() != "normal", "normal").to_numpy(dtype=object)
    tr, te = _stratified_split(cat, test_size, random_state)
    return (df.iloc[tr], y[tr], cat[tr]), (df.iloc[te], y[te], cat[te])


def _load_unsw(root: Path, test_size: float | None, random_state: int):
    pte = _require(root, "unsw-nb15", "unsw-nb15/UNSW_NB15_testing-set.csv")
    ptr = root / "unsw-nb15/UNSW_NB15_training-set.csv"
    if ptr.is_file():
        if test_size is not None:
            raise ValueError(
                "test_size does not apply: both official UNSW-NB15 files are present and "
                "form the split"
            )
        parts = []
        for p in (ptr, pte):
            df = _read_csv(p, UNSW_NB15_COLUMNS, header=True)
            y = _check_labels(p, df, "label")
            cat = df["attack_cat"].astype(str).str.strip()
            cat = cat.where(cat.str.lower() != "normal", "normal").to_numpy(dtype=object)
            parts.append((df, y, cat))
        if len(parts[0][0]) < len(parts[1][0]):
            warnings.warn(
                "UNSW_NB15_training-set.csv has fewer rows than UNSW_NB15_testing-set.csv; "
                "the official training set is the larger (175,341 rows) -- are the file "
                "names swapped?",
                stacklevel=3,
            )
        info = {"files": [str(ptr), str(pte)], "split": "official"}
        return parts[0], parts[1], info
    return _stratified_file(pte, UNSW_NB15_COLUMNS, "attack_cat", test_size, random_state)


def _stratified_file(path: Path, columns, stratify_by: str, test_size, random_state: int):
    """A seeded split of one file, stratified by ``stratify_by``, with its provenance."""
    ts = DEFAULT_TEST_SIZE if test_size is None else test_size
    a, b = _load_split_file(path, columns, stratify_by, ts, random_state)
    info = {
        "files": [str(path)],
        "split": "stratified",
        "stratify_by": stratify_by,
        "test_size": ts,
        "random_state": random_state,
    }
    return a, b, info


def _load_ton(root: Path, test_size: float | None, random_state: int):
    p = _require(root, "ton-iot", "ton-iot/train_test_network.csv")
    return _stratified_file(p, TON_IOT_COLUMNS, "type", test_size, random_state)


def load_dataset(
    name: str,
    data_dir: str | os.PathLike[str] | None = None,
    *,
    feature_set: str = "paper",
    variant: str | None = None,
    test_size: float | None = None,
    random_state: int = 0,
    max_categories: int = 32,
) -> Dataset:
    """Load an official dataset with its train/test split and features.

    Parameters
    ----------
    name : {"nsl-kdd", "unsw-nb15", "ton-iot"}
    data_dir : str or PathLike, optional
        See :func:`~fedep.data.dataset_files.resolve_data_dir`.
    feature_set : {"paper", "rich"}, default="paper"
        See :mod:`fedep.data.feature_sets`.
    variant : {None, "full", "20percent"}, optional
        NSL-KDD only: ``"20percent"`` trains on ``KDDTrain+_20Percent.txt``.
    test_size : float, optional
        Fraction of each class put in the test set when the dataset is split from one
        file (UNSW-NB15 with only the testing-set file, TON-IoT). Default 0.3. Passing
        it where the official split applies raises ``ValueError``.
    random_state : int, default=0
        Seed of the stratified split.
    max_categories : int, default=32
        One-hot categories per categorical column (``rich`` only).

    Returns
    -------
    Dataset

    Raises
    ------
    DatasetNotFoundError
        A needed file is missing.
    DataError
        A file is malformed (wrong header, bad label values ...).
    """
    t0 = time.perf_counter()
    key = name.lower().replace("_", "-")
    if key not in DATASETS:
        raise ValueError(f"name must be one of {DATASETS}; got {name!r}")
    if feature_set not in FEATURE_SETS:
        raise ValueError(f"feature_set must be one of {FEATURE_SETS}; got {feature_set!r}")
    if test_size is not None and not 0.0 < test_size < 1.0:
        raise ValueError(f"test_size must be in (0, 1); got {test_size!r}")
    if variant is not None and key != "nsl-kdd":
        raise ValueError(f"variant applies to nsl-kdd only; got {variant!r} for {key}")
    root = resolve_data_dir(data_dir)
    if key == "nsl-kdd":
        if test_size is not None:
            raise ValueError("test_size does not apply to nsl-kdd (official KDDTest+ split)")
        tr, te, info = _load_nsl(root, variant)
    elif key == "unsw-nb15":
        tr, te, info = _load_unsw(root, test_size, random_state)
    else:
        tr, te, info = _load_ton(root, test_size, random_state)
    t_read = time.perf_counter() - t0
    line_offset = info.pop("line_offset", 2)
    (raw_tr, y_tr, c_tr), (raw_te, y_te, c_te) = tr, te
    spec = FEATURE_SPECS[key][feature_set]
    src = Path(info["files"][0]).name
    tf = FeatureTransformer(spec, max_categories=max_categories, source=src)
    X_tr = tf.fit_transform(raw_tr, line_offset=line_offset)
    tf.source = Path(info["files"][-1]).name
    X_te = tf.transform(raw_te, line_offset=line_offset)
    for alias, col in ALIAS_COLUMNS.get(key, {}).items():
        raw_tr = raw_tr.assign(**{alias: raw_tr[col]})
        raw_te = raw_te.assign(**{alias: raw_te[col]})
    info.update(
        {
            "name": key,
            "data_dir": str(root),
            "feature_set": feature_set,
            "variant": variant,
            "random_state": random_state,
            "dropped_rows": 0,
            "n_train": len(y_tr),
            "n_test": len(y_te),
            "feature_sources": list(tf.feature_sources_),
            "categories": dict(tf.categories_),
            "read_seconds": t_read,
            "load_seconds": time.perf_counter() - t0,
        }
    )
    return Dataset(
        name=key,
        X_train=X_tr,
        X_test=X_te,
        y_train=np.asarray(y_tr, dtype=np.int64),
        y_test=np.asarray(y_te, dtype=np.int64),
        category_train=np.asarray(c_tr, dtype=object),
        category_test=np.asarray(c_te, dtype=object),
        feature_names=list(tf.feature_names_),
        raw_train=raw_tr,
        raw_test=raw_te,
        info=info,
    )

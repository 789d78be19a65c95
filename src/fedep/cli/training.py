"""Training rows for ``fit`` and ``data summary``: an official dataset split among
clients, or the user's table with its clients (a column, or a partition)."""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from fedep.cli._common import PROG, UsageError, check_dataset, read_kwargs
from fedep.data import (
    DataError,
    load_dataset,
    make_client_split,
    partition_dirichlet,
    partition_iid,
    partition_sorted,
)
from fedep.data.labels import column_text, labels_of
from fedep.data.readers import gateway_files, read_many, read_table
from fedep.features.name_hints import normalize_name


@dataclass
class Training:
    """Training rows with clients, feature names and a description.

    ``X`` is a DataFrame of the feature columns: the user's table without its label,
    category and client columns (any dtypes; the estimator's feature pipeline decides
    what they become), or an official dataset's numeric features.
    """

    X: pd.DataFrame
    y: np.ndarray | None
    groups: np.ndarray
    names: list[str]
    desc: str
    categories: np.ndarray | None = None
    # for the user's files: where each row of X was read (see :meth:`origin`)
    files: list[Path] | None = None
    # each file's first row in the concatenated table, then its total
    bounds: np.ndarray | None = None
    kept: np.ndarray | None = None  # rows of that table in X (None: all, in order)

    def origin(self, row: int) -> tuple[Path, int] | None:
        """The file and 0-based data row of row ``row`` of ``X`` (None if unknown)."""
        if self.files is None or row < 0:
            return None
        if self.kept is not None:
            if row >= len(self.kept):
                return None
            row = int(self.kept[row])
        if row >= self.bounds[-1]:
            return None
        i = int(np.searchsorted(self.bounds, row, side="right")) - 1
        return self.files[i], row - int(self.bounds[i])


def client_ids_of(s: pd.Series, path, column: str) -> np.ndarray:
    """Client ids of a client column as stripped strings; a missing id is an error."""
    ids = column_text(s)
    empty = ids == ""
    if empty.any():
        i = int(np.flatnonzero(empty)[0])
        raise DataError(path, "missing client id", row=i + 1, column=column)
    return ids


def numeric_columns(df: pd.DataFrame) -> list[str]:
    """Columns of numeric or boolean dtype (what ``features="numeric"`` can use)."""
    return [
        c
        for c in df.columns
        if pd.api.types.is_numeric_dtype(df[c].dtype) or pd.api.types.is_bool_dtype(df[c].dtype)
    ]


def check_client_options(args) -> None:
    if args.client_column is not None and (args.clients is not None or args.partition):
        raise UsageError("--client-column cannot be combined with --clients / --partition")
    if args.dataset is not None and args.client_column is not None:
        raise UsageError("--client-column applies to --train tables, not to --dataset")
    if args.dataset is not None and (args.label_column or args.normal_label):
        raise UsageError("--label-column / --normal-label apply to --train tables only")
    if args.table is not None and args.normal_label is not None and not args.label_column:
        raise UsageError("--normal-label needs --label-column")


def _read_training_tables(args):
    """(frame, per-file gateway ids or None, description of the files, the files, each
    file's first row in the frame followed by the frame's length)."""
    paths = [args.table] if isinstance(args.table, str | Path) else list(args.table)
    files = gateway_files(paths)
    kw = read_kwargs(args)
    if len(files) == 1 and not Path(paths[0]).is_dir():
        df = read_table(files[0], **kw)
        _check_rows({None: df}, {None: files[0]})
        return df, None, files[0].name, files, np.array([0, len(df)])
    tables = read_many(paths, **kw)
    _check_rows(tables, dict(zip(tables, files, strict=True)))
    _report_missing_columns(tables)
    frames = list(tables.values())
    df = pd.concat(frames, ignore_index=True, sort=False) if len(frames) > 1 else frames[0]
    sizes = [len(f) for f in frames]
    ids = np.repeat(np.asarray(list(tables), dtype=str), sizes)
    return df, ids, f"{len(files)} files", files, np.concatenate([[0], np.cumsum(sizes)])


def _check_rows(tables: dict, files: dict) -> None:
    """A gateway file without records (a header-only log, an empty Parquet file) is an
    error naming it, not a gateway silently left out of the federation."""
    for gid, df in tables.items():
        if len(df) == 0:
            whose = "nothing" if gid is None else f"gateway {gid!r} has nothing"
            raise DataError(files[gid], f"no data rows ({whose} to train on)")
    if len(tables) == 1 and sum(len(df) for df in tables.values()) < 2:
        (gid,) = tables
        raise DataError(files[gid], "1 data row: a fit needs at least 2 records")


def _report_missing_columns(tables: dict) -> None:
    """Name each gateway whose file lacks columns the others have: its values there are
    missing and the feature pipeline imputes them, which a misnamed or truncated export
    would otherwise make silent."""
    every = list(dict.fromkeys(str(c) for df in tables.values() for c in df.columns))
    for gid, df in tables.items():
        have = {str(c) for c in df.columns}
        lacks = [c for c in every if c not in have]
        if lacks:
            shown = ", ".join(map(repr, lacks[:8])) + (" ..." if len(lacks) > 8 else "")
            print(
                f"{PROG}: warning: gateway {gid!r} lacks {len(lacks)} of the {len(every)} "
                f"columns the other gateways have ({shown}): its values there count as "
                "missing",
                file=sys.stderr,
            )


#: Column names (normalised, without an ``_id`` / ``_name`` suffix) that usually hold
#: the gateway or client a row comes from.
_CLIENT_WORDS = frozenset(
    "gateway gw client sensor host hostname node device site probe agent collector router".split()
)


def client_like_columns(df: pd.DataFrame) -> list[str]:
    """Columns named like a gateway / client id (``gateway``, ``client_id``, ``sensor``,
    ``host``, ``node``, ``device``, ``gw``, ...) holding 2 or more distinct values, fewer
    than one per two rows: a per-row gateway id rather than a feature."""
    out = []
    for c in df.columns:
        n = normalize_name(str(c))
        base = re.sub(r"_?(id|name)$", "", n) if n not in _CLIENT_WORDS else n
        if base not in _CLIENT_WORDS:
            continue
        k = df[c].nunique(dropna=True)
        if 2 <= k <= len(df) // 2:
            out.append(str(c))
    return out


def _note_client_like_columns(df: pd.DataFrame, source, skip=None) -> None:
    """One warning per column that looks like a gateway id when all rows train as one
    client (no --client-column, --clients or one file per gateway)."""
    for c in client_like_columns(df):
        if c == skip:
            continue
        k = df[c].nunique(dropna=True)
        print(
            f"{PROG}: warning: {source}: column {c!r} looks like a gateway id ({k} distinct "
            f"values) but all rows train as one client, {c!r} read as an ordinary column; "
            f"pass --client-column {shlex.quote(c)} for one client per gateway",
            file=sys.stderr,
        )


def load_training(args, protocol: str | None, *, seed: int, apply_protocol=True) -> Training:
    """Rows, labels and clients (``protocol`` applied unless ``apply_protocol`` is False).

    ``seed`` drives the random partitions (``iid``, ``dirichlet``). Several ``--train``
    files (or a directory) are one gateway each, unless ``--client-column`` is given.
    """
    check_client_options(args)
    check_dataset(args.dataset)
    if args.dataset is not None:
        return _official(args, protocol, seed)
    df, file_ids, source, files, bounds = _read_training_tables(args)
    path = source
    cols = [str(c) for c in df.columns]
    for opt, c in (("--label-column", args.label_column), ("--client-column", args.client_column)):
        if c is not None and c not in cols:
            raise DataError(path, f"{opt} {c!r} is not a column (columns: {cols})", column=c)
    y = None
    if args.label_column is not None:
        y = labels_of(df[args.label_column], args.normal_label, path, args.label_column)
    if args.client_column is not None:
        groups = client_ids_of(df[args.client_column], path, args.client_column)
        how = f"{len(np.unique(groups))} clients from column {args.client_column!r}"
    elif file_ids is not None:
        if args.clients is not None or args.partition is not None:
            raise UsageError(
                "several --train files are one client each: --clients / --partition "
                "apply to one file"
            )
        groups = file_ids
        how = f"{len(np.unique(groups))} clients (one per file)"
    elif args.clients is not None or args.partition is not None:
        if args.clients is None:
            raise UsageError("--partition needs --clients")
        partition = args.partition or "iid"
        groups = _partition(args, partition, df, y, seed)
        how = f"{args.clients} clients ({partition} partition)"
    else:
        groups = np.zeros(len(df), dtype=np.int64)
        how = "1 client (use --client-column, --clients D or one file per gateway)"
    # The label and client columns never become features.
    special = [c for c in (args.label_column, args.client_column) if c is not None]
    X = df.drop(columns=special) if special else df
    if protocol == "clean" and y is None:
        raise UsageError("--protocol clean needs labels: pass --label-column")
    proto = protocol or ("clean" if y is not None else "contaminated")
    kept = None
    if apply_protocol and proto == "clean":
        keep = y == 0
        if not keep.any():
            raise UsageError(f"{source}: no normal rows to train on (protocol clean)")
        gone = [g for g in np.unique(groups) if not keep[groups == g].any()]
        if gone:
            names = ", ".join(repr(str(g)) for g in gone[:8]) + (" ..." if len(gone) > 8 else "")
            raise UsageError(
                f"{source}: {len(gone)} gateway(s) have no normal rows to train on "
                f"(protocol clean): {names}; leave them out, or train on every row with "
                "--protocol contaminated"
            )
        X = X.loc[keep].reset_index(drop=True)
        y, groups = y[keep], groups[keep]
        kept = np.flatnonzero(keep)
    if how.startswith("1 client"):  # after the option checks: an error comes alone
        _note_client_like_columns(df, source, skip=args.label_column)
    desc = f"{source}, {how}, protocol {proto}"
    names = [str(c) for c in X.columns]
    return Training(X, y, groups, names, desc, files=files, bounds=bounds, kept=kept)


def _official(args, protocol, seed) -> Training:
    generic = args.feature_set == "generic"
    # the generic set splits the cheap paper matrix's rows and trains on the same rows of
    # the raw table (label columns removed), which the estimator's pipeline encodes
    ds = load_dataset(
        args.dataset, args.data_dir, feature_set="paper" if generic else args.feature_set
    )
    clients = args.clients or 10
    partition = args.partition or "sorted"
    split = make_client_split(
        ds,
        clients,
        partition=partition,
        partition_key=args.partition_key,
        protocol=protocol or "clean",
        validation_size=0.0,
        random_state=seed,
        concentration=args.dirichlet_concentration,
        min_train_rows=1,
    )
    tr = split.info["train_row_index"]
    desc = (
        f"{ds.name} ({args.feature_set} features), {clients} clients ({partition} "
        f"partition), protocol {protocol or 'clean'}"
    )
    if generic:
        X = ds.raw_inputs()[0].iloc[np.asarray(tr)].reset_index(drop=True)
    else:
        X = pd.DataFrame(split.X_train, columns=list(ds.feature_names))
    return Training(
        X,
        split.y_train,
        split.groups_train,
        [str(c) for c in X.columns],
        desc,
        np.asarray(ds.category_train)[tr],
    )


def _partition(args, partition: str, df: pd.DataFrame, y, seed: int) -> np.ndarray:
    n = len(df)
    if partition == "sorted":
        if args.partition_key not in df.columns:
            raise UsageError(f"--partition-key column {args.partition_key!r} is not a column")
        key = pd.to_numeric(df[args.partition_key], errors="coerce").to_numpy(
            dtype=float, na_value=np.nan
        )
        if not np.isfinite(key).all():
            raise UsageError(f"--partition-key column {args.partition_key!r} must be numeric")
        return partition_sorted(key, args.clients)
    if partition == "dirichlet":
        if args.label_column is None:
            raise UsageError("--partition dirichlet needs --label-column")
        labels = column_text(df[args.label_column])
        return partition_dirichlet(labels, args.clients, args.dirichlet_concentration, seed)
    return partition_iid(n, args.clients, seed)

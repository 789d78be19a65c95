"""Training rows for ``fit`` and ``data summary``: an official dataset split among
clients, or the user's table with its clients (a column, or a partition)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedep.cli._common import UsageError, check_dataset


@dataclass
class Training:
    """Training rows with clients, feature names and a description."""

    X: np.ndarray
    y: np.ndarray | None
    groups: np.ndarray
    names: list[str]
    desc: str
    categories: np.ndarray | None = None


def read_column(path, column: str) -> np.ndarray:
    """One raw column of a CSV/Parquet table, as stripped strings."""
    import pandas as pd

    from fedep.data import DataError

    p = Path(path)
    try:
        if p.suffix.lower() in (".parquet", ".pq"):
            s = pd.read_parquet(p, columns=[column])[column]
        else:
            s = pd.read_csv(
                p, usecols=[column], dtype=str, keep_default_na=False, encoding="utf-8-sig"
            )[column]
    except (ValueError, KeyError) as exc:
        raise DataError(p, f"cannot read column: {exc}", column=column) from None
    return s.astype(str).str.strip().to_numpy()


def check_client_options(args) -> None:
    if args.client_column is not None and (args.clients is not None or args.partition):
        raise UsageError("--client-column cannot be combined with --clients / --partition")
    if args.dataset is not None and args.client_column is not None:
        raise UsageError("--client-column applies to --train tables, not to --dataset")
    if args.dataset is not None and (args.label_column or args.normal_label):
        raise UsageError("--label-column / --normal-label apply to --train tables only")
    if args.table is not None and args.normal_label is not None and not args.label_column:
        raise UsageError("--normal-label needs --label-column")


def load_training(args, protocol: str | None, *, seed: int, apply_protocol=True) -> Training:
    """Rows, labels and clients (``protocol`` applied unless ``apply_protocol`` is False).

    ``seed`` drives the random partitions (``iid``, ``dirichlet``).
    """
    check_client_options(args)
    check_dataset(args.dataset)
    if args.dataset is not None:
        return _official(args, protocol, seed)
    from fedep.data import load_csv

    t = load_csv(
        args.table,
        label_column=args.label_column,
        normal_label=args.normal_label,
        client_column=args.client_column,
    )
    X, y = t.X, t.y
    if args.client_column is not None:
        # Keep the real client ids in the model so that `score --client-column` matches.
        groups = np.asarray(t.group_names, dtype=str)[t.groups]
        how = f"{len(t.group_names)} clients from column {args.client_column!r}"
    elif args.clients is not None or args.partition is not None:
        if args.clients is None:
            raise UsageError("--partition needs --clients")
        partition = args.partition or "iid"
        groups = _partition(args, partition, t, seed)
        how = f"{args.clients} clients ({partition} partition)"
    else:
        groups = np.zeros(X.shape[0], dtype=np.int64)
        how = "1 client (use --client-column or --clients D)"
    if protocol == "clean" and y is None:
        raise UsageError("--protocol clean needs labels: pass --label-column")
    proto = protocol or ("clean" if y is not None else "contaminated")
    if apply_protocol and proto == "clean":
        keep = y == 0
        if not keep.any():
            raise UsageError(f"{args.table}: no normal rows to train on (protocol clean)")
        X, y, groups = X[keep], y[keep], groups[keep]
    desc = f"{Path(args.table).name}, {how}, protocol {proto}"
    return Training(X, y, groups, list(t.feature_names), desc)


def _official(args, protocol, seed) -> Training:
    from fedep.data import load_dataset, make_client_split

    ds = load_dataset(args.dataset, args.data_dir, feature_set=args.feature_set)
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
        alpha=args.dirichlet_concentration,
        min_train_rows=1,
    )
    tr = split.info["train_row_index"]
    desc = (
        f"{ds.name} ({args.feature_set} features), {clients} clients ({partition} "
        f"partition), protocol {protocol or 'clean'}"
    )
    return Training(
        split.X_train,
        split.y_train,
        split.groups_train,
        list(ds.feature_names),
        desc,
        np.asarray(ds.category_train)[tr],
    )


def _partition(args, partition: str, t, seed: int) -> np.ndarray:
    from fedep.data import partition_dirichlet, partition_iid, partition_sorted

    n = t.X.shape[0]
    if partition == "sorted":
        if args.partition_key in t.feature_names:
            key = t.X[:, t.feature_names.index(args.partition_key)]
        else:
            import pandas as pd

            raw = read_column(args.table, args.partition_key)
            key = pd.to_numeric(pd.Series(raw), errors="coerce").to_numpy(dtype=float)
            if not np.isfinite(key).all():
                raise UsageError(f"--partition-key column {args.partition_key!r} must be numeric")
        return partition_sorted(key, args.clients)
    if partition == "dirichlet":
        if args.label_column is None:
            raise UsageError("--partition dirichlet needs --label-column")
        labels = read_column(args.table, args.label_column)
        return partition_dirichlet(labels, args.clients, args.dirichlet_concentration, seed)
    return partition_iid(n, args.clients, seed)

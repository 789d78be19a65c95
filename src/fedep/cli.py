"""The ``fedep`` command line.

Commands::

    fedep fit       (--dataset NAME | --train PATH) [clients, protocol, method, ...] --out MODEL
    fedep score     --model MODEL --input PATH --output PATH [--client-column COL]
                    [--top-features K] [--chunksize N]
    fedep evaluate  --model MODEL (--dataset NAME | --test PATH --label-column COL)
                    [--client-column COL] [--json]
    fedep reproduce --out DIR [--quick] [--data-dir DIR] [--datasets ...] [--seeds ...]
    fedep data verify  [--data-dir DIR]
    fedep data summary (--dataset NAME | --train PATH) --clients D --partition P
    fedep --version

This module only parses arguments, moves data between files and the library and
prints; the numerics live in :mod:`fedep.detectors`, :mod:`fedep.data` and
:mod:`fedep.evaluation`. Errors caused by the user (missing or malformed files,
unknown columns, incompatible or corrupt models, unknown datasets, bad parameter
values) print one line ``fedep: error: ...`` on stderr and exit with status 1 (2 for
command-line syntax errors, as argparse does), never a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

__all__ = ["main", "build_parser"]

PROG = "fedep"

METHODS = ("fedep", "fedpg", "case1", "case2", "case3", "pca", "local-pca", "oneshot")
_CASE = {"case1": "I", "case2": "II", "case3": "III"}
DATASET_NAMES = ("nsl-kdd", "unsw-nb15", "ton-iot")
PARTITIONS = ("sorted", "dirichlet", "iid")
PROTOCOLS = ("clean", "contaminated")

#: CLI option (dest) -> detector parameter, and the methods it applies to.
_HYPER = {
    "alpha": ("alpha", {"fedep", "case1", "case2", "case3"}),
    "beta": ("beta", {"fedep", "case1", "case2", "case3"}),
    "mu": ("mu", {"fedep", "case1", "case2", "case3"}),
    "nu": ("nu", {"fedep", "case1", "case2", "case3"}),
    "inner_max_iter": ("inner_max_iter", {"fedep", "case1", "case2", "case3"}),
    "lr": ("lr", {"fedpg"}),
    "rho": ("rho", {"fedpg"}),
    "local_epochs": ("local_epochs", {"fedpg"}),
    "rounds": ("n_rounds", {"fedep", "fedpg", "case1", "case2", "case3"}),
    "tol": ("tol", {"fedep", "fedpg", "case1", "case2", "case3"}),
    "client_fraction": ("client_fraction", {"fedep", "fedpg", "case1", "case2", "case3"}),
    "init": ("init", {"fedep", "fedpg", "case1", "case2", "case3"}),
}

SCORE_COLUMNS = ("anomaly_score", "is_anomaly", "top_features")


class UsageError(ValueError):
    """A bad combination of command-line options (exit status 1, one line)."""


# --------------------------------------------------------------------------- helpers
def _err(msg: str) -> None:
    print(f"{PROG}: error: {msg}", file=sys.stderr)


def _info(msg: str, quiet: bool = False) -> None:
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


def _int_at_least(low: int, what: str):
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            v = low - 1
        if v < low:
            raise argparse.ArgumentTypeError(f"expected a {what} integer, got {text!r}")
        return v

    return parse


_positive_int = _int_at_least(1, "positive")
_nonneg_int = _int_at_least(0, "non-negative")


def _finite_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return v


def _dataset_name(text: str) -> str:
    """Normalised dataset name; unknown names are reported by the command (one line)."""
    return text.lower().replace("_", "-")


def _check_dataset(name: str | None) -> None:
    if name is not None and name not in DATASET_NAMES:
        raise UsageError(f"unknown dataset {name!r} (choose from {', '.join(DATASET_NAMES)})")


# --------------------------------------------------------------------------- parser
def _add_data_source(p: argparse.ArgumentParser, *, test: bool = False) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--dataset",
        type=_dataset_name,
        metavar="NAME",
        help=f"official dataset: {', '.join(DATASET_NAMES)}",
    )
    flag = "--test" if test else "--train"
    src.add_argument(
        flag,
        dest="table",
        metavar="PATH",
        help="your own CSV or Parquet table (header row; numeric feature columns)",
    )
    p.add_argument("--data-dir", help="directory of the official datasets (or FEDEP_DATA_DIR)")
    p.add_argument(
        "--feature-set",
        choices=("paper", "rich"),
        default="paper",
        help="feature set of an official dataset (default: paper)",
    )
    p.add_argument("--label-column", help="label column of the table")
    p.add_argument(
        "--normal-label",
        help="label value of normal rows (default: labels must be 0 = normal / 1 = attack)",
    )


def _add_clients(p: argparse.ArgumentParser) -> None:
    p.add_argument("--client-column", help="column holding each row's client (gateway) id")
    p.add_argument(
        "--clients",
        type=_positive_int,
        metavar="D",
        help="number of clients (default for --dataset: 10)",
    )
    p.add_argument(
        "--partition",
        choices=PARTITIONS,
        help="how rows are split among --clients (default: sorted for --dataset, iid for --train)",
    )
    p.add_argument(
        "--partition-key",
        default="dst_bytes",
        help="column sorted on by --partition sorted (default: dst_bytes)",
    )
    p.add_argument(
        "--dirichlet-alpha",
        type=_finite_float,
        default=0.5,
        help="Dirichlet concentration for --partition dirichlet (default: 0.5)",
    )
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of the ``fedep`` command."""
    from fedep import __version__

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Personalised robust federated PCA (FedEP) for IoT anomaly detection.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    # fit -------------------------------------------------------------------
    p = sub.add_parser(
        "fit",
        help="train a detector and save it",
        description="Train a detector on an official dataset or your own table.",
    )
    _add_data_source(p)
    _add_clients(p)
    p.add_argument(
        "--protocol",
        choices=PROTOCOLS,
        help="clean: train on normal rows only (needs labels); contaminated: on all rows "
        "(default: clean with labels, contaminated without)",
    )
    p.add_argument("--method", choices=METHODS, default="fedep", help="default: fedep")
    p.add_argument("--rank", type=_positive_int, default=5, help="subspace rank (default: 5)")
    p.add_argument("--rounds", type=_positive_int, help="communication-round cap")
    p.add_argument("--tol", type=_finite_float, help="convergence tolerance")
    p.add_argument("--alpha", type=_finite_float, help="FedEP: weight of ||S||_1")
    p.add_argument("--beta", type=_finite_float, help="FedEP: weight of ||W||_{2,1}")
    p.add_argument("--mu", type=_finite_float, help="FedEP: ADMM penalty of X - S - U")
    p.add_argument("--nu", type=_finite_float, help="FedEP: ADMM penalty of W_i = V")
    p.add_argument("--inner-max-iter", type=_positive_int, help="FedEP: ManPG steps per round")
    p.add_argument("--lr", type=_finite_float, help="FedPG: local step size")
    p.add_argument("--rho", type=_finite_float, help="FedPG: ADMM penalty")
    p.add_argument("--local-epochs", type=_positive_int, help="FedPG: local steps per round")
    p.add_argument("--client-fraction", type=_finite_float, help="clients sampled per round")
    p.add_argument("--init", choices=("random", "oneshot"), help="initial consensus basis")
    p.add_argument(
        "--contamination",
        type=_finite_float,
        default=0.05,
        help="expected anomaly share of the training rows; sets the threshold (default: 0.05)",
    )
    p.add_argument("--out", required=True, metavar="MODEL", help="model file to write")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=cmd_fit)

    # score -----------------------------------------------------------------
    p = sub.add_parser(
        "score",
        help="score the rows of a CSV file",
        description="Append anomaly_score, is_anomaly and top_features to every row of a "
        "CSV file, streaming it in chunks.",
    )
    p.add_argument("--model", required=True, help="model file from `fedep fit`")
    p.add_argument("--input", required=True, help="CSV file with a header row")
    p.add_argument("--output", required=True, help="CSV file to write")
    p.add_argument(
        "--client-column",
        help="client id column: rows of a known client use its personalised basis and threshold",
    )
    p.add_argument(
        "--top-features",
        type=_nonneg_int,
        default=3,
        metavar="K",
        help="features contributing most to each score (default: 3; 0 leaves the "
        "top_features column empty)",
    )
    p.add_argument(
        "--chunksize",
        type=_positive_int,
        default=100_000,
        metavar="N",
        help="rows read per chunk (default: 100000)",
    )
    p.add_argument("--quiet", action="store_true", help="no summary line")
    p.set_defaults(func=cmd_score)

    # evaluate --------------------------------------------------------------
    p = sub.add_parser(
        "evaluate",
        help="detection metrics of a model on labelled test data",
        description="Acc, Pre, Rec, FNR, FPR, F1, ROC AUC, PR AUC and per-attack-class "
        "recall at the model's threshold (learnt from training data).",
    )
    p.add_argument("--model", required=True, help="model file from `fedep fit`")
    _add_data_source(p, test=True)
    p.add_argument(
        "--category-column",
        help="attack-class column of --test (default: the label values when "
        "--normal-label is given)",
    )
    p.add_argument(
        "--client-column",
        help="client id column of --test: rows of a known client are scored with its "
        "personalised basis and flagged at its own threshold (as `fedep score`)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(func=cmd_evaluate)

    # reproduce -------------------------------------------------------------
    p = sub.add_parser(
        "reproduce",
        help="rerun the paper's experiments",
        description="Rerun the paper's experiments and write tables and figures to DIR.",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    p.add_argument("--quick", action="store_true", help="small, fast configuration")
    p.add_argument("--data-dir", help="directory of the official datasets")
    p.add_argument("--datasets", nargs="+", type=_dataset_name, metavar="NAME")
    p.add_argument("--seeds", nargs="+", type=int, metavar="SEED")
    p.set_defaults(func=cmd_reproduce)

    # data ------------------------------------------------------------------
    p = sub.add_parser("data", help="dataset files and partitions")
    dsub = p.add_subparsers(dest="data_command", metavar="SUBCOMMAND")
    dsub.required = True
    q = dsub.add_parser("verify", help="check the official dataset files (SHA-256)")
    q.add_argument("--data-dir", help="directory of the official datasets")
    q.set_defaults(func=cmd_data_verify)
    q = dsub.add_parser(
        "summary",
        help="per-client summary of a partition",
        description="Rows, attack share and feature shift of every client.",
    )
    _add_data_source(q)
    _add_clients(q)
    q.set_defaults(func=cmd_data_summary)
    return parser


# --------------------------------------------------------------------------- data
class _Training:
    """Training rows with clients, feature names and a description."""

    def __init__(self, X, y, groups, names, desc, categories=None):
        self.X = X
        self.y = y
        self.groups = groups
        self.names = names
        self.desc = desc
        self.categories = categories


def _read_column(path: str, column: str) -> np.ndarray:
    """One raw column of a CSV/Parquet table, as strings."""
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


def _partition(args, n_rows, key_values, labels):
    from fedep.data import partition_dirichlet, partition_iid, partition_sorted

    if args.partition == "sorted":
        return partition_sorted(key_values, args.clients)
    if args.partition == "dirichlet":
        return partition_dirichlet(labels, args.clients, args.dirichlet_alpha, args.seed)
    return partition_iid(n_rows, args.clients, args.seed)


def _check_client_options(args) -> None:
    if args.client_column is not None and (args.clients is not None or args.partition):
        raise UsageError("--client-column cannot be combined with --clients / --partition")
    if args.dataset is not None and args.client_column is not None:
        raise UsageError("--client-column applies to --train tables, not to --dataset")
    if args.dataset is not None and (args.label_column or args.normal_label):
        raise UsageError("--label-column / --normal-label apply to --train tables only")
    if args.table is not None and args.normal_label is not None and not args.label_column:
        raise UsageError("--normal-label needs --label-column")


def _load_training(args, protocol: str | None, *, apply_protocol: bool = True) -> _Training:
    """Rows, labels and clients for ``fit`` / ``data summary`` (protocol applied)."""
    from fedep.data import load_csv, load_dataset, make_client_split

    _check_client_options(args)
    _check_dataset(args.dataset)
    if args.dataset is not None:
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
            random_state=args.seed,
            alpha=args.dirichlet_alpha,
            min_train_rows=1,
        )
        tr = split.info["train_row_index"]
        desc = (
            f"{ds.name} ({args.feature_set} features), {clients} clients ({partition} "
            f"partition), protocol {protocol or 'clean'}"
        )
        return _Training(
            split.X_train,
            split.y_train,
            split.groups_train,
            list(ds.feature_names),
            desc,
            np.asarray(ds.category_train)[tr],
        )

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
        key = labels = None
        if partition == "sorted":
            if args.partition_key in t.feature_names:
                key = X[:, t.feature_names.index(args.partition_key)]
            else:
                raw = _read_column(args.table, args.partition_key)
                import pandas as pd

                key = pd.to_numeric(pd.Series(raw), errors="coerce").to_numpy(dtype=float)
                if not np.isfinite(key).all():
                    raise UsageError(
                        f"--partition-key column {args.partition_key!r} must be numeric"
                    )
        elif partition == "dirichlet":
            if args.label_column is None:
                raise UsageError("--partition dirichlet needs --label-column")
            labels = _read_column(args.table, args.label_column)
        groups = _partition(args, X.shape[0], key, labels)
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
    return _Training(X, y, groups, list(t.feature_names), desc)


# --------------------------------------------------------------------------- fit
def _make_detector(args, callback):
    from fedep import ABLATION_CASES, FedEP, FedPG, LocalPCA, OneShotPCA, PooledPCA

    method = args.method
    params = {
        "n_components": args.rank,
        "contamination": args.contamination,
        "random_state": args.seed,
    }
    for dest, (param, methods) in _HYPER.items():
        value = getattr(args, dest)
        if value is None:
            continue
        if method not in methods:
            opt = "--" + dest.replace("_", "-")
            raise UsageError(f"{opt} does not apply to --method {method}")
        params[param] = value
    if method in ("fedep", "fedpg") or method in _CASE:
        params["callback"] = callback
    if method in _CASE:
        case = ABLATION_CASES[_CASE[method]]
        clash = [k for k in case if k in params and params[k] != case[k]]
        if clash:
            raise UsageError(f"--{clash[0]} is fixed by --method {method} ({case})")
        params.update(case)
    cls = {
        "fedep": FedEP,
        "case1": FedEP,
        "case2": FedEP,
        "case3": FedEP,
        "fedpg": FedPG,
        "pca": PooledPCA,
        "local-pca": LocalPCA,
        "oneshot": OneShotPCA,
    }[method]
    return cls(**params)


def cmd_fit(args) -> int:
    import pandas as pd
    from sklearn.exceptions import ConvergenceWarning

    from fedep._progress import RoundProgress

    out = Path(args.out)
    if out.parent and not out.parent.exists():
        raise FileNotFoundError(f"output directory {str(out.parent)!r} does not exist")
    t0 = time.perf_counter()
    data = _load_training(args, args.protocol)
    t_load = time.perf_counter() - t0
    progress = RoundProgress(1, label=args.method, enabled=not args.quiet)
    det = _make_detector(args, progress)
    progress.n_rounds = int(det.get_params().get("n_rounds", 1))
    n_clients = len(np.unique(data.groups))
    _info(
        f"training {type(det).__name__} (rank {args.rank}) on {data.X.shape[0]} rows x "
        f"{data.X.shape[1]} features: {data.desc}",
        args.quiet,
    )
    frame = pd.DataFrame(data.X, columns=data.names, copy=False)
    t1 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            det.fit(frame, groups=data.groups)
    finally:
        progress.close()
    t_fit = time.perf_counter() - t1
    det.save(out)
    rounds = getattr(det, "n_iter_", None)
    stop = getattr(det, "stop_reason_", None)
    if rounds is None:
        how = "closed form (no rounds)"
    else:
        note = "" if stop == "converged" else " (round cap reached before --tol)"
        how = f"{rounds} rounds, stop reason: {stop}{note}"
    print(
        f"{args.method}: {how}; {n_clients} clients, {data.X.shape[0]} training rows; "
        f"fit {t_fit:.2f} s (data {t_load:.2f} s); threshold {det.threshold_:.6g}; "
        f"model written to {out}"
    )
    return 0


# --------------------------------------------------------------------------- model
def _load_model(path):
    import fedep

    return fedep.load(path)


def _model_features(det, path) -> list[str]:
    from fedep.persistence import ModelFileError

    names = getattr(det, "feature_names_in_", None)
    if names is None:
        raise ModelFileError(
            f"model file {path} stores no feature names (it was fitted on a plain array); "
            "refit it with `fedep fit` or from a pandas DataFrame"
        )
    return [str(c) for c in names]


# --------------------------------------------------------------------------- score
#
# Streaming design: the input is read as raw lines, ``--chunksize`` lines at a time.
# Each block is parsed by pandas' C parser for the model's feature columns (and the
# client column) only, and every original line is written back byte for byte with
# ``,anomaly_score,is_anomaly,top_features`` appended. Memory is bounded by one block,
# and the input's own columns keep their exact text (no float re-formatting, quoting
# or dtype guessing). A quoted field spanning several lines is not supported (the
# block's row count then differs from its line count, which is reported).


def _parse_header(src: Path) -> tuple[list[str], bytes]:
    """Column names and the raw header line (BOM and line end stripped)."""
    from fedep.data import DataError
    from fedep.data.tabular import parse_header_line

    with open(src, "rb") as fh:
        raw = fh.readline()
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    raw = raw.rstrip(b"\r\n")
    if not raw.strip():
        raise DataError(src, "empty file (no header row)", line=1)
    return parse_header_line(raw, src), raw


def _locate_bad_value(block: bytes, header, names, src, first_line):
    """Re-parse a block as text to name the line and column of a bad feature value."""
    import io

    import pandas as pd

    from fedep.data import DataError

    df = pd.read_csv(
        io.BytesIO(block),
        header=None,
        names=header,
        usecols=names,
        dtype=str,
        keep_default_na=False,
        skip_blank_lines=False,
    )
    for c in names:
        s = df[c].fillna("")
        v = pd.to_numeric(s.str.strip(), errors="coerce").to_numpy(dtype=float, na_value=np.nan)
        bad = ~np.isfinite(v)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raw = s.iloc[i].strip()
            what = "missing value" if raw == "" else f"non-numeric or non-finite value {raw!r}"
            raise DataError(src, what, line=first_line + i, column=c)
    raise DataError(src, "cannot parse the feature columns", line=first_line)


def _parse_block(block: bytes, n_lines, header, names, client, src, first_line):
    """Feature matrix (and raw client ids) of ``n_lines`` CSV lines."""
    import io

    import pandas as pd

    from fedep.data import DataError

    usecols = list(names) + ([client] if client is not None and client not in names else [])
    dtype = dict.fromkeys(names, np.float64)
    if client is not None and client not in names:
        dtype[client] = str
    try:
        df = pd.read_csv(
            io.BytesIO(block),
            header=None,
            names=header,
            usecols=usecols,
            dtype=dtype,
            skip_blank_lines=False,
            na_filter=True,
            keep_default_na=False,
            na_values=[""],
            engine="c",
        )
    except pd.errors.ParserError as exc:
        msg = " ".join(str(exc).split())
        import re

        m = re.search(r"line (\d+)", msg)
        line = first_line + int(m.group(1)) - 1 if m else None
        msg = re.sub(r"^Error tokenizing data\. C error: ", "", msg)
        msg = re.sub(r" in line \d+", "", msg)
        raise DataError(src, f"malformed row: {msg}", line=line) from None
    except (ValueError, TypeError):
        _locate_bad_value(block, header, names, src, first_line)
        raise  # pragma: no cover - _locate_bad_value always raises
    if len(df) != n_lines:
        raise DataError(
            src,
            f"{n_lines} lines parsed as {len(df)} rows (a quoted field spanning lines is "
            "not supported by fedep score)",
            line=first_line,
        )
    X = df[list(names)].to_numpy(dtype=np.float64)
    if not np.isfinite(X).all():
        _locate_bad_value(block, header, names, src, first_line)
    ids = None if client is None else df[client]
    return X, ids


def _check_field_counts(body: list[bytes], expected: int, src: Path, first_line: int) -> None:
    """Every line must have as many fields as the header (pandas' C parser does not
    check rows with extra fields when ``usecols`` is given)."""
    import csv

    from fedep.data import DataError

    commas = expected - 1
    for i, ln in enumerate(body):
        if b'"' in ln:
            try:
                n = len(next(csv.reader([ln.decode("utf-8")])))
            except (UnicodeDecodeError, csv.Error, StopIteration) as exc:
                raise DataError(src, f"unreadable row ({exc})", line=first_line + i) from None
        elif ln.count(b",") == commas:
            continue
        else:
            n = ln.count(b",") + 1
        if n != expected:
            text = ln.decode("utf-8", "replace")
            snippet = text if len(text) <= 60 else text[:57] + "..."
            raise DataError(
                src,
                f"malformed row: expected {expected} fields, found {n} ({snippet!r})",
                line=first_line + i,
            )


def _client_ids(series, det):
    """Client column values in the dtype of the model's client ids."""
    import pandas as pd

    if det.clients_.dtype.kind in "iu":
        v = pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        ok = np.isfinite(v) & (v == np.round(v))
        return np.where(ok, v, -(2**62)).astype(np.int64)
    return series.fillna("").astype(str).str.strip().to_numpy(dtype=str)


def _top_indices(contrib: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Column indices and values of the ``k`` largest entries of each row, largest first."""
    k = min(k, contrib.shape[1])
    idx = np.argpartition(-contrib, k - 1, axis=1)[:, :k]
    vals = np.take_along_axis(contrib, idx, axis=1)
    order = np.argsort(-vals, axis=1, kind="stable")
    return np.take_along_axis(idx, order, axis=1), np.take_along_axis(vals, order, axis=1)


def _needs_quotes(text: str) -> bool:
    return any(ch in text for ch in ',"\r\n')


class _TailFormatter:
    """Formats ``,anomaly_score,is_anomaly,top_features`` for each row of a block.

    ``top_features`` is ``"name:value;name:value;..."`` (largest contribution first,
    values with 4 significant digits), quoted as a CSV field when a feature name needs
    it. One ``%`` format per row keeps this fast.
    """

    def __init__(self, names: list[str], k: int) -> None:
        self.k = min(k, len(names))
        quote = any(_needs_quotes(n) for n in names)
        self.names = np.asarray([n.replace('"', '""') if quote else n for n in names], object)
        q = '"' if quote else ""
        tops = ";".join(["%s:%.4g"] * self.k)
        self.fmt = f",%.10g,%d,{q if self.k else ''}{tops}{q if self.k else ''}\n"

    def __call__(self, scores, flags, idx=None, vals=None) -> list[bytes]:
        cols = [scores.tolist(), flags.tolist()]
        for j in range(self.k):
            cols.append(self.names[idx[:, j]].tolist())
            cols.append(vals[:, j].tolist())
        fmt = self.fmt
        return [(fmt % row).encode() for row in zip(*cols, strict=True)]


def _score_block(det, X, groups, names, k):
    """Scores, 0/1 flags and top-feature indices/values of one block."""
    import pandas as pd

    frame = pd.DataFrame(X, columns=names, copy=False)
    idx = vals = None
    if k > 0:
        # One pass: contributions' rows sum to decision_function (documented).
        contrib = det.feature_contributions(frame, groups)
        scores = contrib.sum(axis=1)
        idx, vals = _top_indices(contrib, k)
    else:
        scores = det.decision_function(frame, groups)
    # predict()'s rule (score above the row's client threshold), without a second pass.
    flags = (scores > det.row_thresholds(groups, X.shape[0])).astype(int)
    return scores, flags, idx, vals


def cmd_score(args) -> int:
    from itertools import islice

    from fedep.data import DataError

    src, dst = Path(args.input), Path(args.output)
    if not src.is_file():
        raise FileNotFoundError(f"input file {str(src)!r} does not exist")
    if dst.exists() and dst.resolve() == src.resolve():
        raise UsageError("--output must differ from --input")
    if not dst.parent.exists():
        raise FileNotFoundError(f"output directory {str(dst.parent)!r} does not exist")
    if src.suffix.lower() in (".parquet", ".pq"):
        raise UsageError("fedep score streams CSV files; convert Parquet input to CSV")
    det = _load_model(args.model)
    names = _model_features(det, args.model)
    k = args.top_features
    tail_fmt = _TailFormatter(names, k)
    header, header_raw = _parse_header(src)
    missing = [c for c in names if c not in header]
    if missing:
        raise DataError(
            src,
            f"lacks {len(missing)} feature column(s) the model needs: {missing[:5]}"
            + (" ..." if len(missing) > 5 else ""),
            line=1,
            column=missing[0],
        )
    client = args.client_column
    if client is not None and client not in header:
        raise DataError(src, f"client column {client!r} is not a column", line=1, column=client)
    clash = [c for c in SCORE_COLUMNS if c in header]
    if clash:
        raise DataError(src, f"already has output column {clash[0]!r}", line=1, column=clash[0])

    tmp = dst.with_name(dst.name + ".partial")
    n_rows = n_anom = 0
    t0 = time.perf_counter()
    try:
        with open(src, "rb") as fin, open(tmp, "wb") as fout:
            fin.readline()
            fout.write(header_raw + b"," + ",".join(SCORE_COLUMNS).encode() + b"\n")
            line_no = 2  # of the next line to read
            pending_blank = 0
            while True:
                lines = list(islice(fin, args.chunksize))
                if not lines:
                    break
                body = [ln.rstrip(b"\r\n") for ln in lines]
                # Blank lines: fine at the end of the file, an error inside the data.
                blank = [i for i, ln in enumerate(body) if not ln.strip()]
                if blank:
                    if any(body[i].strip() for i in range(blank[0], len(body))):
                        raise DataError(src, "blank line inside the data", line=line_no + blank[0])
                    pending_blank += len(body) - blank[0]
                    body = body[: blank[0]]
                elif pending_blank:
                    raise DataError(src, "blank line inside the data", line=line_no - pending_blank)
                if body:
                    _check_field_counts(body, len(header), src, line_no)
                    block = b"\n".join(body) + b"\n"
                    X, ids = _parse_block(block, len(body), header, names, client, src, line_no)
                    groups = None if ids is None else _client_ids(ids, det)
                    scores, flags, idx, vals = _score_block(det, X, groups, names, k)
                    tails = tail_fmt(scores, flags, idx, vals)
                    fout.write(
                        b"".join([x for pair in zip(body, tails, strict=True) for x in pair])
                    )
                    n_rows += len(body)
                    n_anom += int(flags.sum())
                line_no += len(lines)
        if n_rows == 0:
            raise DataError(src, "file has a header but no data rows", line=2)
        os.replace(tmp, dst)
    finally:
        if tmp.exists():
            tmp.unlink()
    dt = time.perf_counter() - t0
    rate = n_rows / dt if dt > 0 else float("inf")
    _info(
        f"scored {n_rows} records in {dt:.2f} s ({rate:,.0f} records/s); {n_anom} flagged "
        f"as anomalies ({100 * n_anom / n_rows:.2f}%); written to {dst}",
        args.quiet,
    )
    return 0


# --------------------------------------------------------------------------- evaluate
def _test_data(args, names):
    """X_test (as a DataFrame with the model's columns), y_test, categories, source."""
    import pandas as pd

    from fedep.data import DataError, load_csv, load_dataset

    _check_dataset(args.dataset)
    if args.dataset is not None:
        if args.label_column or args.normal_label or args.category_column or args.client_column:
            raise UsageError(
                "--label-column / --normal-label / --category-column / --client-column "
                "apply to --test"
            )
        ds = load_dataset(args.dataset, args.data_dir, feature_set=args.feature_set)
        if list(ds.feature_names) != names:
            raise UsageError(
                f"the model's {len(names)} features do not match {ds.name} with feature set "
                f"{args.feature_set!r} ({len(ds.feature_names)} features); pass the dataset "
                "and --feature-set the model was trained with"
            )
        X = pd.DataFrame(ds.X_test, columns=names, copy=False)
        return X, ds.y_test, np.asarray(ds.category_test).astype(str), f"{ds.name} test set"
    if not args.label_column:
        raise UsageError("--test needs --label-column")
    t = load_csv(
        args.table,
        label_column=args.label_column,
        normal_label=args.normal_label,
        feature_columns=names,
    )
    if args.category_column is not None:
        cats = _read_column(args.table, args.category_column)
    elif args.normal_label is not None:
        cats = _read_column(args.table, args.label_column)
    else:
        cats = np.where(t.y == 0, "normal", "attack")
    if len(cats) != len(t.y):
        raise DataError(args.table, "category column length differs from the table")
    cats = np.where(t.y == 0, "normal", cats)
    X = pd.DataFrame(t.X, columns=names, copy=False)
    return X, t.y, cats, Path(args.table).name


def _jsonable(v):
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def cmd_evaluate(args) -> int:
    from fedep.data import DataError
    from fedep.evaluation.metrics import (
        best_f1_threshold,
        detection_metrics,
        format_metrics_table,
        per_class_recall,
        trivial_detector_metrics,
    )

    det = _load_model(args.model)
    names = _model_features(det, args.model)
    X, y, cats, source = _test_data(args, names)
    groups = None
    if args.client_column is not None:
        groups = _read_column(args.table, args.client_column)
        if len(groups) != len(y):
            raise DataError(args.table, "client column length differs from the table")
    scores = det.decision_function(X, groups)
    threshold = float(det.threshold_)
    thresholds = det.row_thresholds(groups, len(scores)) if groups is not None else threshold
    model_row = detection_metrics(y, scores, thresholds)
    y_pred = (scores > thresholds).astype(int)
    recall = per_class_recall(cats, y_pred)
    trivial = trivial_detector_metrics(y)
    tuned_thr = best_f1_threshold(y, scores)
    if isinstance(tuned_thr, tuple):  # tolerate (threshold, f1) return values
        tuned_thr = tuned_thr[0]
    tuned = detection_metrics(y, scores, float(tuned_thr))
    labels = {
        "model": "model (training threshold)",
        "trivial": "trivial all-attack detector",
        "test_tuned": "test-tuned (as in the paper; optimistic)",
    }
    personal = None
    if groups is not None:
        known = np.isin(groups, np.asarray(det.clients_).astype(str))
        personal = {
            "client_column": args.client_column,
            "rows_of_known_clients": int(known.sum()),
            "rows_scored_globally": int((~known).sum()),
        }
    result = {
        "model_file": str(args.model),
        "detector": type(det).__name__,
        "test": source,
        "personalised": personal,
        "n_test": int(len(y)),
        "n_attack": int(np.sum(y)),
        "model": model_row,
        "trivial": trivial,
        "test_tuned": tuned,
        "per_class_recall": recall,
    }
    if args.json:
        print(json.dumps(_jsonable(result), indent=2))
        return 0
    print(
        f"{type(det).__name__} on {source}: {len(y)} records, {int(np.sum(y))} attacks; "
        f"threshold {threshold:.6g} (from training data)"
    )
    if personal is not None:
        print(
            f"personalised by column {args.client_column!r}: "
            f"{personal['rows_of_known_clients']} rows scored by their gateway's basis and "
            f"threshold, {personal['rows_scored_globally']} rows of unknown clients by the "
            "global ones"
        )
    rows = [{"detector": labels[k], **result[k]} for k in ("model", "trivial", "test_tuned")]
    cols = ["detector", "acc", "pre", "rec", "fnr", "fpr", "f1", "roc_auc", "pr_auc"]
    print(format_metrics_table(rows, columns=cols))
    print()
    print(
        "per-class detection rate (share flagged at the training threshold; "
        "recall for attack classes, FPR for normal):"
    )
    width = max((len(str(k)) for k in recall), default=5)
    for k, v in recall.items():
        print(f"  {str(k):<{width}}  {_fmt_recall(v)}")
    return 0


def _fmt_recall(v) -> str:
    if isinstance(v, dict):
        parts = []
        for k, x in v.items():
            parts.append(f"{k}={x:.4f}" if isinstance(x, float) else f"{k}={x}")
        return " ".join(parts)
    return f"{v:.4f}" if isinstance(v, float) else str(v)


# --------------------------------------------------------------------------- reproduce
def cmd_reproduce(args) -> int:
    from fedep.evaluation.reproduce import run_reproduce

    for name in args.datasets or ():
        _check_dataset(name)
    out = run_reproduce(
        Path(args.out),
        quick=args.quick,
        data_dir=args.data_dir,
        datasets=args.datasets,
        seeds=args.seeds,
        log=lambda msg: print(msg, flush=True),
    )
    print(f"results written to {out}")
    return 0


# --------------------------------------------------------------------------- data
def cmd_data_verify(args) -> int:
    from fedep.data import format_verify_report, resolve_data_dir, verify_data_dir

    root = resolve_data_dir(args.data_dir)
    records = verify_data_dir(root)
    print(format_verify_report(records, str(root)))
    bad = [r for r in records if r.status == "altered" or (r.required and r.status == "missing")]
    return 1 if bad else 0


def cmd_data_summary(args) -> int:
    from fedep.data import format_partition_summary, partition_summary

    if args.dataset is not None and args.clients is None:
        raise UsageError("data summary needs --clients D")
    data = _load_training(args, "contaminated", apply_protocol=False)
    df = partition_summary(data.groups, data.y, data.X, data.names)
    print(data.desc.replace(", protocol contaminated", ", all training rows"))
    print(format_partition_summary(df))
    return 0


# --------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    """Run the ``fedep`` command; returns the exit status.

    Parameters
    ----------
    argv : list of str, optional
        Arguments without the program name (default: ``sys.argv[1:]``).
    """
    from fedep.data import DataError, DatasetNotFoundError
    from fedep.persistence import ModelFileError

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, syntax errors (argparse printed them)
        return int(exc.code) if isinstance(exc.code, int) else 1
    try:
        with warnings.catch_warnings():
            # Library warnings are useful, but one line each, without source lines.
            warnings.showwarning = _show_warning
            return int(args.func(args) or 0)
    except (DataError, DatasetNotFoundError, ModelFileError, UsageError) as exc:
        _err(_one_line(exc))
    except BrokenPipeError:  # output piped into `head` etc.: stop quietly
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 1
    except FileNotFoundError as exc:
        _err(_one_line(exc) if str(exc) else f"file not found: {exc.filename}")
    except (ValueError, OSError) as exc:
        _err(_one_line(exc))
    except KeyboardInterrupt:
        _err("interrupted")
        return 130
    return 1


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, OSError) and exc.strerror and exc.filename is not None:
        text = f"{exc.filename}: {exc.strerror}"
    return " ".join(text.split())


def _show_warning(message, category, filename, lineno, file=None, line=None):
    print(f"{PROG}: warning: {' '.join(str(message).split())}", file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

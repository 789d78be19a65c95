"""Shared pieces of the commands: errors, option parsers, data-source options, models.

:mod:`fedep.cli` imports this module, so it imports the standard library and
:mod:`fedep._names` only; the library (:mod:`fedep.data`, :mod:`fedep.modelfile`:
pandas, NumPy) is imported inside the functions that need it (start-up time:
``import fedep.cli`` stays light).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

from fedep._names import DATASET_FEATURE_SETS, DEFAULT_FEATURE_SET, PARTITIONS
from fedep._names import DATASETS as DATASET_NAMES

PROG = "fedep"


#: Seed of the client partition when ``--random-state`` is not given.
DEFAULT_PARTITION_SEED = 0


class UsageError(ValueError):
    """A bad combination of command-line options (exit status 1, one line)."""


# ---------------------------------------------------------------------- printing


def err(msg: str) -> None:
    """Print ``fedep: error: msg`` on stderr."""
    print(f"{PROG}: error: {msg}", file=sys.stderr)


def info(msg: str, quiet: bool = False) -> None:
    """A progress message on stderr (stdout stays for results)."""
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


def show_warning(message, category, filename, lineno, file=None, line=None):
    """``warnings.showwarning`` replacement: one line, no source."""
    print(f"{PROG}: warning: {' '.join(str(message).split())}", file=sys.stderr)


# ---------------------------------------------------------------------- option types
def int_at_least(low: int, what: str):
    """The one integer option parser factory: integers ``>= low``."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            v = low - 1
        if v < low:
            raise argparse.ArgumentTypeError(f"expected a {what} integer, got {text!r}")
        return v

    return parse


positive_int = int_at_least(1, "positive")
nonneg_int = int_at_least(0, "non-negative")


def finite_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return v


def dataset_name(text: str) -> str:
    """Normalised dataset name; unknown names are reported by the command (one line)."""
    return text.lower().replace("_", "-")


def check_dataset(name: str | None) -> None:
    if name is not None and name not in DATASET_NAMES:
        raise UsageError(f"unknown dataset {name!r} (choose from {', '.join(DATASET_NAMES)})")


# ---------------------------------------------------------------------- data options
def add_read_options(p: argparse.ArgumentParser) -> None:
    """``--format``, ``--delimiter``, ``--infinity``: how flow-record files are read
    (:func:`fedep.data.readers.read_table`), shared by fit, score and evaluate."""
    # start-up time: see the module docstring
    from fedep.data.readers import FORMATS, INFINITY_POLICIES

    g = p.add_argument_group("input files (CSV/TSV, Zeek TSV/JSON logs, Parquet, Feather, JSON)")
    g.add_argument(
        "--format",
        choices=("auto", *FORMATS),
        default="auto",
        help="file format (default: auto, detected from the content and the name; "
        "gzip/bzip2/xz/zstd compression is always recognised)",
    )
    g.add_argument(
        "--delimiter",
        metavar="CHAR",
        help="CSV/TSV delimiter (default: sniffed from the header line)",
    )
    g.add_argument(
        "--infinity",
        choices=INFINITY_POLICIES,
        default="nan",
        help="infinite values in float columns: nan (missing, the default), clip (to the "
        "column's finite range in the file) or error",
    )


def read_kwargs(args) -> dict:
    """The :func:`~fedep.data.readers.read_table` options of the command line.

    The ``--client-column`` is read as text as written: ``1``, ``01`` and ``1.0`` are three
    gateways (typed as numbers they would be merged into one), as in ``score``'s stream.
    """
    client = getattr(args, "client_column", None)
    return {
        "format": args.format,
        "delimiter": args.delimiter,
        "infinity": args.infinity,
        "text_columns": () if client is None else (client,),
    }


def add_data_source(p: argparse.ArgumentParser, *, test: bool = False) -> None:
    """``--dataset NAME | --train PATH [PATH ...] / --test PATH``, the read options and
    the table's column options."""
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--dataset",
        type=dataset_name,
        metavar="NAME",
        help=f"official dataset: {', '.join(DATASET_NAMES)}",
    )
    if test:
        src.add_argument(
            "--test",
            dest="table",
            metavar="PATH",
            help="your own flow records, one file in any supported format",
        )
    else:
        src.add_argument(
            "--train",
            dest="table",
            nargs="+",
            metavar="PATH",
            help="your own flow records: one file per gateway (gateway id = file name "
            "without suffixes), a directory of such files, or one file with "
            "--client-column; any supported format",
        )
    add_read_options(p)
    p.add_argument("--data-dir", help="directory of the official datasets (or FEDEP_DATA_DIR)")
    p.add_argument(
        "--feature-set",
        choices=DATASET_FEATURE_SETS,
        default=DEFAULT_FEATURE_SET,
        help="features of an official dataset: generic = its raw table as your own file "
        "(the automatic feature pipeline, stored in the model), rich / paper = the "
        "hand-written specifications (default: generic)",
    )
    p.add_argument("--label-column", help="label column of the table")
    p.add_argument(
        "--normal-label",
        help="label value of normal rows (default: labels must be 0 = normal / 1 = attack)",
    )


def add_clients(p: argparse.ArgumentParser, *, random_state: bool) -> None:
    """Client options. ``random_state``: add ``--random-state`` (commands without
    estimator options; ``fit`` gets it from the estimator parameters)."""
    p.add_argument("--client-column", help="column holding each row's client (gateway) id")
    p.add_argument(
        "--clients",
        type=positive_int,
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
        "--dirichlet-concentration",
        type=finite_float,
        default=0.5,
        metavar="C",
        help="Dirichlet concentration of --partition dirichlet (default: 0.5)",
    )
    if random_state:
        p.add_argument(
            "--random-state",
            type=int,
            default=DEFAULT_PARTITION_SEED,
            metavar="INT",
            help=f"seed of the partition (default: {DEFAULT_PARTITION_SEED})",
        )


# ---------------------------------------------------------------------- files, models
def bad_value_error(exc, path, **where):
    """A :class:`~fedep.features.FeatureError` about one value (its ``value`` and
    ``column`` set) as the DataError naming ``path`` and ``where`` (``row=`` or
    ``line=``): the one wording of fit and score."""
    from fedep.data import DataError  # start-up time: see the module docstring

    msg = f"non-numeric value {exc.value!r} in a numeric feature column"
    return DataError(path, msg, column=exc.column, **where)


def check_output_file(path, option: str, keep: dict[str, object] | None = None) -> Path:
    """Fail early (one line) unless ``path`` can be written: its directory exists, is
    a directory and is writable, ``path`` itself is not a directory nor any other
    non-regular file (a device, a FIFO: the atomic rename would replace it with a
    regular file), and it is none of the files in ``keep`` (option -> path or list of
    paths, e.g. the inputs: writing there would destroy them)."""
    out = Path(path)
    if out.exists() and not out.is_dir() and not out.is_file():
        raise UsageError(f"{option}: {str(out)!r} exists and is not a regular file")
    for other, paths in (keep or {}).items() if out.exists() else ():
        for q in paths if isinstance(paths, list | tuple) else [paths]:
            if q is not None and Path(q).exists() and out.samefile(q):
                raise UsageError(f"{option} must differ from {other} ({str(q)!r})")
    parent = out.parent
    if not parent.exists():
        raise UsageError(f"{option}: output directory {str(parent)!r} does not exist")
    if not parent.is_dir():
        raise UsageError(f"{option}: {str(parent)!r} is not a directory")
    if out.is_dir():
        raise UsageError(f"{option}: {str(out)!r} is a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{option}: output directory {str(parent)!r} is not writable")
    return out


def add_model_options(p) -> None:
    """``--model`` and the options that authenticate it (shared by score and evaluate)."""
    p.add_argument("--model", required=True, help="model file from `fedep fit`")
    p.add_argument(
        "--verify-key",
        metavar="KEY",
        help="verify the model's signature: an Ed25519 public key PEM file, or a shared "
        "secret as hmac:SECRET or @FILE (the file's bytes); an unsigned or altered model "
        "is refused",
    )


def load_model(path, verify_key: str | None = None):
    # start-up time: see the module docstring
    import fedep
    from fedep.modelfile.signing import parse_key

    key = parse_key(verify_key)
    return fedep.load(path, verify_key=key, require_signature=key is not None)


def required_columns(det) -> list[str]:
    """Raw columns a model needs: its pipeline's used, non-optional columns, or (numeric
    path) ``feature_names_in_``."""
    pipe = getattr(det, "features_", None)
    if pipe is None:
        return [str(c) for c in getattr(det, "feature_names_in_", ())]
    return [d.name for d in pipe.decisions_ if d.used and not d.optional]


def used_columns(det) -> list[str]:
    """Raw columns a model reads (required and optional)."""
    pipe = getattr(det, "features_", None)
    if pipe is None:
        return [str(c) for c in getattr(det, "feature_names_in_", ())]
    return [d.name for d in pipe.decisions_ if d.used]


def check_columns(det, columns, path) -> None:
    """One error naming every column the model needs that ``columns`` lacks."""
    from fedep.data import DataError  # start-up time: see the module docstring

    have = set(columns)
    missing = [c for c in required_columns(det) if c not in have]
    if missing:
        shown = ", ".join(map(repr, missing[:10])) + (" ..." if len(missing) > 10 else "")
        raise DataError(
            path,
            f"lacks {len(missing)} column(s) needed by the model: {shown}",
            line=1,
            column=missing[0],
        )


def output_feature_names(det) -> list[str]:
    """Names of the model's features (columns of ``feature_contributions``)."""
    names = getattr(det, "feature_names_out_", None)
    if names is None:
        names = getattr(det, "feature_names_in_", None)
    if names is None:
        return [f"x{j}" for j in range(det.components_.shape[1])]
    return [str(c) for c in names]


def model_features(det, path) -> list[str]:
    from fedep.modelfile import ModelFileError  # start-up time: see the module docstring

    names = getattr(det, "feature_names_in_", None)
    if names is None:
        raise ModelFileError(
            f"model file {path} stores no feature names (it was fitted on a plain array); "
            "refit it with `fedep fit` or from a pandas DataFrame"
        )
    return [str(c) for c in names]

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
import shutil
import sys
from pathlib import Path

from fedep._names import DATASET_FEATURE_SETS, DEFAULT_FEATURE_SET, PARTITIONS
from fedep._names import DATASETS as DATASET_NAMES

PROG = "fedep"

#: Every command: its module (imported only when the command runs or its help is
#: asked for: start-up time) and its one-line help, shown by ``fedep --help``.
COMMANDS: dict[str, tuple[str, str]] = {
    "fit": ("fedep.cli.fit", "train a detector on flow records and save it"),
    "score": ("fedep.cli.score", "score every row of a flow-record file"),
    "watch": (
        "fedep.cli.watch",
        "follow live logs (Zeek, JSON lines) and write alerts as records are written",
    ),
    "evaluate": ("fedep.cli.evaluate", "detection metrics of a model on labelled test data"),
    "federate": (
        "fedep.cli.federate",
        "run the federation over Flower on this machine (one process per gateway)",
    ),
    "reproduce": ("fedep.cli.reproduce", "rerun the paper's experiments"),
    "models": ("fedep.cli.models", "a model's lineage; the drift between two models"),
    "data": ("fedep.cli.data", "check the dataset files; summarise a partition"),
    "warmup": ("fedep.cli.warmup", "compile the numerical kernels now, not in the first fit"),
}

#: ``--method``'s values in words (``fit``, ``federate``).
METHOD_HELP: dict[str, str] = {
    "fedep": "personalised robust federated PCA (FedEP, the paper's method)",
    "fedpg": "FedPG baseline: federated PCA on the Grassmann manifold",
    "case1": "FedEP ablation: no S, beta=0",
    "case2": "FedEP ablation: S, beta=0",
    "case3": "FedEP ablation: beta, no S",
    "pca": "centralised PCA on the pooled records (upper bound; moves the records)",
    "local-pca": "each client's own PCA, nothing shared",
    "oneshot": "one-shot federated PCA: the clients' SVDs merged once",
}


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Help at column 26, at most 100 columns wide (the terminal's width if less);
    descriptions and epilogs keep their line breaks (lists of methods, examples)."""

    def __init__(self, prog, indent_increment=2, max_help_position=26, width=None):
        if width is None:
            width = min(shutil.get_terminal_size().columns, 100) - 2
        super().__init__(prog, indent_increment, max_help_position, width)

    def _format_action_invocation(self, action):
        if isinstance(action, argparse.BooleanOptionalAction):  # --[no-]x, not --x, --no-x
            return action.option_strings[0].replace("--", "--[no-]", 1)
        return super()._format_action_invocation(action)

    def _format_args(self, action, default_metavar):
        if action.nargs == argparse.ONE_OR_MORE:  # PATH ..., not PATH [PATH ...]
            return f"{self._metavar_formatter(action, default_metavar)(1)[0]} ..."
        return super()._format_args(action, default_metavar)


def command_parser(sub, name: str, **kwargs) -> argparse.ArgumentParser:
    """The parser of command ``name`` (its help from :data:`COMMANDS`)."""
    kwargs.setdefault("help", COMMANDS[name][1])
    return sub.add_parser(name, formatter_class=HelpFormatter, **kwargs)


def methods_text(methods) -> str:
    """What every ``--method`` is, one per line (for a command's description)."""
    width = max(len(m) for m in methods) + 2
    lines = [f"  {m:<{width}}{METHOD_HELP.get(m, m)}" for m in methods]
    return "methods (--method):\n" + "\n".join(lines)


def add_method_option(p, methods) -> None:
    """``--method`` (its values are listed by :func:`methods_text`)."""
    p.add_argument(
        "--method",
        choices=list(methods),
        default="fedep",
        metavar="NAME",
        help="the detector: one of the methods above (default: fedep)",
    )


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

    g = p.add_argument_group("file format (CSV/TSV, Zeek logs, Parquet, Feather, JSON)")
    g.add_argument(
        "--format",
        choices=("auto", *FORMATS),
        default="auto",
        metavar="FMT",
        help=f"{', '.join(FORMATS)} (default: auto, from the content and the name; "
        "gzip/bzip2/xz/zstd are always recognised)",
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
        help="infinite values: nan (missing), clip (to the column's finite range) or error "
        "(default: nan)",
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


def add_dataset_options(g) -> None:
    """``--data-dir`` and ``--feature-set``: where the official datasets are, and which
    of their feature sets to use (``fit``, ``evaluate``, ``federate``)."""
    g.add_argument(
        "--data-dir",
        metavar="DIR",
        help="directory of the official datasets (default: $FEDEP_DATA_DIR)",
    )
    g.add_argument(
        "--feature-set",
        choices=DATASET_FEATURE_SETS,
        default=DEFAULT_FEATURE_SET,
        metavar="SET",
        help="features of --dataset: generic = its raw table, as your own files; rich, "
        f"paper = hand-written features (default: {DEFAULT_FEATURE_SET})",
    )


def add_data_source(p: argparse.ArgumentParser, *, test: bool = False) -> None:
    """``--dataset NAME | --train PATH [PATH ...] / --test PATH``, the read options and
    the table's column options."""
    g = p.add_argument_group("data")
    src = g.add_mutually_exclusive_group(required=True)
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
            help="your own flow records: one file per gateway (its name is the gateway "
            "id), a directory of them, or one file with --client-column",
        )
    add_dataset_options(g)
    g.add_argument("--label-column", metavar="COL", help="label column of your table")
    g.add_argument(
        "--normal-label",
        metavar="VALUE",
        help="label of normal rows (default: labels are 0 = normal, 1 = attack)",
    )
    add_read_options(p)


def add_clients(p: argparse.ArgumentParser, *, random_state: bool) -> None:
    """Client options. ``random_state``: add ``--random-state`` (commands without
    estimator options; ``fit`` gets it from the estimator parameters)."""
    g = p.add_argument_group("clients (gateways)")
    g.add_argument("--client-column", metavar="COL", help="column of each row's client id")
    g.add_argument(
        "--clients",
        type=positive_int,
        metavar="D",
        help="split the rows among D clients (default for --dataset: 10)",
    )
    g.add_argument(
        "--partition",
        choices=PARTITIONS,
        metavar="HOW",
        help=f"how --clients split the rows: {', '.join(PARTITIONS)} (default: sorted for "
        "--dataset, iid for --train)",
    )
    g.add_argument(
        "--partition-key",
        default="dst_bytes",
        metavar="COL",
        help="column that --partition sorted sorts on (default: dst_bytes)",
    )
    g.add_argument(
        "--dirichlet-concentration",
        type=finite_float,
        default=0.5,
        metavar="C",
        help="concentration of --partition dirichlet (default: 0.5)",
    )
    if random_state:
        g.add_argument(
            "--random-state",
            type=int,
            default=DEFAULT_PARTITION_SEED,
            metavar="INT",
            help=f"seed of the partition (default: {DEFAULT_PARTITION_SEED})",
        )


FEATURES_GROUP = "features (--include ... configure the pipeline of --features auto)"

#: The estimator options' groups, in the order ``--help`` shows them.
PARAM_GROUPS = (
    "model and threshold (every method)",
    FEATURES_GROUP,
    "federation rounds (fedep, fedpg, case1..case3)",
    "FedEP (fedep, case1..case3)",
    "baselines: FedPG (fedpg), one-shot (oneshot)",
)


def param_group(spec) -> str:
    """The ``--help`` group of an estimator parameter (a :class:`fedep.params.ParamSpec`)."""
    used = set(spec.estimators)
    if spec.name in ("features", "standardize"):
        return FEATURES_GROUP
    if used == {"FedEP"}:
        return PARAM_GROUPS[3]
    if used in ({"FedPG"}, {"OneShotPCA"}):
        return PARAM_GROUPS[4]
    if used <= {"FedEP", "FedPG"}:
        return PARAM_GROUPS[2]
    return PARAM_GROUPS[0]


def add_estimator_options(p: argparse.ArgumentParser, pipeline: dict, detectors: dict) -> None:
    """The options of the feature pipeline's and the detectors' parameter tables
    (:func:`fedep.params.add_param_options`), in the groups of :func:`param_group`."""
    # start-up time: see the module docstring (fedep.params imports scikit-learn)
    from fedep.params import add_param_options

    for title in PARAM_GROUPS:  # made in this order; empty groups are not shown
        p.add_argument_group(title)
    add_param_options(p, detectors, group_of=param_group)
    add_param_options(p, pipeline, group_of=lambda spec: FEATURES_GROUP)


# ---------------------------------------------------------------------- files, models
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


#: Where keys live: the environment. ``fedep fit`` signs its model and ``fedep
#: federate`` its server messages with :data:`SIGNING_KEY_ENV` when no ``--sign-key``
#: is given; ``score``, ``evaluate`` and ``watch`` verify with ``--verify-key``, else
#: :data:`VERIFY_KEY_ENV`, else the signing key (an HMAC secret verifies itself, an
#: Ed25519 private key PEM its own signatures). Values as the options take them: a PEM
#: path, ``hmac:SECRET`` or ``@FILE`` (a secret kept in a file).
SIGNING_KEY_ENV = "FEDEP_SIGNING_KEY"
VERIFY_KEY_ENV = "FEDEP_VERIFY_KEY"
#: Set to 1 (or ``--require-signature``): refuse a model that is not signed with a
#: configured key.
REQUIRE_SIGNATURE_ENV = "FEDEP_REQUIRE_SIGNATURE"


def env_flag(name: str) -> bool:
    """Whether the environment variable ``name`` is set to a true value (1, yes, true, on)."""
    return os.environ.get(name, "").strip().lower() in ("1", "yes", "true", "on")


def signing_key_text(option: str | None) -> str | None:
    """The key to sign with: the option, else :data:`SIGNING_KEY_ENV` (None: neither)."""
    return option or os.environ.get(SIGNING_KEY_ENV) or None


def verify_key_text(option: str | None) -> str | None:
    """The key to verify models with: the option, else :data:`VERIFY_KEY_ENV`, else
    :data:`SIGNING_KEY_ENV` (None: none configured)."""
    return option or os.environ.get(VERIFY_KEY_ENV) or os.environ.get(SIGNING_KEY_ENV) or None


def add_model_options(p) -> None:
    """``--model`` and the options that authenticate it (score, evaluate, watch)."""
    p.add_argument("--model", required=True, metavar="MODEL", help="model file from fedep fit")
    p.add_argument(
        "--verify-key",
        metavar="KEY",
        help="refuse an unsigned or altered model: an Ed25519 public key PEM file, or a "
        f"shared secret as hmac:SECRET or @FILE (default: {VERIFY_KEY_ENV}, else "
        f"{SIGNING_KEY_ENV})",
    )
    p.add_argument(
        "--require-signature",
        action="store_true",
        help=f"refuse a model that is not signed with the key (also: {REQUIRE_SIGNATURE_ENV}=1)",
    )


def load_model(path, verify_key: str | None = None, require_signature: bool = False):
    """The detector saved in ``path``, authenticated as configured: every command that
    loads a model (score, evaluate, watch) calls this.

    The key is ``verify_key``, else :data:`VERIFY_KEY_ENV`, else :data:`SIGNING_KEY_ENV`.
    With a key the model must be signed with it (a signature stripped off is refused).
    Without one, ``require_signature`` or :data:`REQUIRE_SIGNATURE_ENV` is a usage
    error; otherwise the model loads (its integrity checked) and one line on stderr
    says that it is unsigned, or signed but not verified.

    Raises
    ------
    UsageError
        Signatures are required and no key is configured.
    fedep.modelfile.ModelFileError
        One line: the file is refused.
    """
    # start-up time: see the module docstring
    import fedep
    from fedep.modelfile.readwrite import signature_scheme
    from fedep.modelfile.signing import parse_key

    key = parse_key(verify_key_text(verify_key))
    required = bool(require_signature) or env_flag(REQUIRE_SIGNATURE_ENV)
    if required and key is None:
        raise UsageError(
            f"signatures are required (--require-signature / {REQUIRE_SIGNATURE_ENV}) but no "
            f"key is configured: give --verify-key or set {VERIFY_KEY_ENV}"
        )
    det = fedep.load(path, verify_key=key, require_signature=key is not None)
    if key is None:
        scheme = signature_scheme(path)
        if scheme is None:
            what = "is NOT SIGNED: anyone who could write it may have changed what it flags"
        else:
            what = f"carries a {scheme} signature that was NOT VERIFIED (no key configured)"
        print(
            f"{PROG}: warning: model {path} {what}; verify with --verify-key or "
            f"{VERIFY_KEY_ENV} (sign with fedep fit --sign-key or {SIGNING_KEY_ENV})",
            file=sys.stderr,
        )
    return det


def load_warm_start(args: argparse.Namespace):
    """The model of ``--warm-start`` (:func:`load_model` with ``--verify-key``), which
    must be of the class ``--method`` fits (``fedep fit`` and ``fedep federate``).

    Raises
    ------
    UsageError
        A model of another method.
    """
    # start-up time: see the module docstring
    from fedep.detectors import make_estimator

    det = load_model(args.warm_start, args.verify_key)
    want = type(make_estimator(args.method))
    if type(det) is not want:
        raise UsageError(
            f"--warm-start: {args.warm_start} is a {type(det).__name__} model, --method "
            f"{args.method} fits {want.__name__}"
        )
    return det


def check_columns(det, columns, path) -> None:
    """One error naming every column the model needs that ``columns`` lacks."""
    # start-up time: see the module docstring
    from fedep.data import DataError
    from fedep.detectors.columns import required_columns

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


def model_features(det, path) -> list[str]:
    from fedep.modelfile import ModelFileError  # start-up time: see the module docstring

    names = getattr(det, "feature_names_in_", None)
    if names is None:
        raise ModelFileError(
            f"model file {path} stores no feature names (it was fitted on a plain array); "
            "refit it with `fedep fit` or from a pandas DataFrame"
        )
    return [str(c) for c in names]

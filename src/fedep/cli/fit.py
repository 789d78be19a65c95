"""``fedep fit``: train a detector and save it.

Every estimator parameter is an option generated from the estimator's own declaration
(:func:`fedep.params.add_param_options`): ``--n-components``, ``--n-rounds``,
``--alpha``, ``--random-state``, ...; an option not given keeps the estimator's
default. The detector is built and validated before any data is read, so a bad value
is reported (one line, the estimator's message) at once. The rank (``--n-components``,
default ``auto``: chosen from the merged spectrum, see :mod:`fedep.core.rank`) is
printed after the fit with its reason.

``--random-state`` seeds the estimator and also the random client partitions
(``--partition iid`` / ``dirichlet``); not given, the estimator keeps its default
(``None``) and the partition uses seed 0.

Your own flow records (``--train``: one file per gateway, a directory, or one file with
``--client-column``; any format :func:`fedep.data.readers.read_table` reads) go through
the estimator's federated feature pipeline (``--features auto``, the default):
``--include / --exclude / --categorical / --numeric COL ...`` override its decisions
(they build a :class:`~fedep.features.FeaturePipeline` passed as ``features``), and the
decisions are printed as a table unless ``--quiet``. The label and client columns are
removed before the pipeline sees the table. ``--features numeric`` uses the numeric
columns as they are. An official ``--dataset`` is read as a user's file by default
(``--feature-set generic``: its raw table, label columns removed, through the same
pipeline); with ``--feature-set paper`` or ``rich`` its hand-written numeric features are
used as they are (``--features numeric``) unless ``--features`` or a pipeline option is
given.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.exceptions import ConvergenceWarning

import fedep
from fedep._progress import RoundProgress
from fedep.cli._common import (
    DEFAULT_PARTITION_SEED,
    UsageError,
    add_clients,
    add_data_source,
    add_estimator_options,
    add_method_option,
    check_output_file,
    command_parser,
    info,
    load_warm_start,
    methods_text,
    signing_key_text,
)
from fedep.cli.training import load_training, numeric_columns
from fedep.cli.trusted import (
    add_trust_options,
    describe_trust,
    reference_columns,
    trust_inputs,
)
from fedep.core.trimming import describe_trimming
from fedep.data.errors import bad_value_error
from fedep.detectors import METHODS, detector_param_table, make_estimator
from fedep.features import FeatureError, format_decisions
from fedep.federation.rounds import TOL_REASONS
from fedep.modelfile.signing import parse_key
from fedep.params import (
    make_pipeline,
    option_name,
    params_from_args,
    pipeline_table,
    validate_params,
)

PROTOCOLS = ("clean", "contaminated")


def register(sub) -> None:
    p = command_parser(
        sub,
        "fit",
        usage="fedep fit (--dataset NAME | --train PATH ...) --out MODEL [options]",
        description="Train a detector on an official dataset or on your own flow records "
        "(one file per\ngateway) and save it as a model file for fedep score / evaluate.\n\n"
        + methods_text(METHODS),
        epilog="example:\n  fedep fit --train gw1.csv gw2.csv gw3.csv --out model.fedep\n"
        "--random-state also seeds the iid / dirichlet partition (0 when not given).",
    )
    p.add_argument("--out", required=True, metavar="MODEL", help="model file to write")
    add_method_option(p, METHODS)
    p.add_argument(
        "--protocol",
        choices=PROTOCOLS,
        metavar="P",
        help="clean: normal rows only (needs labels); contaminated: all rows "
        "(default: clean with labels)",
    )
    p.add_argument(
        "--sign-key",
        metavar="KEY",
        help="sign the model: an Ed25519 private key PEM file, hmac:SECRET or @FILE "
        "(default: FEDEP_SIGNING_KEY)",
    )
    p.add_argument(
        "--no-sign", action="store_true", help="do not sign, even with FEDEP_SIGNING_KEY set"
    )
    p.add_argument(
        "--warm-start",
        metavar="MODEL",
        help="refit MODEL on new data from its own state",
    )
    p.add_argument(
        "--verify-key",
        metavar="KEY",
        help="refuse an unsigned or altered --warm-start MODEL",
    )
    p.add_argument(
        "--quiet", action="store_true", help="print only the model file's path (no progress)"
    )
    add_data_source(p)
    add_clients(p, random_state=False)
    add_trust_options(p)
    add_estimator_options(p, pipeline_table(), detector_param_table())
    p.set_defaults(func=cmd_fit)


def build_estimator(args: argparse.Namespace):
    """The validated detector of ``--method`` and the estimator options given.

    Raises
    ------
    ValueError
        An option of another method, or the estimator's own message for a bad value.
    """
    params = params_from_args(args, detector_param_table())
    overrides = pipeline_overrides(args)
    if overrides:
        # Checked and refused before any data is read.
        params["features"] = make_pipeline(
            overrides,
            params.get("features", "auto"),
            spell=lambda k: f"--{option_name(k)}",
            needs="--features auto",
        )
    elif (
        getattr(args, "dataset", None) is not None
        and getattr(args, "feature_set", "generic") != "generic"
        and "features" not in params
    ):
        params["features"] = "numeric"  # a hand-written feature set, as the reproduction
    det = make_estimator(args.method, params)
    validate_params(det)  # the estimator's full check (e.g. OneShotPCA's sketch_rank)
    return det


def warm_estimator(args: argparse.Namespace):
    """The model of ``--warm-start`` (verified with ``--verify-key``), with the estimator
    options given and ``warm_start=True``.

    Raises
    ------
    UsageError
        Feature-pipeline options (the model's pipeline is kept), or a model of another
        method than ``--method``.
    """
    if pipeline_overrides(args):
        raise UsageError(
            "--warm-start keeps the model's feature pipeline: drop the pipeline options"
        )
    det = load_warm_start(args)
    det.set_params(**params_from_args(args, detector_param_table()), warm_start=True)
    validate_params(det)
    return det


def pipeline_overrides(args: argparse.Namespace) -> dict:
    """The FeaturePipeline parameters given on the command line."""
    return params_from_args(args, pipeline_table())


def non_default_params(det) -> dict:
    """The detector's parameters that differ from its class defaults (no callback)."""
    defaults = type(det)().get_params(deep=False)
    out = {}
    for k, v in det.get_params(deep=False).items():
        if k != "callback" and (k not in defaults or repr(defaults[k]) != repr(v)):
            out[k] = v
    return out


def partition_seed(det) -> int:
    rs = det.get_params(deep=False).get("random_state")
    return DEFAULT_PARTITION_SEED if rs is None else int(rs)


def cmd_fit(args) -> int:
    out = check_output_file(args.out, "--out", {"--train": list(args.table or [])})
    # a missing key file is found before training
    key = None if args.no_sign else parse_key(signing_key_text(args.sign_key))
    if args.verify_key is not None and args.warm_start is None:
        raise UsageError("--verify-key checks the --warm-start model: give --warm-start")
    # before any data is read
    det = build_estimator(args) if args.warm_start is None else warm_estimator(args)
    t0 = time.perf_counter()
    data = load_training(args, args.protocol, seed=partition_seed(det))
    trust_kw, trust_lines = trust_inputs(args, data, partition_seed(det))
    t_load = time.perf_counter() - t0
    params = det.get_params(deep=False)
    progress = None
    if "callback" in params:
        progress = RoundProgress(int(params["n_rounds"]), label=args.method, enabled=not args.quiet)
        det.set_params(callback=progress)  # callback(round, V, record)
    n_clients = len(np.unique(data.groups))
    frame = data.X
    if isinstance(det.features, str) and det.features == "numeric":
        keep = numeric_columns(frame)
        ignored = [str(c) for c in frame.columns if c not in keep]
        if ignored:
            info(f"--features numeric: ignoring non-numeric column(s) {ignored}", args.quiet)
        frame = frame[keep]
    if hasattr(trust_kw.get("reference"), "columns"):  # trusted records: the same columns
        trust_kw["reference"], missing = reference_columns(trust_kw["reference"], frame.columns)
        if missing and isinstance(det.features, str) and det.features == "numeric":
            raise ValueError(f"--reference: the files lack training column(s) {missing[:5]}")
        if missing:
            info(f"--reference: the files lack column(s) {missing[:5]}: missing values", args.quiet)
    for line in trust_lines:
        info(line, args.quiet)
    n_rows, n_cols = frame.shape
    info(
        f"training {type(det).__name__} (rank {det.n_components}) on {n_rows} rows x "
        f"{n_cols} columns: {data.desc}",
        args.quiet,
    )
    # Hand the table over without keeping a reference here: the estimator encodes it
    # into its own float matrix, and the table is then freed during the fit instead
    # of staying in memory beside the matrix.
    data.X = None
    handover = [frame]
    del frame
    t1 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            # keywords spelled out, no **trust_kw: a call with ** packs the table into
            # an argument tuple that this frame holds until fit returns (CPython)
            det.fit(
                handover.pop(),
                groups=data.groups,
                reference=trust_kw.get("reference"),
                reference_groups=trust_kw.get("reference_groups"),
                feedback=trust_kw.get("feedback"),
            )
    except FeatureError as exc:
        raise _located(exc, data) from None
    finally:
        if progress is not None:
            progress.close()
            det.set_params(callback=None)
    t_fit = time.perf_counter() - t1
    if data.files is not None and data.bounds is not None:
        # the data window: the files and their rows (a time column adds first/last ts)
        rows = np.diff(data.bounds).tolist()
        det.lineage_["window"]["files"] = [
            {"name": Path(f).name, "rows": int(n)} for f, n in zip(data.files, rows, strict=True)
        ]
    fedep.save(det, out, sign_key=key)
    if args.quiet:  # the one line: the model file, e.g. for MODEL=$(fedep fit ... --quiet)
        print(out)
        return 0
    pipe = getattr(det, "features_", None)
    if pipe is not None:
        n_out = len(det.feature_names_out_)
        print(f"feature pipeline: {n_cols} columns -> {n_out} features")
        print(format_decisions(pipe.decisions_))
    print(f"rank {det.n_components_} ({det.rank_reason_})")
    if det.lineage_.get("parent"):
        print(f"warm start from model {det.lineage_['parent']} ({args.warm_start})")
    if det.n_trim_steps_:
        print(describe_trimming(det.trim_history_, n_rows))
    for line in describe_trust(det):
        print(line)
    if getattr(det, "dp_epsilon_", None) is not None:
        print(
            f"differential privacy: epsilon {det.dp_epsilon_:.4g} at delta "
            f"{det.dp_delta_:.3g} for one record (noise multiplier "
            f"{det.dp_noise_multiplier_:.4g} on every release; see docs/privacy.md)"
        )
    changed = non_default_params(det)
    shown = ", ".join(f"{k}={v!r}" for k, v in changed.items()) or "all defaults"
    print(f"{type(det).__name__} parameters (non-default): {shown}")
    print(
        f"{args.method}: {_how(det)}; {n_clients} clients, {n_rows} training rows; "
        f"fit {t_fit:.2f} s (data {t_load:.2f} s); threshold {det.threshold_:.6g}; "
        f"model written to {out}"
    )
    return 0


def _located(exc, data):
    """A feature-pipeline error about one value, reworded to name the user's file and
    its data row (the pipeline saw the files' rows concatenated and renumbered)."""
    where = data.origin(int(exc.row)) if isinstance(exc.row, int | np.integer) else None
    if where is None:
        return exc
    return bad_value_error(exc, where[0], row=where[1] + 1)


def _how(det) -> str:
    rounds = getattr(det, "n_iter_", None)
    stop = getattr(det, "stop_reason_", None)
    if rounds is None:
        return "closed form (no rounds)"
    text = f"{rounds} rounds, stop reason: {stop}"
    if stop in TOL_REASONS.values():
        return text
    text += " (round cap reached before --tol)" if stop == "max_rounds" else ""
    unmet = {
        k: (v, b)
        for k, (v, b) in (getattr(det, "stop_tests_", None) or {}).items()
        if isinstance(v, (int, float)) and v > b
    }
    if unmet:
        res = ", ".join(f"{k}={v:.3g} (bound {b:.3g})" for k, (v, b) in unmet.items())
        text += f"; not met at tol={det.tol:g}: {res}"
    return text

"""``fedep federate``: run the federation over Flower on this machine.

One line::

    fedep federate --gateways 3 --dataset nsl-kdd --max-rows 3000 --n-rounds 10 \\
        --out runs/flower

starts a Flower SuperLink and one SuperNode per gateway on 127.0.0.1, each a separate
process (:mod:`fedep.flower.deployment`), submits the FedEP app with ``flwr run``,
prints the rounds and stops every process it started. Gateway ``i`` loads its own
records from its node config: partition ``i`` of an official ``--dataset`` (its normal
training rows, shuffled, cut to ``--max-rows``, as ``--feature-set``), or the ``i``-th
``--train`` file; it writes ``gateway-<i>.fedep`` in ``--out``, a model file
``fedep score`` reads.

The estimator options are those of ``fedep fit`` for the methods with rounds to
federate (:func:`fedep.params.add_param_options`); they travel to the ServerApp as
run-config keys, and only those typed are sent (the others keep the method's defaults).

Everything is checked before any process starts, and a bad value is one line
``fedep: error: ...`` (exit status 1; 2 for command-line syntax, as argparse does):
``--gateways``, the dataset name and its files in the data directory (``--data-dir``,
else ``FEDEP_DATA_DIR``, else :func:`fedep.data.dataset_files.resolve_data_dir`, made absolute
because the gateways run in the output folder), the ``--train`` files, the estimator
parameters (the estimator's own validation) and the output folder (refused if it holds
an earlier run's ``result.json`` / ``gateway-*.fedep``, unless ``--overwrite``).

Exit status: 0 when every gateway took part to the end; 1 for a bad value, or when the
run failed or any gateway failed (listed in ``result.json["failed"]``, printed with the
gateway's own error from its ``supernode-<i>.log``; ``--allow-failures`` makes that 0);
130 on Ctrl-C or SIGTERM, after every process it started is stopped and this run's
partial results are removed (the logs stay).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
from pathlib import Path

from fedep._names import DATASETS as DATASET_NAMES
from fedep.cli._common import (
    SIGNING_KEY_ENV,
    UsageError,
    add_dataset_options,
    add_estimator_options,
    add_method_option,
    add_read_options,
    check_dataset,
    command_parser,
    dataset_name,
    err,
    finite_float,
    info,
    load_warm_start,
    methods_text,
    positive_int,
)
from fedep.cli._federate_roles import add_role_options, check_local_only, run_role
from fedep.core.trimming import describe_trimming
from fedep.data.dataset_files import DATASET_URLS, KNOWN_FILES, resolve_data_dir
from fedep.data.readers import check_distinct_gateways, gateway_files
from fedep.detectors import METHODS, make_estimator
from fedep.federation.privacy import check_private
from fedep.flower.deployment import (
    FederationPlan,
    Interrupted,
    RunOutcome,
    gateway_node_configs,
    missing_flower,
    run_config,
    run_local_federation,
    stale_results,
)
from fedep.flower.secure_rules import MIN_GATEWAYS, check_secure_aggregation
from fedep.modelfile.signing import write_public_key
from fedep.params import (
    make_pipeline,
    option_name,
    param_table,
    params_from_args,
    pipeline_table,
)

__all__ = ["register", "cmd_federate", "plan", "output_folder", "federated_methods"]


def federated_methods() -> dict[str, type]:
    """The methods with rounds to federate, and their estimator classes."""
    out = {}
    for m in METHODS:
        est = make_estimator(m, validate=False)
        if est.runs_rounds:
            out[m] = type(est)
    return out


def federated_param_table() -> dict:
    """The parameter table of the federated methods' estimators (:mod:`fedep.params`)."""
    return param_table(list(dict.fromkeys(federated_methods().values())))


def register(sub) -> None:
    methods = list(federated_methods())
    p = command_parser(
        sub,
        "federate",
        usage="fedep federate (--dataset NAME --gateways N | --train PATH ...) [options]\n"
        "       fedep federate --role server --superlink HOST:PORT --certs DIR "
        "--gateways N\n"
        "                      [--gateway-keys PUB ...] [options]\n"
        "       fedep federate --role gateway --superlink HOST:PORT --certs DIR "
        "--node-key KEY\n"
        "                      --train FILE [--once]\n"
        "       fedep federate --role keys --certs DIR --server-name HOST | "
        "--node-key KEY",
        description="Start a Flower SuperLink and one SuperNode per gateway on 127.0.0.1, "
        "run the federation,\nwrite each gateway's model and stop every process; or, "
        "with --role, one machine's part\nof a federation across machines "
        "(docs/deployment.md).\n\n" + methods_text(methods),
        epilog="example:\n  fedep federate --dataset nsl-kdd --gateways 3 --max-rows 3000 "
        "--out runs/flower\nExit status: 0 when every gateway took part to the end; 1 for a "
        "bad value or a failed\nrun or gateway; 130 when interrupted (every process is "
        "stopped).",
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        help="output folder: gateway models, logs, result.json (default: a new temporary folder)",
    )
    add_method_option(p, methods)
    p.add_argument(
        "--warm-start",
        metavar="MODEL",
        help="refit MODEL on new data, each gateway from its own state in MODEL",
    )
    p.add_argument(
        "--verify-key",
        metavar="KEY",
        help="refuse an unsigned or altered --warm-start MODEL",
    )
    g = p.add_argument_group("data")
    src = g.add_mutually_exclusive_group()
    src.add_argument(
        "--dataset",
        type=dataset_name,
        metavar="NAME",
        help=f"official dataset ({', '.join(DATASET_NAMES)}): its normal training rows "
        "split among --gateways",
    )
    src.add_argument(
        "--train",
        nargs="+",
        metavar="PATH",
        help="your own flow records: one file per gateway, or a directory of them",
    )
    g.add_argument(
        "--gateways",
        type=positive_int,
        metavar="N",
        help="number of gateways (needed with --dataset; with --train: one per file)",
    )
    g.add_argument(
        "--max-rows",
        type=positive_int,
        metavar="N",
        help="with --dataset: a random sample of N normal training rows",
    )
    add_dataset_options(g)
    g.add_argument("--label-column", metavar="COL", help="label column of the --train files")
    g.add_argument(
        "--normal-label",
        metavar="VALUE",
        help="label of normal rows, the only ones trained on (default: labels are 0 = "
        "normal, 1 = attack)",
    )
    add_read_options(p)
    f = p.add_argument_group("Flower")
    f.add_argument(
        "--min-clients",
        type=positive_int,
        default=1,
        metavar="N",
        help="fewest gateways a round needs (default: 1)",
    )
    f.add_argument(
        "--round-timeout",
        type=finite_float,
        default=120.0,
        metavar="SECONDS",
        help="how long the server waits for replies (default: 120)",
    )
    f.add_argument(
        "--timeout",
        type=finite_float,
        default=3600.0,
        metavar="SECONDS",
        help="how long the whole run may take (default: 3600)",
    )
    f.add_argument(
        "--poll-interval",
        type=finite_float,
        default=0.2,
        metavar="SECONDS",
        help="longest wait of a SuperNode between two pulls (default: 0.2; 0: Flower's 3)",
    )
    f.add_argument(
        "--sign-key",
        metavar="KEY",
        help="sign every server message: an Ed25519 private key PEM, hmac:SECRET or @FILE "
        "(a secret kept in a file); the gateways then refuse unsigned, altered, redirected "
        "or replayed messages (default: FEDEP_SIGNING_KEY when set)",
    )
    f.add_argument(
        "--secure-aggregation",
        action="store_true",
        help="SecAgg+: the server sees only sums of the gateways' statistics and rounds "
        "(3 gateways or more; see docs/privacy.md)",
    )
    f.add_argument(
        "--isolation",
        choices=["process", "subprocess"],
        default="process",
        help="how a SuperNode runs its gateway's messages: process (default: one "
        "long-running fedep executor), subprocess (Flower's: a process per message)",
    )
    f.add_argument(
        "--overwrite",
        action="store_true",
        help="remove an earlier run's result.json and gateway-*.fedep from --out",
    )
    f.add_argument(
        "--allow-failures",
        action="store_true",
        help="exit 0 even when some gateways failed (listed in result.json)",
    )
    add_role_options(p)
    add_estimator_options(p, pipeline_table(), federated_param_table())
    p.set_defaults(func=cmd_federate)


# ---------------------------------------------------------------------- checks
def _check_dataset_files(name: str, root: Path) -> None:
    """The dataset's required files are in ``root`` (the gateways read them there)."""
    needed = [rel for rel, (ds, req) in KNOWN_FILES.items() if ds == name and req]
    missing = [rel for rel in needed if not (root / rel).is_file()]
    if missing:
        raise UsageError(
            f"dataset {name}: missing {', '.join(missing)} in {root} "
            f"(set --data-dir or FEDEP_DATA_DIR; download: {DATASET_URLS[name]})"
        )


def _gateway_files(args) -> list[Path]:
    """The ``--train`` files, one per gateway, absolute (the gateways run elsewhere)."""
    files = [f.expanduser().resolve() for f in gateway_files(args.train)]
    if args.gateways is not None and args.gateways != len(files):
        raise UsageError(
            f"--train needs one file per gateway: {len(files)} files for {args.gateways} gateways"
        )
    check_distinct_gateways(files)
    return files


def _gateway_sources(args) -> dict:
    """The gateways' data, checked: the :func:`gateway_node_configs` arguments."""
    if args.train is not None:
        if args.max_rows is not None:
            raise UsageError("--max-rows applies to --dataset, not to --train files")
        if args.normal_label is not None and args.label_column is None:
            raise UsageError("--normal-label needs --label-column")
        table_options = {  # the readers' defaults are left out of the node configs
            "label-column": args.label_column,
            "normal-label": args.normal_label,
            "format": None if args.format == "auto" else args.format,
            "delimiter": args.delimiter,
            "infinity": None if args.infinity == "nan" else args.infinity,
        }
        return {"files": _gateway_files(args), "table_options": table_options}

    check_dataset(args.dataset)
    if args.gateways is None:
        raise UsageError("--dataset needs --gateways (the number of gateways to split it among)")
    if args.label_column is not None or args.normal_label is not None:
        raise UsageError("--label-column / --normal-label apply to --train files only")
    if args.max_rows is not None and args.max_rows < args.gateways:
        raise UsageError(f"--max-rows must be >= --gateways ({args.gateways}); got {args.max_rows}")
    data_dir = resolve_data_dir(args.data_dir).expanduser().resolve()
    _check_dataset_files(args.dataset, data_dir)
    return {
        "dataset": args.dataset,
        "gateways": args.gateways,
        "data_dir": data_dir,
        "feature_set": args.feature_set,
        "max_rows": args.max_rows,
    }


def _run_settings(args) -> dict:
    """The estimator and feature-pipeline options typed, by run-config key, validated by
    the estimator and the pipeline (their own messages)."""
    table, ptable = federated_param_table(), pipeline_table()
    params = params_from_args(args, table)
    pipe = params_from_args(args, ptable)
    est = make_estimator(args.method, params)
    make_pipeline(
        pipe, est.features, spell=lambda k: f"--{option_name(k)}", needs="--features auto"
    )
    check_private(est)  # differential privacy's rules, before anything starts
    return {
        **{table[k].key: v for k, v in params.items()},
        **{ptable[k].key: v for k, v in pipe.items()},
    }


def _check_secure(args, n: int, tables: bool) -> None:
    """Refuse (one line) what secure aggregation cannot do, before anything starts."""
    if n < MIN_GATEWAYS:
        raise UsageError(f"--secure-aggregation needs at least {MIN_GATEWAYS} gateways; got {n}")
    est = make_estimator(args.method, params_from_args(args, federated_param_table()))
    check_secure_aggregation(est)
    if tables and est.features == "auto":
        raise UsageError(
            "--secure-aggregation with --train files needs --features numeric: the "
            "feature pipeline's column summaries cannot be summed securely"
        )


def output_folder(arg: str | None, overwrite: bool) -> Path:
    """The output folder, absolute, without an earlier run's results.

    Not given: a new temporary folder. A folder holding an earlier run's results is
    refused unless ``overwrite`` (then they are removed; logs and other files stay).

    Raises
    ------
    UsageError
        ``arg`` is not a folder, cannot be created or written, or holds an earlier run.
    """
    if arg is None:
        return Path(tempfile.mkdtemp(prefix="fedep-flower-")).resolve()
    out = Path(arg).expanduser().resolve()
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is not a directory")
    base = out
    while not base.exists():
        base = base.parent
    if not base.is_dir() or not os.access(base, os.W_OK | os.X_OK):
        raise UsageError(f"--out {out}: {base} is not a writable directory")
    stale = stale_results(out) if out.is_dir() else []
    if stale and not overwrite:
        names = ", ".join(p.name for p in stale[:4]) + (" ..." if len(stale) > 4 else "")
        raise UsageError(
            f"--out {out} holds an earlier run ({names}); pass --overwrite or another --out"
        )
    for p in stale:
        p.unlink()
    return out


def plan(args: argparse.Namespace) -> FederationPlan:
    """Check every argument and build the federation's node and run configs; nothing
    is started, and the output folder is touched last (``--overwrite`` empties it).

    Raises
    ------
    UsageError, ValueError, DataError
        One line naming the option, the file or the estimator parameter.
    """
    if args.round_timeout <= 0 or args.timeout <= 0:
        raise UsageError("--round-timeout and --timeout must be > 0")
    if args.poll_interval < 0:
        raise UsageError(f"--poll-interval must be >= 0; got {args.poll_interval:g}")
    sources = _gateway_sources(args)
    n = len(sources["files"]) if "files" in sources else sources["gateways"]
    if args.min_clients > n:
        raise UsageError(f"--min-clients must be in [1, {n}]; got {args.min_clients}")
    settings = _run_settings(args)
    if args.secure_aggregation:
        _check_secure(args, n, "files" in sources)
    sign = _key_option(getattr(args, "sign_key", None) or os.environ.get(SIGNING_KEY_ENV))
    verify = None  # the gateways verify with the same secret, or the PEM's public key
    out = output_folder(args.out, args.overwrite)
    nodes = gateway_node_configs(out, **sources)
    rc = run_config(args.method, args.min_clients, args.round_timeout, settings)
    rc.update(_warm_start_config(args))
    if sign is not None:
        if verify is None:
            verify = sign
            if not sign.startswith(("hmac:", "@")):
                verify = str(out / "server-key.pub")
                try:
                    out.mkdir(parents=True, exist_ok=True)
                    write_public_key(sign, verify)
                except ValueError as exc:
                    raise UsageError(f"--sign-key: {exc}") from None
        rc["sign-key"] = sign
        for cfg in nodes:
            cfg["verify-key"] = verify
    if args.secure_aggregation:
        rc["secure-aggregation"] = True
    return FederationPlan(nodes, rc, out)


def _warm_start_config(args: argparse.Namespace) -> dict:
    """The run-config keys of ``--warm-start`` / ``--verify-key``: the model is loaded
    (and its signature checked) here, before any process starts, and its path made
    absolute (the ServerApp runs in the output folder)."""
    if args.warm_start is None:
        if args.verify_key is not None:
            raise UsageError("--verify-key checks the --warm-start model: give --warm-start")
        return {}
    load_warm_start(args)  # the model and its signature checked before any process starts
    return {
        "warm-start": str(Path(args.warm_start).expanduser().resolve()),
        "warm-start-verify-key": args.verify_key or "",
    }


def _key_option(text: str | None) -> str | None:
    """A key option as the server and gateways read it: ``hmac:SECRET`` as given,
    ``@FILE`` and a PEM path made absolute (the processes run in the output folder);
    a file that does not exist is one line."""
    if not text:
        return None
    if text.startswith("hmac:"):
        return text
    at = text.startswith("@")
    path = Path(text[1:] if at else text).expanduser().resolve()
    if not path.is_file():
        raise UsageError(f"key file {path} does not exist")
    return ("@" if at else "") + str(path)


# ---------------------------------------------------------------------- printing
def _print_result(outcome: RunOutcome, out: Path) -> None:
    res = outcome.result
    if res.rank_reason:
        print(f"rank {res.components.shape[0]} ({res.rank_reason})")
    for rec in res.history:
        print(
            f"round {rec['round']:3d}  objective {rec['objective']:.6g}  "
            f"gateways {len(rec['participants'])}  {rec['time_s'] * 1e3:.1f} ms"
        )
    if res.trim_history:
        print(describe_trimming(res.trim_history))
    if res.privacy:
        p = res.privacy
        print(
            f"differential privacy: epsilon {p['epsilon']:.4g} at delta {p['delta']:.3g} for "
            f"one record (noise multiplier {p['noise_multiplier']:.4g} on each of "
            f"{p['releases']} releases, added by each gateway; see docs/privacy.md)"
        )
    print(f"{res.stop_reason} after {res.n_rounds} rounds; models and logs in {out}")


def _report_failures(outcome: RunOutcome) -> None:
    for f in outcome.failures():
        print(f"gateway {f.label} failed: {f.reason}", file=sys.stderr)
        for line in f.node_error:
            print(f"  supernode-{f.node}.log: {line}", file=sys.stderr)


def cmd_federate(args) -> int:
    missing = missing_flower()  # before plan(): a refusal leaves no --out folder behind
    if missing is not None:
        raise UsageError(f"Flower is not installed: pip install 'fedep[flower]' ({missing})")
    if args.role != "local":
        return run_role(
            args, _run_settings, output_folder, _print_result, _gateway_sources, _check_secure
        )
    check_local_only(args)
    if args.train is None and args.dataset is None:
        raise UsageError("give --dataset NAME --gateways N, or --train PATH ...")
    fed = plan(args)
    # on stderr, flushed: with stdout redirected a run of minutes is not silent
    info(
        f"fedep federate: a SuperLink and {fed.gateways} SuperNodes on this machine; "
        f"logs in {fed.out} (superlink.log, supernode-*.log; at most --timeout {args.timeout:g} s)"
    )
    try:
        outcome = run_local_federation(
            fed,
            poll_interval=args.poll_interval or None,
            timeout=args.timeout,
            isolation=args.isolation,
        )
    except Interrupted as exc:
        name = signal.Signals(exc.signum).name
        err(f"interrupted by {name}: stopped every process it started; logs in {fed.out}")
        return 130
    if outcome.result is None:
        err(f"run failed: {outcome.error}")
        for i, lines in outcome.node_errors().items():
            for line in lines:
                print(f"  supernode-{i}.log: {line}", file=sys.stderr)
        print(f"logs in {fed.out}", file=sys.stderr)
        return 1
    _print_result(outcome, fed.out)
    failed = outcome.result.failed
    if failed:
        _report_failures(outcome)
        if not args.allow_failures:
            err(f"{len(failed)} of {fed.gateways} gateways failed (--allow-failures to accept)")
            return 1
    return 0

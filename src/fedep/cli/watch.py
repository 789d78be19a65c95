"""``fedep watch``: follow live logs (a file, a glob, a Zeek log directory) and write an
alert, as JSON lines, for every anomalous record as it is written.

The work is :class:`fedep.live.Watcher`'s; this module parses the options, handles the
signals (SIGTERM / SIGINT: finish the batch, flush, save the position, exit 0) and prints.
See ``docs/watch.md``.
"""

from __future__ import annotations

import argparse
import re
import signal
import threading

from fedep.cli._common import (
    UsageError,
    check_output_file,
    command_parser,
    finite_float,
    load_model,
    nonneg_int,
    positive_int,
    verify_key_text,
)
from fedep.live import WatchConfig, Watcher

_EPILOG = """\
examples:
  fedep watch /opt/zeek/logs --pattern 'conn*' --model model.fedep --alerts alerts.json
  fedep watch 'logs/*/conn.log' --gateway-pattern 'logs/(?P<gateway>[^/]+)/' \\
      --model model.fedep --alerts alerts.json --ecs --group-by id.orig_h
  fedep watch conn.log --model model.fedep --stdout --position-file conn.pos --once

Each record is scored once, across restarts and crashes: the position file (default:
ALERTS.position) is saved after the alerts it covers are flushed; see docs/watch.md."""


def _positive_float(text: str) -> float:
    v = finite_float(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return v


def _rate(text: str) -> float:
    v = finite_float(text)
    if not 0 < v < 1:
        raise argparse.ArgumentTypeError(f"expected a rate between 0 and 1, got {text!r}")
    return v


def register(sub) -> None:
    p = command_parser(
        sub,
        "watch",
        description="Follow live flow logs (Zeek TSV with #fields headers, Zeek JSON, JSON "
        "lines, CSV), score every complete record as it is written and write an alert "
        "(JSON lines) for each anomalous one. Follows rotation (rename + new file, "
        "compressed archives), truncation and files that appear later.",
        epilog=_EPILOG,
    )
    p.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="a log file, a glob ('logs/*/conn.log', '**' recursive) or a directory "
        "(every file below it whose name matches --pattern)",
    )
    p.add_argument(
        "--model",
        required=True,
        metavar="MODEL",
        help="model file from fedep fit (replaced atomically, it is swapped in between batches)",
    )
    p.add_argument(
        "--verify-key",
        metavar="KEY",
        help="refuse an unsigned or altered model (also a replacement): an Ed25519 public "
        "key PEM file, or a shared secret as hmac:SECRET or @FILE (default: "
        "FEDEP_VERIFY_KEY, else FEDEP_SIGNING_KEY)",
    )
    p.add_argument(
        "--require-signature",
        action="store_true",
        help="refuse a model that is not signed with the key (also: FEDEP_REQUIRE_SIGNATURE=1)",
    )
    g = p.add_argument_group("alerts")
    g.add_argument("--alerts", metavar="FILE", help="append alerts to FILE (JSON lines)")
    g.add_argument("--stdout", action="store_true", help="write alerts to stdout (also)")
    g.add_argument(
        "--max-bytes",
        type=positive_int,
        metavar="N",
        help="rotate the alert file before it exceeds N bytes (FILE.1 ... FILE.K)",
    )
    g.add_argument(
        "--backups",
        type=positive_int,
        default=5,
        metavar="K",
        help="rotated alert files kept (default: 5)",
    )
    g.add_argument(
        "--ecs",
        action="store_true",
        help="Elastic Common Schema field names (event.kind, source.ip, ...)",
    )
    g.add_argument(
        "--top-features",
        type=nonneg_int,
        default=3,
        metavar="K",
        help="features named in each alert with their share (default: 3)",
    )
    g.add_argument(
        "--group-by",
        metavar="FIELD",
        help="group alerts of one value of FIELD (e.g. id.orig_h, gateway) per window",
    )
    g.add_argument(
        "--group-window",
        type=_positive_float,
        default=60.0,
        metavar="S",
        help="grouping window in seconds (default: 60)",
    )
    g.add_argument(
        "--group-cap",
        type=nonneg_int,
        default=10,
        metavar="N",
        help="alerts of one value let through per window; the rest are counted in "
        "one alert_group record at the window's end (default: 10)",
    )
    g.add_argument(
        "--summary-window",
        type=_positive_float,
        metavar="S",
        help="a window_summary record per gateway every S seconds (records, "
        "alerts, share above the threshold)",
    )
    g.add_argument(
        "--recalibrate-rate",
        type=_rate,
        metavar="R",
        help="every --recalibrate-window records, set the threshold so that a "
        "share R of the recent scores is above it (a threshold_changed record "
        "says so)",
    )
    g.add_argument(
        "--recalibrate-window",
        type=positive_int,
        default=100_000,
        metavar="N",
        help="recent records the recalibration uses (default: 100000)",
    )
    f = p.add_argument_group("logs")
    f.add_argument(
        "--pattern",
        default="*",
        metavar="GLOB",
        help="file names taken from a directory (default: all; e.g. 'conn*')",
    )
    f.add_argument(
        "--from-end",
        action="store_true",
        help="on the first start, skip what the files already hold",
    )
    f.add_argument(
        "--client-column",
        metavar="COL",
        help="column naming each record's gateway (its personalised model)",
    )
    f.add_argument(
        "--gateway-pattern",
        metavar="REGEX",
        help="regular expression on the file path whose group 'gateway' (or first "
        "group) names the gateway",
    )
    f.add_argument(
        "--position-file",
        metavar="FILE",
        help="where the position is kept (default: ALERTS.position)",
    )
    f.add_argument(
        "--on-error",
        choices=("skip", "stop"),
        default="skip",
        help="a malformed record: report it and go on (skip, the default) or stop (exit status 1)",
    )
    r = p.add_argument_group("running")
    r.add_argument(
        "--once", action="store_true", help="process what the logs hold now and exit (cron, tests)"
    )
    r.add_argument(
        "--status-interval",
        type=finite_float,
        default=60.0,
        metavar="S",
        help="one status line on stderr every S seconds (default: 60; 0: none)",
    )
    r.add_argument(
        "--poll-interval",
        type=_positive_float,
        default=0.1,
        metavar="S",
        help="seconds between two looks at idle logs (default: 0.1)",
    )
    r.add_argument(
        "--batch-bytes",
        type=positive_int,
        default=8 << 20,
        metavar="N",
        help="most bytes of log read per batch (default: 8 MiB)",
    )
    r.add_argument(
        "--verbose", action="store_true", help="also report files found, rotated and finished"
    )
    p.set_defaults(func=cmd_watch)


def config(args) -> WatchConfig:
    """The :class:`~fedep.live.WatchConfig` of the command line (usage errors: one line)."""
    if args.alerts is None and not args.stdout:
        raise UsageError("give --alerts FILE, --stdout, or both")
    if args.alerts is not None:
        check_output_file(args.alerts, "--alerts", {"--model": args.model})
    position = args.position_file
    if position is None:
        if args.alerts is None:
            raise UsageError("--stdout without --alerts needs --position-file FILE")
        position = f"{args.alerts}.position"
    check_output_file(position, "--position-file", {"--model": args.model, "--alerts": args.alerts})
    if args.group_by is None and (args.group_window != 60.0 or args.group_cap != 10):
        raise UsageError("--group-window and --group-cap need --group-by")
    return WatchConfig(
        targets=list(args.paths),
        model=args.model,
        verify_key=verify_key_text(args.verify_key),
        alerts=args.alerts,
        stdout=args.stdout,
        max_bytes=args.max_bytes,
        backups=args.backups,
        position_file=position,
        pattern=args.pattern,
        from_end=args.from_end,
        ecs=args.ecs,
        top_k=args.top_features,
        client_column=args.client_column,
        gateway_pattern=args.gateway_pattern,
        group_by=args.group_by,
        group_window=args.group_window,
        group_cap=args.group_cap,
        summary_window=args.summary_window,
        recalibrate_rate=args.recalibrate_rate,
        recalibrate_window=args.recalibrate_window,
        on_error=args.on_error,
        once=args.once,
        status_interval=args.status_interval,
        poll_interval=args.poll_interval,
        batch_bytes=args.batch_bytes,
        verbose=args.verbose,
    )


def cmd_watch(args) -> int:
    cfg = config(args)
    if cfg.gateway_pattern is not None:  # a usage error before the model is read
        try:
            re.compile(cfg.gateway_pattern)
        except re.error as exc:
            raise UsageError(f"--gateway-pattern: {exc}") from None
    # As score and evaluate: refused, or announced on one line when unsigned; the
    # watcher loads the file once with it, and every replacement the same way.
    require = getattr(args, "require_signature", False)
    watcher = Watcher(cfg, load_model=lambda path: load_model(path, args.verify_key, require))
    if threading.current_thread() is not threading.main_thread():
        return watcher.run()

    def stop(signum, frame):
        if watcher.stopping:  # a second signal: stop now (the position stays consistent)
            raise KeyboardInterrupt
        watcher.stopping = True

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        return watcher.run()
    finally:
        for s, h in previous.items():
            signal.signal(s, h)

"""The ``fedep`` command line.

Commands::

    fedep fit       (--dataset NAME | --train PATH [PATH ...]) [clients, protocol]
                    [--method M] [--include/--exclude/--categorical/--numeric COL ...]
                    [estimator options: --n-components, --features, --alpha, ...] --out MODEL
    fedep score     --model MODEL --input PATH --output PATH [--client-column COL]
                    [--top-features K] [--chunksize N]
    fedep evaluate  --model MODEL (--dataset NAME | --test PATH --label-column COL)
                    [--client-column COL] [--json]

    fit, score, evaluate (and data summary) read CSV/TSV, Zeek TSV/JSON logs, Parquet,
    Feather and JSON, optionally compressed (``--format``, ``--delimiter``,
    ``--infinity``; :func:`fedep.data.readers.read_table`).
    fedep federate  (--dataset NAME --gateways N | --train PATH [PATH ...]) [--max-rows N]
                    [--method M] [estimator options] [--out DIR] [--overwrite]
                    [--allow-failures]   (Flower on this machine: 1 SuperLink + N SuperNodes)
    fedep reproduce --out DIR [--quick] [--data-dir DIR] [--datasets ...] [--seeds ...]
    fedep data verify  [--data-dir DIR]
    fedep data summary (--dataset NAME | --train PATH) --clients D --partition P
    fedep --version

One module per command (:mod:`~fedep.cli.fit`, :mod:`~fedep.cli.score`,
:mod:`~fedep.cli.evaluate`, :mod:`~fedep.cli.federate`, :mod:`~fedep.cli.reproduce`,
:mod:`~fedep.cli.data`); they only parse arguments, move data between files and the
library and print (``federate``'s processes are run by :mod:`fedep.flower.deployment`). The
estimator options of ``fit`` are generated from the estimators (:mod:`fedep.params`),
CSV streaming lives in :mod:`fedep.data.stream`, evaluation in
:mod:`fedep.evaluation.evaluate`.

Errors caused by the user (missing or malformed files, unknown columns, incompatible
or corrupt models, unknown datasets, bad parameter values, unwritable outputs) print
one line ``fedep: error: ...`` on stderr and exit with status 1 (2 for command-line
syntax errors, as argparse does), never a traceback. Ctrl-C and SIGTERM stop a command
with status 130 and leave no partial output file.

Imports are at module level. An import inside a function body is there only where
start-up time needs it, with a comment saying so, never to hide an import circle. Here:
``import fedep.cli`` (this module and :mod:`~fedep.cli._common`) loads the standard
library only, the command modules (pandas, scikit-learn, numba) when the parser is
built; :mod:`fedep.evaluation` loads for ``evaluate`` and ``reproduce`` only. Building
the parser imports every command module, and ``fit``'s options are generated from the
estimators: even ``fedep --version`` loads scikit-learn.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import warnings

from fedep import __version__
from fedep._errors import one_line
from fedep.cli._common import PROG, UsageError, err, show_warning

__all__ = ["main", "build_parser", "UsageError"]


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of the ``fedep`` command."""
    # start-up time: `import fedep.cli` stays light; the command modules load the library
    from fedep.cli import data, evaluate, federate, fit, reproduce, score

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Personalised robust federated PCA (FedEP) for IoT anomaly detection.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module in (fit, score, evaluate, federate, reproduce, data):
        module.register(sub)
    return parser


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


@contextlib.contextmanager
def _sigterm_interrupts():
    """While the command runs, SIGTERM raises KeyboardInterrupt (so that cleanup runs)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    """Run the ``fedep`` command; returns the exit status.

    Parameters
    ----------
    argv : list of str, optional
        Arguments without the program name (default: ``sys.argv[1:]``).
    """
    # start-up time: `import fedep.cli` stays light (importing fedep.data loads pandas)
    from fedep.data import DataError, DatasetNotFoundError
    from fedep.modelfile import ModelFileError

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, syntax errors (argparse printed them)
        return int(exc.code) if isinstance(exc.code, int) else 1
    try:
        with _sigterm_interrupts(), warnings.catch_warnings():
            # Library warnings are useful, but one line each, without source lines.
            warnings.showwarning = show_warning
            return int(args.func(args) or 0)
    except (DataError, DatasetNotFoundError, ModelFileError, UsageError) as exc:
        err(one_line(exc))
    except BrokenPipeError:  # output piped into `head` etc.: stop quietly
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 1
    except FileNotFoundError as exc:
        err(one_line(exc) if str(exc) else f"file not found: {exc.filename}")
    except (ValueError, OSError) as exc:
        err(one_line(exc))
    except KeyboardInterrupt:
        err("interrupted")
        return 130
    return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

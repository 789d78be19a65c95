"""The ``fedep`` command line.

Commands::

    fedep fit       (--dataset NAME | --train PATH [PATH ...]) [clients, protocol]
                    [--method M] [--include/--exclude/--categorical/--numeric COL ...]
                    [estimator options: --n-components, --features, --alpha, ...] --out MODEL
    fedep score     --model MODEL --input PATH --output PATH [--client-column COL]
                    [--top-features K] [--chunksize N]
    fedep evaluate  --model MODEL (--dataset NAME | --test PATH --label-column COL)
                    [--client-column COL] [--json]
    fedep watch     PATH ... --model MODEL (--alerts FILE | --stdout) [--once] [--ecs]
                    [--group-by F] [--summary-window S] [--recalibrate-rate R]
                    (live logs to alerts, exactly once; docs/watch.md)

    fit, score, evaluate (and data summary) read CSV/TSV, Zeek TSV/JSON logs, Parquet,
    Feather and JSON, optionally compressed (``--format``, ``--delimiter``,
    ``--infinity``; :func:`fedep.data.readers.read_table`).
    fedep federate  (--dataset NAME --gateways N | --train PATH [PATH ...]) [--max-rows N]
                    [--method M] [estimator options] [--out DIR] [--overwrite]
                    [--allow-failures]   (Flower on this machine: 1 SuperLink + N SuperNodes)
    fedep models    show MODEL | diff A B   [--verify-key KEY] [--json]
                    (lineage; drift between two models: docs/lineage.md)
    fedep reproduce --out DIR [--quick] [--data-dir DIR] [--datasets ...] [--seeds ...]
    fedep data verify  [--data-dir DIR]
    fedep data summary (--dataset NAME | --train PATH) --clients D --partition P
    fedep warmup    [--quiet]   (compile the numba kernels once, ahead of the first fit)
    fedep --version

One module per command (:mod:`~fedep.cli.fit`, :mod:`~fedep.cli.score`,
:mod:`~fedep.cli.evaluate`, :mod:`~fedep.cli.federate`, :mod:`~fedep.cli.models`,
:mod:`~fedep.cli.reproduce`, :mod:`~fedep.cli.data`, :mod:`~fedep.cli.watch`); they only
parse arguments, move data between files and the library and print (``federate``'s
processes are run by :mod:`fedep.flower.deployment`; ``watch``'s loop is
:class:`fedep.live.Watcher`). The
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
library only. :func:`main` builds the options of the command it runs only (its module
imports pandas, scikit-learn, numba; ``fit``'s options are generated from the
estimators); the other commands are names with their one-line help
(:data:`~fedep.cli._common.COMMANDS`), so ``fedep --version`` and ``fedep --help``
load no library. :mod:`fedep.evaluation` loads for ``evaluate`` and ``reproduce`` only.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
import threading
import warnings

from fedep import __version__
from fedep._errors import one_line
from fedep.cli._common import COMMANDS, PROG, HelpFormatter, UsageError, err, show_warning

__all__ = ["main", "build_parser", "UsageError"]

_EPILOG = """\
Run `fedep COMMAND --help` for a command's options. Errors are one line
`fedep: error: ...` (exit status 1; 2 for command-line syntax; 130 when interrupted)."""


def build_parser(commands=None) -> argparse.ArgumentParser:
    """The argparse parser of the ``fedep`` command.

    Parameters
    ----------
    commands : iterable of str, optional
        The commands whose options are built (their modules imported); the others
        are their names and one-line help only. Default: every command.
    """
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Personalised robust federated PCA (FedEP) for IoT anomaly detection.",
        epilog=_EPILOG,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    sub.required = True
    wanted = set(COMMANDS) if commands is None else set(commands)
    for name, (module, help_) in COMMANDS.items():
        if name in wanted:
            # start-up time: a command's module (and the library) loads when it is used
            importlib.import_module(module).register(sub)
        else:
            sub.add_parser(name, help=help_)
    return parser


def _command_of(argv: list[str]) -> str | None:
    """The command that ``argv`` names (its first word not an option), if any."""
    for word in argv:
        if word == "--":
            return None
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


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


def _no_huge_page_hint() -> None:
    """Turn off NumPy's huge-page hint for this command's process, unless set already.

    NumPy asks the kernel for transparent huge pages on every large array
    (``madvise``); with Linux's common ``defrag=madvise`` setting the first touch of
    such an array may then wait for the kernel to compact memory. Measured on the
    benchmark machine (docs/performance.md, "Large files"): filling a fresh 544 MB
    array 1.2-1.4 s with the hint, 0.35 s without; ``fedep fit`` of a 2,000,000-row CSV
    about 1 s faster. Only the command's own process: the library never changes a
    caller's NumPy, and ``NUMPY_MADVISE_HUGEPAGE`` set in the environment wins. NumPy
    reads the variable when it is imported, so this is a no-op once NumPy is loaded
    (as when :func:`main` is called from Python).
    """
    if "numpy" not in sys.modules:
        os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")


def main(argv: list[str] | None = None) -> int:
    """Run the ``fedep`` command; returns the exit status.

    Parameters
    ----------
    argv : list of str, optional
        Arguments without the program name (default: ``sys.argv[1:]``).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    _no_huge_page_hint()
    command = _command_of(argv)
    parser = build_parser(() if command is None else (command,))
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, syntax errors (argparse printed them)
        return int(exc.code) if isinstance(exc.code, int) else 1
    # start-up time: `import fedep.cli` stays light (importing fedep.data loads pandas)
    from fedep.data import DataError, DatasetNotFoundError
    from fedep.modelfile import ModelFileError

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

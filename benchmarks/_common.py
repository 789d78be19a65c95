"""What the benchmarks share: writing their JSON, and running a child process and
measuring it.

A sibling module, not a package: every benchmark runs as a script from this folder
(``python benchmarks/bench_x.py``), so ``from _common import ...`` finds it, and a child
started with :func:`child_env` finds it too.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from fedep._atomic import atomic_write

#: The checkout these benchmarks belong to.
ROOT = Path(__file__).resolve().parents[1]

#: A child that runs ``fedep ARGS`` (``python -c FEDEP_CHILD ARGS``) and reports its own
#: peak memory (:func:`peak_rss_kb`) on stderr for :func:`run_measured`.
FEDEP_CHILD = """
import runpy, sys
from _common import report_peak
sys.argv = ["fedep", *sys.argv[1:]]
try:
    runpy.run_module("fedep", run_name="__main__")
except SystemExit as e:
    if e.code:
        raise
report_peak()
"""

_PEAK = "BENCH-PEAK-KB "


def write_json(path, obj, *, indent: int = 2, default=None) -> Path:
    """Write ``obj`` as JSON (and a final newline) to ``path``, its folder made.

    The file is replaced atomically: a run stopped while writing keeps the last
    complete file (the benchmarks that rewrite their results after every row rely on it).
    ``default``: as :func:`json.dumps`'s.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path, "w") as fh:
        fh.write(json.dumps(obj, indent=indent, default=default) + "\n")
    return path


def write_rows(path, args, rows: list[dict]) -> None:
    """The rows measured so far with the run's arguments (``{"args", "rows"}``) to
    ``path``, when one is given: rewritten after each row or cell, so that a run cut
    short keeps what it measured."""
    if path:
        write_json(path, {"args": vars(args), "rows": rows}, indent=1)


def child_env(env: dict[str, str] | None = None, *, checkout: bool = True) -> dict[str, str]:
    """``env`` (default: this process's environment) with this checkout's ``src`` (not
    an installed fedep) and this folder (for ``_common``) first on ``PYTHONPATH``;
    ``checkout=False``: this folder only, the fedep the caller's ``PYTHONPATH`` names
    (an older checkout's, to measure it)."""
    env = dict(os.environ if env is None else env)
    first = [str(ROOT / "src")] if checkout else []
    first.append(str(Path(__file__).resolve().parent))
    env["PYTHONPATH"] = os.pathsep.join([*first, *filter(None, [env.get("PYTHONPATH")])])
    return env


def peak_rss_kb() -> int:
    """This process's peak resident set size in KiB: its ``VmHWM``. Linux keeps
    ``ru_maxrss`` across fork + exec (the parent's RSS at the fork); ``VmHWM`` is this
    process image's own peak (``ru_maxrss`` where ``/proc`` is missing)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def report_peak() -> None:
    """In a child: print :func:`peak_rss_kb` on stderr, for :func:`run_measured`."""
    print(f"{_PEAK}{peak_rss_kb()}", file=sys.stderr, flush=True)


@dataclass
class Measured:
    """One child process, measured by :func:`run_measured`."""

    #: wall seconds from its start to its exit
    seconds: float
    #: user + system CPU seconds of the child and the children it waited for
    cpu_seconds: float
    #: its own peak RSS in KiB when it reported it (:func:`report_peak`), else
    #: ``ru_maxrss`` of the wait
    peak_kb: int
    #: everything it wrote to stderr
    stderr: str


def run_measured(cmd: list[str], env: dict[str, str] | None = None, cwd=None) -> Measured:
    """Run ``cmd`` to its end (stdout discarded) and measure it.

    Raises
    ------
    SystemExit
        It failed: the command, its exit status and the end of its stderr.
    """
    with tempfile.TemporaryFile() as err:  # a file: a chatty child never blocks on a pipe
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            cmd, env=child_env() if env is None else env, stdout=subprocess.DEVNULL,
            stderr=err, cwd=cwd,
        )  # fmt: skip
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        text = err.read().decode(errors="replace")
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, cmd))} failed ({proc.returncode}): {text[-2000:]}")
    own = [int(ln[len(_PEAK) :]) for ln in text.splitlines() if ln.startswith(_PEAK)]
    return Measured(
        seconds=seconds,
        cpu_seconds=usage.ru_utime + usage.ru_stime,
        peak_kb=own[-1] if own else usage.ru_maxrss,
        stderr=text,
    )

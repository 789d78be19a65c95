"""BLAS threads under load: one thread, every core, and fedep's choice, on an idle
machine and with busy processes started by the benchmark.

Run by hand (not a test)::

    python benchmarks/bench_threads.py --out benchmarks/results/threads.json

Times, on seeded records (``--rows`` x ``--features``), the one-shot start's Gram
matrix ``X^T X`` (:func:`fedep.core.baselines.client_sketch` of a tall block) and the
residual energies of scoring (:func:`fedep.core.scoring.residual_energy`, rank 10),
each with BLAS limited to one thread (``FEDEP_THREADS=1``), to every core this process
may use, and with the threads :func:`fedep.core._threads.choose_threads` picks
(``FEDEP_THREADS`` unset). Median of ``--repeats``.

Each ``--busy`` value is a load condition: that many busy-loop processes (``sh`` loops,
one process group, started here and stopped with :func:`fedep._procs.stop_group` on
every path, Ctrl-C included) run while the three are timed, after ``--settle``
seconds. ``busy 0`` is the machine as it is. Beside each figure: the 1-minute load
average, the threads runnable at that moment, the threads fedep chose, and
``load_average_rule_threads``: what a large product would get from the load average
alone (the rule before it counted the threads runnable now). The load average lags (it
reaches a new load over about a minute), so on an idle machine a busy condition started
seconds ago shows the difference.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from _common import write_json

from fedep._procs import stop_group
from fedep.core import _threads
from fedep.core.baselines import client_sketch
from fedep.core.scoring import residual_energy


def timed(fn, repeats: int) -> float:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def start_busy(n: int) -> subprocess.Popen | None:
    """``n`` busy-loop processes in one new process group (None for 0)."""
    if n <= 0:
        return None
    loops = " ".join(["( while :; do :; done ) &"] * n)
    return subprocess.Popen(
        ["/bin/sh", "-c", f"{loops} wait"],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def measure(ops: dict, cores: int, repeats: int) -> list[dict]:
    rows = []
    chosen: list[int] = []
    rule = _threads.choose_threads

    def recording(flops, **kw):
        n = rule(flops, **kw)
        chosen.append(n)
        return n

    _threads.choose_threads = recording  # blas_threads calls it by the module's name
    for name, fn in ops.items():
        fn()  # first touch
        entry = {"op": name}
        for label, fixed in (("one_thread", "1"), ("all_cores", str(cores)), ("fedep", None)):
            if fixed is None:
                os.environ.pop(_threads.THREADS_ENV, None)
            else:
                os.environ[_threads.THREADS_ENV] = fixed
            entry[f"{label}_load_1min"] = round(os.getloadavg()[0], 2)
            entry[f"{label}_runnable_now"] = _threads._runnable_now()
            chosen.clear()
            entry[f"{label}_seconds"] = round(timed(fn, repeats), 4)
            if fixed is None:  # the threads fedep's rule gave the op's products
                entry["fedep_threads"] = sorted(set(chosen))
                # what the 1-minute load average alone would give a large product
                # (fedep's rule before it counted the threads runnable now)
                load_only = max(0.0, os.getloadavg()[0] - 1.0)
                entry["load_average_rule_threads"] = _threads.choose_threads(
                    float("inf"), busy=load_only
                )
        os.environ.pop(_threads.THREADS_ENV, None)
        one = entry["one_thread_seconds"]
        entry["fedep_over_one_thread"] = round(entry["fedep_seconds"] / one, 3)
        entry["all_cores_over_one_thread"] = round(entry["all_cores_seconds"] / one, 3)
        rows.append(entry)
    _threads.choose_threads = rule
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--features", type=int, default=34)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--busy", type=int, nargs="+", default=None, metavar="N",
                    help="busy processes per condition (default: 0 and the cores)")  # fmt: skip
    ap.add_argument("--settle", type=float, default=2.0, help="seconds before timing")
    args = ap.parse_args()

    os.environ.pop(_threads.THREADS_ENV, None)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((args.rows, args.features))
    B = np.linalg.qr(rng.standard_normal((args.features, 10)))[0]
    cores = _threads.available_cores()
    ops = {
        "gram_XtX": lambda: client_sketch(X, args.features),
        "residual_energy": lambda: residual_energy(X, B),
    }
    conditions = []
    for n in [0, cores] if args.busy is None else args.busy:
        proc = start_busy(n)
        try:
            time.sleep(args.settle if n else 0.0)
            results = measure(ops, cores, args.repeats)
        finally:
            if proc is not None:
                stop_group(proc, grace=5.0)
        conditions.append({"busy_processes": n, "results": results})
        print(json.dumps(conditions[-1]), flush=True)
    result = {
        "benchmark": "threads",
        "rows": args.rows,
        "features": args.features,
        "cores": cores,
        "repeats": args.repeats,
        "python": sys.version.split()[0],
        "conditions": conditions,
    }
    write_json(args.out, result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

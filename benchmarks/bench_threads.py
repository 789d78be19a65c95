"""BLAS threads under load: one thread, every core, and fedep's choice.

Run by hand (not a test)::

    python benchmarks/bench_threads.py --out benchmarks/results/threads.json

Times, on seeded records (``--rows`` x ``--features``), the one-shot start's Gram
matrix ``X^T X`` (:func:`fedep.core.baselines.client_sketch` of a tall block) and the
residual energies of scoring (:func:`fedep.core.scoring.residual_energy`, rank 10),
each with BLAS limited to one thread, to every core this process may use, and with
the threads :func:`fedep.core._threads.choose_threads` picks (``FEDEP_THREADS``
unset). Median of ``--repeats``; the 1-minute load average beside each figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from _common import write_json

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--features", type=int, default=34)
    ap.add_argument("--repeats", type=int, default=3)
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
    rows = []
    for name, fn in ops.items():
        fn()  # first touch
        entry = {"op": name}
        for label, fixed in (("one_thread", "1"), ("all_cores", str(cores)), ("fedep", None)):
            if fixed is None:
                os.environ.pop(_threads.THREADS_ENV, None)
            else:
                os.environ[_threads.THREADS_ENV] = fixed
            entry[f"{label}_load"] = os.getloadavg()[0]
            entry[f"{label}_seconds"] = timed(fn, args.repeats)
        os.environ.pop(_threads.THREADS_ENV, None)
        flops = 2.0 * args.rows * args.features**2 if name == "gram_XtX" else 0.0
        entry["fedep_threads_chosen_now"] = _threads.choose_threads(flops) if flops else 1
        entry["fedep_over_one_thread"] = entry["fedep_seconds"] / entry["one_thread_seconds"]
        entry["all_cores_over_one_thread"] = (
            entry["all_cores_seconds"] / entry["one_thread_seconds"]
        )
        rows.append(entry)
    result = {
        "benchmark": "threads",
        "rows": args.rows,
        "features": args.features,
        "cores": cores,
        "python": sys.version.split()[0],
        "results": rows,
    }
    write_json(args.out, result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

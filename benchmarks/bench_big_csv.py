"""``fedep fit`` on a large CSV against pandas + scikit-learn PCA on the same file.

Run by hand (not a test)::

    python benchmarks/bench_big_csv.py --out benchmarks/results/big_csv.json

Writes a seeded ``--rows`` (2,000,000) x 34 numeric CSV (a rank-10 signal plus noise,
written in blocks so that this process stays small), then runs, each in a fresh child
process, alternating ``--repeats`` times:

- ``reference``: ``pandas.read_csv`` + ``sklearn.decomposition.PCA(10).fit``;
- ``fedep_pca``: ``fedep fit --method pca --n-components 10``;
- ``fedep``: ``fedep fit --n-components 10`` (FedEP, one gateway, default rounds).
- ``fedep_pca_baseline``, ``fedep_baseline`` (with ``--baseline-src``): the same fits
  (those ``--runs`` names) by another checkout.

Each run: wall ``seconds``, ``cpu_seconds`` (user + system of the child, all its
threads, from ``wait4``) and the child's peak RSS (its own ``VmHWM``: Linux carries
``ru_maxrss`` over fork and exec, i.e. this process's size at the fork) beside the
float matrix's size, and the 1-minute load average when it started; ratios are
medians over the reference's median. The kernels are compiled first (``fedep
warmup``) so that no run pays the compilation. The machine is shared: on a busy one the
wall times say little and the CPU seconds are the steadier figure (the reference's
BLAS threads spin when the cores are busy; fedep's read and column summaries, like
pandas' parallel reader, take every core, its BLAS products only the idle ones).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
from _common import child_env, run_measured, write_json

REFERENCE = """
import sys
import pandas as pd
from sklearn.decomposition import PCA
PCA(10).fit(pd.read_csv(sys.argv[1]).to_numpy(dtype=float))
"""
# Runs the reference (``ref FILE``) or ``fedep ARGS...`` and reports its own peak.
CHILD = """
import runpy, sys
from _common import report_peak
what, sys.argv = sys.argv[1], sys.argv[1:]
try:
    if what == "ref":
        exec(compile(REFERENCE, "<reference>", "exec"), {"__name__": "__main__"})
    else:
        runpy.run_module("fedep", run_name="__main__")
except SystemExit as e:
    assert not e.code, e.code
report_peak()
"""


def write_csv(path: Path, rows: int, features: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    mix = rng.standard_normal((10, features))
    with path.open("w") as fh:
        fh.write(",".join(f"f{j}" for j in range(features)) + "\n")
        for start in range(0, rows, 100_000):
            n = min(100_000, rows - start)
            block = rng.standard_normal((n, 10)) @ mix + 0.1 * rng.standard_normal((n, features))
            np.savetxt(fh, block, fmt="%.6g", delimiter=",")


def run(cmd: list[str], env: dict[str, str]) -> dict:
    load = os.getloadavg()[0]
    m = run_measured(cmd, env)
    return {
        "seconds": m.seconds,
        "cpu_seconds": m.cpu_seconds,
        "peak_rss_mb": m.peak_kb / 1024,
        "load_1min_at_start": load,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--features", type=int, default=34)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--csv", type=Path, help="reuse this generated CSV (else a temporary one)")
    ap.add_argument(
        "--runs",
        default="reference,fedep_pca,fedep",
        help="comma-separated runs to time (reference, fedep_pca, fedep; default all)",
    )
    ap.add_argument(
        "--baseline-src",
        type=Path,
        help="another checkout's src folder: its fits (those of --runs) too, alternating",
    )
    args = ap.parse_args()
    wanted = [r.strip() for r in args.runs.split(",") if r.strip()]
    if "reference" not in wanted or not set(wanted) <= {"reference", "fedep_pca", "fedep"}:
        ap.error("--runs: reference plus any of fedep_pca, fedep")

    work = Path(tempfile.mkdtemp(prefix="fedep-big-"))
    env = child_env()
    py = [sys.executable]
    try:
        csv = args.csv or work / "big.csv"
        if not csv.exists():
            write_csv(csv, args.rows, args.features, args.seed)
        child = py + ["-c", f"REFERENCE = {REFERENCE!r}\n{CHILD}"]
        run(child + ["fedep", "warmup", "--quiet"], env)
        fit = child + ["fedep", "fit", "--train", str(csv), "--n-components", "10"]
        fit += ["--out", str(work / "m.fedep"), "--quiet"]
        every = {
            "reference": child + ["ref", str(csv)],
            "fedep_pca": fit + ["--method", "pca"],
            "fedep": fit,
        }
        cmds = {k: every[k] for k in wanted}
        envs = dict.fromkeys(cmds, env)
        if args.baseline_src is not None:  # the same fits by another checkout
            base = dict(os.environ, PYTHONPATH=str(args.baseline_src.resolve()))
            base_env = child_env(base, checkout=False)
            for k in [k for k in wanted if k != "reference"]:
                cmds[f"{k}_baseline"], envs[f"{k}_baseline"] = every[k], base_env
            run(child + ["fedep", "warmup", "--quiet"], base_env)
        runs: dict[str, list[dict]] = {k: [] for k in cmds}
        load = [os.getloadavg()[0]]
        for _ in range(args.repeats):
            for name, cmd in cmds.items():
                runs[name].append(run(cmd, envs[name]))
        load.append(os.getloadavg()[0])
        csv_mb = csv.stat().st_size / 2**20
    finally:
        shutil.rmtree(work, ignore_errors=True)

    matrix_mb = args.rows * args.features * 8 / 2**20
    med = {k: statistics.median(r["seconds"] for r in v) for k, v in runs.items()}
    cpu = {k: statistics.median(r["cpu_seconds"] for r in v) for k, v in runs.items()}
    peak = {k: max(r["peak_rss_mb"] for r in v) for k, v in runs.items()}
    result = {
        "benchmark": "big_csv",
        "rows": args.rows,
        "features": args.features,
        "csv_mb": csv_mb,
        "float_matrix_mb": matrix_mb,
        "load_1min_before_after": load,
        "runs": runs,
        "median_seconds": med,
        "median_cpu_seconds": cpu,
        "peak_rss_over_matrix": {k: v / matrix_mb for k, v in peak.items()},
    }
    for k in cmds:
        if k != "reference":
            result[f"{k}_over_reference"] = med[k] / med["reference"]
            result[f"{k}_over_reference_cpu"] = cpu[k] / cpu["reference"]
    write_json(args.out, result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

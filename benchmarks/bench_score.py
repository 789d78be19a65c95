"""Throughput and peak memory of ``fedep score`` with a feature-pipeline model.

Run by hand (not a test)::

    python benchmarks/bench_score.py --out benchmarks/results/score.json

Writes Zeek-like flow records as CSV (``ts``, ``uid``, ``id.orig_h``, ``id.resp_p``,
``proto``, ``service``, ``conn_state``, ``duration``, ``orig_bytes``, ``resp_bytes`` and a
``gateway`` column): ``--train-rows`` (50,000) rows from 5 gateways to fit a default
FedEP with ``fedep fit --client-column gateway`` (features="auto": the federated feature
pipeline), and ``--rows`` (500,000) rows to score. ``fedep score --top-features 3``
(personalised by ``--client-column gateway``) then runs in a fresh subprocess, so that
its peak resident set size (``ru_maxrss`` of the child) is its own.

Reports ``records_per_s`` (wall clock, median of ``--repeats``), ``cpu_s`` (all
threads), ``peak_rss_mb`` and, for reference, the fit time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd


def flows(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    proto = rng.choice(["tcp", "udp"], n, p=[0.7, 0.3])
    service = np.where(
        proto == "udp", "dns", rng.choice(["http", "ssl", "-"], n, p=[0.5, 0.4, 0.1])
    )
    orig = np.round(rng.lognormal(6.0, 2.0, n)).astype(np.int64)
    resp = np.round(orig * rng.lognormal(1.5, 0.7, n)).astype(np.int64)
    return pd.DataFrame(
        {
            "ts": (1.7e9 + np.sort(rng.uniform(0, 86400, n))).round(6),
            "uid": [f"C{v:016x}" for v in rng.integers(0, 2**62, n)],
            "id.orig_h": [f"10.0.{i % 7}.{i % 250 + 1}" for i in rng.integers(0, 10_000, n)],
            "id.resp_p": rng.choice([53, 80, 443, 8080], n),
            "proto": proto,
            "service": service,
            "conn_state": rng.choice(["SF", "S0", "REJ", "RSTO"], n, p=[0.8, 0.1, 0.09, 0.01]),
            "duration": rng.lognormal(-1.0, 1.2, n).round(6),
            "orig_bytes": orig,
            "resp_bytes": resp,
            "gateway": rng.choice([f"gw{i}" for i in range(5)], n),
        }
    )


def run_cli(args: list[str]) -> dict:
    """``python -m fedep.cli ARGS`` in a child; wall, CPU and peak RSS of that child."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "fedep.cli", *args], capture_output=True, text=True
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"fedep {' '.join(args)} failed:\n{proc.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    # ru_maxrss of RUSAGE_CHILDREN is the largest child so far: run the big one last
    return {"wall_s": wall, "cpu_s": cpu, "peak_rss_mb": after.ru_maxrss / 1024, "out": proc}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=500_000)
    p.add_argument("--train-rows", type=int, default=50_000)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--chunksize", type=int, default=100_000)
    p.add_argument("--out", help="JSON file to write (default: print only)")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        flows(a.train_rows, 1).to_csv(d / "train.csv", index=False)
        flows(a.rows, 2).to_csv(d / "test.csv", index=False)
        fit = run_cli(["fit", "--train", str(d / "train.csv"), "--client-column", "gateway",
                       "--random-state", "0", "--quiet", "--out", str(d / "m.fedep")])  # fmt: skip
        walls, cpus, rss = [], [], 0.0
        for _ in range(a.repeats):
            score = ["score", "--model", str(d / "m.fedep"), "--input", str(d / "test.csv"),
                     "--output", str(d / "o.csv"), "--client-column", "gateway",
                     "--top-features", "3", "--chunksize", str(a.chunksize)]  # fmt: skip
            r = run_cli([*score, "--quiet"])
            walls.append(r["wall_s"])
            cpus.append(r["cpu_s"])
            rss = max(rss, r["peak_rss_mb"])
        n_out = sum(1 for _ in open(d / "o.csv", "rb")) - 1
        assert n_out == a.rows, n_out
        results = {
            "rows": a.rows,
            "train_rows": a.train_rows,
            "chunksize": a.chunksize,
            "top_features": 3,
            "fit_wall_s": round(fit["wall_s"], 3),
            "score_wall_s_median": round(statistics.median(walls), 3),
            "score_cpu_s_median": round(statistics.median(cpus), 3),
            "records_per_s": round(a.rows / statistics.median(walls)),
            "peak_rss_mb": round(rss, 1),
            "input_mb": round(os.path.getsize(d / "test.csv") / 2**20, 1),
            "python": platform.python_version(),
            "machine": platform.machine(),
            "cpu_count": os.cpu_count(),
        }
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

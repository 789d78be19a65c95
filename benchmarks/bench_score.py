"""Throughput and peak memory of ``fedep score`` with a feature-pipeline model.

Run by hand (not a test)::

    python benchmarks/bench_score.py --out benchmarks/results/score.json

Writes Zeek-like flow records as CSV (``ts``, ``uid``, ``id.orig_h``, ``id.resp_p``,
``proto``, ``service``, ``conn_state``, ``duration``, ``orig_bytes``, ``resp_bytes`` and a
``gateway`` column): ``--train-rows`` (50,000) rows from 5 gateways to fit a default
FedEP with ``fedep fit --client-column gateway`` (features="auto": the federated feature
pipeline), and two files to score, ``--rows`` (2,000,000) rows and a quarter of that.
``fedep score --top-features 3`` (personalised by ``--client-column gateway``,
``--chunksize`` rows per chunk) runs on each in a fresh child process. Reported:

- ``records_per_s``: rows / wall time of the whole command (imports and model
  loading included);
- ``records_per_s_scoring``: the command's own figure (rows / time from the model
  loaded to the output renamed into place);
- ``records_per_cpu_s_marginal``: (rows_large - rows_small) / (CPU_large - CPU_small),
  CPU seconds over all threads: the cost of one more record, the fixed start-up cost
  and most of the machine's load taken out;
- ``peak_rss_mb`` of each run: memory is bounded by the chunk size when the larger
  file does not raise it;
- ``os.getloadavg()`` before and after: on a shared machine wall times are depressed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from _common import FEDEP_CHILD, run_measured, write_json


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
    """``fedep ARGS`` in a child: its wall, CPU and own peak RSS."""
    m = run_measured([sys.executable, "-c", FEDEP_CHILD, *args])
    r = re.search(r"\(([\d,]+) records/s\)", m.stderr)
    return {
        "wall_s": m.seconds,
        "cpu_s": m.cpu_seconds,
        "peak_rss_mb": m.peak_kb / 1024,
        "scoring_records_per_s": int(r.group(1).replace(",", "")) if r else None,
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--train-rows", type=int, default=50_000)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--chunksize", type=int, default=100_000)
    p.add_argument("--out", help="JSON file to write (default: print only)")
    a = p.parse_args(argv)
    sizes = {"small": a.rows // 4, "large": a.rows}
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        flows(a.train_rows, 1).to_csv(d / "train.csv", index=False)
        for name, n in sizes.items():
            flows(n, 2).to_csv(d / f"{name}.csv", index=False)
        fit = run_cli(["fit", "--train", str(d / "train.csv"), "--client-column", "gateway",
                       "--random-state", "0", "--quiet", "--out", str(d / "m.fedep")])  # fmt: skip
        load0 = os.getloadavg()
        runs = {}
        for name, n in sizes.items():
            reps = []
            for _ in range(a.repeats):
                score = ["score", "--model", str(d / "m.fedep"), "--input", str(d / f"{name}.csv"),
                         "--output", str(d / "o.csv"), "--client-column", "gateway",
                         "--top-features", "3", "--chunksize", str(a.chunksize)]  # fmt: skip
                reps.append(run_cli(score))
            with open(d / "o.csv", "rb") as fh:
                n_out = sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 24), b""))
            assert n_out - 1 == n, n_out
            wall = statistics.median(r["wall_s"] for r in reps)
            runs[name] = {
                "rows": n,
                "input_mb": round(os.path.getsize(d / f"{name}.csv") / 2**20, 1),
                "wall_s": round(wall, 3),
                "cpu_s": round(statistics.median(r["cpu_s"] for r in reps), 3),
                "records_per_s": round(n / wall),
                "records_per_s_scoring": max(r["scoring_records_per_s"] or 0 for r in reps),
                "peak_rss_mb": round(max(r["peak_rss_mb"] for r in reps), 1),
            }
        load1 = os.getloadavg()
    small, large = runs["small"], runs["large"]
    results = {
        "command": "fedep score --client-column gateway --top-features 3 "
        f"--chunksize {a.chunksize}",
        "train_rows": a.train_rows,
        "chunksize": a.chunksize,
        "top_features": 3,
        "fit_wall_s": round(fit["wall_s"], 3),
        "runs": runs,
        "records_per_s": large["records_per_s"],
        "records_per_s_scoring": large["records_per_s_scoring"],
        "records_per_cpu_s_marginal": round(
            (large["rows"] - small["rows"]) / max(large["cpu_s"] - small["cpu_s"], 1e-9)
        ),
        "peak_rss_growth_mb": round(large["peak_rss_mb"] - small["peak_rss_mb"], 1),
        "loadavg_before": [round(x, 2) for x in load0],
        "loadavg_after": [round(x, 2) for x in load1],
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
    }
    if a.out:
        write_json(a.out, results)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

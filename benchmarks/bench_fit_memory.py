"""Peak memory (and time) of ``fedep fit`` on a large numeric CSV.

Run by hand (not a test)::

    python benchmarks/bench_fit_memory.py --out benchmarks/results/fit_memory.json

Writes the ``--rows`` x 34 CSV of ``bench_read.py`` (2,000,000 rows by default; or
reuses ``--csv``) and runs ``fedep fit --train FILE --n-rounds N --random-state 0`` in a
child process (default FedEP, features="auto": the federated feature pipeline), after
the same command on a 1,000-row file of the same columns: the small fit's peak resident
set size is the interpreter + imports + fixed-size baseline, so that

- ``peak_rss_mb``: the large fit's peak RSS (the child's own ``VmHWM``);
- ``baseline_rss_mb``: the small fit's peak RSS;
- ``over_baseline_x_matrix``: (peak - baseline) / bytes of the float64 matrix
  (rows x 34 x 8): the aim is at most 4;
- ``peak_x_matrix``: peak / matrix bytes, the baseline included.

Wall and CPU seconds (all threads) of the child, and ``os.getloadavg()`` before and
after, are reported: on a shared machine the wall time says little.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import FEDEP_CHILD, run_measured, write_json
from bench_read import N_COLS, write_csv  # noqa: E402


def run_fit(csv: Path, out: Path, n_rounds: int) -> dict:
    """``fedep fit`` in a child: wall, CPU and peak RSS of that child alone."""
    args = ["fit", "--train", str(csv), "--n-rounds", str(n_rounds), "--random-state", "0"]
    args += ["--quiet", "--out", str(out)]
    m = run_measured([sys.executable, "-c", FEDEP_CHILD, *args])
    return {"peak_kb": m.peak_kb, "cpu_s": m.cpu_seconds, "wall_s": m.seconds}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="benchmarks/results/fit_memory.json")
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--csv", help="reuse this CSV (written by bench_read.write_csv)")
    p.add_argument("--n-rounds", type=int, default=3)
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        big = Path(a.csv) if a.csv else tmp / "flows.csv"
        if not a.csv:
            write_csv(big, a.rows)
        rows = a.rows
        if a.csv:
            with open(big, "rb") as fh:
                rows = sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 24), b"")) - 1
        small = tmp / "small.csv"
        write_csv(small, 1000)
        load0 = os.getloadavg()
        base = run_fit(small, tmp / "small.fedep", a.n_rounds)
        big_run = run_fit(big, tmp / "big.fedep", a.n_rounds)
        load1 = os.getloadavg()
    matrix = rows * N_COLS * 8
    peak = big_run["peak_kb"] * 1024
    baseline = base["peak_kb"] * 1024
    results = {
        "command": f"fedep fit --train FILE --n-rounds {a.n_rounds} --random-state 0",
        "rows": rows,
        "columns": N_COLS,
        "matrix_mb": round(matrix / 2**20, 1),
        "peak_rss_mb": round(peak / 2**20, 1),
        "baseline_rss_mb": round(baseline / 2**20, 1),
        "over_baseline_x_matrix": round((peak - baseline) / matrix, 3),
        "peak_x_matrix": round(peak / matrix, 3),
        "wall_s": round(big_run["wall_s"], 2),
        "cpu_s": round(big_run["cpu_s"], 2),
        "loadavg_before": [round(x, 2) for x in load0],
        "loadavg_after": [round(x, 2) for x in load1],
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "maxrss_note": "VmHWM of the fit's own process image (ru_maxrss where /proc is missing)",
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_json(a.out, results)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

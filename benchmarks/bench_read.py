"""Read speed and peak memory of ``fedep.data.read_table`` on a large numeric CSV.

Run by hand (not a test)::

    python benchmarks/bench_read.py --out benchmarks/results/read.json

Writes a ``--rows`` x 34 numeric CSV (17 integer count columns, 17 float columns with
three decimals, like a flow exporter's features; 2,000,000 rows by default) to a temporary
directory and measures, each in a fresh subprocess so that the peak resident set size
(the child's ``VmHWM``; ``ru_maxrss`` would carry the parent's RSS over the exec)
belongs to that read alone:

- ``read_table``: the whole file into one DataFrame (``rows_per_s``, median and best of
  ``--repeats``);
- ``read_table_chunks``: ``chunksize=200_000`` streaming (two passes over the file);
- ``pandas_c``: ``pandas.read_csv(engine="c")``, for reference.

``cpu_s_median`` / ``rows_per_cpu_s`` count CPU time over all threads: on a loaded machine
wall-clock rows/s understates what a quiet one does.

``peak_rss_over_matrix`` is (peak RSS - RSS after the imports) over the bytes of the
float64 matrix (rows x 34 x 8): what reading costs beyond the data it produces.
``arrow_pool_peak_mb`` is the peak of pyarrow's memory pool (not seen by tracemalloc).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
from _common import child_env, write_json

N_COLS = 34

CHILD = r"""
import json, resource, sys, time
import pandas as pd
import pyarrow as pa
from _common import peak_rss_kb
from fedep.data import read_table

path, mode = sys.argv[1], sys.argv[2]
r0 = resource.getrusage(resource.RUSAGE_SELF)
base = peak_rss_kb()
t0 = time.perf_counter()
if mode == "whole":
    n = len(read_table(path))
elif mode == "chunks":
    n = sum(len(c) for c in read_table(path, chunksize=200_000))
else:
    n = len(pd.read_csv(path, engine="c"))
dt = time.perf_counter() - t0
r1 = resource.getrusage(resource.RUSAGE_SELF)
cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
print(json.dumps({"rows": n, "seconds": dt, "cpu_s": cpu, "base_kb": base, "peak_kb": peak_rss_kb(),
                  "pool_peak": pa.default_memory_pool().max_memory()}))
"""


def write_csv(path: Path, rows: int, seed: int = 0) -> None:
    """Write the benchmark CSV in blocks (bounded memory)."""
    rng = np.random.default_rng(seed)
    names = [f"count_{i}" for i in range(N_COLS // 2)] + [
        f"rate_{i}" for i in range(N_COLS - N_COLS // 2)
    ]
    block = 250_000
    with pa.OSFile(str(path), "wb") as sink:
        writer = None
        for start in range(0, rows, block):
            n = min(block, rows - start)
            cols = [rng.integers(0, 100_000, n) for _ in range(N_COLS // 2)]
            cols += [np.round(rng.exponential(1000.0, n), 3) for _ in range(N_COLS - N_COLS // 2)]
            table = pa.table(dict(zip(names, cols, strict=True)))
            if writer is None:
                writer = pacsv.CSVWriter(sink, table.schema)
            writer.write_table(table)
        writer.close()


def run_child(path: Path, mode: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), mode],
        check=True,
        capture_output=True,
        text=True,
        env=child_env(),
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def summarize(runs: list[dict], rows: int) -> dict:
    secs = [r["seconds"] for r in runs]
    matrix = rows * N_COLS * 8
    extra = [(r["peak_kb"] - r["base_kb"]) * 1024 for r in runs]
    return {
        "seconds_median": float(np.median(secs)),
        "seconds_min": float(np.min(secs)),
        "rows_per_s": rows / float(np.median(secs)),
        "rows_per_s_best": rows / float(np.min(secs)),
        # CPU seconds (all threads): on a shared machine, rows per CPU-second is the
        # steadier figure; wall time / CPU time < 1 means the threads ran in parallel
        "cpu_s_median": float(np.median([r["cpu_s"] for r in runs])),
        "rows_per_cpu_s": rows / float(np.median([r["cpu_s"] for r in runs])),
        "peak_rss_mb": max(r["peak_kb"] for r in runs) / 1024,
        "rss_after_imports_mb": runs[0]["base_kb"] / 1024,
        "peak_rss_over_matrix": max(extra) / matrix,
        "arrow_pool_peak_mb": max(r["pool_peak"] for r in runs) / 2**20,
        "repeats": len(runs),
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="benchmarks/results/read.json")
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-pandas", action="store_true", help="skip the pandas C-engine baseline")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "flows.csv"
        t0 = time.perf_counter()
        write_csv(path, a.rows)
        results = {
            "loadavg_before": [round(x, 2) for x in os.getloadavg()],
            "machine": platform.platform(),
            "cpus": os.cpu_count(),
            "pyarrow": pa.__version__,
            "rows": a.rows,
            "columns": N_COLS,
            "csv_mb": path.stat().st_size / 2**20,
            "matrix_mb": a.rows * N_COLS * 8 / 2**20,
            "write_s": time.perf_counter() - t0,
        }
        whole = [run_child(path, "whole") for _ in range(a.repeats)]
        assert all(r["rows"] == a.rows for r in whole)
        results["read_table"] = summarize(whole, a.rows)
        print("read_table", json.dumps(results["read_table"]))
        chunks = [run_child(path, "chunks")]
        assert chunks[0]["rows"] == a.rows
        results["read_table_chunks"] = summarize(chunks, a.rows)
        print("read_table_chunks", json.dumps(results["read_table_chunks"]))
        if not a.no_pandas:
            pdc = [run_child(path, "pandas")]
            results["pandas_c"] = summarize(pdc, a.rows)
            print("pandas_c", json.dumps(results["pandas_c"]))
    results["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    write_json(a.out, results)
    print(json.dumps(results, indent=2))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()

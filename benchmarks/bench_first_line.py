"""Time and memory to refuse a file whose first line never ends.

Run by hand (not a test)::

    python benchmarks/bench_first_line.py --out benchmarks/results/first_line.json

Writes a ``--mb`` MB file of one line without a line break (``a,`` repeated: a CSV
header that never ends), plain and gzip-compressed (the ``.gz`` is tiny and inflates to
the whole line), and measures, each in a fresh subprocess, ``read_table`` (format
detection included) up to its one-line refusal: ``seconds``, ``peak_rss_mb`` (the
child's ``VmHWM`` over its RSS after the imports) and ``tracemalloc_peak_mb`` (Python
allocations during the call), with the error message it gave.

Before the fix the first line was read by repeated concatenation (quadratic: a 64 MB
line took minutes); now it is read in pieces joined once, and refused after 1 MiB.
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import child_env, write_json

CHILD = r"""
import json, sys, time, tracemalloc
from _common import peak_rss_kb
from fedep.data import read_table

def rss():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0

base = rss()
tracemalloc.start()
t0 = time.perf_counter()
try:
    read_table(sys.argv[1])
    msg = None
except Exception as exc:
    msg = f"{type(exc).__name__}: {exc}"
dt = time.perf_counter() - t0
_, peak = tracemalloc.get_traced_memory()
print(json.dumps({
    "seconds": dt,
    "peak_rss_mb": (peak_rss_kb() * 1024 - base) / 2**20,
    "tracemalloc_peak_mb": peak / 2**20,
    "error": msg,
}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=64, help="length of the line in MB (2**20)")
    ap.add_argument("--out", help="JSON file to write (default: stdout only)")
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        line = b"a," * (args.mb * 2**19)
        plain = Path(tmp) / "one_line.csv"
        plain.write_bytes(line)
        packed = Path(tmp) / "one_line.csv.gz"
        packed.write_bytes(gzip.compress(line, compresslevel=9))
        del line
        for path in (plain, packed):
            out = subprocess.run(
                [sys.executable, "-c", CHILD, str(path)],
                check=True,
                capture_output=True,
                text=True,
                env=child_env(checkout=False),  # the fedep PYTHONPATH names
            )
            row = json.loads(out.stdout)
            row.update(case=path.name, file_bytes=path.stat().st_size, line_mb=args.mb)
            results.append(row)
            print(json.dumps(row), flush=True)
    report = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "results": results,
    }
    if args.out:
        write_json(args.out, report)


if __name__ == "__main__":
    main()

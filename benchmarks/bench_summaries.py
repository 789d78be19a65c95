"""Speed of the per-gateway column summaries (``fedep.features.summarize_columns``).

Run by hand (not a test)::

    python benchmarks/bench_summaries.py --out benchmarks/results/summaries.json

Two tables are generated in memory (no file is read), split into ``--gateways`` equal
gateways, and every gateway's frame is summarised as ``fedep fit`` does in round 1
(``max_categories=64``: top lists of 256 values):

- ``float``: ``--rows`` x 34 float columns, log-normal values rounded to 4 decimals
  (nearly every value distinct, as in a flow exporter's rates and durations);
- ``mixed``: ``--mixed-rows`` rows of float and integer columns, low-cardinality codes,
  text categories with missing tokens, numbers written as text (``"80"``, ``"2.5"``),
  IPv4 addresses, Zeek-like uids and date-time text.

Reported per table: ``seconds_median`` / ``seconds_min`` over ``--repeats`` runs of all
gateways, ``cpu_s_median`` (process CPU time, all threads: the steadier figure on a
loaded machine) and ``rows_per_s``. To compare with another version of the code, run
the same command with ``PYTHONPATH=<that checkout>/src``; ``fedep_file`` records which
source was timed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np
import pandas as pd
from _common import write_json

import fedep
from fedep.features import summarize_columns

N_FLOAT_COLS = 34


def float_table(rows: int, seed: int = 0) -> pd.DataFrame:
    """``rows`` x 34 nearly-all-distinct float columns."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {f"f{i}": np.round(rng.lognormal(3.0, 2.0, rows), 4) for i in range(N_FLOAT_COLS)}
    )


def mixed_table(rows: int, seed: int = 0) -> pd.DataFrame:
    """Numbers, codes, text categories, numbers as text, addresses, uids, time text."""
    rng = np.random.default_rng(seed)
    octets = rng.integers(0, 256, (rows, 2)).astype(str)
    uid_alphabet = np.array(list("ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnpqrstuvwxyz0123456789"))
    uids = pd.Series(rng.choice(uid_alphabet, (rows, 12)).tolist()).str.join("")
    t0 = np.datetime64("2024-01-01T00:00:00")
    return pd.DataFrame(
        {
            "duration": np.round(rng.lognormal(-1.0, 2.0, rows), 6),
            "orig_bytes": rng.integers(0, 1_000_000, rows),
            "resp_pkts": rng.poisson(5.0, rows),
            "code": rng.integers(0, 12, rows),
            "ratio": rng.uniform(0.0, 1.0, rows),
            "proto": rng.choice(["tcp", "udp", "icmp"], rows, p=[0.7, 0.25, 0.05]),
            "service": rng.choice(["dns", "http", "ssl", "-", "ssh", "ftp"], rows),
            "conn_state": rng.choice(["SF", "S0", "REJ", "RSTO", "OTH"], rows),
            "resp_port_text": rng.choice(["80", "443", "53", "8080", "22", "-"], rows),
            "weight_text": rng.choice(["1", "2.5", "0.75", "3", "?"], rows),
            "id.orig_h": pd.Series(octets[:, 0]).str.cat(octets[:, 1], sep=".").radd("10.0."),
            "uid": uids.radd("C"),
            "when": (t0 + rng.integers(0, 86_400, rows).astype("timedelta64[s]")).astype(str),
        }
    )


def time_summaries(df: pd.DataFrame, gateways: int, repeats: int) -> dict:
    """Summarise every gateway's share of ``df``, ``repeats`` times."""
    bounds = np.linspace(0, len(df), gateways + 1).astype(int)
    parts = [
        df.iloc[lo:hi].reset_index(drop=True)
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)
    ]
    secs, cpus = [], []
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        for p in parts:
            summarize_columns(p, max_categories=64)
        secs.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return {
        "rows": len(df),
        "columns": df.shape[1],
        "gateways": gateways,
        "seconds_median": float(np.median(secs)),
        "seconds_min": float(np.min(secs)),
        "cpu_s_median": float(np.median(cpus)),
        "rows_per_s": len(df) / float(np.median(secs)),
        "repeats": repeats,
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="benchmarks/results/summaries.json")
    p.add_argument("--rows", type=int, default=2_000_000, help="rows of the float table")
    p.add_argument("--mixed-rows", type=int, default=500_000, help="rows of the mixed table")
    p.add_argument("--gateways", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args(argv)
    results = {
        "loadavg_before": [round(x, 2) for x in os.getloadavg()],
        "machine": platform.platform(),
        "cpus": os.cpu_count(),
        "numpy": np.__version__,
        "pandas": pd.__version__,
        "fedep_file": fedep.__file__,
    }
    for name, make, rows in (("float", float_table, a.rows), ("mixed", mixed_table, a.mixed_rows)):
        df = make(rows)
        results[name] = time_summaries(df, a.gateways, a.repeats)
        print(name, json.dumps(results[name]), flush=True)
        del df
    results["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    write_json(a.out, results)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()

"""The worst model files we can construct: time and peak memory of loading and scoring.

Run by hand (not a test)::

    nice -n 10 python benchmarks/bench_hostile_model.py --out benchmarks/results/hostile_model.json

Every file passes the integrity digest (written by ``write_model_file``: a forger who
recomputes it); each is measured in a fresh process (peak resident memory from
``getrusage``), beside the honest small model the hostile ones are made from:

- ``honest``: a PCA model with a feature pipeline (two numbers, one 3-value category);
- ``wide-vocabulary``: the same with a 200,000-value vocabulary, every array, the
  scaling and the rank consistent with it (the issue's case: ``fedep score`` asked for
  11.9 GiB); loaded, then ``fedep score`` on ``--rows`` rows;
- ``inflated-array``: the honest metadata with a 1 GiB basis that the metadata does not
  allow, deflated just under the compression-ratio cap (the issue's 5.9 MB file that
  took 13.7 s and +1,050 MB before it was refused);
- ``many-clients``: a consistent model that claims enough clients for a 1 GiB
  ``client_components_`` (its honest size is 1 GiB; the overhead above it is the point).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from _common import ROOT, child_env, peak_rss_kb, write_json

sys.path.insert(0, str(ROOT / "tests"))

from _hostile import honest_model, wide_vocabulary  # noqa: E402

GiB = 2**30


def near_cap(nbytes: int, seed: int = 0) -> np.ndarray:
    """float64 zeros with one random value every 1024 entries: deflates (level 1, the
    writer's) to about 1/194, just under the cap of 200."""
    a = np.zeros(nbytes // 8)
    rng = np.random.default_rng(seed)
    a[::1024] = np.round(rng.random(a[::1024].size), 1)
    return a


def build(folder: Path, rows: int) -> dict:
    from fedep.modelfile import write_model_file

    path, meta, arrays, df = honest_model(folder)
    files = {"honest": path}
    m, a = wide_vocabulary(meta, arrays, 200_000)
    files["wide-vocabulary"] = folder / "wide.fedep"
    write_model_file(files["wide-vocabulary"], m, a)
    # inflated: a 1 GiB basis in a model whose pipeline has 6 outputs
    big = dict(arrays)
    r = arrays["components_"].shape[0]
    big["components_"] = near_cap(GiB).reshape(r, -1)
    files["inflated-array"] = folder / "inflated.fedep"
    write_model_file(files["inflated-array"], meta, big)
    del big
    # many clients: client_components_ of 1 GiB, consistent
    r, n = arrays["components_"].shape
    k = GiB // (8 * r * n)
    many = dict(arrays)
    cc = np.empty((k, r, n))
    cc[:] = arrays["components_"]
    many.update(
        clients_=np.arange(k, dtype=np.int64),
        client_components_=cc,
        client_thresholds_=np.full(k, float(arrays["client_thresholds_"][0])),
    )
    files["many-clients"] = folder / "many.fedep"
    write_model_file(files["many-clients"], meta, many)
    del many, cc
    csv = folder / "rows.csv"
    pd.concat([df] * (rows // len(df) + 1), ignore_index=True).iloc[:rows].to_csv(csv, index=False)
    files["rows"] = csv
    return {k: str(v) for k, v in files.items()}


def measure(kind: str, path: str, csv: str | None) -> dict:
    """In this (fresh) process: load, or score with the CLI; time and peak memory."""
    import fedep.cli  # noqa: F401  (the imports before the baseline)

    base = peak_rss_kb() * 1024
    t0 = time.perf_counter()
    out: dict = {}
    if kind == "load":
        import fedep
        from fedep.modelfile import ModelFileError

        try:
            det = fedep.load(path)
            out["result"] = f"loaded ({det.components_.shape[1]} features)"
        except ModelFileError as exc:
            out["result"] = "refused: " + str(exc)
    else:
        from fedep.cli import main

        code = main(["score", "--model", path, "--input", csv, "--output", csv + ".out", "--quiet"])
        out["result"] = f"fedep score exit status {code}"
    out["seconds"] = time.perf_counter() - t0
    peak = peak_rss_kb() * 1024
    out["peak_rss_mb"] = peak / 2**20
    out["peak_above_start_mb"] = (peak - base) / 2**20
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="benchmarks/results/hostile_model.json")
    p.add_argument("--dir", default="/tmp/fedep-hostile-models")
    p.add_argument("--rows", type=int, default=2000)
    p.add_argument("--measure", nargs=3, metavar=("KIND", "PATH", "CSV"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.measure:
        kind, path, csv = args.measure
        print(json.dumps(measure(kind, path, csv)))
        return
    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    files = build(folder, args.rows)
    build_s = time.perf_counter() - t0
    print(f"built in {build_s:.1f} s", flush=True)
    runs = []
    env = child_env()
    for name in ("honest", "wide-vocabulary", "inflated-array", "many-clients"):
        kinds = ["load", "score"] if name in ("honest", "wide-vocabulary") else ["load"]
        for kind in kinds:
            cmd = [sys.executable, __file__, "--measure", kind, files[name], files["rows"]]
            res = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
            row = {
                "file": name,
                "what": kind,
                "file_mb": os.path.getsize(files[name]) / 2**20,
                **json.loads(res.stdout.strip().splitlines()[-1]),
            }
            runs.append(row)
            print(json.dumps(row), flush=True)
    for f in files.values():
        Path(f).unlink(missing_ok=True)
    out = {
        "setup": {
            "rows_scored": args.rows,
            "build_s": build_s,
            "machine": platform.platform(),
            "load_1min": os.getloadavg()[0],
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        },
        "runs": runs,
    }
    write_json(args.out, out)


if __name__ == "__main__":
    main()

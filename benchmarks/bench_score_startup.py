"""How soon ``fedep score`` is done on a small file, warm: this checkout against another.

Run by hand (not a test)::

    python benchmarks/bench_score_startup.py --baseline-src ../main/src \\
        --out benchmarks/results/score_startup.json

Writes a seeded 20,000 x 30 training CSV of 20 gateways and a ``--rows`` (1,000) row
file to score (:func:`bench_cold_start.write_data`), fits one model with this checkout,
then, for each source tree (``--baseline-src`` when given, then this checkout's
``src``), runs ``fedep warmup --quiet`` once (numba's cache warm for that tree's
kernels, as after an install), and ``--repeats`` times, alternating between the trees
so that both see the same load:

- ``fedep score --model M --input F --output O --quiet``: the whole command, wall
  seconds and CPU seconds (user + system, ``wait4``) of a fresh child process;
- ``python -c "import fedep.cli.score"``: the imports alone.

Medians are reported with every run, beside the 1-minute load average and the
threads runnable before and after. The two trees' outputs must be byte-identical.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_cold_start import write_data

ROOT = Path(__file__).resolve().parents[1]


def runnable_now() -> int:
    try:
        with open("/proc/loadavg") as fh:
            return int(fh.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return 0


def run(cmd: list[str], env: dict[str, str]) -> dict:
    """Wall and CPU seconds of one child process (which must succeed)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {err[-2000:]}")
    return {"seconds": round(seconds, 4), "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 4)}


def summary(runs: list[dict]) -> dict:
    return {
        "median_seconds": round(statistics.median(r["seconds"] for r in runs), 4),
        "median_cpu_seconds": round(statistics.median(r["cpu_seconds"] for r in runs), 4),
        "runs": runs,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--baseline-src", type=Path, help="another checkout's src folder")
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()

    trees = {"this": ROOT / "src"}
    if args.baseline_src is not None:
        trees = {"baseline": args.baseline_src.resolve(), **trees}
    work = Path(tempfile.mkdtemp(prefix="fedep-score-startup-"))
    try:
        train, _ = write_data(work, 20_000, 30, 0)
        score = work / "score.csv"
        with train.open() as fh, score.open("w") as out:  # the first --rows records
            for i, line in enumerate(fh):
                if i > args.rows:
                    break
                out.write(line)
        base = {k: v for k, v in os.environ.items() if k not in ("FEDEP_KERNELS", "PYTHONPATH")}
        envs = {name: dict(base, PYTHONPATH=str(src)) for name, src in trees.items()}
        py = [sys.executable]
        model = work / "model.fedep"
        fit = py + ["-m", "fedep", "fit", "--train", str(train), "--client-column", "gw"]
        fit += ["--out", str(model), "--quiet"]
        run(fit, dict(envs["this"], FEDEP_KERNELS="numpy"))  # no compile for the model
        for env in envs.values():
            run(py + ["-m", "fedep", "warmup", "--quiet"], env)
        scoring = {
            name: py
            + [
                "-m",
                "fedep",
                "score",
                "--model",
                str(model),
                "--input",
                str(score),
                "--output",
                str(work / f"scored-{name}.csv"),
                "--quiet",
            ]  # fmt: skip
            for name in trees
        }
        imports = py + ["-c", "import fedep.cli.score"]
        load_before, runnable_before = os.getloadavg(), runnable_now()
        runs = {name: {"score": [], "imports": []} for name in trees}
        for _ in range(args.repeats):
            for name, env in envs.items():
                runs[name]["score"].append(run(scoring[name], env))
                runs[name]["imports"].append(run(imports, env))
        load_after, runnable_after = os.getloadavg(), runnable_now()
        outputs = {name: (work / f"scored-{name}.csv").read_bytes() for name in trees}
        same = len(set(outputs.values())) == 1
    finally:
        shutil.rmtree(work, ignore_errors=True)

    result = {
        "benchmark": "score_startup",
        "rows": args.rows,
        "repeats": args.repeats,
        "trees": {name: str(src) for name, src in trees.items()},
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_1min_before": round(load_before[0], 2),
        "load_1min_after": round(load_after[0], 2),
        "runnable_before": runnable_before,
        "runnable_after": runnable_after,
        "outputs_identical": same,
        "score": {name: summary(r["score"]) for name, r in runs.items()},
        "imports": {name: summary(r["imports"]) for name, r in runs.items()},
    }
    if "baseline" in trees:
        b, t = result["score"]["baseline"], result["score"]["this"]
        result["score_this_over_baseline"] = round(t["median_seconds"] / b["median_seconds"], 3)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("score", "imports")}))
    for part in ("score", "imports"):
        for name, s in result[part].items():
            print(part, name, s["median_seconds"], "s wall", s["median_cpu_seconds"], "CPU-s")


if __name__ == "__main__":
    main()

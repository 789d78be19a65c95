"""Cold start: the first ``fedep fit`` on a fresh install against a warm one, and how
soon ``fedep score`` starts.

Run by hand (not a test)::

    python benchmarks/bench_cold_start.py --out benchmarks/results/cold_start.json

Writes a seeded 20,000 x 30 CSV of 20 gateways (``gw`` column) and a 1,000-row file to
score, then runs, each in a fresh child process with ``NUMBA_CACHE_DIR`` pointed at a
new empty directory (a fresh install: nothing compiled yet):

1. ``fedep fit`` (the default FedEP, ``FEDEP_KERNELS`` unset: ``"auto"``) — cold: the
   kernels run their NumPy references and a detached ``fedep warmup`` compiles them
   behind the fit;
2. the wait for that background compile (its lock file released; wall seconds, and its
   CPU seconds sampled from ``/proc`` while it runs);
3. the same fit again (``--warm-repeats`` times) — warm: compiled kernels from the cache;
4. ``fedep score`` of the 1,000 rows with the fitted model (``--warm-repeats`` times):
   the start-up of a scoring command (imports, model, first chunk);
5. ``python -c "import fedep.cli.score"``: the imports alone;
6. with a second empty cache and ``FEDEP_KERNELS=numba``: the first fit compiling its
   kernels in the fit's own process (fedep's behaviour before ``"auto"`` ran NumPy),
   and ``fedep warmup`` then the fit on a third empty cache (``--no-compare`` skips
   both: about 90 CPU-seconds).

Each entry has wall ``seconds`` and the child's ``cpu_seconds`` (user + system, from
``wait4``): on a shared machine CPU time is the steadier figure. The 1-minute load
average is recorded before and after. ``extra_env`` (``--env NAME=VALUE``, repeatable)
is set for every child, e.g. ``--env NUMBA_OPT=3`` to compare optimisation levels.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import ROOT, child_env, run_measured, write_json


def write_data(folder: Path, rows: int, features: int, seed: int) -> tuple[Path, Path]:
    """The training CSV (``gw`` column, 20 gateways) and a 1,000-row file to score."""
    rng = np.random.default_rng(seed)
    rank = 10
    X = rng.standard_normal((rows, rank)) @ rng.standard_normal((rank, features))
    X += 0.1 * rng.standard_normal(X.shape)
    gw = rng.integers(0, 20, rows)
    header = ",".join([f"f{j}" for j in range(features)] + ["gw"])
    train, score = folder / "train.csv", folder / "score.csv"
    for path, n in ((train, rows), (score, 1000)):
        with path.open("w") as fh:
            fh.write(header + "\n")
            for i in range(n):
                fh.write(",".join(f"{v:.6g}" for v in X[i]) + f",{gw[i]}\n")
    return train, score


def run(cmd: list[str], env: dict[str, str]) -> dict:
    """Wall and CPU seconds of one child process (which must succeed)."""
    m = run_measured(cmd, env, cwd=ROOT)
    return {"seconds": m.seconds, "cpu_seconds": m.cpu_seconds}


def _cpu_of_group(pgid: int) -> float:
    """User + system CPU seconds of the live processes in group ``pgid`` (Linux)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def wait_background(cache: Path, limit: float = 1800.0) -> dict:
    """Wait for the background compile's lock in ``cache`` to be released."""
    t0 = time.perf_counter()
    locks = list(cache.glob("*/fedep-compile.lock"))
    if not locks:
        return {"started": False, "seconds": 0.0, "cpu_seconds": 0.0}
    pgid = int(locks[0].read_text().strip())
    cpu = 0.0
    while time.perf_counter() - t0 < limit:
        cpu = max(cpu, _cpu_of_group(pgid))
        fd = os.open(locks[0], os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError:
            time.sleep(0.25)
        finally:
            os.close(fd)
    else:
        raise SystemExit(f"the background compile (process group {pgid}) ran past {limit} s")
    return {"started": True, "pgid": pgid, "seconds": time.perf_counter() - t0, "cpu_seconds": cpu}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--features", type=int, default=30)
    ap.add_argument("--warm-repeats", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--no-compare", action="store_true", help="skip step 6")
    args = ap.parse_args()

    extra = dict(item.split("=", 1) for item in args.env)
    work = Path(tempfile.mkdtemp(prefix="fedep-cold-"))
    try:
        train, score = write_data(work, args.rows, args.features, args.seed)
        env = {k: v for k, v in os.environ.items() if k != "FEDEP_KERNELS"}
        env.update(extra)
        env = child_env(env)
        env["NUMBA_CACHE_DIR"] = str(work / "numba-cache")
        model = work / "model.fedep"
        py = [sys.executable]
        fit = py + ["-m", "fedep", "fit", "--train", str(train), "--client-column", "gw"]
        fit += ["--out", str(model), "--quiet"]
        scoring = py + ["-m", "fedep", "score", "--model", str(model), "--input", str(score)]
        scoring += ["--output", str(work / "scored.csv"), "--quiet"]
        imports = py + ["-c", "import fedep.cli.score"]

        load_before = os.getloadavg()
        cold = run(fit, env)
        background = wait_background(work / "numba-cache")
        warm = [run(fit, env) for _ in range(args.warm_repeats)]
        score_runs = [run(scoring, env) for _ in range(args.warm_repeats)]
        import_runs = [run(imports, env) for _ in range(args.warm_repeats)]
        compare = {}
        if not args.no_compare:
            env2 = dict(env, NUMBA_CACHE_DIR=str(work / "numba-cache-2"), FEDEP_KERNELS="numba")
            compare["fit_cold_compiling_in_process"] = run(fit, env2)
            env3 = dict(env, NUMBA_CACHE_DIR=str(work / "numba-cache-3"))
            compare["warmup_fresh_cache"] = run(py + ["-m", "fedep", "warmup", "--quiet"], env3)
            compare["fit_after_warmup"] = run(fit, env3)
        load_after = os.getloadavg()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    best_warm = min(warm, key=lambda r: r["cpu_seconds"])
    result = {
        "benchmark": "cold_start",
        "rows": args.rows,
        "features": args.features,
        "extra_env": extra,
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_1min_before": load_before[0],
        "load_1min_after": load_after[0],
        "fit_cold": cold,
        "background_compile": background,
        "fit_warm": warm,
        "cold_minus_warm_seconds": cold["seconds"] - best_warm["seconds"],
        "cold_minus_warm_cpu_seconds": cold["cpu_seconds"] - best_warm["cpu_seconds"],
        "target_met": cold["seconds"] - best_warm["seconds"] <= 10.0,
        "score_1000_rows_warm": score_runs,
        "import_fedep_cli_score": import_runs,
        **compare,
    }
    write_json(args.out, result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

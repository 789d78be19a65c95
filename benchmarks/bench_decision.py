"""``decision_function`` against NumPy doing the same sums, on one BLAS thread.

Run by hand (not a test)::

    python benchmarks/bench_decision.py --out benchmarks/results/decision.json

A PooledPCA (rank 10) fitted on 50,000 seeded correlated records scores ``--rows``
(1,000,000) x 34 records. References, timed in the same run, alternating with the
estimator: ``numpy_whole`` (z-score the whole array, ``R = Z - Z B B^T``, row sums of
``R * R``) and ``numpy_blocked`` (z-score the whole array, then
:func:`fedep.core.scoring.residual_energy`, which works a block of rows at a time).
A second model, fitted on a DataFrame of the same columns through the feature pipeline
(``features="auto"``), scores the DataFrame (``estimator_pipeline``) against
``pipeline_numpy``: the pipeline's ``transform`` of the whole frame, then the blocked
``residual_energy``. Median of ``--repeats``; ratios are the estimator's median over each
reference's, in wall seconds and in CPU seconds (``time.process_time``, steadier on a
shared machine); BLAS limited to one thread for all (``threadpoolctl``), the load
average beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from _common import write_json
from threadpoolctl import threadpool_limits

from fedep import PooledPCA
from fedep.core.scoring import residual_energy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

    rng = np.random.default_rng(0)
    X = rng.standard_normal((args.rows, 34)) @ rng.standard_normal((34, 34))
    model = PooledPCA(n_components=10).fit(X[:50_000])
    B = model.components_.T

    def numpy_whole():
        Z = (X - model.mean_) / model.scale_
        R = Z - (Z @ B) @ B.T
        return np.einsum("ij,ij->i", R, R)

    def numpy_blocked():
        return residual_energy((X - model.mean_) / model.scale_, B)

    def estimator():
        return model.decision_function(X)

    frame = pd.DataFrame(X, columns=[f"f{j}" for j in range(X.shape[1])])
    piped = PooledPCA(n_components=10).fit(frame.iloc[:50_000])
    Bp = piped.components_.T

    def pipeline_numpy():
        Z = piped.features_.transform(frame)
        return residual_energy((Z - piped.mean_) / piped.scale_, Bp)

    def estimator_pipeline():
        return piped.decision_function(frame)

    fns = {
        "numpy_whole": numpy_whole,
        "numpy_blocked": numpy_blocked,
        "estimator": estimator,
        "pipeline_numpy": pipeline_numpy,
        "estimator_pipeline": estimator_pipeline,
    }
    times: dict[str, list[float]] = {k: [] for k in fns}
    cpu: dict[str, list[float]] = {k: [] for k in fns}
    load = [os.getloadavg()[0]]
    with threadpool_limits(limits=1, user_api="blas"):
        np.testing.assert_allclose(estimator(), numpy_whole(), rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(estimator_pipeline(), pipeline_numpy(), rtol=1e-9, atol=1e-9)
        for _ in range(args.repeats):
            for name, fn in fns.items():
                t0, c0 = time.perf_counter(), time.process_time()
                fn()
                times[name].append(time.perf_counter() - t0)
                cpu[name].append(time.process_time() - c0)
    load.append(os.getloadavg()[0])
    med = {k: statistics.median(v) for k, v in times.items()}
    med_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    result = {
        "benchmark": "decision_function",
        "rows": args.rows,
        "features": 34,
        "rank": 10,
        "python": sys.version.split()[0],
        "load_1min_before_after": load,
        "median_seconds": med,
        "all_seconds": times,
        "estimator_over_numpy_whole": med["estimator"] / med["numpy_whole"],
        "estimator_over_numpy_blocked": med["estimator"] / med["numpy_blocked"],
        "estimator_pipeline_over_pipeline_numpy": med["estimator_pipeline"] / med["pipeline_numpy"],
        "median_cpu_seconds": med_cpu,
        "all_cpu_seconds": cpu,
        "cpu_estimator_over_numpy_blocked": med_cpu["estimator"] / med_cpu["numpy_blocked"],
        "cpu_estimator_pipeline_over_pipeline_numpy": med_cpu["estimator_pipeline"]
        / med_cpu["pipeline_numpy"],
    }
    write_json(args.out, result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

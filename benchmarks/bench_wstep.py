"""Seconds per FedEP W-step (ManPG with the SSN direction) against the rank.

Run by hand (not a test)::

    python benchmarks/bench_wstep.py --out benchmarks/results/wstep.json

One client's W-subproblem on a Gram matrix of ``--n-features`` (200, about TON-IoT's
encoded width on the generic path) decaying features, ranks 10-80, ``--iters`` ManPG
iterations, with the compiled kernel and (up to ``--numpy-max-rank``) the NumPy
reference; reports seconds per call (best of ``--repeats``), the SSN's iterations and
the largest difference between the two kernels' W. At rank r the SSN's Newton system
has r(r+1)/2 unknowns: below 120 (rank 15) it is solved densely, from there on
matrix-free by preconditioned CG (``fedep.core.ssn.CG_MIN_UNKNOWNS``), whose cost grows
like n r^2 per CG iteration instead of the dense r^6.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
from _common import write_json

from fedep.core.manpg import manpg_w_step
from fedep.core.stiefel import random_stiefel


def problem(n: int, r: int, beta: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((4 * n, n)) * 0.97 ** np.arange(n)
    G = (X.T @ X)[None]
    W0 = random_stiefel(n, r, rng, (1,))
    Z = W0 + 0.3 * rng.standard_normal((1, n, r))
    return G, W0, Z, np.array([beta * np.sqrt(np.trace(G[0]) / n)]), np.array([1.0])


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n-features", type=int, default=200)
    p.add_argument("--ranks", type=int, nargs="+", default=[10, 20, 40, 60, 80])
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--beta", type=float, default=1.0)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--numpy-max-rank", type=int, default=80)
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    rows = []
    for r in a.ranks:
        G, W0, Z, beta, nu = problem(a.n_features, r, a.beta)
        row = {"rank": r, "unknowns": r * (r + 1) // 2}
        res = {}
        kernels = ["numba"] + (["numpy"] if r <= a.numpy_max_rank else [])
        for k in kernels:
            manpg_w_step(G, W0, Z, beta, nu, max_iter=1, kernel=k)  # compile / warm up
            best = np.inf
            for _ in range(a.repeats):
                t0 = time.perf_counter()
                res[k] = manpg_w_step(G, W0, Z, beta, nu, max_iter=a.iters, kernel=k)
                best = min(best, time.perf_counter() - t0)
            row[f"{k}_s"] = best
            row[f"{k}_ssn_iter"] = int(np.sum(res[k].ssn_iter))
        if "numpy" in res:
            row["max_abs_dW"] = float(np.abs(res["numpy"].W - res["numba"].W).max())
        rows.append(row)
        print(json.dumps(row), flush=True)
    out = {"args": vars(a) | {"out": str(a.out)}, "rows": rows, "loadavg": os.getloadavg()}
    if a.out:
        write_json(a.out, out, indent=1)
    return out


if __name__ == "__main__":
    main()

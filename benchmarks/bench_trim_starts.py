"""Can the trimmed objective pick the right start? A FAST-MCD-like multi-start (by hand).

The question behind ``trim_start``: with attacks injected into unlabelled training
traffic, the C-steps of trimmed probabilistic PCA (:mod:`fedep.core.trimming`) end at
different fixed points from different starts, some keeping the attacks and some not.
FAST-MCD (Rousseeuw & Van Driessen 1999) runs the C-steps from many starts and keeps
the fixed point of smallest trimmed objective ``L(K, theta) / h`` (mean PPCA distance
plus ``log det C``). This benchmark asks whether that choice is the right one here.

Setting: the training sets of ``bench_contaminated.py`` (normal rows of the training
split, attack rows injected at 0/5/10/20 %, rich features, seed 0), centralised (the
federated loop reaches the same fixed points for pooled PCA), rank 10, trimmed share
0.25, every start's C-steps run to their fixed point (at most ``--max-steps``) in one
fixed standardisation, so that the objectives are comparable: the moments of every
record (``--units all``) or of the median start set (``--units median``). Starts:

- ``all``: every record (today's ``trim_start="all"``);
- ``median``: the half closest in L1 to the coordinate-wise median (``"median"``);
- ``gateway<g>``: one gateway's records (20 IID gateways: a random 5 %);
- ``random<k>``: a random subset of ``2 r`` records (FAST-MCD's elemental starts,
  enlarged so that the PPCA of rank ``r`` is defined).

For each start: the objective at its fixed point, the share of the injected attacks
it keeps, and the test ROC AUC of the residual energy under its fit. Per training
set: the start the objective chooses, against ``all``, ``median`` and the best start
by test AUC (an oracle: it uses the test labels, it is not a method).

Usage::

    PYTHONPATH=src python benchmarks/bench_trim_starts.py --out starts.json \\
        [--datasets nsl-kdd unsw-nb15 ton-iot] [--n-normal 5000] [--random 10]
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np
from sklearn.metrics import roc_auc_score

from fedep.core.scoring import residual_energy
from fedep.core.stats import client_moments, standardization_from_moments
from fedep.core.trimming import (
    coordinate_median,
    kept_count,
    median_distance,
    ppca_distance,
    selection_step,
    trimmed_ppca,
)
from fedep.data import load_dataset

sys.path.insert(0, str(Path(__file__).parent))
from bench_contaminated import _training_rows  # noqa: E402


def _units(X: np.ndarray):
    mean, scale, _ = standardization_from_moments(client_moments(X))
    return mean, scale


def _starts(Z, groups, r, h, n_random, rng):
    """Initial kept sets (boolean masks) by name."""
    n = Z.shape[0]
    out = {"all": np.ones(n, dtype=bool)}
    med = coordinate_median([Z])
    out["median"] = selection_step(median_distance(Z, med, 1.0), n - n // 2)
    for g in np.unique(groups):
        out[f"gateway{g}"] = groups == g
    for k in range(n_random):
        keep = np.zeros(n, dtype=bool)
        keep[rng.choice(n, 2 * r, replace=False)] = True
        out[f"random{k}"] = keep
    return out


def _objective_per_record(Z, keep, theta) -> float:
    mu, B, lam, sigma2 = theta
    logdet = float(np.log(lam).sum() + (Z.shape[1] - B.shape[1]) * np.log(sigma2))
    return float(ppca_distance(Z[keep], mu, B, lam, sigma2).mean() + logdet)


def run(a) -> list[dict]:
    out = []
    for name in a.datasets:
        d = load_dataset(name, a.data_dir, feature_set="rich")
        for share in a.shares:
            rng = np.random.default_rng(a.seed)  # the draws of bench_contaminated
            idx, true_share = _training_rows(d, share, a.n_normal, rng)
            groups = rng.integers(0, a.n_clients, idx.size)
            X, is_attack = d.X_train[idx], d.y_train[idx] == 1
            mean, scale = _units(X)
            Z = (X - mean) / scale
            h = kept_count(Z.shape[0], a.trim_share)
            if a.units == "median":
                start = _starts(Z, groups, a.rank, h, 0, rng)["median"]
                mean, scale = _units(X[start])
                Z = (X - mean) / scale
            starts = _starts(Z, groups, a.rank, h, a.random, np.random.default_rng(a.seed + 1))
            Zt = (d.X_test - mean) / scale
            rows = []
            for sname, keep0 in starts.items():
                keep, theta, _ = trimmed_ppca(Z, a.rank, h, keep=keep0, max_steps=a.max_steps)
                mu, B = theta[0], theta[1]
                auc = roc_auc_score(d.y_test, residual_energy(Zt - mu, B))
                rows.append(
                    {
                        "start": sname,
                        "objective": round(_objective_per_record(Z, keep, theta), 3),
                        "attacks_kept": round(float(keep[is_attack].mean()), 3)
                        if is_attack.any()
                        else None,
                        "roc_auc": round(float(auc), 4),
                    }
                )
            by = {r["start"]: r for r in rows}
            chosen = min(rows, key=lambda r: r["objective"])
            best = max(rows, key=lambda r: r["roc_auc"])
            summary = {
                "dataset": name,
                "share": share,
                "true_share": round(true_share, 4),
                "units": a.units,
                "chosen": chosen,
                "all": by["all"],
                "median": by["median"],
                "oracle_best": best,
                "n_distinct_objectives": len({r["objective"] for r in rows}),
                "starts": rows,
            }
            out.append(summary)
            print(
                json.dumps({k: v for k, v in summary.items() if k != "starts"}),
                flush=True,
            )
            if a.out:
                Path(a.out).write_text(json.dumps({"args": vars(a), "rows": out}, indent=1))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=["nsl-kdd", "unsw-nb15", "ton-iot"])
    p.add_argument("--data-dir", default="/work/shared/data")
    p.add_argument("--shares", nargs="+", type=float, default=[0.0, 0.05, 0.1, 0.2])
    p.add_argument("--n-normal", type=int, default=5000)
    p.add_argument("--n-clients", type=int, default=20)
    p.add_argument("--rank", type=int, default=10)
    p.add_argument("--trim-share", type=float, default=0.25)
    p.add_argument("--random", type=int, default=10, help="random elemental starts")
    p.add_argument("--max-steps", type=int, default=30)
    p.add_argument("--units", choices=["all", "median"], default="all")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    warnings.simplefilter("ignore")
    run(a)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

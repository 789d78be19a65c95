"""Numeric transform, scale rule and rank of the generic path, centralised probe.

Run by hand (not a test)::

    OMP_NUM_THREADS=1 python benchmarks/bench_transform.py --data-dir ../shared/data \
        --out transform.json

On the reproduction's generic split of each dataset (seed 0, the full mode's headline
settings: 20 gateways sorted by ``dst_bytes``, the normal training rows, 5,000
validation rows carved from the training file, the whole test file), the feature
pipeline is fitted per gateway for every numeric transform (``log``: log1p of heavy
tails; ``quantile``: normal scores from the merged sketches) and scale rule; pooled PCA
(closed form) is then fitted at every rank of ``--ranks`` and scores the validation and
the test rows by residual energy. Reported per (transform, rule): validation and test
ROC AUC per rank, the ranks of unlabelled rules on the pooled spectrum (Gavish-Donoho,
:mod:`fedep.core.rank`; 95 % of the variance; Kaiser: eigenvalues above their mean).
The test columns are for reading the validation choice, never for choosing.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from _common import write_json
from sklearn.metrics import roc_auc_score

from fedep.core.rank import choose_rank
from fedep.evaluation.reproduce.config import MODES
from fedep.evaluation.reproduce.run import best_data
from fedep.features import FeaturePipeline

RULES = [("sd", 0.0), ("floor", 0.01), ("floor", 0.1), ("floor", 0.3), ("shrink", 0.3)]


def _aucs(Z, Zv, yv, Zt, yt, ranks):
    _, V = np.linalg.eigh(Z.T @ Z)
    V = V[:, ::-1]
    out = {}
    for r in ranks:
        if r >= Z.shape[1]:
            continue
        v = V[:, :r]
        sv = ((Zv - Zv @ v @ v.T) ** 2).sum(1)
        st = ((Zt - Zt @ v @ v.T) ** 2).sum(1)
        out[str(r)] = {"val": float(roc_auc_score(yv, sv)), "test": float(roc_auc_score(yt, st))}
    return out


def run(name: str, data_dir: str, ranks: list[int]) -> dict:
    cfg = json.loads(json.dumps(MODES["full"]))
    sp = best_data(data_dir, [name], cfg, "generic").split(name, "clean", 0, max_train_rows=None)
    g = np.asarray(sp.groups_train)
    counts = [int((g == k).sum()) for k in np.unique(g)]
    out: dict = {"n_train": len(sp.X_train), "n_val": len(sp.X_val), "n_test": len(sp.y_test)}
    for tf in ("log", "quantile"):
        for rule, par in RULES:
            t0 = time.perf_counter()
            pipe = FeaturePipeline(numeric_transform=tf, scale_rule=rule, scale_floor=par)
            pipe.fit(sp.X_train, groups=g)
            Z, Zv, Zt = (pipe.transform(x) for x in (sp.X_train, sp.X_val, sp.X_test))
            lam = np.linalg.eigvalsh(Z.T @ Z / len(Z))[::-1].clip(0)
            cum = np.cumsum(lam) / lam.sum()
            auto = {
                "gavish_donoho": choose_rank(Z.T @ Z, counts).rank,
                "variance95": int(np.searchsorted(cum, 0.95) + 1),
                "kaiser": int((lam > lam.mean()).sum()),
            }
            grid = sorted(set(ranks) | set(auto.values()))
            key = f"{tf}/{rule}:{par}"
            out[key] = {
                "n_features": Z.shape[1],
                "unlabelled_ranks": auto,
                "auc": _aucs(Z, Zv, sp.y_val, Zt, sp.y_test, grid),
                "seconds": time.perf_counter() - t0,
            }
            print(name, key, auto, flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--datasets", nargs="+", default=["nsl-kdd", "unsw-nb15", "ton-iot"])
    ap.add_argument("--ranks", nargs="+", type=int, default=[5, 10, 20, 30, 40, 60, 80])
    ap.add_argument("--out", default="transform.json")
    a = ap.parse_args()
    res = {n: run(n, a.data_dir, a.ranks) for n in a.datasets}
    write_json(a.out, res, indent=1)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()

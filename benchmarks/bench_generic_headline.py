"""The generic path's headline table alone: the reproduction's own cells, nothing else.

Run by hand (not a test)::

    OMP_NUM_THREADS=1 python benchmarks/bench_generic_headline.py --data-dir ../shared/data \
        --out runs/generic [--datasets ton-iot] [--seeds 0 1 2 3 4] [--methods FedPG]

Builds the ``fs-generic-*`` cells of ``fedep reproduce`` (full mode: the scaling and
numeric transform chosen on validation by PooledPCA, then per method the rank (and
FedEP's alpha) chosen on validation, one fit per seed, honest threshold) and nothing
else, in ``OUT/cells`` with the reproduction's cache keys: ``fedep reproduce --out OUT``
reuses them. Writes ``OUT/generic_headline.json``: per dataset and method, the test ROC
AUC, FPR and F1 (mean and standard deviation over the seeds), the validation choice and
its validation ROC AUC, and the scaling selection. ``--methods`` limits the cells to
some of the methods (the scaling selection always runs).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from _common import write_json

from fedep.evaluation.reproduce.cells import Cells
from fedep.evaluation.reproduce.config import BEST_METHODS, DATASETS, MODES
from fedep.evaluation.reproduce.plan import Context, FeatureSetCells, feature_set_cells
from fedep.evaluation.reproduce.run import best_data, run_plan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS))
    ap.add_argument("--seeds", nargs="+", type=int, default=None, help="default: the mode's")
    ap.add_argument("--methods", nargs="+", default=list(BEST_METHODS), choices=BEST_METHODS)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    cfg = json.loads(json.dumps(MODES["full"]))
    if a.seeds is not None:
        cfg["seeds"] = a.seeds
    data = best_data(a.data_dir, a.datasets, cfg, "generic")
    ctx = Context(cfg=cfg, data=data, best_data=data)
    fs = FeatureSetCells("generic", data, headline=False)
    skip = [f"-{m}" for m in BEST_METHODS if m not in a.methods]
    plan = [
        c
        for n in data.names
        for c in feature_set_cells(ctx, fs, n)
        if not any(f"{s}-" in c.key or c.key.endswith(s) for s in skip)
    ]
    out = Path(a.out)
    values = run_plan(plan, Cells(out, "full", cfg, print), print)
    res: dict = {"seeds": cfg["seeds"], "config": cfg["best"], "datasets": {}}
    res["methods"] = list(a.methods)
    for n in data.names:
        pre = fs.prefix(n)
        sc = values[f"{pre}-scaling"]
        entry = {"scaling": {"chosen": sc["chosen"], "by_scaling": sc["by_scaling"]}}
        for m in a.methods:
            sel = values[f"{pre}-select-{m}"]
            fits = [values[f"{pre}-{m}-s{s}"] for s in cfg["seeds"]]
            h = {k: np.array([f["honest"][k] for f in fits]) for k in ("roc_auc", "fpr", "f1")}
            entry[m] = {
                "params": {
                    k: v
                    for k, v in sel["best_params"].items()
                    if k in ("n_components", "alpha", "scaling")
                },
                "val_roc_auc": sel["best_score"],
                **{f"{k}_mean": float(v.mean()) for k, v in h.items()},
                **{f"{k}_std": float(v.std()) for k, v in h.items()},
                "n_iter": [f["n_iter"] for f in fits],
                "fit_time_s": [f["fit_time_s"] for f in fits],
            }
            print(
                f"{n:10s} {m:10s} ROC AUC {h['roc_auc'].mean():.4f} +- {h['roc_auc'].std():.4f}"
                f"  FPR {100 * h['fpr'].mean():.1f} %  F1 {100 * h['f1'].mean():.1f} %"
                f"  (validation {sel['best_score']:.4f}, {entry[m]['params']})"
            )
        res["datasets"][n] = entry
    write_json(out / "generic_headline.json", res, indent=1)
    print(f"wrote {out / 'generic_headline.json'}")


if __name__ == "__main__":
    main()

"""Training without labels on traffic that already holds attacks (run by hand).

Normal training rows of a real dataset (rich features) with attack rows of its
training split injected at a share of 0/5/10/20% of the training set, no labels used
for fitting, 20 IID gateways, rank 10; tested on the full test split. Reports ROC AUC,
FPR and F1 at the model's own threshold, and the estimated contamination
(``contamination_``) of the ``"auto"`` variants against the injected share.

Usage::

    PYTHONPATH=src python benchmarks/bench_contaminated.py --out contaminated.json \\
        [--datasets nsl-kdd unsw-nb15 ton-iot] [--shares 0 0.05 0.1 0.2] \\
        [--n-normal 10000] [--methods pca pca-robust fedep fedep-robust fedpg mcd] \\
        [--generic] [--rank 10]

``--generic``: the user's path instead of the rich features: each dataset's raw
table (label columns dropped, :meth:`~fedep.data.Dataset.raw_inputs`) through the
federated feature pipeline (``features="auto"``), fitted on the same rows; the
pipeline's own statistics (scales, vocabularies) then also see the attacks.

``*-trim``: trimming from every record (``trim_start="all"``); ``*-robust``: from the
robust start (``trim_start="median"``, :mod:`fedep.core.trimming`).
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np
from _common import write_rows
from sklearn.metrics import f1_score, roc_auc_score

from fedep import FedEP, FedPG, PooledPCA
from fedep.data import load_dataset
from fedep.evaluation.reproduce.contaminated import MCDReference, training_rows

TRIM = {"trim_steps": 3, "trim_share": 0.2, "trim_start": "all"}
#: Record trimming from the robust start (coordinate-wise median, start-set scaling).
ROBUST = {"trim_steps": 5, "trim_share": 0.25, "trim_start": "median"}
METHODS = {
    "pca": lambda r, s: PooledPCA(r),
    "pca-auto": lambda r, s: PooledPCA(r, contamination="auto", trim_steps=3),
    "pca-trim": lambda r, s: PooledPCA(r, **TRIM),
    "fedep": lambda r, s: FedEP(r, random_state=s),
    "fedep-trim": lambda r, s: FedEP(r, random_state=s, **TRIM),
    "fedpg": lambda r, s: FedPG(r, random_state=s),
    "fedpg-trim": lambda r, s: FedPG(r, random_state=s, **TRIM),
    "pca-robust": lambda r, s: PooledPCA(r, **ROBUST),
    "fedep-robust": lambda r, s: FedEP(r, random_state=s, **ROBUST),
    "fedpg-robust": lambda r, s: FedPG(r, random_state=s, **ROBUST),
    # FedEP without the entry-wise S (no re-merges): the federation's fit step alone.
    "fedep-robust-nos": lambda r, s: FedEP(r, random_state=s, sparse_corruption=False, **ROBUST),
    # The same trimming from every record: isolates the effect of the start.
    "pca-robust-all": lambda r, s: PooledPCA(r, **{**ROBUST, "trim_start": "all"}),
    "fedep-robust-all": lambda r, s: FedEP(r, random_state=s, **{**ROBUST, "trim_start": "all"}),
}


def run(args) -> list[dict]:
    out = []
    for name in args.datasets:
        d = load_dataset(name, args.data_dir, feature_set="paper" if args.generic else "rich")
        raw, raw_test = d.raw_inputs() if args.generic else (None, None)
        X_test = raw_test if args.generic else d.X_test
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            for share in args.shares:
                rng = np.random.default_rng(seed)
                idx, true_share = training_rows(d.y_train, share, args.n_normal, rng)
                X = raw.iloc[idx].reset_index(drop=True) if args.generic else d.X_train[idx]
                groups = rng.integers(0, args.n_clients, X.shape[0])  # IID gateways
                for m in args.methods:
                    est = MCDReference(2000, seed) if m == "mcd" else METHODS[m](args.rank, seed)
                    t0 = time.perf_counter()
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        est.fit(X, groups=groups)
                    fit_s = time.perf_counter() - t0
                    s = est.decision_function(X_test)
                    pred = est.predict(X_test)
                    normal = d.y_test == 0
                    row = {
                        "dataset": name,
                        "seed": seed,
                        "share": share,
                        "true_share": round(true_share, 4),
                        "method": m,
                        "features": "generic" if args.generic else "rich",
                        "rank": args.rank,
                        "n_train": int(X.shape[0]),
                        "roc_auc": round(float(roc_auc_score(d.y_test, s)), 4),
                        "fpr": round(float(pred[normal].mean()), 4),
                        "f1": round(float(f1_score(d.y_test, pred)), 4),
                        "contamination_": getattr(est, "contamination_", None),
                        "n_trim_steps_": getattr(est, "n_trim_steps_", None),
                        "fit_s": round(fit_s, 1),
                    }
                    out.append(row)
                    print(json.dumps(row), flush=True)
                    write_rows(args.out, args, out)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=["nsl-kdd", "unsw-nb15", "ton-iot"])
    p.add_argument("--data-dir", default="/work/shared/data")
    p.add_argument("--shares", nargs="+", type=float, default=[0.0, 0.05, 0.1, 0.2])
    p.add_argument("--methods", nargs="+", default=list(METHODS) + ["mcd"])
    p.add_argument("--n-normal", type=int, default=10000, help="normal training rows")
    p.add_argument("--n-clients", type=int, default=20)
    p.add_argument("--rank", type=int, default=10)
    p.add_argument("--seeds", type=int, default=1, help="number of seeds")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument(
        "--generic",
        action="store_true",
        help="raw tables through the feature pipeline (features='auto') instead of rich features",
    )
    p.add_argument("--out", default=None, help="JSON file (rewritten after every row)")
    run(p.parse_args(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

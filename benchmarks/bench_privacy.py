"""ROC AUC against the privacy loss epsilon: DP-FedEP beside centralised DP-PCA.

For each dataset (NSL-KDD, UNSW-NB15, TON-IoT; ``rich`` features, the paper's sorted
split over ``--gateways`` gateways, clean protocol), FedEP is fitted with
``dp_epsilon`` in ``--epsilons`` (``inf``: no noise, the plain fit) and the test ROC
AUC of its global basis is measured; beside it, the centralised reference
(:func:`fedep.core.privacy.dp_pca_reference`: the same clipping, DP moments then
Analyze Gauss on the pooled records) at the same epsilon. Public settings, chosen
without the data: ``dp_clip = --clip-factor * sqrt(n_features)`` (default 2), rank
``--rank``, ``--n-rounds`` rounds, delta 1e-5. Mean and spread over ``--seeds`` noise seeds.

Usage::

    PYTHONPATH=src nice -n 10 python benchmarks/bench_privacy.py --out privacy.json \\
        [--datasets nsl-kdd unsw-nb15 ton-iot] [--seeds 2] [--max-rows 40000]
"""

from __future__ import annotations

import argparse
import math
import os
import time
import warnings

import numpy as np
from _common import write_json


def _auc(y, s) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, s))


def _residual(Z: np.ndarray, V: np.ndarray) -> np.ndarray:
    return np.square(Z - (Z @ V) @ V.T).sum(axis=1)


def run_dataset(name: str, a) -> dict:
    from fedep.core.privacy import dp_pca_reference
    from fedep.data import load_dataset, make_client_split
    from fedep.detectors import FedEP

    ds = load_dataset(name, feature_set="rich")
    partition = "sorted"
    try:
        sp = make_client_split(ds, a.gateways, partition=partition, random_state=0)
    except ValueError as exc:  # a sorted chunk without normal rows (UNSW-NB15 at 20)
        print(f"{name}: {exc}; partition iid instead", flush=True)
        partition = "iid"
        sp = make_client_split(ds, a.gateways, partition=partition, random_state=0)
    X, g = sp.X_train, sp.groups_train
    if a.max_rows and len(X) > a.max_rows:  # every gateway's rows thinned alike
        keep = np.sort(np.random.default_rng(0).choice(len(X), a.max_rows, replace=False))
        X, g = X[keep], g[keep]
    Xt, yt = sp.X_test, sp.y_test
    n = X.shape[1]
    clip = a.clip_factor * math.sqrt(n)
    out = {"dataset": name, "partition": partition, "n_train": len(X), "n_features": n}
    out.update({"dp_clip": clip, "rows": []})
    for eps in a.epsilons:
        fed, ref, spent = [], [], []
        for seed in range(a.seeds):
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                det = FedEP(
                    n_components=a.rank,
                    n_rounds=a.n_rounds,
                    tol=0.0,
                    remerge=False,
                    dp_epsilon=eps,
                    dp_clip=clip,
                    random_state=seed,
                ).fit(X, groups=g)
            fed.append(_auc(yt, det.decision_function(Xt)))
            spent.append(det.dp_epsilon_)
            mean, scale, V = dp_pca_reference(
                X, a.rank, eps, 1e-5, clip, np.random.default_rng([seed, 7])
            )
            ref.append(_auc(yt, _residual((Xt - mean) / scale, V)))
            print(f"{name} eps={eps} seed={seed}: fedep {fed[-1]:.4f} reference {ref[-1]:.4f} "
                  f"({time.perf_counter() - t0:.1f} s)", flush=True)  # fmt: skip
        out["rows"].append(
            {
                "epsilon": eps,
                "epsilon_spent": max(spent),
                "fedep_auc_mean": float(np.mean(fed)),
                "fedep_auc_std": float(np.std(fed)),
                "reference_auc_mean": float(np.mean(ref)),
                "reference_auc_std": float(np.std(ref)),
            }
        )
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--datasets", nargs="+", default=["nsl-kdd", "unsw-nb15", "ton-iot"])
    ap.add_argument("--epsilons", nargs="+", type=float, default=[0.5, 1, 2, 4, 8, math.inf])
    ap.add_argument("--gateways", type=int, default=20)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--rank", type=int, default=5)
    ap.add_argument("--n-rounds", type=int, default=5)
    ap.add_argument("--max-rows", type=int, default=40000)
    ap.add_argument("--clip-factor", type=float, default=2.0, help="dp_clip / sqrt(n_features)")
    a = ap.parse_args(argv)
    report = {"load_before": os.getloadavg(), "settings": vars(a) | {"delta": 1e-5}}
    report["datasets"] = []
    for name in a.datasets:  # written after each dataset
        report["datasets"].append(run_dataset(name, a))
        report["load_after"] = os.getloadavg()
        write_json(a.out, report, indent=1, default=str)
    return report


if __name__ == "__main__":
    main()

"""Would a full-covariance MCD selection fix trimming? Centralised, by hand.

The question behind ``trim_start``'s failures on TON-IoT (``docs/robustness.md``):
scikit-learn's ``MinCovDet`` (full covariance, half the records, FAST-MCD's many
starts) holds there with injected attacks where trimmed PPCA of rank 10 from the
median start does not. Is it the covariance model, the start or the choice among
starts? For each training set of ``bench_contaminated.py`` (normal rows of the
training split, attack rows injected at a share, rich features, centralised,
standardised by the moments of every record), select a kept set ``K`` of
``h = round(0.52 N)`` records by:

- ``mincovdet``: ``MinCovDet(random_state=seed).support_`` (its reweighted support);
- ``median``: full-covariance C-steps (mean and covariance of ``K`` plus ``ridge * I``,
  keep the ``h`` smallest Mahalanobis distances) from the half of the records closest
  to the coordinate-wise median (sum of squared deviations in MAD units), to their
  fixed point;
- ``random``: the same C-steps from ``--starts`` random subsets of ``--start-size``
  records each, keeping the fixed point of smallest ``log det`` (FAST-MCD's rule).

Then fit PCA of rank ``--rank`` on ``K`` (same units) and score the test split by the
residual energy. Reports per selection the share of the injected attacks in ``K`` and
the test ROC AUC, beside PCA on every record and on the normal rows only (``clean``:
uses the labels, a reference, not a method).

Usage::

    PYTHONPATH=src python benchmarks/bench_mcd_selection.py --out mcd.json \\
        [--datasets nsl-kdd unsw-nb15 ton-iot] [--shares 0 0.1 0.2] [--seeds 3]
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np
from bench_contaminated import _training_rows
from sklearn.covariance import MinCovDet
from sklearn.metrics import roc_auc_score

from fedep.data import load_dataset


def _pca_auc(Z, Zt, y, r) -> float:
    mu = Z.mean(0)
    V = np.linalg.svd(Z - mu, full_matrices=False)[2][:r].T
    R = (Zt - mu) - (Zt - mu) @ V @ V.T
    return float(roc_auc_score(y, (R**2).sum(1)))


def _csteps(Z, keep, h, ridge, max_steps=50):
    """Full-covariance C-steps from ``keep`` to a fixed point; (kept, log det)."""
    eye = ridge * np.eye(Z.shape[1])
    for _ in range(max_steps):
        C = np.cov(Z[keep].T) + eye
        L = np.linalg.cholesky(C)
        dist = (np.linalg.solve(L, (Z - Z[keep].mean(0)).T) ** 2).sum(0)
        new = np.zeros(len(Z), bool)
        new[np.argsort(dist, kind="stable")[:h]] = True
        if (new == keep).all():
            break
        keep = new
    return keep, float(np.linalg.slogdet(np.cov(Z[keep].T) + eye)[1])


def run(args) -> list[dict]:
    out = []
    for name in args.datasets:
        d = load_dataset(name, args.data_dir, feature_set="rich")
        n_test = min(args.n_test, len(d.y_test))
        rows = np.random.default_rng(123).choice(len(d.y_test), n_test, replace=False)
        Xt, yt = d.X_test[rows], d.y_test[rows]
        for seed in range(args.seeds):
            for share in args.shares:
                rng = np.random.default_rng(seed)
                idx, true_share = _training_rows(d, share, args.n_normal, rng)
                X = d.X_train[idx]
                att = np.isin(idx, np.flatnonzero(d.y_train == 1))
                mean, sd = X.mean(0), X.std(0)
                cols = sd > 1e-9
                Z = (X[:, cols] - mean[cols]) / sd[cols]
                Zt = (Xt[:, cols] - mean[cols]) / sd[cols]
                n = len(Z)
                h = int(0.52 * n)
                kept = {}
                t0 = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    jitter = 1e-6 * rng.standard_normal(Z.shape)  # exact collinearity
                    kept["mincovdet"] = MinCovDet(random_state=seed).fit(Z + jitter).support_
                med = np.median(Z, 0)
                mad = 1.4826 * np.median(np.abs(Z - med), 0)
                mad[mad < 1e-9] = 1.0
                start = np.zeros(n, bool)
                start[np.argsort((((Z - med) / mad) ** 2).sum(1), kind="stable")[: n // 2]] = True
                kept["median"] = _csteps(Z, start, h, args.ridge)[0]
                starts = np.random.default_rng(1000 + seed)
                best = None
                for _ in range(args.starts):
                    s = np.zeros(n, bool)
                    s[starts.choice(n, args.start_size, replace=False)] = True
                    k, logdet = _csteps(Z, s, h, args.ridge)
                    if best is None or logdet < best[1]:
                        best = (k, logdet)
                kept["random"] = best[0]
                row = {
                    "dataset": name,
                    "seed": seed,
                    "share": share,
                    "true_share": round(true_share, 4),
                    "pca_all": round(_pca_auc(Z, Zt, yt, args.rank), 4),
                    "clean": round(_pca_auc(Z[~att], Zt, yt, args.rank), 4),
                    "seconds": round(time.perf_counter() - t0, 1),
                }
                for m, k in kept.items():
                    row[m] = {
                        "attacks_kept": round(float(k[att].mean()), 3) if att.any() else None,
                        "kept": round(float(k.mean()), 3),
                        "roc_auc": round(_pca_auc(Z[k], Zt, yt, args.rank), 4),
                    }
                out.append(row)
                print(json.dumps(row), flush=True)
                if args.out:
                    with open(args.out, "w") as f:
                        json.dump({"args": vars(args), "rows": out}, f, indent=1)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=["nsl-kdd", "unsw-nb15", "ton-iot"])
    p.add_argument("--data-dir", default="/work/shared/data")
    p.add_argument("--shares", nargs="+", type=float, default=[0.0, 0.1, 0.2])
    p.add_argument("--n-normal", type=int, default=2000, help="normal training rows")
    p.add_argument("--n-test", type=int, default=20000)
    p.add_argument("--rank", type=int, default=10)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--starts", type=int, default=30)
    p.add_argument("--start-size", type=int, default=200)
    p.add_argument("--ridge", type=float, default=1e-3)
    p.add_argument("--out", default=None, help="JSON file (rewritten after every row)")
    run(p.parse_args(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

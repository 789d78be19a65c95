"""Can the contamination share be estimated without labels? (run by hand)

The training sets of ``bench_contaminated.py`` (normal training rows of a real dataset,
rich features, attack rows of its training split injected at 0/5/10/20%, 20 IID
gateways), pooled PCA of rank 10, plain and trimmed from the robust start. For each,
the injected share against:

- ``mad_rule``: today's ``contamination="auto"`` (share of log-scores above median +
  3 robust standard deviations; :func:`fedep.core.trimming.estimate_contamination`);
- ``oracle_bound``: the largest share identifiable from the training scores when the
  normal records' own score distribution ``F`` is known (mixture-proportion
  estimation, Blanchard, Lee & Scott 2010: ``p* = 1 - min_t G(s <= t) / F(s <= t)``
  over thresholds with ``F >= 5%``) -- not an estimator: it uses the labels;
- ``reference_mpe``: the same with ``F`` replaced by 1000 held-out normal rows (a
  clean reference, e.g. a capture known to be clean), median over ``q`` in [0.1, 0.5]
  of ``1 - G(s <= t_q) / q``; ``crossfit_mpe``: the same with the training scores
  cross-fitted (a model fitted on half of the gateways scores the other half and the
  reference; the two directions averaged);
- ``bulk_quantiles``: a parametric bulk without any reference: the normal log-scores
  Gaussian and the contamination all above them, so that the overall ``q``-quantile
  for ``q <= 0.5`` is the normal ``q / (1 - p)``-quantile; ``(mu, sigma, p)`` fitted
  by least squares to the lower half's quantiles (``p`` on a grid to 0.45);
- ``bulk_tail_excess``: the same Gaussian bulk from the normal 10 % and 40 % quantiles
  (the overall ``0.1 (1 - p)`` and ``0.4 (1 - p)`` ones), ``p`` the excess of records
  above ``mu + 3 sigma`` over the bulk's own tail, iterated to a fixed point;
- ``forward_knee``: the trimmed share ``q`` (grid 0.02..0.40) at which the smallest
  trimmed PPCA distance jumps most above the kept ones (a forward-search statistic,
  Riani, Atkinson & Cerioli 2009), with ``--forward`` (slow).

Usage::

    PYTHONPATH=src python benchmarks/bench_contamination_estimate.py --out est.json \\
        [--datasets nsl-kdd unsw-nb15 ton-iot] [--n-normal 5000] [--forward]
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np
from scipy.stats import norm

from fedep import PooledPCA
from fedep.core.trimming import (
    ScoreCounts,
    coordinate_median,
    estimate_contamination,
    keep_at_or_below,
    log_scores,
    median_distance,
    ppca_distance,
    trimmed_ppca,
)
from fedep.data import load_dataset

sys.path.insert(0, str(Path(__file__).parent))
from bench_contaminated import ROBUST  # noqa: E402

QS = np.linspace(0.1, 0.5, 41)


def _reference_mpe(g: np.ndarray, ref: np.ndarray) -> float:
    ratio = np.searchsorted(np.sort(g), np.quantile(ref, QS), side="right") / g.size / QS
    return float(np.clip(1.0 - np.median(ratio), 0.0, 1.0))


def _bulk_quantiles(ls: np.ndarray) -> float:
    q = np.linspace(0.02, 0.5, 49)
    xq = np.quantile(ls, q)
    best = (np.inf, 0.0)
    for p in np.linspace(0.0, 0.45, 91):
        A = np.c_[np.ones_like(q), norm.ppf(q / (1.0 - p))]
        coef = np.linalg.lstsq(A, xq, rcond=None)[0]
        best = min(best, (float(((A @ coef - xq) ** 2).sum()), float(p)))
    return best[1]


def _bulk_tail_excess(ls: np.ndarray, k: float = 3.0) -> float:
    p, tail = 0.0, norm.sf(k)
    for _ in range(100):
        xa, xb = np.quantile(ls, [0.1 * (1.0 - p), 0.4 * (1.0 - p)])
        sigma = (xb - xa) / (norm.ppf(0.4) - norm.ppf(0.1))
        mu = xa - sigma * norm.ppf(0.1)
        new = float(np.clip(((ls > mu + k * sigma).mean() - tail) / (1.0 - tail), 0.0, 0.5))
        if abs(new - p) < 1e-6:
            break
        p = new
    return p


def _oracle_bound(scores: np.ndarray, is_attack: np.ndarray) -> float:
    f, g = np.sort(scores[~is_attack]), np.sort(scores)
    t = np.quantile(f, np.linspace(0.05, 1.0, 96))
    ratio = (np.searchsorted(g, t, side="right") / g.size) / (
        np.searchsorted(f, t, side="right") / f.size
    )
    return float(max(0.0, 1.0 - ratio.min()))


def _forward_knee(X: np.ndarray, r: int) -> float:
    """Trimmed share where the smallest trimmed log-distance jumps most over the median
    kept one (trimmed PPCA from the median start, start-set scaling)."""
    m, s = X.mean(0), X.std(0)
    s[s == 0] = 1.0
    Z = (X - m) / s
    med = coordinate_median([Z])
    start = keep_at_or_below([median_distance(Z, med, 1.0)], len(Z) - len(Z) // 2, 2)[0]
    m, s = X[start].mean(0), X[start].std(0)
    s[s == 0] = 1.0
    Z = (X - m) / s
    qs = np.round(np.arange(0.02, 0.42, 0.02), 2)
    gaps = []
    for q in qs:
        keep, theta, _ = trimmed_ppca(Z, r, int(len(Z) - round(q * len(Z))), keep=start)
        d = np.log(ppca_distance(Z, *theta))
        gaps.append(d[~keep].min() - np.median(d[keep]))
    return float(qs[int(np.argmax(gaps))])


def run(a) -> list[dict]:
    out = []
    for name in a.datasets:
        d = load_dataset(name, a.data_dir, feature_set="rich")
        normal, attack = np.flatnonzero(d.y_train == 0), np.flatnonzero(d.y_train == 1)
        for share in a.shares:
            rng = np.random.default_rng(a.seed)  # the draws of bench_contaminated
            rows = rng.choice(normal, min(a.n_normal, normal.size), replace=False)
            n_att = int(round(share / (1.0 - share) * rows.size))
            att = rng.choice(attack, min(n_att, attack.size), replace=False)
            X = d.X_train[np.concatenate([rows, att])]
            is_attack = np.r_[np.zeros(rows.size, bool), np.ones(att.size, bool)]
            groups = rng.integers(0, 20, X.shape[0])
            rest = np.setdiff1d(normal, rows)
            pick = np.random.default_rng(a.seed + 1).choice(rest, min(1000, rest.size), False)
            ref = d.X_train[pick]
            half = groups < 10
            for tag, make in (
                ("plain", lambda: PooledPCA(a.rank)),
                ("robust", lambda: PooledPCA(a.rank, **ROBUST)),
            ):
                est = make().fit(X, groups=groups)
                s = est.decision_scores_
                xfit = []
                for fit_on in (half, ~half):
                    m = make().fit(X[fit_on], groups=groups[fit_on])
                    xfit.append(
                        _reference_mpe(m.decision_function(X[~fit_on]), m.decision_function(ref))
                    )
                row = {
                    "dataset": name,
                    "share": share,
                    "true_share": round(float(is_attack.mean()), 4),
                    "model": tag,
                    "mad_rule": round(estimate_contamination(ScoreCounts([log_scores(s)])), 4),
                    "oracle_bound": round(_oracle_bound(s, is_attack), 4) if att.size else 0.0,
                    "reference_mpe": round(_reference_mpe(s, est.decision_function(ref)), 4),
                    "crossfit_mpe": round(float(np.mean(xfit)), 4),
                    "bulk_quantiles": round(_bulk_quantiles(log_scores(s)), 4),
                    "bulk_tail_excess": round(_bulk_tail_excess(log_scores(s)), 4),
                }
                if a.forward and tag == "robust":
                    row["forward_knee"] = _forward_knee(X, a.rank)
                out.append(row)
                print(json.dumps(row), flush=True)
                if a.out:
                    Path(a.out).write_text(json.dumps({"args": vars(a), "rows": out}, indent=1))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=["nsl-kdd", "unsw-nb15", "ton-iot"])
    p.add_argument("--data-dir", default="/work/shared/data")
    p.add_argument("--shares", nargs="+", type=float, default=[0.0, 0.05, 0.1, 0.2])
    p.add_argument("--n-normal", type=int, default=5000)
    p.add_argument("--rank", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--forward", action="store_true", help="the forward-search knee (slow)")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    warnings.simplefilter("ignore")
    rows = run(a)
    keys = ("mad_rule", "bulk_quantiles", "bulk_tail_excess", "reference_mpe", "crossfit_mpe")
    for key in (*keys, "forward_knee", "oracle_bound"):
        hits = [abs(r[key] - r["true_share"]) <= 0.03 for r in rows if key in r and r["share"] > 0]
        clean = [r[key] for r in rows if key in r and r["share"] == 0]
        print(
            f"{key}: within 3 points of the injected share in {sum(hits)} of {len(hits)}"
            f"; on clean training at most {max(clean, default=float('nan')):.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

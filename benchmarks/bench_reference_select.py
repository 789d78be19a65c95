"""How the trusted reference selects training records: the study on the TRAINING split.

The constants of :mod:`fedep.detectors.trust` (``SELECT_LEVEL``,
``SELECT_MIN_REFERENCE``) were chosen with this script, which never reads a test
label: 5000 normal training rows with attack rows of the training split injected at
0 / 5 / 10 / 20 %, a reference of 50 or 100 of the normal rows, and the ROC AUC of
the fits measured on *other* training rows (5000 normal, 5000 attacks). Pooled PCA
(rank 10, z-scored by every record, score: residual energy) for each rule:

- ``clean``: a fit on the normal rows only; ``none``: on every row;
- ``sel{q}``: a fit on the rows at or below the reference's own (in-sample) ``q``
  quantile of the PPCA distance under a PPCA of the whole reference;
- ``z``: the largest excess over its noise of the cross-fitted evidence
  (:func:`fedep.core.reference.contamination_evidence`'s rule, halves of the
  reference, tails 0.05 / 0.1 / 0.2), to study gating the selection on it;
- ``sh{q}_{p}``: the share estimated under the ``sel{q}`` fit above the reference's
  ``1 - p`` quantile (:func:`fedep.core.reference.estimate_share`'s rule).

Usage::

    PYTHONPATH=src nice -n 10 python benchmarks/bench_reference_select.py \\
        --out select.json [--datasets unsw-nb15 nsl-kdd ton-iot] [--seeds 5]
    python benchmarks/bench_reference_select.py --summarize select.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
from _common import write_rows
from sklearn.metrics import roc_auc_score

from fedep.core.reference import ppca_from_gram
from fedep.data import load_dataset

LEVELS = (0.85, 0.9, 0.95, 1.0)
TAILS = (0.05, 0.1, 0.2)
SHARES = (0.0, 0.05, 0.1, 0.2)


def _fit(X, r):
    return ppca_from_gram(X.shape[0], X.sum(0), X.T @ X, r)


def _dist(X, th):
    mean, V, lam, s2 = th
    Z = X - mean
    T = Z @ V
    return (T**2 / lam).sum(1) + ((Z * Z).sum(1) - (T * T).sum(1)) / s2


def _residual(X, th):
    Z = X - th[0]
    T = Z @ th[1]
    return (Z * Z).sum(1) - (T * T).sum(1)


def _quantile(values, q):
    """The ``ceil(q n)``-th smallest value (the library's order statistic)."""
    k = min(max(int(np.ceil(q * values.size)), 1), values.size)
    return np.sort(values)[k - 1]


def _evidence_z(Z, R, r):
    halves = (R[0::2], R[1::2])
    best = -np.inf
    for p in TAILS:
        vals = []
        for fit, held in (halves, halves[::-1]):
            th = _fit(fit, r)
            sh = _dist(held, th)
            cut = _quantile(sh, 1 - p)
            eps = ((sh > cut).sum() + 1) / (sh.size + 1)
            vals.append(((_dist(Z, th) > cut).mean() - eps) / (1 - eps))
        noise = np.sqrt(p / ((1 - p) * min(h.shape[0] for h in halves))) / np.sqrt(2)
        best = max(best, float(np.mean(vals) / noise))
    return best


def run(args) -> list[dict]:
    out, r = [], args.rank
    for name in args.datasets:
        d = load_dataset(name, args.data_dir, feature_set="rich")
        for seed in range(args.seeds):
            for share in SHARES:
                rng = np.random.default_rng(100 + seed)
                normal = rng.permutation(np.flatnonzero(d.y_train == 0))
                attack = rng.permutation(np.flatnonzero(d.y_train == 1))
                n_att = int(round(share / (1 - share) * 5000))
                idx = np.r_[normal[:5000], attack[:n_att]]
                val = np.r_[normal[5000:10000], attack[n_att : n_att + 5000]]
                y = np.r_[np.zeros(5000, bool), np.ones(n_att, bool)]
                yv = np.r_[np.zeros(5000), np.ones(val.size - 5000)]
                mu, sd = d.X_train[idx].mean(0), d.X_train[idx].std(0)
                sd[sd == 0] = 1
                Z, Zv = (d.X_train[idx] - mu) / sd, (d.X_train[val] - mu) / sd

                def auc(th, Zv=Zv, yv=yv):
                    return round(float(roc_auc_score(yv, _residual(Zv, th))), 4)

                row = {"dataset": name, "seed": seed, "share": share, "true": n_att / y.size}
                row["clean"], row["none"] = auc(_fit(Z[~y], r)), auc(_fit(Z, r))
                for n_ref in (50, 100):
                    R = Z[rng.choice(5000, n_ref, replace=False)]
                    ref_th = _fit(R, r)
                    d_ref, d_all = _dist(R, ref_th), _dist(Z, ref_th)
                    row[f"z{n_ref}"] = round(_evidence_z(Z, R, r), 3)
                    for q in LEVELS:
                        keep = d_all <= _quantile(d_ref, q)
                        th = _fit(Z[keep], r)
                        row[f"sel{q}_{n_ref}"] = auc(th)
                        s, sr = _dist(Z, th), _dist(R, th)
                        for p in TAILS:
                            cut = _quantile(sr, 1 - p)
                            eps, e = (sr > cut).mean(), (s > cut).mean()
                            est = min(max((e - eps) / (1 - eps), 0.0), 0.5)
                            row[f"sh{q}_{p}_{n_ref}"] = round(float(est), 4)
                out.append(row)
                print(json.dumps(row), flush=True)
                write_rows(args.out, args, out)
    return out


def summarize(paths) -> str:
    """Markdown: ROC AUC lost against ``clean`` (mean over seeds) per rule, the selection
    gated on the evidence at 2 x noise, and the share estimates' mean errors."""
    rows = [r for p in paths for r in json.load(open(p))["rows"]]
    lines = [
        "| dataset | reference | rule | loss at 0 / 5 / 10 / 20 % | share error (points) "
        "at 0 / 5 / 10 / 20 %, tail 0.05 / 0.2 |",
        "|---|---|---|---|---|",
    ]
    for ds in sorted({r["dataset"] for r in rows}):
        cell = {s: [r for r in rows if r["dataset"] == ds and r["share"] == s] for s in SHARES}

        def loss(f, cell=cell):
            return "/".join(
                f"{np.mean([x['clean'] for x in cell[s]]) - np.mean([f(x) for x in cell[s]]):+.3f}"
                for s in SHARES
            )

        lines.append(f"| {ds} | - | none | {loss(lambda x: x['none'])} | - |")
        for n_ref in (50, 100):
            for q in LEVELS:

                def error(s, p, q=q, n_ref=n_ref, cell=cell):
                    return 100 * np.mean([x[f"sh{q}_{p}_{n_ref}"] - x["true"] for x in cell[s]])

                err = ["/".join(f"{error(s, p):+.1f}" for s in SHARES) for p in (0.05, 0.2)]
                rule = f"select at {q}"
                lines.append(
                    f"| {ds} | {n_ref} | {rule} | {loss(lambda x, k=f'sel{q}_{n_ref}': x[k])} "
                    f"| {err[0]}, {err[1]} |"
                )
            gated = loss(lambda x, n=n_ref: x[f"sel0.9_{n}"] if x[f"z{n}"] > 2 else x["none"])
            shown = "/".join(
                f"{np.mean([x[f'z{n_ref}'] > 2 for x in cell[s]]):.1f}" for s in SHARES
            )
            lines.append(f"| {ds} | {n_ref} | 0.9 if shown ({shown}) | {gated} | - |")
    return "\n".join(lines)


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--summarize":
        print(summarize(sys.argv[2:]))
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=["unsw-nb15", "nsl-kdd", "ton-iot"])
    p.add_argument("--data-dir", default=os.environ.get("FEDEP_DATA_DIR", "/work/shared/data"))
    p.add_argument("--rank", type=int, default=10)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--out", default=None, help="JSON file (rewritten after every row)")
    run(p.parse_args(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

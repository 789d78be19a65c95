"""What analyst feedback could do to a subspace model: variants measured side by side.

The question (issue 26): do 200 labels on the highest-scoring training records (simulated
triage, labelled with their *training* labels) cut the false-positive rate at equal
recall by a third? ``bench_reference.py`` measures the library's feedback step; this
benchmark measures, on the same training sets (its ``_training``), what other uses of
the same labels would give, with pooled PCA (the closed form: each variant is one
eigen-decomposition, so the comparison isolates the use of the labels):

- ``none``: PCA of every training record (``PooledPCA``'s defaults);
- ``exclude``: the confirmed attacks left out (the library's step, without neighbours);
- ``weight<w>``: the confirmed attacks left out and the confirmed false positives
  counted ``w`` times in the covariance (weights are sums: federated as they stand);
- ``countout``: ``exclude``'s fit with the threshold counting the confirmed false
  positives out of the exceedance (the 0.95 quantile with them taken as below any cut);
- ``oracle``: every attack row of the training set left out (a ceiling for any use of
  labels that only decides which training records, and how much, the fit sees);
- ``modes<m>``: a model of another form, not in the library: the confirmed false
  positives split into at most ``m`` groups of at least 5 (divisive PCA splits, then
  Lloyd steps: sums and counts only) and a record's score is the smaller of its
  residual energy and its squared distance to the nearest group's centre, scaled so
  that the group's median record scores at the threshold (alert suppression by
  confirmed benign modes).

Test labels are used for the final measurement only: ROC AUC, FPR and recall at the
0.95 quantile of the training scores, and the FPR at the cut that gives the ``none``
model's recall ("FPR at equal recall").

Usage::

    PYTHONPATH=src nice -n 10 python benchmarks/bench_feedback_variants.py \\
        --out variants.json [--datasets nsl-kdd] [--seeds 3]
    python benchmarks/bench_feedback_variants.py --summarize variants.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
from _common import write_rows
from bench_reference import measure_scores

from fedep.data import load_dataset
from fedep.evaluation.reproduce.contaminated import training_rows

WEIGHTS = (3, 10, 30)
MODES = (3, 8)
MIN_GROUP = 5


def _basis(Z, w, r):
    """Mean and top-``r`` basis (n, r) of the rows of ``Z`` weighted by ``w`` (N,)."""
    mu = (w[:, None] * Z).sum(0) / w.sum()
    C = Z - mu
    _, U = np.linalg.eigh((C * w[:, None]).T @ C)
    return mu, U[:, ::-1][:, :r]


def _residual(Z, mu, V):
    C = Z - mu
    R = C - (C @ V) @ V.T
    return np.einsum("ij,ij->i", R, R)


def _groups(F, m):
    """Divisive PCA splits of the rows of ``F`` into at most ``m`` groups of at least
    :data:`MIN_GROUP`, then Lloyd steps; returns the centres (k, n) and labels (N,)."""
    lab = np.zeros(len(F), dtype=int)
    while lab.max() + 1 < m:
        sizes = np.bincount(lab)
        sse = [((F[lab == c] - F[lab == c].mean(0)) ** 2).sum() for c in range(sizes.size)]
        c = int(np.argmax(np.where(sizes >= 2 * MIN_GROUP, sse, -1.0)))
        if sizes[c] < 2 * MIN_GROUP:
            break
        idx = np.flatnonzero(lab == c)
        G = F[idx] - F[idx].mean(0)
        side = G @ np.linalg.eigh(G.T @ G)[1][:, -1] > 0
        if min(side.sum(), (~side).sum()) < MIN_GROUP:
            break
        lab[idx[side]] = lab.max() + 1
    for _ in range(5):
        centres = np.stack([F[lab == c].mean(0) for c in range(lab.max() + 1)])
        new = ((F[:, None, :] - centres[None]) ** 2).sum(-1).argmin(1)
        if np.bincount(new, minlength=len(centres)).min() < MIN_GROUP:
            break
        lab = new
    return np.stack([F[lab == c].mean(0) for c in range(lab.max() + 1)]), lab


def _measure(s_train, s_test, y_test, recall=None):
    """As ``bench_reference``'s, at the 95 % quantile of the training scores."""
    return measure_scores(s_test, s_test > np.quantile(s_train, 0.95), y_test, recall)


def variants(X, y, Xt, r, k):
    """Per variant, (training scores, test scores) of the standardised records."""
    mean, scale = X.mean(0), X.std(0)
    scale[scale == 0] = 1.0
    Z, Zt = (X - mean) / scale, (Xt - mean) / scale
    ones = np.ones(len(Z))
    mu, V = _basis(Z, ones, r)
    s0 = _residual(Z, mu, V)
    out = {"none": (s0, _residual(Zt, mu, V))}
    top = np.argsort(-s0, kind="stable")[:k]
    fp, att = top[y[top] == 0], top[y[top] == 1]
    w = ones.copy()
    w[att] = 0.0
    mu, V = _basis(Z, w, r)
    s, st = _residual(Z, mu, V), _residual(Zt, mu, V)
    out["exclude"] = (s, st)
    counted = s.copy()
    counted[fp] = -np.inf
    out["countout"] = (counted, st)
    t = np.quantile(s, 0.95)
    if fp.size >= MIN_GROUP:
        for m in MODES:
            centres, lab = _groups(Z[fp] - mu, m)
            a, b = s.copy(), st.copy()
            for c, centre in enumerate(centres):
                d = ((Z[fp][lab == c] - mu - centre) ** 2).sum(1)
                f = t / max(float(np.median(d)), np.finfo(float).tiny)
                a = np.minimum(a, f * ((Z - mu - centre) ** 2).sum(1))
                b = np.minimum(b, f * ((Zt - mu - centre) ** 2).sum(1))
            out[f"modes{m}"] = (a, b)
    for wt in WEIGHTS:
        w2 = w.copy()
        w2[fp] = wt
        mu2, V2 = _basis(Z, w2, r)
        out[f"weight{wt}"] = (_residual(Z, mu2, V2), _residual(Zt, mu2, V2))
    mu, V = _basis(Z, (y == 0).astype(float), r)
    out["oracle"] = (_residual(Z, mu, V), _residual(Zt, mu, V))
    return out, int(fp.size), int(att.size)


def run(args) -> list[dict]:
    rows = []
    for name in args.datasets:
        d = load_dataset(name, args.data_dir, feature_set="rich")
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            for share in args.shares:
                rng = np.random.default_rng(seed)
                idx, true_share = training_rows(d.y_train, share, args.n_normal, rng)
                scores, n_fp, n_att = variants(
                    d.X_train[idx], d.y_train[idx], d.X_test, args.rank, args.labels
                )
                base = _measure(*scores["none"], d.y_test)
                for v, (a, b) in scores.items():
                    if args.variants and v not in args.variants:
                        continue
                    row = {
                        "dataset": name,
                        "seed": seed,
                        "share": share,
                        "true_share": round(true_share, 4),
                        "variant": v,
                        "benign_labels": n_fp,
                        "attack_labels": n_att,
                        **_measure(a, b, d.y_test, None if v == "none" else base["recall"]),
                        "load": os.getloadavg()[0],
                    }
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                write_rows(args.out, args, rows)
    return rows


def summarize(paths) -> str:
    """Markdown: one row per dataset and share, per variant the FPR at the ``none``
    model's recall and the ROC AUC (means over seeds; ``none``: its FPR at its
    threshold)."""
    rows = [r for p in paths for r in json.load(open(p))["rows"]]
    cells: dict = {}
    for r in rows:
        cells.setdefault((r["dataset"], r["share"], r["variant"]), []).append(r)
    names = list(dict.fromkeys(r["variant"] for r in rows))

    def mean(k, f):
        v = [r[f] for r in cells.get(k, []) if f in r]
        return float(np.mean(v)) if v else float("nan")

    out = [
        "| dataset | attacks | seeds | " + " | ".join(names) + " |",
        "|---|---|---|" + "---|" * len(names),
    ]
    for ds, share in sorted({k[:2] for k in cells}):
        vals = [
            f"{mean((ds, share, v), 'fpr' if v == 'none' else 'fpr_at_base_recall'):.4f} "
            f"({mean((ds, share, v), 'roc_auc'):.3f})"
            for v in names
        ]
        n = len(cells.get((ds, share, "none"), []))
        out.append(f"| {ds} | {100 * share:.0f} % | {n} | " + " | ".join(vals) + " |")
    return "\n".join(out)


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--summarize":
        print(summarize(sys.argv[2:]))
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=["nsl-kdd", "unsw-nb15", "ton-iot"])
    p.add_argument("--data-dir", default=os.environ.get("FEDEP_DATA_DIR", "/work/shared/data"))
    p.add_argument("--shares", nargs="+", type=float, default=[0.0, 0.05, 0.1, 0.2])
    p.add_argument("--n-normal", type=int, default=5000, help="normal training rows")
    p.add_argument("--rank", type=int, default=10)
    p.add_argument("--labels", type=int, default=200, help="triaged training records")
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--variants", nargs="+", default=None, help="keep only these rows")
    p.add_argument("--out", default=None, help="JSON file (rewritten after every cell)")
    run(p.parse_args(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

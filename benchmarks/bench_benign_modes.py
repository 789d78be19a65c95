"""Choosing the form of the benign modes (``fedep.core.benign``) on the training split.

Issue 26: confirmed false positives become suppression rules. Which space the modes
live in (the standardised features ``z``, or the residual vector off the subspace
``res``), how many (``--modes``) and how wide (``--radii``: the squared radius in units
of the mode's mean squared distance) were chosen here, on *training* rows only: the fit
rows are ``bench_reference``'s training set (normal rows with injected attacks), the
triage its 200 highest-scoring rows under pooled PCA (labelled with their training
labels, the confirmed attacks left out of the refit), and the validation rows 5000
normal and 2000 attack rows drawn from the *other* training rows. The test split is
never read. Per variant: the validation FPR at the ``none`` model's validation recall
(suppressed scores, ``min(s, t * d2 / radius2)``), the FPR and recall at the model's
own threshold, and ROC AUC, beside ``none``'s.

Usage::

    PYTHONPATH=src nice -n 10 python benchmarks/bench_benign_modes.py nsl-kdd \\
        --seeds 0 --out modes.jsonl
"""

from __future__ import annotations

import argparse
import itertools
import json
import os

import numpy as np
from bench_reference import measure_scores

from fedep.core.benign import learn_modes, mode_sums
from fedep.data import load_dataset
from fedep.evaluation.reproduce.contaminated import training_rows


def _basis(Z, w, r):
    mu = (w[:, None] * Z).sum(0) / w.sum()
    C = Z - mu
    _, U = np.linalg.eigh((C * w[:, None]).T @ C)
    return U[:, ::-1][:, :r]


def _energy(Z, V):
    return ((Z - (Z @ V) @ V.T) ** 2).sum(1)


def cell(d, share, seed, args, out):
    rng = np.random.default_rng(seed)
    idx, _ = training_rows(d.y_train, share, 5000, rng)
    rest = np.setdiff1d(np.arange(d.y_train.size), idx)
    vr = np.random.default_rng(100 + seed)
    vidx = np.concatenate([
        vr.choice(rest[d.y_train[rest] == 0], 5000, replace=False),
        vr.choice(rest[d.y_train[rest] == 1], 2000, replace=False),
    ])  # fmt: skip
    yv = d.y_train[vidx]
    X, y = d.X_train[idx], d.y_train[idx]
    mean, scale = X.mean(0), X.std(0)
    scale[scale == 0] = 1
    Z, Zv = (X - mean) / scale, (d.X_train[vidx] - mean) / scale
    V0 = _basis(Z, np.ones(len(Z)), args.rank)
    s0 = _energy(Z, V0)
    s0v = _energy(Zv, V0)
    none = measure_scores(s0v, s0v > np.quantile(s0, 0.95), yv)
    top = np.argsort(-s0, kind="stable")[: args.labels]
    fp, att = top[y[top] == 0], top[y[top] == 1]
    w = np.ones(len(Z))
    w[att] = 0
    V = _basis(Z, w, args.rank)
    s, sv = _energy(Z, V), _energy(Zv, V)
    t = np.quantile(s, 0.95)
    for space, m, rad in itertools.product(args.spaces, args.modes, args.radii):
        F = Zv if space == "z" else Zv - (Zv @ V) @ V.T
        B = Z[fp] if space == "z" else Z[fp] - (Z[fp] @ V) @ V.T
        modes = learn_modes(lambda C, B=B: mode_sums(B, C), Z.shape[1], max_modes=m, radius=rad)
        if modes is None:
            continue
        C = modes.centres
        d2 = (F**2).sum(1)[:, None] - 2 * F @ C.T + (C**2).sum(1)[None]
        ratio = (np.maximum(d2, 0) / modes.radius2[None]).min(1)
        sc = np.where(ratio <= 1, np.minimum(sv, t * ratio), sv)
        row = {
            "dataset": args.dataset,
            "seed": seed, "share": share, "space": space, "modes": m, "radius": rad,
            "k": len(C), "none_fpr": none["fpr"], "none_recall": none["recall"],
            "none_roc_auc": none["roc_auc"],
            **measure_scores(sc, sc > t, yv, none["recall"]),
            "load": os.getloadavg()[0],
        }  # fmt: skip
        out.write(json.dumps(row) + "\n")
        out.flush()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dataset")
    p.add_argument("--data-dir", default=os.environ.get("FEDEP_DATA_DIR", "/work/shared/data"))
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--shares", nargs="+", type=float, default=[0.0, 0.05, 0.1, 0.2])
    p.add_argument("--spaces", nargs="+", default=["z", "res"])
    p.add_argument("--modes", nargs="+", type=int, default=[3, 8, 16])
    p.add_argument("--radii", nargs="+", type=float, default=[0.25, 0.5, 0.75, 1.0, 2.0])
    p.add_argument("--rank", type=int, default=10)
    p.add_argument("--labels", type=int, default=200)
    p.add_argument("--out", required=True, help="JSON lines, appended after every variant")
    args = p.parse_args(argv)
    d = load_dataset(args.dataset, args.data_dir, feature_set="rich")
    with open(args.out, "a") as out:
        for seed in args.seeds:
            for share in args.shares:
                cell(d, share, seed, args, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Label-free rank rules compared: planted ranks (synthetic) and detection (real data).

Run by hand (not a test)::

    python benchmarks/bench_rank.py --data-dir ../shared/data --out benchmarks/results/rank.json

Rules, all from the merged spectrum (eigenvalues of the pooled covariance of the
standardised records, which the server has exactly from the clients' Gram matrices):
``gavish-donoho`` (the library's ``n_components="auto"``, :mod:`fedep.core.rank`),
explained variance 80/90/95 %, Kaiser (eigenvalues above their mean), broken stick, and
Minka's PPCA evidence (scikit-learn's ``n_components="mle"``); the last four on the
non-degenerate eigenvalues, as ``gavish-donoho``.

Synthetic: :func:`fedep.data.make_federated_data` over ranks 2/5/10, 30/60 features,
noise 0.2/0.5/1, gross corruption 0/1/5 % of entries and 3 seeds; reports each rule's
error (chosen - planted) per setting. Real data: each dataset's training file through the
generic path (the federated feature pipeline, ``features="auto"``), 20 gateways sorted
by ``dst_bytes``, normal rows of a random 80 % (the other 20 % is the validation split
of ``bench_generic.py``); the pooled-PCA ROC AUC (validation and test) at every rank
from one eigendecomposition, the rank each rule picks, and the rank the validation
labels pick from {5, 10, 20, 30} (``bench_generic.py``'s protocol).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from _common import write_json
from sklearn.metrics import roc_auc_score

from fedep.core.rank import DEGENERATE_RTOL, choose_rank
from fedep.data import load_dataset, make_federated_data, partition_sorted
from fedep.features import FeaturePipeline

LABELS = {"attack_type", "difficulty_level", "attack_cat", "label", "type", "id"}


def _live(lam):
    return lam[lam > DEGENERATE_RTOL * lam[0]]


def _explained(t):
    def rule(lam, n):
        c = np.cumsum(lam) / lam.sum()
        return int(np.searchsorted(c, t) + 1)

    return rule


def _kaiser(lam, n):
    return int((lam > lam.mean()).sum())


def _broken_stick(lam, n):
    p = lam.size
    expected = np.cumsum(1.0 / np.arange(p, 0, -1))[::-1] / p
    share = lam / lam.sum()
    k = 0
    while k < p and share[k] > expected[k]:
        k += 1
    return k


def _minka(lam, n):
    from sklearn.decomposition._pca import _infer_dimension

    return int(_infer_dimension(lam, n))


OTHER_RULES = {
    "explained-80": _explained(0.8),
    "explained-90": _explained(0.9),
    "explained-95": _explained(0.95),
    "kaiser": _kaiser,
    "broken-stick": _broken_stick,
    "minka-ppca": _minka,
}


def ranks_by_rule(gram: np.ndarray, counts) -> dict[str, int]:
    """Every rule's rank for a merged Gram matrix (bounded to [1, live - 1])."""
    choice = choose_rank(gram, counts)
    lam = _live(choice.eigenvalues)
    n = int(sum(counts))
    out = {"gavish-donoho": choice.rank}
    for name, rule in OTHER_RULES.items():
        out[name] = int(min(max(rule(lam, n), 1), max(lam.size - 1, 1)))
    return out


def synthetic(seeds=3) -> dict:
    rows = []
    for corruption in (0.0, 0.01, 0.05):
        for noise in (0.2, 0.5, 1.0):
            errors: dict[str, list[int]] = {}
            for rank in (2, 5, 10):
                for n_features in (30, 60):
                    for seed in range(seeds):
                        D = make_federated_data(
                            n_clients=10,
                            n_features=n_features,
                            n_components=rank,
                            n_samples=(50, 300),
                            noise=noise,
                            corruption_rate=corruption,
                            random_state=seed,
                        )
                        X = D.X_train
                        Z = (X - X.mean(axis=0)) / X.std(axis=0)
                        counts = np.bincount(D.groups_train)
                        for k, r in ranks_by_rule(Z.T @ Z, counts).items():
                            errors.setdefault(k, []).append(r - rank)
            rows.append(
                {
                    "corruption": corruption,
                    "noise": noise,
                    "errors": {
                        k: {
                            "min": int(min(v)),
                            "max": int(max(v)),
                            "within_1": float(np.mean(np.abs(v) <= 1)),
                        }
                        for k, v in errors.items()
                    },
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    return {"settings": rows}


def real(name: str, data_dir, seed: int, grid=(5, 10, 20, 30)) -> dict:
    ds = load_dataset(name, data_dir, feature_set="rich")
    raw = ds.raw_train.drop(columns=[c for c in ds.raw_train.columns if c in LABELS])
    test = ds.raw_test.drop(columns=[c for c in ds.raw_test.columns if c in LABELS])
    idx = np.random.default_rng(seed).permutation(len(raw))
    n_val = len(raw) // 5
    val, tr = idx[:n_val], idx[n_val:]
    tr = tr[ds.y_train[tr] == 0]
    groups = partition_sorted(ds.raw_train["dst_bytes"].to_numpy()[tr], 20)
    X = raw.iloc[tr].reset_index(drop=True)
    pipe = FeaturePipeline().fit(X, groups=groups)
    Z = pipe.transform(X)  # the pipeline centres and scales (as the estimators use it)
    G = Z.T @ Z
    _, vecs = np.linalg.eigh(G)
    vecs = vecs[:, ::-1]

    def aucs(frame, y):
        T2 = (pipe.transform(frame) @ vecs) ** 2
        res = np.cumsum(T2[:, ::-1], axis=1)[:, ::-1]  # res[:, r]: energy beyond rank r
        return [float(roc_auc_score(y, res[:, r])) for r in range(1, T2.shape[1])]

    va, te = aucs(raw.iloc[val], ds.y_train[val]), aucs(test, ds.y_test)
    by_rule = ranks_by_rule(G, np.bincount(groups))
    rv = max(grid, key=lambda r: va[r - 1])
    out = {
        "n_records": int(Z.shape[0]),
        "n_features": int(Z.shape[1]),
        "reason": choose_rank(G, np.bincount(groups)).reason,
        "validation_labels": {"rank": rv, "val_roc_auc": va[rv - 1], "test_roc_auc": te[rv - 1]},
        "rules": {
            k: {"rank": r, "val_roc_auc": va[r - 1], "test_roc_auc": te[r - 1]}
            for k, r in by_rule.items()
        },
        "test_roc_auc_by_rank": te,
    }
    print(name, json.dumps({k: v for k, v in out.items() if k != "test_roc_auc_by_rank"}))
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=None)
    p.add_argument("--out", default="benchmarks/results/rank.json")
    p.add_argument("--datasets", nargs="*", default=["nsl-kdd", "unsw-nb15", "ton-iot"])
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    res = {"synthetic": synthetic()}
    res["real"] = {name: real(name, a.data_dir, a.seed) for name in a.datasets}
    res["seconds"] = time.perf_counter() - t0
    write_json(a.out, res)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()

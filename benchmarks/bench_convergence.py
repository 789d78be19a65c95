"""Rounds and seconds to ``tol`` and to quality of the default FedEP and FedPG fits.

Run by hand (not a test), once per code version, into one JSON file::

    PYTHONPATH=/path/to/old/src python benchmarks/bench_convergence.py --label before
    PYTHONPATH=src python benchmarks/bench_convergence.py --label after

Each run adds ``runs[label]`` to ``--out`` (default
``benchmarks/results/convergence.json``), keeping the other labels, so "before" and
"after" sit side by side; run both on the same machine, one after the other.

For each official dataset (NSL-KDD, UNSW-NB15, TON-IoT) it fits the estimators with
their DEFAULT parameters (whatever the imported code defines; only ``random_state``
is set) on the sorted 20-gateway split of the normal training rows (sorted by
``dst_bytes`` and cut into 20 chunks, :func:`fedep.data.partition_sorted`), on the
``rich`` feature matrix and, with ``--raw``, on the raw DataFrame through
``features="auto"``. Per fit it records:

- ``stop_reason``, ``n_rounds``, ``warned`` (a ``ConvergenceWarning`` was emitted),
  ``fit_s`` (wall) and ``fit_cpu_s`` (process time, less sensitive to a loaded
  machine);
- ``rounds_to_tol`` / ``seconds_to_tol``: rounds run and the sum of their round times
  when the fit stopped on ``tol`` (None when it hit the cap);
- ``rounds_to_quality`` / ``seconds_to_quality``: first round from which the held-out
  ROC AUC stays within 0.005 of its value at the last round, and the round time
  spent until then (the test split is used only to monitor convergence; ROC AUC is
  threshold-free, nothing is tuned on it);
- ``auc_final``, ``auc_round1``, and per round ``auc`` and the stopping residuals.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
import warnings
from pathlib import Path

import numpy as np
from _common import write_json
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import roc_auc_score

import fedep
from fedep import FedEP, FedPG
from fedep.core.stiefel import polar
from fedep.data import load_dataset, partition_sorted
from fedep.features import FeaturePipeline

DATASETS = ("nsl-kdd", "unsw-nb15", "ton-iot")
RESIDUALS = (
    "consensus_residual_rel",
    "data_residual_rel",
    "dual_residual_rel",
    "v_change",
    "subspace_change",
    "objective",
    "augmented_lagrangian",
)


def _time_to_quality(times, aucs, eps=0.005):
    """First round (1-based) from which the AUC stays within ``eps`` of the last one."""
    final = aucs[-1]
    for k in range(len(aucs)):
        if all(abs(a - final) <= eps for a in aucs[k:]):
            return k + 1, float(np.sum(times[: k + 1]))
    return len(aucs), float(np.sum(times))


def fit_one(Est, X, groups, Z_test, y_test, standardised_input: bool, seed: int, **params) -> dict:
    """One default fit (``params`` override defaults), monitored by its callback."""
    aucs, recs = [], []
    det = Est(random_state=seed, **params)

    def on_round(k, V, rec):
        Z = Z_test if not standardised_input else (Z_test - det.mean_) / det.scale_
        B = polar(V)
        R = Z - (Z @ B) @ B.T
        aucs.append(float(roc_auc_score(y_test, np.einsum("ij,ij->i", R, R))))
        recs.append(
            {k2: float(rec[k2]) for k2 in RESIDUALS if k2 in rec} | {"time_s": rec["time_s"]}
        )

    det.set_params(callback=on_round)
    t0, c0 = time.perf_counter(), time.process_time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        det.fit(X, groups=groups)
    fit_s, fit_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    times = [r["time_s"] for r in recs]
    q_rounds, q_s = _time_to_quality(times, aucs)
    # Met tol: "lagrangian_stationary" / "objective_stationary" ("converged" before
    # the stop reasons were named; this also runs on older sources).
    stopped = det.stop_reason_ not in ("max_rounds", "too_few_clients")
    params = det.get_params()
    return {
        "defaults": {k: params[k] for k in ("n_rounds", "tol", "init") if k in params},
        "stop_reason": det.stop_reason_,
        "n_rounds": int(det.n_iter_),
        "warned": any(issubclass(w.category, ConvergenceWarning) for w in caught),
        "fit_s": fit_s,
        "fit_cpu_s": fit_cpu_s,
        "rounds_to_tol": int(det.n_iter_) if stopped else None,
        "seconds_to_tol": float(np.sum(times)) if stopped else None,
        "rounds_to_quality": q_rounds,
        "seconds_to_quality": q_s,
        "auc_final": aucs[-1],
        "auc_round1": aucs[0],
        "auc": aucs,
        "history": recs,
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--label", required=True, help="e.g. before / after")
    p.add_argument("--out", default="benchmarks/results/convergence.json")
    p.add_argument("--datasets", nargs="+", default=list(DATASETS))
    p.add_argument("--methods", nargs="+", default=["fedep", "fedpg"])
    p.add_argument("--raw", action="store_true", help="also the raw DataFrame (features='auto')")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--set", nargs="*", default=[], metavar="NAME=JSON",
        help="override a default (exploration only), e.g. --set init='\"oneshot\"'",
    )  # fmt: skip
    a = p.parse_args(argv)
    overrides = {k: json.loads(v) for k, v in (s.split("=", 1) for s in a.set)}
    ests = {"fedep": FedEP, "fedpg": FedPG}
    out = {
        "machine": platform.platform(),
        "fedep_src": str(Path(fedep.__file__).parent),
        "clients": 20,
        "partition": "normal training rows sorted by dst_bytes, 20 chunks",
        "overrides": overrides,
        "results": {},
    }
    for name in a.datasets:
        ds = load_dataset(name, a.data_dir, feature_set="rich")
        normal = np.flatnonzero(ds.y_train == 0)
        # The normal rows sorted by dst_bytes, cut into 20 gateways (partitioning all
        # rows first can leave a gateway with no normal row: UNSW-NB15).
        groups = partition_sorted(ds.raw_train["dst_bytes"].to_numpy()[normal], 20)
        inputs = {"rich": (ds.X_train[normal], ds.X_test, True)}
        if a.raw:
            raw = ds.raw_train.iloc[normal].reset_index(drop=True)
            # The same pipeline the estimator fits (deterministic), to score the test
            # rows in the callback before the fitted one exists.
            pipe = FeaturePipeline().fit(raw, groups=groups)
            inputs["raw-auto"] = (raw, pipe.transform(ds.raw_test), False)
        for feats, (X, Zt, std_in) in inputs.items():
            for m in a.methods:
                res = fit_one(ests[m], X, groups, Zt, ds.y_test, std_in, a.seed, **overrides)
                out["results"][f"{name}/{feats}/{m}"] = res
                brief = {k: v for k, v in res.items() if k not in ("auc", "history")}
                print(name, feats, m, json.dumps(brief), flush=True)
    path = Path(a.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = json.loads(path.read_text()) if path.exists() else {"runs": {}}
    run = doc["runs"].setdefault(a.label, out)
    run["results"].update(out["results"])  # a run of some datasets adds to the others
    write_json(path, doc, indent=1)
    print("wrote", path)


if __name__ == "__main__":
    main()

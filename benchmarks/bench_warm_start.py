"""Warm start vs cold start on next-period data: rounds, seconds and ROC AUC.

Run by hand (not a test)::

    PYTHONPATH=src python benchmarks/bench_warm_start.py --out benchmarks/results/warm_start.json

For each official dataset (NSL-KDD, UNSW-NB15, TON-IoT; ``rich`` features) the normal
training rows are cut into 20 gateways by ``dst_bytes`` order
(:func:`fedep.data.partition_sorted`, as ``bench_convergence.py``) and each gateway's
rows into two periods by time: the ``ts`` column where the dataset has one (TON-IoT),
else the files' row order (NSL-KDD, UNSW-NB15). The last gateway takes part in period 2
only (a gateway new to the federation). With the estimator's defaults (``random_state``
set):

- ``period1``: a cold fit on period 1;
- ``cold``: a cold fit on period 2 (one-shot start, re-merges);
- ``warm``: the period-1 model refitted on period 2 with ``warm_start=True`` (every
  period-1 gateway from its own state, the new one from the consensus);

- ``warm_no_remerge`` (FedEP): the same with ``remerge=False``, the carried state alone
  (with re-merges, the default, the drift test at round 2 restarts the ADMM at the merge
  of the new cleaned records when the carried state is not stationary on them);
- ``warm_same``: the period-1 model refitted on period 1 itself (the data did not move);

each to the same stopping test (``tol``; a warm start's window holds the model's last
rounds, see ``docs/lineage.md``), recording rounds, whether the drift test merged
(``remerged``: the rounds whose merge was taken), the sum of the rounds'
times (``rounds_s``; the setup phases excluded), the whole fit (``fit_s``, wall;
``fit_cpu_s``, this process's CPU time, less sensitive to a loaded machine), the
stop reason and the test split's ROC AUC of the global scores (the labels are used for
this figure only). ``warm_over_cold_rounds`` is their ratio; ``subspace_distance`` the
projector distance ``||P_warm - P_cold||_F / sqrt(2 r)`` between the two bases (None
when the cold fit chose another rank). The
machine's load average is recorded beside the timings.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import time
import warnings
from pathlib import Path

import numpy as np
from _common import write_json
from sklearn.metrics import roc_auc_score

from fedep import FedEP, FedPG
from fedep.core.stiefel import projector_distance
from fedep.data import load_dataset, partition_sorted

DATASETS = ("nsl-kdd", "unsw-nb15", "ton-iot")
N_GATEWAYS = 20


def periods(ds) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """The normal training rows, their gateway and their period (1 or 2), and how
    the periods were cut."""
    normal = np.flatnonzero(ds.y_train == 0)
    groups = partition_sorted(ds.raw_train["dst_bytes"].to_numpy()[normal], N_GATEWAYS)
    if "ts" in ds.raw_train.columns:
        when, how = ds.raw_train["ts"].to_numpy(dtype=float)[normal], "ts"
    else:
        when, how = np.arange(normal.size, dtype=float), "row order"
    period = np.ones(normal.size, dtype=int)
    for g in np.unique(groups):
        rows = np.flatnonzero(groups == g)
        later = rows[np.argsort(when[rows], kind="stable")][rows.size // 2 :]
        period[later] = 2
    period[groups == N_GATEWAYS - 1] = 2  # a gateway new in period 2
    return normal, groups, period, how


def fit_record(det, X, groups, ds) -> dict:
    c0 = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        det.fit(X, groups=groups)
    cpu = time.process_time() - c0
    return {
        "fit_cpu_s": cpu,
        "n_rounds": int(det.n_iter_),
        "stop_reason": det.stop_reason_,
        "rounds_s": float(sum(r["time_s"] for r in det.history_)),
        "fit_s": float(det.fit_time_),
        "rank": int(det.n_components_),
        "remerged": [int(r["round"]) for r in det.history_ if r.get("remerged")],
        "roc_auc": float(roc_auc_score(ds.y_test, det.decision_function(ds.X_test))),
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="benchmarks/results/warm_start.json")
    p.add_argument("--datasets", nargs="+", default=list(DATASETS))
    p.add_argument("--methods", nargs="+", default=["fedep"], choices=["fedep", "fedpg"])
    p.add_argument("--data-dir", default=None)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    ests = {"fedep": FedEP, "fedpg": FedPG}
    out = {"machine": platform.platform(), "gateways": N_GATEWAYS, "results": {}}
    for name in a.datasets:
        ds = load_dataset(name, a.data_dir, feature_set="rich")
        normal, groups, period, how = periods(ds)
        X = ds.X_train[normal]
        one, two = period == 1, period == 2
        for m in a.methods:
            load0 = os.getloadavg()
            first = ests[m](random_state=a.seed)
            rec = {"periods_by": how, "rows": [int(one.sum()), int(two.sum())]}
            rec["period1"] = fit_record(first, X[one], groups[one], ds)
            cold = ests[m](random_state=a.seed)
            rec["cold"] = fit_record(cold, X[two], groups[two], ds)
            warm = copy.deepcopy(first).set_params(warm_start=True)
            rec["warm"] = fit_record(warm, X[two], groups[two], ds)
            if m == "fedep":  # the carried state alone, without re-merges' drift test
                alone = copy.deepcopy(first).set_params(warm_start=True, remerge=False)
                rec["warm_no_remerge"] = fit_record(alone, X[two], groups[two], ds)
            same = copy.deepcopy(first).set_params(warm_start=True)
            rec["warm_same"] = fit_record(same, X[one], groups[one], ds)
            rec["warm_over_cold_rounds"] = rec["warm"]["n_rounds"] / rec["cold"]["n_rounds"]
            rec["warm_over_cold_s"] = rec["warm"]["fit_s"] / rec["cold"]["fit_s"]
            rec["warm_over_cold_cpu"] = rec["warm"]["fit_cpu_s"] / rec["cold"]["fit_cpu_s"]
            r = warm.components_.shape[0]
            same = cold.components_.shape[0] == r  # the cold fit chooses its own rank
            dist = projector_distance(warm.components_.T, cold.components_.T) if same else None
            rec["subspace_distance"] = None if dist is None else float(dist / np.sqrt(r))
            rec["loadavg"] = [load0, os.getloadavg()]
            out["results"][f"{name}/{m}"] = rec
            print(name, m, json.dumps(rec), flush=True)
    path = Path(a.out)
    write_json(path, out, indent=1)
    print("wrote", path)


if __name__ == "__main__":
    main()

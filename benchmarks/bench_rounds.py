"""Per-round wall time, memory and time-to-quality of FedEP and FedPG.

Run by hand (not a test)::

    python benchmarks/bench_rounds.py --out benchmarks/results/rounds.json

For d clients (sorted non-IID split of the NSL-KDD training set, 125,973 x 34, and of
synthetic data of the same size) it measures, in one process and one run:

- ``floor_s``: forming every client's Gram matrix ``X_i^T X_i`` once (a Python loop
  over clients, the cheapest thing any Gram-based federated PCA must do per pass),
  median of 15 repeats (``floor_min_s``: the fastest);
- ``fedep_round_s`` / ``fedpg_round_s``: median wall time of a round (all clients,
  server aggregation included), after the set-up round (``*_round_min_s``: the
  fastest); ``*_round_over_floor`` is median over median, ``*_over_floor_min`` best
  over best;
- ``fedep_peak_ratio``: peak traced memory of FedEP's fit state (set-up and three
  rounds, in a separate untimed run) over the bytes of the training matrix
  (tracemalloc sees NumPy's allocations);
- time to quality: rounds and seconds until the held-out ROC AUC (KDDTest+, used only
  to monitor convergence here) is within 0.005 of its value at the last round.

``nsl_kdd`` trains on every training row (attacks included); ``nsl_kdd_clean`` on the
normal rows only (67,343 x 34), the intended use of a detector of normal traffic;
``synthetic`` is a planted rank-r federation of the full size.

``--scaling`` measures instead the round time against the floor at 20-5,000 gateways
(default ``--clients 20 500 5000``) on the NSL-KDD training set and, at fixed gateway
counts, on every 2nd and 4th of its rows; on one thread (BLAS limited to one, the
cohorts' own rule); wall and CPU seconds (``time.process_time``, less sensitive to a
busy machine) of the floor and of every round, the CPU seconds of the parts of a
round (FedEP's W-step, data step, the Gram matrices within it and the Gram terms; each
method's client side; ``*_floors``: the same in floors), and a least-squares fit of the
round's CPU time as ``a * gateways + b * rows`` per method (the scaling in gateways and
rows). The load average is recorded before and after every point.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import time
import tracemalloc

import numpy as np
from _common import write_json
from sklearn.metrics import roc_auc_score
from threadpoolctl import threadpool_limits

import fedep.core.fedep as fedep_module
from fedep import FedEP, FedPG
from fedep.core import _kernels
from fedep.core.cohort import make_cohort
from fedep.core.scoring import residual_energy
from fedep.core.stiefel import polar, random_stiefel
from fedep.data import load_dataset, partition_sorted
from fedep.federation.rounds import run_rounds


def _blocks(X, groups, d):
    return [X[groups == i] for i in range(d)]


def _floor(blocks, repeats=15, threads=1):
    """Median and minimum time of one pass of every client's Gram matrix.

    Same BLAS thread policy as the cohorts (one thread), so the ratio compares like
    with like; ``threads=0`` lets BLAS pick.
    """
    times = []
    with threadpool_limits(limits=threads or None, user_api="blas"):
        for _ in range(repeats):
            t0 = time.perf_counter()
            for b in blocks:
                b.T @ b
            times.append(time.perf_counter() - t0)
    return float(np.median(times)), float(np.min(times))


def _cohort(est, blocks, V0, kernel):
    """The estimator's own cohort (its defaults), with the kernel of this benchmark."""
    spec = est.cohort_spec()
    spec["settings"]["kernel"] = kernel
    return make_cohort(spec, blocks, V0)


def _rounds(cohort, method, V0, n_rounds, X_eval=None, y_eval=None):
    """The one round loop; the held-out AUC is taken in its hook (outside the timing)."""
    aucs = []

    def on_round(rnd, V, record):
        if X_eval is not None:
            aucs.append(roc_auc_score(y_eval, residual_energy(X_eval, polar(V))))

    res = run_rounds(cohort, method, V0, n_rounds=n_rounds, tol=0.0, on_round=on_round)
    return [rec["time_s"] for rec in res.history], aucs


def _time_to_quality(times, aucs, eps=0.005):
    final = aucs[-1]
    for k in range(len(aucs)):
        if all(abs(b - final) <= eps for b in aucs[k:]):
            return k + 1, float(np.sum(times[: k + 1]))
    return len(aucs), float(np.sum(times))


def bench(X, groups_all, d, r, n_rounds, X_eval, y_eval, seed=0, kernel="auto"):
    groups = groups_all[d]
    blocks = _blocks(X, groups, d)
    V0 = random_stiefel(X.shape[1], r, np.random.default_rng(seed))
    floor, floor_min = _floor(blocks)
    out = {
        "n_clients": d,
        "floor_s": floor,
        "floor_min_s": floor_min,
        "floor_blas_default_s": _floor(blocks, threads=0)[0],
    }
    # The estimators' defaults (what users run), not settings typed here.
    makers = {
        "fedep": lambda: _cohort(FedEP(n_components=r), blocks, V0, kernel),
        "fedpg": lambda: _cohort(FedPG(n_components=r), blocks, V0, kernel),
    }
    for method, make in makers.items():
        t0 = time.perf_counter()
        cohort = make()
        out[f"{method}_setup_s"] = time.perf_counter() - t0
        times, aucs = _rounds(cohort, method, V0, n_rounds, X_eval, y_eval)
        del cohort
        # Memory in a run of its own: tracemalloc slows every allocation, so the
        # timed rounds above run untraced.
        tracemalloc.start()
        cohort = make()
        _rounds(cohort, method, V0, 3)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        del cohort
        out[f"{method}_peak_ratio"] = peak / X.nbytes
        out[f"{method}_round_s"] = float(np.median(times[1:]))
        out[f"{method}_round_min_s"] = float(np.min(times[1:]))
        # Median over median (the headline ratio) and best over best.
        out[f"{method}_round_over_floor"] = out[f"{method}_round_s"] / out["floor_s"]
        out[f"{method}_round_over_floor_min"] = out[f"{method}_round_min_s"] / floor_min
        if X_eval is not None:
            out[f"{method}_auc_final"] = aucs[-1]
            q = _time_to_quality(times, aucs)
            out[f"{method}_rounds_to_quality"], out[f"{method}_seconds_to_quality"] = q
    return out


def _cpu_floor(blocks, repeats=15):
    """Wall and CPU seconds (medians) of every client's Gram matrix once, one thread."""
    wall, cpu = [], []
    with threadpool_limits(limits=1, user_api="blas"):
        for _ in range(repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            for b in blocks:
                b.T @ b
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    return float(np.median(wall)), float(np.median(cpu))


def _cpu_group_grams(groups, repeats=7):
    """Median CPU seconds of FedEP's Gram matrices of every padded group, one thread."""
    cpu = []
    for _ in range(repeats):
        c0 = time.process_time()
        for g in groups:
            np.matmul(np.swapaxes(g.U, 1, 2), g.U)
        cpu.append(time.process_time() - c0)
    return float(np.median(cpu))


@contextlib.contextmanager
def _cpu_parts(cohort, method):
    """CPU seconds of the parts of every round, per part: ``{part: [seconds, ...]}``.

    FedEP: ``wstep`` (the ManPG W-step of every gateway), ``data`` (the fused S-, U- and
    dual step and the Gram matrices it forms again), ``gram_terms`` and ``client`` (the
    whole client side); FedPG: ``client``. The server step and the round loop are the
    rest of a round. Wrappers on this cohort (and on the W-step's name in
    :mod:`fedep.core.fedep`, restored on exit); a call costs under a microsecond.
    """
    parts: dict[str, list[float]] = {}

    def timed(fn, name):
        def call(*args, **kwargs):
            c0 = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                parts.setdefault(name, []).append(time.process_time() - c0)

        return call

    wstep = fedep_module.manpg_w_step
    cohort.local_round = timed(cohort.local_round, "client")
    if method == "fedep":
        fedep_module.manpg_w_step = timed(wstep, "wstep")
        cohort._data_step = timed(cohort._data_step, "data")
        cohort._gram_terms = timed(cohort._gram_terms, "gram_terms")
    try:
        yield parts
    finally:
        fedep_module.manpg_w_step = wstep


def _timed_rounds(cohort, method, V0, n_rounds):
    """Wall and CPU seconds of each round of the one round loop (the set-up round
    dropped), and the median CPU seconds of each part of a round (:func:`_cpu_parts`)."""
    cpu = [time.process_time()]

    def on_round(rnd, V, record):
        cpu.append(time.process_time())

    with _cpu_parts(cohort, method) as parts:
        res = run_rounds(cohort, method, V0, n_rounds=n_rounds, tol=0.0, on_round=on_round)
    wall = [rec["time_s"] for rec in res.history]
    medians = {name: float(np.median(v[1:])) for name, v in parts.items()}
    return wall[1:], list(np.diff(cpu))[1:], medians


def scaling_point(X, key, d, step, r, n_rounds, kernel="auto"):
    """Floor, FedEP and FedPG rounds for ``d`` gateways of the sorted split of every
    ``step``-th record: medians of wall and CPU seconds and their ratios to the floor."""
    sub = np.arange(0, X.shape[0], step)
    groups = partition_sorted(key[sub], d)
    order = np.argsort(groups, kind="stable")
    Xs, gs = X[sub][order], groups[order]
    cuts = np.searchsorted(gs, np.arange(1, d))
    blocks = np.split(Xs, cuts)
    V0 = random_stiefel(X.shape[1], r, np.random.default_rng(0))
    out = {"gateways": d, "rows": int(Xs.shape[0]), "load_before": os.getloadavg()[0]}
    floors = [_cpu_floor(blocks)]
    for method, est in (("fedep", FedEP(n_components=r)), ("fedpg", FedPG(n_components=r))):
        cohort = _cohort(est, blocks, V0, kernel)
        wall, cpu, parts = _timed_rounds(cohort, method, V0, n_rounds)
        if method == "fedep":
            # The part of the data step that forms the Gram matrices U_i^T U_i again
            # (the same batched products over the padded groups).
            parts["data_gram"] = _cpu_group_grams(cohort.groups)
        del cohort
        floors.append(_cpu_floor(blocks))
        out[f"{method}_round_s"] = float(np.median(wall))
        out[f"{method}_round_cpu_s"] = float(np.median(cpu))
        for name, seconds in parts.items():
            out[f"{method}_{name}_cpu_s"] = seconds
    out["floor_s"] = float(np.median([f[0] for f in floors]))
    out["floor_cpu_s"] = float(np.median([f[1] for f in floors]))
    for method in ("fedep", "fedpg"):
        out[f"{method}_over_floor"] = out[f"{method}_round_s"] / out["floor_s"]
        out[f"{method}_cpu_over_floor"] = out[f"{method}_round_cpu_s"] / out["floor_cpu_s"]
    for method in ("fedep", "fedpg"):
        for key in [k for k in out if k.startswith(f"{method}_") and k.endswith("_cpu_s")]:
            if key != f"{method}_round_cpu_s":
                out[key.replace("_cpu_s", "_floors")] = out[key] / out["floor_cpu_s"]
    out["load_after"] = os.getloadavg()[0]
    return out


def fit_scaling(points, key):
    """Least-squares ``seconds = a * gateways + b * rows`` over ``points`` (field
    ``key``): microseconds per gateway and per row."""
    A = np.array([[p["gateways"], p["rows"]] for p in points], dtype=float)
    y = np.array([p[key] for p in points])
    (a, b), *_ = np.linalg.lstsq(A, y, rcond=None)
    return {"us_per_gateway": 1e6 * float(a), "us_per_row": 1e6 * float(b)}


def scaling(a):
    """The ``--scaling`` run: every point of ``--clients`` on all rows, and on every 2nd
    and 4th row at ``--row-steps-at`` gateways."""
    ds = load_dataset("nsl-kdd", a.data_dir)
    mean, std = ds.X_train.mean(0), ds.X_train.std(0)
    std[std == 0] = 1.0
    X = (ds.X_train - mean) / std
    key = ds.raw_train["dst_bytes"].to_numpy()
    plan = [(d, 1) for d in a.clients] + [(d, s) for d in a.row_steps_at for s in (2, 4)]
    points = []
    for d, step in plan:
        p = scaling_point(X, key, d, step, a.rank, a.rounds, a.kernel)
        points.append(p)
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in p.items()}))
    fits = {
        name: fit_scaling(points, f"{name}_cpu_s" if name == "floor" else f"{name}_round_cpu_s")
        for name in ("floor", "fedep", "fedpg")
    }
    return {
        "machine": platform.platform(),
        "numpy": np.__version__,
        "numba": getattr(_kernels.numba, "__version__", None),
        "kernel": a.kernel,
        "rank": a.rank,
        "rounds": a.rounds,
        "blas_threads": 1,
        "points": points,
        "cpu_seconds_fit": fits,
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--out",
        default=None,
        help="default: benchmarks/results/rounds.json, or rounds_scaling.json with --scaling",
    )
    p.add_argument(
        "--clients",
        type=int,
        nargs="+",
        default=None,
        help="gateway counts (default 20 100 200 500; with --scaling 20 500 5000)",
    )
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--rank", type=int, default=5)
    p.add_argument("--data-dir", default=None)
    p.add_argument(
        "--kernel",
        choices=["auto", "numba", "numpy"],
        default="numba",
        help="compiled kernels (default; 'auto' runs NumPy while numba's cache is cold) "
        "or the batched NumPy reference",
    )
    p.add_argument(
        "--scaling",
        action="store_true",
        help="round time against the floor per gateway count and row count only",
    )
    p.add_argument("--row-steps-at", type=int, nargs="*", default=[500, 5000])
    a = p.parse_args(argv)
    if a.scaling:
        a.clients, a.rounds = a.clients or [20, 500, 5000], min(a.rounds, 12)
        with threadpool_limits(limits=1, user_api="blas"):
            results = scaling(a)
        out = write_json(a.out or "benchmarks/results/rounds_scaling.json", results)
        print(json.dumps(results["cpu_seconds_fit"]), f"wrote {out}")
        return
    a.out = a.out or "benchmarks/results/rounds.json"
    a.clients = a.clients or [20, 100, 200, 500]
    ds = load_dataset("nsl-kdd", a.data_dir)
    mean, std = ds.X_train.mean(0), ds.X_train.std(0)
    std[std == 0] = 1.0
    X = (ds.X_train - mean) / std
    Xt = (ds.X_test - mean) / std
    key = ds.raw_train["dst_bytes"].to_numpy()
    groups = {d: partition_sorted(key, d) for d in a.clients}
    # Rows of a client must be contiguous for the floor to be a plain slice.
    results = {
        "machine": platform.platform(),
        "numpy": np.__version__,
        "numba": getattr(_kernels.numba, "__version__", None),
        "kernel": a.kernel if a.kernel != "auto" else ("numba" if _kernels.HAVE_NUMBA else "numpy"),
        "rank": a.rank,
        "rounds": a.rounds,
        "nsl_kdd": [],
        "nsl_kdd_clean": [],
        "synthetic": [],
    }
    for d in a.clients:
        order = np.argsort(groups[d], kind="stable")
        res = bench(
            X[order], {d: groups[d][order]}, d, a.rank, a.rounds, Xt, ds.y_test, kernel=a.kernel
        )
        results["nsl_kdd"].append(res)
        print("nsl-kdd", json.dumps(res))
    # The intended use: train on normal traffic only (the clean protocol), same split
    # rule. Its time to quality says how fast a useful detector is reached.
    normal = ds.y_train == 0
    mean_n, std_n = ds.X_train[normal].mean(0), ds.X_train[normal].std(0)
    std_n[std_n == 0] = 1.0
    Xn, key_n = (ds.X_train[normal] - mean_n) / std_n, key[normal]
    Xtn = (ds.X_test - mean_n) / std_n
    for d in a.clients:
        gn = partition_sorted(key_n, d)
        order = np.argsort(gn, kind="stable")
        res = bench(Xn[order], {d: gn[order]}, d, a.rank, a.rounds, Xtn, ds.y_test, kernel=a.kernel)
        results["nsl_kdd_clean"].append(res)
        print("nsl-kdd clean", json.dumps(res))
    rng = np.random.default_rng(0)
    n, r = X.shape[1], a.rank
    B = np.linalg.qr(rng.standard_normal((n, r)))[0]
    Xs = rng.standard_normal((X.shape[0], r)) * np.linspace(3, 1, r) @ B.T
    Xs += 0.1 * rng.standard_normal(Xs.shape)
    for d in a.clients:
        g = np.repeat(np.arange(d), int(np.ceil(Xs.shape[0] / d)))[: Xs.shape[0]]
        res = bench(Xs, {d: g}, d, a.rank, max(5, a.rounds // 3), None, None, kernel=a.kernel)
        results["synthetic"].append(res)
        print("synthetic", json.dumps(res))
    write_json(a.out, results)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()

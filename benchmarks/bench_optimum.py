"""Does a default fit stop at its optimum? Objective gaps, rounds and seconds (issue 35).

Run by hand (not a test); every axis of the matrix is an option whose default is the
whole matrix, so a smaller run is one command::

    python benchmarks/bench_optimum.py --data-dir ../shared/data
    python benchmarks/bench_optimum.py --data-dir ../shared/data --datasets unsw-nb15 \\
        --features rich --splits sorted --seeds 0 --ranks 5 --starts cold warm \\
        --max-rows 3000 --ref-rounds 150 --out benchmarks/results/optimum-smoke.json

The matrix: ``--datasets`` (nsl-kdd, unsw-nb15, ton-iot: their normal training rows,
``--max-rows`` of them drawn at random with a fixed seed, kept in file order; and
``synthetic``, an own-data-like table generated here, see :func:`synthetic_dataset`) x
``--features`` (``rich``: the loader's rich feature matrix as an ndarray, z-scored by
the estimator; ``auto``: the raw DataFrame rows through the generic
``features="auto"`` pipeline; for ``synthetic``, ``rich`` is its numeric columns as an
ndarray) x ``--splits`` (``sorted``: rows sorted by ``dst_bytes`` cut into 20 gateways,
10 for synthetic, :func:`fedep.data.partition_sorted`; ``iid``: a random assignment
seeded by the cell's seed, :func:`fedep.data.partition_iid`) x ``--seeds`` (the
estimator's ``random_state`` and the iid split) x ``--ranks`` (``n_components``: auto,
5, 10) x ``--starts`` (``cold``; ``warm``: a fit on the first half of each gateway's
rows in file order, then ``set_params(warm_start=True)`` and a refit on the second
half) x ``--methods`` (fedep; fedpg). ``--cells K`` stops after K cells, ``--budget-s``
starts no cell after that many seconds, ``--resume`` skips the cells already in
``--out``. Every estimator has its defaults except ``random_state`` and
``n_components`` (and what a run below names).

The runs of a cell. A *reference* run is the same estimator on the same rows with
``tol=1e-9`` and ``n_rounds=--ref-rounds`` (default 2000).

``cold`` cells:

- ``default``: the fit with the default stopping;
- ``reference``: its reference run;
- ``random``: a reference run from a random start (``init="random"``);
- ``other_split``: the reference run of the same rows on the other split (``sorted`` <->
  ``iid``; shared with that cell, ``cached`` says so). At consensus (every ``W_i =
  V``) the objective is a sum over records plus ``beta N ||V||_{2,1}`` with
  ``penalty_scaling="relative"``: it does not depend on the partition.

``warm`` cells:

- ``first``: the cold default fit on the first halves;
- ``default``: the warm refit (``first`` copied, ``warm_start=True``) on the second halves;
- ``reference``: the same warm refit as a reference run;
- ``cold``: the ordinary cold default fit on the second halves, in its OWN units (see
  below): its rounds, seconds and ROC AUC, for ``rounds_share``;
- ``cold_units`` / ``cold_units_reference``: a cold fit of the second halves in the
  warm refit's units, with the default stopping and as a reference run.

Comparable objectives. The objective is a function of the records in model units: a warm
refit keeps the first fit's feature pipeline (``features="auto"``), its standardisation
(``mean_``, ``scale_``, rich and auto alike) and its rank
(:func:`fedep.detectors.warm.warm_start`), so a cold fit of the same rows, which fits its
own, minimises another function, and no public parameter makes a cold fit take given
units (``standardize=False`` still centres on the new rows' mean; a FeaturePipeline
instance is cloned and refitted). ``cold_units`` is therefore a warm start from a
*stateless* copy of ``first``: its fitted ``consensus_``, ``client_duals_``,
``client_multipliers_`` and ``history_`` removed (a model file written before the rounds'
state was stored: duals start at 0, no stopping window is carried) and every basis
(``components_``, ``client_components_``) set to the top right singular vectors of the
second halves in those units (the centralised stand-in of the one-shot start). It keeps
the units and the rank, nothing of the first fit's solution. Whether two runs share
units is also measured, not assumed: each run's model coordinates of a fixed probe of
200 training rows (through its ``features_``, ``mean_`` and ``scale_``) and its rank are
compared with the default fit's (``comparable``: rank equal and coordinates within
1e-6 relative); only comparable runs of the same rows enter ``best`` (``first``, a fit
of other rows in the same units, never does; with features="auto" a pipeline fitted on
another split may differ; the ordinary ``cold`` refit of a warm cell has its own units).

Per run (``default``, ``reference``, ...): ``rounds`` (``n_iter_``), ``stop_reason``
(``stop_reason_``), ``stop_tests`` (``stop_tests_`` where the estimator has it, else
None), ``warned`` (a ``ConvergenceWarning``), ``remerged`` (rounds whose re-merge was
taken), ``fit_s`` (wall seconds of ``fit``) and ``fit_cpu_s`` (this process's CPU
seconds; less sensitive to a loaded machine), ``objective`` and ``augmented_lagrangian``
(of the last round, ``history_[-1]``), ``rank`` (``n_components_``), ``comparable``,
``cached`` (a reference run reused from another cell) and, for ``default``, ``reference``
and (warm) ``cold``, ``roc_auc`` on the test rows (``decision_function``: higher = more
anomalous; ``--max-test-rows`` of them, seeded; labels are used for this figure only).

Per cell: ``key``, the axes, ``rows`` and ``gateways`` (of the fit on which the gap is
measured), ``best`` (the lowest comparable objective and the run it came from), ``gap``
(``(default - best) / |best|``, >= 0), ``gap_lagrangian`` (the same with the default's
augmented Lagrangian against ``best``, for reference), ``auc_diff`` (default minus
reference ROC AUC), ``seconds`` (the whole cell); warm cells add ``gap_to_cold`` (the
warm objective against the lower of ``cold_units`` and ``cold_units_reference``,
negative when the warm refit ends lower than a cold start in its units) and
``rounds_share`` (warm rounds / ``cold`` rounds) and ``auc_vs_cold`` (warm minus cold
ROC AUC). A cell that fails has ``error`` (one line) instead.

``summary`` (rewritten with the file after every cell), per ``method/start`` (all
datasets) and per ``method/start/dataset/features``: ``cells``, ``gap_median``,
``gap_max``, ``over_1pct`` (cells whose gap exceeds 1 %), ``rounds_median``,
``rounds_max``, ``fit_s_median``, ``fit_s_max``, ``fit_cpu_s_median``,
``auc_diff_median`` / ``_min`` / ``_max``, ``stop_reasons`` (counts); warm groups add
``gap_to_cold_median`` / ``_max``, ``rounds_share_median`` / ``_max`` and
``auc_vs_cold_median``.

One line per cell is printed (flushed) as it ends, and ``--out`` (default
``benchmarks/results/optimum.json``) is rewritten atomically after every cell, so a run
stopped by a time limit keeps every finished cell.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import os
import platform
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
from _common import write_json
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import roc_auc_score

import fedep
from fedep import FedEP, FedPG
from fedep.data import load_dataset, partition_iid, partition_sorted

DATASETS = ("nsl-kdd", "unsw-nb15", "ton-iot", "synthetic")
GATEWAYS = {"synthetic": 10}  # every other dataset: 20
REF_TOL = 1e-9
PROBE_ROWS = 200
UNITS_RTOL = 1e-6
ESTIMATORS = {"fedep": FedEP, "fedpg": FedPG}


# ------------------------------------------------------------------ data
def synthetic_dataset(n_train: int = 20000, seed: int = 0) -> SimpleNamespace:
    """An own-data-like flow table: heavy-tailed counts, rare huge spikes, a
    near-constant column with rare huge values, a protocol column; ``n_train`` normal
    training rows and a test part of ``n_train // 4`` normal rows plus 5 % planted
    attacks (scans, exfiltration, floods), seeded.

    Normal rows come from three services (web 60 %, dns 30 %, bulk transfers 10 %):
    log-normal packet counts (Pareto for bulk), bytes per packet log-normal, durations
    log-normal; 0.1 % of rows have their byte counts multiplied by 1e3 to 1e5; ``urgent``
    is 0 except on 0.05 % of rows (log-normal around 1e6). Returns the fields of a
    loaded dataset that this benchmark reads (``X_*``: the numeric columns).
    """
    rng = np.random.default_rng(seed)

    def normal(n):
        service = rng.choice(3, size=n, p=[0.6, 0.3, 0.1])
        web, dns, bulk = service == 0, service == 1, service == 2
        src_pkts = np.where(web, 1 + rng.lognormal(2.0, 0.8, n), 1.0)
        src_pkts = np.where(dns, rng.integers(1, 3, n), src_pkts)
        src_pkts = np.where(bulk, 50 * (1 + rng.pareto(1.2, n)), src_pkts)
        src_pkts = np.floor(src_pkts)
        dst_pkts = np.floor(src_pkts * rng.lognormal(np.where(bulk, 0.8, 0.2), 0.3, n))
        src_bpp = rng.lognormal(np.select([web, dns], [5.5, 4.3], 6.5), 0.4, n)
        dst_bpp = rng.lognormal(np.select([web, dns], [6.8, 4.8], 7.2), 0.6, n)
        src_bytes, dst_bytes = np.floor(src_pkts * src_bpp), np.floor(dst_pkts * dst_bpp)
        spike = rng.random(n) < 1e-3
        boost = 10.0 ** rng.uniform(3, 5, n)
        src_bytes = np.where(spike, src_bytes * boost, src_bytes)
        dst_bytes = np.where(spike, dst_bytes * boost, dst_bytes)
        duration = rng.lognormal(np.select([web, dns], [-1.0, -4.0], 2.0), 1.2, n)
        return pd.DataFrame(
            {
                "duration": duration,
                "proto": np.where(dns, "udp", np.where(rng.random(n) < 0.05, "udp", "tcp")),
                "src_pkts": src_pkts,
                "dst_pkts": dst_pkts,
                "src_bytes": src_bytes,
                "dst_bytes": dst_bytes,
                "rate": (src_bytes + dst_bytes) / (duration + 1e-3),
                "conn_count": np.floor(1 + rng.pareto(1.5, n)),
                "dst_host_count": np.floor(rng.lognormal(1.0, 0.7, n)),
                "rst_count": rng.poisson(0.2, n).astype(float),
                "urgent": np.where(rng.random(n) < 5e-4, np.floor(rng.lognormal(14, 2, n)), 0.0),
            }
        )

    def attacks(n):
        df = normal(n)
        kind = rng.choice(3, size=n)
        scan, exfil, flood = kind == 0, kind == 1, kind == 2
        df.loc[scan, ["src_pkts", "dst_pkts"]] = 1.0
        df.loc[scan, "src_bytes"] = 40.0 + rng.integers(0, 20, scan.sum())
        df.loc[scan, "dst_bytes"] = 0.0
        df.loc[scan, "duration"] = rng.lognormal(-7, 0.5, scan.sum())
        df.loc[scan, "dst_host_count"] = np.floor(200 * (1 + rng.pareto(1.0, scan.sum())))
        df.loc[scan, "rst_count"] = 1.0 + rng.poisson(3, scan.sum())
        df.loc[exfil, "src_bytes"] = np.floor(rng.lognormal(16, 1, exfil.sum()))
        df.loc[exfil, "duration"] = rng.lognormal(4, 1, exfil.sum())
        df.loc[flood, "src_pkts"] = np.floor(rng.lognormal(9, 1, flood.sum()))
        df.loc[flood, "dst_pkts"] = 0.0
        df.loc[flood, "dst_bytes"] = 0.0
        df.loc[flood, "proto"] = "udp"
        df.loc[flood, "conn_count"] = np.floor(500 * (1 + rng.pareto(1.0, flood.sum())))
        df["rate"] = (df["src_bytes"] + df["dst_bytes"]) / (df["duration"] + 1e-3)
        return df

    raw_train = normal(n_train)
    n_test = max(n_train // 4, 20)
    n_attack = max(n_test // 20, 1)
    raw_test = pd.concat([normal(n_test), attacks(n_attack)], ignore_index=True)
    y_test = np.r_[np.zeros(n_test, int), np.ones(n_attack, int)]
    numeric = [c for c in raw_train.columns if c != "proto"]
    return SimpleNamespace(
        X_train=raw_train[numeric].to_numpy(float),
        X_test=raw_test[numeric].to_numpy(float),
        y_train=np.zeros(n_train, int),
        y_test=y_test,
        raw_train=raw_train,
        raw_test=raw_test,
    )


def load(name: str, a) -> SimpleNamespace:
    """The dataset's normal training rows (``--max-rows``, seeded, in file order) and
    test rows (``--max-test-rows``, seeded) in both forms."""
    if name == "synthetic":
        ds = synthetic_dataset(a.synthetic_rows, a.synthetic_seed)
    else:
        ds = load_dataset(name, a.data_dir, feature_set="rich")
    rng = np.random.default_rng(0)
    rows = np.flatnonzero(ds.y_train == 0)
    if a.max_rows and rows.size > a.max_rows:
        rows = np.sort(rng.choice(rows, a.max_rows, replace=False))
    test = np.arange(ds.y_test.size)
    if a.max_test_rows and test.size > a.max_test_rows:
        test = np.sort(rng.choice(test, a.max_test_rows, replace=False))
    raw = ds.raw_train.iloc[rows].reset_index(drop=True)
    raw_test = ds.raw_test.iloc[test].reset_index(drop=True)
    probe = np.sort(rng.choice(rows.size, min(PROBE_ROWS, rows.size), replace=False))
    return SimpleNamespace(
        name=name,
        gateways=GATEWAYS.get(name, 20),
        X={"rich": ds.X_train[rows], "auto": raw},
        X_test={"rich": ds.X_test[test], "auto": raw_test},
        y_test=ds.y_test[test],
        dst_bytes=raw["dst_bytes"].to_numpy(dtype=float),
        probe=probe,
    )


def split_groups(data, split: str, seed: int) -> np.ndarray:
    n = data.dst_bytes.size
    if split == "sorted":
        return partition_sorted(data.dst_bytes, data.gateways)
    return partition_iid(n, data.gateways, random_state=seed)


def halves(groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each gateway's first and second half of its rows (file order), as row indices."""
    first, second = [], []
    for g in np.unique(groups):
        rows = np.flatnonzero(groups == g)
        first.append(rows[: rows.size // 2])
        second.append(rows[rows.size // 2 :])
    return np.sort(np.concatenate(first)), np.sort(np.concatenate(second))


def take(X, rows):
    return X.iloc[rows].reset_index(drop=True) if isinstance(X, pd.DataFrame) else X[rows]


# ------------------------------------------------------------------ runs
def units(det, probe) -> tuple[int, np.ndarray]:
    """The model's rank and its coordinates of the probe rows (what its objective is a
    function of: the feature pipeline, the standardisation)."""
    pipe = getattr(det, "features_", None)
    Z = pipe.transform(probe) if pipe is not None else np.asarray(probe, dtype=float)
    return int(det.n_components_), (np.asarray(Z, dtype=float) - det.mean_) / det.scale_


def same_units(a, b) -> bool:
    (ra, Za), (rb, Zb) = a, b
    if ra != rb or Za.shape != Zb.shape:
        return False
    return bool(np.allclose(Za, Zb, rtol=UNITS_RTOL, atol=UNITS_RTOL * max(np.abs(Za).max(), 1)))


def run(det, X, groups, *, probe, test=None, y_test=None) -> dict:
    """Fit ``det`` and summarise it (``_units``: for :func:`same_units`, not written)."""
    t0, c0 = time.perf_counter(), time.process_time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        det.fit(X, groups=groups)
    fit_s, fit_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    last = det.history_[-1] if getattr(det, "history_", None) else {}
    rec = {
        "rounds": int(det.n_iter_),
        "stop_reason": getattr(det, "stop_reason_", None),
        "stop_tests": getattr(det, "stop_tests_", None),
        "warned": any(issubclass(w.category, ConvergenceWarning) for w in caught),
        "remerged": sum(bool(h.get("remerged")) for h in det.history_),
        "fit_s": fit_s,
        "fit_cpu_s": fit_cpu_s,
        "objective": _num(last.get("objective")),
        "augmented_lagrangian": _num(last.get("augmented_lagrangian")),
        "rank": int(det.n_components_),
    }
    if test is not None:
        rec["roc_auc"] = float(roc_auc_score(y_test, det.decision_function(test)))
    rec["_units"] = units(det, probe)
    return rec


def _num(v):
    return None if v is None or not np.isfinite(v) else float(v)


def stateless(first, Z: np.ndarray):
    """A copy of ``first`` (fitted) whose warm start keeps its units and rank and
    nothing of its solution: the rounds' state removed, every basis the top right
    singular vectors of ``Z`` (the records in its model units)."""
    det = copy.deepcopy(first)
    r = int(first.n_components_)
    V0 = np.linalg.svd(Z, full_matrices=False)[2][:r]  # (r, n), orthonormal rows
    det.components_ = V0.copy()
    det.client_components_ = np.repeat(V0[None], len(first.clients_), axis=0)
    for k in ("consensus_", "client_duals_", "client_multipliers_", "history_"):
        det.__dict__.pop(k, None)
    return det


def model_coordinates(det, X) -> np.ndarray:
    pipe = getattr(det, "features_", None)
    Z = pipe.transform(X) if pipe is not None else np.asarray(X, dtype=float)
    return (np.asarray(Z, dtype=float) - det.mean_) / det.scale_


def finish(cell: dict, runs: dict, other_rows=(), base: str = "default") -> None:
    """``best`` over the runs comparable with ``base`` (``other_rows``: runs of other
    rows, never candidates), the gap, the ROC AUC difference; each run's
    ``comparable`` set and its ``_units`` dropped."""
    ref_units = runs[base]["_units"]
    best = None
    for name, rec in runs.items():
        rec["comparable"] = name not in other_rows and same_units(ref_units, rec["_units"])
        if rec["comparable"] and rec["objective"] is not None:
            if best is None or rec["objective"] < best[0]:
                best = (rec["objective"], name)
    d = runs[base]
    cell["best"] = None if best is None else {"objective": best[0], "run": best[1]}
    cell["gap"] = _gap(d["objective"], best)
    cell["gap_lagrangian"] = _gap(d["augmented_lagrangian"], best)
    ref = runs.get("reference", {})
    if "roc_auc" in d and "roc_auc" in ref:
        cell["auc_diff"] = d["roc_auc"] - ref["roc_auc"]
    for name, rec in runs.items():
        cell[name] = {k: v for k, v in rec.items() if k != "_units"}


def _gap(value, best):
    if value is None or best is None or best[0] == 0:
        return None
    return (value - best[0]) / abs(best[0])


def cold_cell(cell, data, feats, split, seed, rank, Est, a, cache) -> None:
    X, test = data.X[feats], data.X_test[feats]
    groups = split_groups(data, split, seed)
    probe = take(X, data.probe)
    kw = {"probe": probe}
    scored = {"test": test, "y_test": data.y_test}
    params = {"n_components": rank, "random_state": seed}
    ref_params = {**params, "tol": REF_TOL, "n_rounds": a.ref_rounds}
    cell.update(rows=int(len(groups)), gateways=int(np.unique(groups).size))

    def reference(sp):
        key = (data.name, feats, sp, seed, rank, cell["method"])
        if key in cache:
            return {**cache[key], "cached": True}
        g = groups if sp == split else split_groups(data, sp, seed)
        rec = run(Est(**ref_params), X, g, **kw, **scored)
        cache[key] = rec
        return {**rec, "cached": False}

    runs = {"default": run(Est(**params), X, groups, **kw, **scored)}
    if "reference" in a.candidates:
        runs["reference"] = reference(split)
    if "random" in a.candidates:
        runs["random"] = run(Est(**ref_params, init="random"), X, groups, **kw)
    if "other-split" in a.candidates:
        runs["other_split"] = reference("iid" if split == "sorted" else "sorted")
    finish(cell, runs)


def warm_cell(cell, data, feats, split, seed, rank, Est, a) -> None:
    X, test = data.X[feats], data.X_test[feats]
    groups = split_groups(data, split, seed)
    one, two = halves(groups)
    X1, X2, g1, g2 = take(X, one), take(X, two), groups[one], groups[two]
    kw = {"probe": take(X, data.probe)}
    scored = {"test": test, "y_test": data.y_test}
    params = {"n_components": rank, "random_state": seed}
    ref = {"tol": REF_TOL, "n_rounds": a.ref_rounds}
    cell.update(rows=int(two.size), gateways=int(np.unique(g2).size), first_rows=int(one.size))
    first = Est(**params)
    runs = {"first": run(first, X1, g1, **kw)}
    warm = copy.deepcopy(first).set_params(warm_start=True)
    runs["default"] = run(warm, X2, g2, **kw, **scored)
    if "reference" in a.candidates:
        warm_ref = copy.deepcopy(first).set_params(warm_start=True, **ref)
        runs["reference"] = run(warm_ref, X2, g2, **kw, **scored)
    runs["cold"] = run(Est(**params), X2, g2, **kw, **scored)
    if "cold-units" in a.candidates:
        Z2 = model_coordinates(first, X2)
        for name, extra in (("cold_units", {}), ("cold_units_reference", ref)):
            det = stateless(first, Z2).set_params(warm_start=True, **extra)
            runs[name] = run(det, X2, g2, **kw)
    finish(cell, runs, other_rows=("first",))
    cold = [cell[k]["objective"] for k in ("cold_units", "cold_units_reference") if k in cell]
    cold = [v for v in cold if v is not None]
    w = cell["default"]
    cell["gap_to_cold"] = _gap(w["objective"], (min(cold),) if cold else None)
    cell["rounds_share"] = w["rounds"] / max(cell["cold"]["rounds"], 1)
    cell["auc_vs_cold"] = w["roc_auc"] - cell["cold"]["roc_auc"]


# ------------------------------------------------------------------ summary
def _stats(vals, *fns):
    vals = [v for v in vals if v is not None]
    if not vals:
        return {f: None for f in fns}
    return {f: float(getattr(np, f)(vals)) for f in fns}


def summarise(cells: list[dict]) -> dict:
    groups: dict[str, list[dict]] = {}
    for c in cells:
        if "error" in c:
            continue
        for key in (
            f"{c['method']}/{c['start']}",
            f"{c['method']}/{c['start']}/{c['dataset']}/{c['features']}",
        ):
            groups.setdefault(key, []).append(c)
    out = {}
    for key, cs in sorted(groups.items()):
        d = [c["default"] for c in cs]
        gaps = [c.get("gap") for c in cs]
        s = {"cells": len(cs)}
        for name, vals, fns in (
            ("gap", gaps, ("median", "max")),
            ("rounds", [x["rounds"] for x in d], ("median", "max")),
            ("fit_s", [x["fit_s"] for x in d], ("median", "max")),
            ("fit_cpu_s", [x["fit_cpu_s"] for x in d], ("median",)),
            ("auc_diff", [c.get("auc_diff") for c in cs], ("median", "min", "max")),
        ):
            s |= {f"{name}_{f}": v for f, v in _stats(vals, *fns).items()}
        s["over_1pct"] = sum(g is not None and g > 0.01 for g in gaps)
        reasons: dict[str, int] = {}
        for x in d:
            reasons[str(x["stop_reason"])] = reasons.get(str(x["stop_reason"]), 0) + 1
        s["stop_reasons"] = reasons
        if cs[0]["start"] == "warm":
            for name, fns in (
                ("gap_to_cold", ("median", "max")),
                ("rounds_share", ("median", "max")),
                ("auc_vs_cold", ("median",)),
            ):
                vals = [c.get(name) for c in cs]
                s |= {f"{name}_{f}": v for f, v in _stats(vals, *fns).items()}
        out[key] = s
    return out


def _plain(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def brief(c: dict) -> str:
    key = c["key"]
    if "error" in c:
        return f"{key} ERROR {c['error']}"

    def f(v, fmt):
        return "-" if v is None else format(v, fmt)

    d = c["default"]
    line = (
        f"{key} rows={c['rows']} rounds={d['rounds']} stop={d['stop_reason']} "
        f"fit_s={d['fit_s']:.2f} cpu_s={d['fit_cpu_s']:.2f} obj={f(d['objective'], '.6g')} "
        f"best={f((c['best'] or {}).get('objective'), '.6g')}"
        f"({(c['best'] or {}).get('run', '-')}) gap={f(c['gap'], '.2e')} "
        f"auc={f(d.get('roc_auc'), '.4f')} auc_diff={f(c.get('auc_diff'), '+.4f')}"
    )
    if c["start"] == "warm":
        line += (
            f" cold_rounds={c['cold']['rounds']} share={c['rounds_share']:.2f}"
            f" gap_to_cold={f(c['gap_to_cold'], '.2e')}"
        )
    return line + f" cell_s={c['seconds']:.1f}"


# ------------------------------------------------------------------ main
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="benchmarks/results/optimum.json")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    p.add_argument("--features", nargs="+", default=["rich", "auto"], choices=["rich", "auto"])
    p.add_argument("--splits", nargs="+", default=["sorted", "iid"], choices=["sorted", "iid"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--ranks", nargs="+", default=["auto", "5", "10"])
    p.add_argument("--starts", nargs="+", default=["cold", "warm"], choices=["cold", "warm"])
    p.add_argument("--methods", nargs="+", default=["fedep"], choices=list(ESTIMATORS))
    p.add_argument(
        "--candidates", nargs="*", default=["reference", "random", "other-split", "cold-units"],
        choices=["reference", "random", "other-split", "cold-units"],
        help="the runs besides the default fit (random, other-split: cold cells; "
        "cold-units: warm cells)",
    )  # fmt: skip
    p.add_argument("--ref-rounds", type=int, default=2000, help="n_rounds of a reference run")
    p.add_argument("--max-rows", type=int, default=None, help="normal training rows per dataset")
    p.add_argument("--max-test-rows", type=int, default=None, help="test rows per dataset")
    p.add_argument("--synthetic-rows", type=int, default=20000)
    p.add_argument("--synthetic-seed", type=int, default=0)
    p.add_argument("--cells", type=int, default=None, help="stop after this many cells")
    p.add_argument("--budget-s", type=float, default=None, help="start no cell after this")
    p.add_argument("--resume", action="store_true", help="skip the cells already in --out")
    a = p.parse_args(argv)
    ranks = [r if r == "auto" else int(r) for r in a.ranks]
    path = Path(a.out)
    doc = {
        "machine": platform.platform(),
        "cpus": os.cpu_count(),
        "fedep_src": str(Path(fedep.__file__).parent),
        "args": vars(a),
        "cells": [],
        "summary": {},
    }
    if a.resume and path.exists():
        doc["cells"] = [c for c in json.loads(path.read_text())["cells"] if "error" not in c]
    done = {c["key"] for c in doc["cells"]}
    cache: dict = {}
    t_start, ran = time.perf_counter(), 0
    axes = (a.features, a.splits, a.seeds, ranks, a.starts, a.methods)
    for name in a.datasets:
        data = None
        for feats, split, seed, rank, start, m in itertools.product(*axes):
            key = f"{name}/{feats}/{split}/seed{seed}/r{rank}/{start}/{m}"
            if key in done:
                continue
            if a.cells is not None and ran >= a.cells:
                return _end(path, doc)
            if a.budget_s and time.perf_counter() - t_start > a.budget_s:
                print("budget spent", flush=True)
                return _end(path, doc)
            if data is None:
                data = load(name, a)
            cell = {
                "key": key, "dataset": name, "features": feats, "split": split,
                "seed": seed, "rank": rank, "start": start, "method": m,
            }  # fmt: skip
            t0 = time.perf_counter()
            try:
                args = (cell, data, feats, split, seed, rank, ESTIMATORS[m], a)
                if start == "cold":
                    cold_cell(*args, cache)
                else:
                    warm_cell(*args)
            except Exception as exc:  # one cell's failure: recorded, the run goes on
                msg = f"{type(exc).__name__}: {exc}".splitlines()
                cell["error"] = msg[0] if msg else type(exc).__name__
            cell["seconds"] = time.perf_counter() - t0
            ran += 1
            doc["cells"].append(cell)
            doc["summary"] = summarise(doc["cells"])
            write_json(path, doc, indent=1, default=_plain)
            print(brief(cell), flush=True)
    _end(path, doc)


def _end(path: Path, doc: dict) -> None:
    doc["summary"] = summarise(doc["cells"])
    write_json(path, doc, indent=1, default=_plain)
    print("wrote", path, flush=True)


if __name__ == "__main__":
    main()

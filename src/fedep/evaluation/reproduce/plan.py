"""The experiment plan: every cell of a reproduction, named up front.

:func:`build_plan` lists the cells (key, section, compute function) in run order, so
the number of cells is known before the first fit. A cell's ``compute(values)``
receives the values of the cells computed before it (e.g. a validation selection
feeds the fits that use its parameters); the keys never depend on such values, so a
cached run and a fresh one walk the same plan. :mod:`.collect` turns the values into
``results.json``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedep.detectors import ABLATION_CASES, make_estimator
from fedep.evaluation.experiment import evaluate_detector, per_round_curve
from fedep.evaluation.metrics import trivial_detector_metrics
from fedep.evaluation.reproduce.cells import Cell, Values
from fedep.evaluation.reproduce.config import (
    BEST_METHODS,
    METHOD_ORDER,
    ROUND_METHODS,
    best_base_params,
    best_grid,
    method_params,
)
from fedep.evaluation.reproduce.contaminated import contaminated_cells
from fedep.evaluation.reproduce.data import Data, split_info
from fedep.evaluation.selection import grid_search
from fedep.features import FeaturePipeline

__all__ = [
    "Context",
    "build_plan",
    "best_cells",
    "feature_set_cells",
    "FeatureSetCells",
    "make_cell_detector",
    "n_model_features",
    "select_scaling",
    "selection_cells",
    "main_cells",
    "round_cells",
    "ablation_cells",
    "rank_cells",
    "scalability_cells",
    "selected_params",
    "select_best_config",
]


@dataclass
class Context:
    """What the cells compute from: the mode's settings and the data sources (paper
    feature set for the secondary tables, ``best["feature_set"]`` for the headline,
    ``compare_data`` for the other feature sets under the headline protocol)."""

    cfg: dict
    data: Data
    best_data: Data
    compare_data: dict[str, Data] = field(default_factory=dict)

    @property
    def seed0(self) -> int:
        return self.cfg["seeds"][0]

    @property
    def headline_set(self) -> FeatureSetCells:
        return FeatureSetCells(self.cfg["best"]["feature_set"], self.best_data, headline=True)

    @property
    def compare_sets(self) -> list[FeatureSetCells]:
        return [FeatureSetCells(fs, d, headline=False) for fs, d in self.compare_data.items()]


# --------------------------------------------------------------------------- headline
def make_cell_detector(method: str, params: dict, seed: int = 0):
    """The detector of a reproduction cell: :func:`fedep.detectors.make_estimator` of a
    detector class name (``"FedEP"``, ...) seeded with ``seed``, where a ``"scaling"``
    entry (``"[transform/]rule[:parameter]"``, e.g. ``"floor:0.1"`` or
    ``"quantile/shrink:0.3"``) becomes the feature pipeline of the generic path
    (``features=FeaturePipeline(numeric_transform=..., scale_rule=...,
    scale_floor=...)``; the transform is ``"log"`` when omitted)."""
    p = dict(params)
    scaling = p.pop("scaling", None)
    if scaling is not None:
        transform, _, rule = str(scaling).rpartition("/")
        rule, _, value = rule.partition(":")
        p["features"] = FeaturePipeline(
            numeric_transform=transform or "log", scale_rule=rule, scale_floor=float(value or 0.0)
        )
    return make_estimator(method, {**p, "random_state": seed})


def n_model_features(sp) -> int:
    """Number of features the detectors see: the columns of a numeric split, or for a
    split of raw tables (the generic path) the width of the automatic pipeline's
    encoding of its training rows (fitted per gateway; the numeric transform and the
    scale rule do not change it). Ranks must stay below it."""
    import pandas as pd

    if not isinstance(sp.X_train, pd.DataFrame):
        return int(sp.X_train.shape[1])
    pipe = FeaturePipeline(scale_rule=None).fit(sp.X_train, groups=sp.groups_train)
    return len(pipe.get_feature_names_out())


def select_best_config(
    method: str, sp, best: dict, seed: int = 0, extra: dict | None = None
) -> dict:
    """Validation-only hyper-parameter selection for the headline table.

    Calls :func:`fedep.evaluation.selection.grid_search` with the split's TRAINING rows
    and its VALIDATION rows/labels (carved from training) only: ``sp.X_test`` and
    ``sp.y_test`` are never read, so permuting or replacing them cannot change the
    result. ``extra`` (e.g. the generic path's chosen ``scaling``) is fixed under
    every grid point. Returns ``grid_search``'s dict plus ``grid``.
    """
    grid = best_grid(method, best, n_model_features(sp))
    sel = grid_search(
        lambda p: make_cell_detector(method, p, seed),
        grid,
        sp.X_train,
        sp.groups_train,
        sp.X_val,
        sp.y_val,
        base_params={**best_base_params(method, best), **(extra or {})},
    )
    sel["grid"] = grid
    return sel


def select_scaling(sp, best: dict, seed: int = 0) -> dict:
    """The generic path's feature scaling, chosen on the validation split only.

    PooledPCA (closed form, cheap) is fitted for every scaling of ``best["scalings"]``
    and every rank of ``best["ranks"]``; the scaling of the best validation ROC AUC is
    kept and then fixed for every method. The pipeline of a scaling is fitted once (per
    gateway, on the training rows) and its encoding shared by the ranks: the same
    fits as ``PooledPCA(features=pipeline)`` per grid point (whose own standardisation
    is off under a scaling pipeline), without refitting the pipeline per rank. Returns
    ``grid_search``'s dict (``results`` in scaling-major order) plus ``by_scaling``
    (each scaling's best validation ROC AUC over the ranks, and that rank) and
    ``chosen``.
    """
    ranks = best_grid("PooledPCA", best, n_model_features(sp))["n_components"]
    results = []
    for sc in best["scalings"]:
        pipe = make_cell_detector("PooledPCA", {"n_components": 1, "scaling": sc}).features
        t0 = time.perf_counter()
        pipe.fit(sp.X_train, groups=sp.groups_train)
        Z, Zv = pipe.transform(sp.X_train), pipe.transform(sp.X_val)
        share = (time.perf_counter() - t0) / len(ranks)
        sel = grid_search(
            lambda p: make_cell_detector("PooledPCA", {**p, "standardize": False}, seed),
            {"n_components": ranks},
            Z,
            sp.groups_train,
            Zv,
            sp.y_val,
        )
        for r in sel["results"]:
            results.append(
                {
                    "params": {"scaling": sc, "n_components": r["params"]["n_components"]},
                    "val_roc_auc": r["val_roc_auc"],
                    "fit_time_s": r["fit_time_s"] + share,
                }
            )
    scores = np.array([r["val_roc_auc"] for r in results], dtype=float)
    i = 0 if np.all(np.isnan(scores)) else int(np.nanargmax(scores))  # first on ties
    out = {"best_params": dict(results[i]["params"]), "best_score": float(scores[i])}
    out["results"] = results
    by: dict[str, dict] = {}
    for r in results:
        sc, auc = r["params"]["scaling"], r["val_roc_auc"]
        if sc not in by or (np.isfinite(auc) and not auc <= by[sc]["val_roc_auc"]):
            by[sc] = {"val_roc_auc": auc, "rank": r["params"]["n_components"]}
    out["by_scaling"] = by
    out["chosen"] = out["best_params"]["scaling"]
    return out


@dataclass(frozen=True)
class FeatureSetCells:
    """Where one feature set's headline-protocol cells live: the cell-key prefix of a
    dataset (``best-{name}`` for the headline set, ``fs-{set}-{name}`` for the others)
    and its data."""

    feature_set: str
    data: Data
    headline: bool

    def prefix(self, name: str) -> str:
        return f"best-{name}" if self.headline else f"fs-{self.feature_set}-{name}"


def _set_split(ctx: Context, fs: FeatureSetCells, name: str, seed: int, refit: bool):
    if not refit:
        return fs.data.split(name, "clean", seed)
    mtr = ctx.cfg["best"].get("refit_train_rows", "cfg")
    return fs.data.split(name, "clean", seed, max_train_rows=mtr)


def _set_select(ctx: Context, fs: FeatureSetCells, name: str, method: str):
    scaling_key = f"{fs.prefix(name)}-scaling" if fs.feature_set == "generic" else None

    def compute(values: Values) -> dict:
        extra = {"scaling": values[scaling_key]["chosen"]} if scaling_key else None
        sp = _set_split(ctx, fs, name, ctx.seed0, refit=False)
        return select_best_config(method, sp, ctx.cfg["best"], ctx.seed0, extra)

    return compute


def _set_fit(ctx: Context, fs: FeatureSetCells, name: str, method: str, seed: int):
    def compute(values: Values) -> dict:
        params = dict(values[f"{fs.prefix(name)}-select-{method}"]["best_params"])
        det = make_cell_detector(method, params, seed)
        sp = _set_split(ctx, fs, name, seed, refit=True)
        r = evaluate_detector(det, sp, with_roc=fs.headline and seed == ctx.seed0)
        r.pop("per_class", None)
        r["n_features"] = int(det.components_.shape[1])  # encoded, for the generic path
        return r

    return compute


def feature_set_cells(ctx: Context, fs: FeatureSetCells, name: str) -> list[Cell]:
    """The headline protocol on one feature set and dataset: (for the generic path
    the scaling selection,) per method a validation selection and one fit per seed;
    the trivial detector and the split's sizes."""
    pre = fs.prefix(name)
    sec = (
        f"{name} (best honest configuration)"
        if fs.headline
        else f"{name} ({fs.feature_set} features, headline protocol)"
    )
    cells = []
    if fs.feature_set == "generic":
        cells.append(
            Cell(
                f"{pre}-scaling",
                sec,
                lambda v: select_scaling(
                    _set_split(ctx, fs, name, ctx.seed0, refit=False), ctx.cfg["best"], ctx.seed0
                ),
            )
        )
    for method in BEST_METHODS:
        cells.append(Cell(f"{pre}-select-{method}", sec, _set_select(ctx, fs, name, method)))
        for seed in ctx.cfg["seeds"]:
            cells.append(
                Cell(f"{pre}-{method}-s{seed}", sec, _set_fit(ctx, fs, name, method, seed))
            )
    if fs.headline:
        cells.append(
            Cell(
                f"{pre}-trivial",
                sec,
                lambda v: trivial_detector_metrics(fs.data.split(name, "clean", ctx.seed0).y_test),
            )
        )
    cells.append(
        Cell(
            f"{pre}-split",
            sec,
            lambda v: split_info(_set_split(ctx, fs, name, ctx.seed0, refit=True)),
        )
    )
    return cells


def best_cells(ctx: Context, name: str) -> list[Cell]:
    """Headline cells of one dataset: per method a validation selection and one fit
    per seed; the trivial detector; the split's sizes."""
    return feature_set_cells(ctx, ctx.headline_set, name)


# --------------------------------------------------------------------------- paper setting
def selected_params(values: Values, name: str, cfg: dict) -> dict[str, dict]:
    """The validation-selected grid values per method (empty without a grid)."""
    out = {}
    for method, grid in cfg["grid"].items():
        sel = values[f"{name}-select-{method}"]
        out[method] = {k: sel["best_params"][k] for k in grid}
    return out


def selection_cells(ctx: Context, name: str) -> list[Cell]:
    """Grid search per method on the validation split (clean protocol, first seed)."""

    def make(method: str, grid: dict) -> Callable[[Values], Any]:
        def compute(values: Values) -> dict:
            sp = ctx.data.split(name, "clean", ctx.seed0)
            return grid_search(
                lambda p: make_cell_detector(method, p, ctx.seed0),
                grid,
                sp.X_train,
                sp.groups_train,
                sp.X_val,
                sp.y_val,
                base_params=method_params(method, ctx.cfg, {}),
            )

        return compute

    return [Cell(f"{name}-select-{m}", name, make(m, grid)) for m, grid in ctx.cfg["grid"].items()]


def _main_fit(ctx: Context, name: str, protocol: str, method: str, seed: int):
    first = seed == ctx.seed0 and protocol == "clean"

    def compute(values: Values) -> dict:
        params = method_params(method, ctx.cfg, selected_params(values, name, ctx.cfg))
        sp = ctx.data.split(name, protocol, seed)
        det = make_cell_detector(method, params, seed)
        r = evaluate_detector(det, sp, with_roc=first, with_contributions=first)
        r["params"] = params
        return r

    return compute


def main_cells(ctx: Context, name: str) -> list[Cell]:
    """Table 2: every protocol, method and seed; the trivial detector and the split's
    sizes per protocol; the feature names."""
    cells = []
    for protocol in ctx.cfg["protocols"]:
        for method in METHOD_ORDER:
            for seed in ctx.cfg["seeds"]:
                cells.append(
                    Cell(
                        f"{name}-{protocol}-{method}-s{seed}",
                        name,
                        _main_fit(ctx, name, protocol, method, seed),
                    )
                )
        cells.append(
            Cell(
                f"{name}-{protocol}-trivial",
                name,
                lambda v, p=protocol: trivial_detector_metrics(
                    ctx.data.split(name, p, ctx.seed0).y_test
                ),
            )
        )
        cells.append(
            Cell(
                f"{name}-{protocol}-split",
                name,
                lambda v, p=protocol: split_info(ctx.data.split(name, p, ctx.seed0)),
            )
        )
    cells.append(
        Cell(
            f"{name}-features",
            name,
            lambda v: list(ctx.data.split(name, "clean", ctx.seed0).feature_names),
        )
    )
    return cells


def round_cells(ctx: Context, name: str) -> list[Cell]:
    """Accuracy / ROC AUC / objective after every round (one fit per method)."""

    def make(method: str) -> Callable[[Values], Any]:
        def compute(values: Values) -> list:
            params = method_params(method, ctx.cfg, selected_params(values, name, ctx.cfg))
            return per_round_curve(
                method,
                params,
                ctx.data.split(name, "clean", ctx.seed0),
                ctx.cfg["curve_rounds"],
                random_state=ctx.seed0,
            )

        return compute

    return [Cell(f"{name}-rounds-{m}", name, make(m)) for m in ROUND_METHODS]


def ablation_cells(ctx: Context, name: str) -> list[Cell]:
    """FedEP's ablation cases I-IV (clean, first seed)."""

    def make(extra: dict) -> Callable[[Values], Any]:
        def compute(values: Values) -> dict:
            sel = selected_params(values, name, ctx.cfg)
            params = {**method_params("FedEP", ctx.cfg, sel), **extra}
            sp = ctx.data.split(name, "clean", ctx.seed0)
            return evaluate_detector(make_cell_detector("FedEP", params, ctx.seed0), sp)

        return compute

    return [
        Cell(f"{name}-ablation-{case}", name, make(extra)) for case, extra in ABLATION_CASES.items()
    ]


def rank_cells(ctx: Context, name: str) -> list[Cell]:
    """FedEP and FedPG at every rank of the mode (clean, first seed)."""

    def make(method: str, rank: int) -> Callable[[Values], Any]:
        def compute(values: Values) -> dict:
            sel = selected_params(values, name, ctx.cfg)
            params = {
                **method_params(method, ctx.cfg, sel),
                "n_components": rank,
                "n_rounds": int(ctx.cfg["rank_rounds"][str(rank)]),
            }
            sp = ctx.data.split(name, "clean", ctx.seed0)
            if rank >= sp.X_train.shape[1]:
                return {"note": f"rank {rank} >= {sp.X_train.shape[1]} features"}
            return evaluate_detector(make_cell_detector(method, params, ctx.seed0), sp)

        return compute

    return [
        Cell(f"{name}-rank{rank}-{m}", name, make(m, rank))
        for rank in ctx.cfg["ranks"]
        for m in ROUND_METHODS
    ]


def scalability_cells(ctx: Context) -> list[Cell]:
    """Time per round vs number of clients (first dataset, ``scal_rows`` rows)."""
    cfg = ctx.cfg
    name = ctx.data.names[0]

    def make(method: str, n_clients: int) -> Callable[[Values], Any]:
        def compute(values: Values) -> dict:
            params = {**method_params(method, cfg, {}), "n_rounds": cfg["scal_rounds"], "tol": 0.0}
            sp = ctx.data.split(
                name, "clean", ctx.seed0, n_clients=n_clients, max_train_rows=cfg["scal_rows"]
            )
            det = make_cell_detector(method, params, ctx.seed0)
            det.fit(sp.X_train, groups=sp.groups_train)
            ts = [h["time_s"] for h in det.history_]
            return {
                "time_per_round_s": float(np.mean(ts)),
                "cumulative_time_s": [float(v) for v in np.cumsum(ts)],
                "n_train": int(len(sp.X_train)),
            }

        return compute

    return [
        Cell(f"{name}-scal{n}-{m}", "scalability", make(m, n))
        for n in cfg["scal_clients"]
        for m in ROUND_METHODS
    ]


def build_plan(ctx: Context) -> list[Cell]:
    """Every cell of the run, in run order: the headline per dataset, then per dataset
    selection, Table 2, curves, ablation and rank, then scalability, then the
    contaminated-training table per dataset (:mod:`.contaminated`)."""
    plan: list[Cell] = []
    for name in ctx.best_data.names:
        plan += best_cells(ctx, name)
    for fs in ctx.compare_sets:
        for name in fs.data.names:
            plan += feature_set_cells(ctx, fs, name)
    for name in ctx.data.names:
        plan += selection_cells(ctx, name)
        plan += main_cells(ctx, name)
        plan += round_cells(ctx, name)
        plan += ablation_cells(ctx, name)
        plan += rank_cells(ctx, name)
    plan += scalability_cells(ctx)
    for name in ctx.best_data.names:
        plan += contaminated_cells(ctx, name)
    keys = [c.key for c in plan]
    if len(set(keys)) != len(keys):  # pragma: no cover - a plan bug
        raise RuntimeError("duplicate cell keys in the reproduction plan")
    return plan

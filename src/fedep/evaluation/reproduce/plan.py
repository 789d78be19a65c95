"""The experiment plan: every cell of a reproduction, named up front.

:func:`build_plan` lists the cells (key, section, compute function) in run order, so
the number of cells is known before the first fit. A cell's ``compute(values)``
receives the values of the cells computed before it (e.g. a validation selection
feeds the fits that use its parameters); the keys never depend on such values, so a
cached run and a fresh one walk the same plan. :mod:`.collect` turns the values into
``results.json``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedep import ABLATION_CASES
from fedep.evaluation.experiment import evaluate_detector, make_detector, per_round_curve
from fedep.evaluation.metrics import trivial_detector_metrics
from fedep.evaluation.reproduce.config import (
    BEST_METHODS,
    METHOD_ORDER,
    best_base_params,
    best_grid,
    method_params,
)
from fedep.evaluation.reproduce.contaminated import contaminated_cells
from fedep.evaluation.reproduce.data import Data, split_info
from fedep.evaluation.selection import grid_search

__all__ = [
    "Cell",
    "Context",
    "build_plan",
    "best_cells",
    "selection_cells",
    "main_cells",
    "round_cells",
    "ablation_cells",
    "rank_cells",
    "scalability_cells",
    "selected_params",
    "select_best_config",
    "ROUND_METHODS",
]

Values = dict[str, Any]

#: Methods with per-round curves, ablation, rank and scalability cells.
ROUND_METHODS = ("FedEP", "FedPG")


@dataclass(frozen=True)
class Cell:
    """One cached experiment result: ``compute(values)`` runs when it is not stored."""

    key: str
    section: str
    compute: Callable[[Values], Any]


@dataclass
class Context:
    """What the cells compute from: the mode's settings and the two data sources
    (paper feature set for the secondary tables, ``best["feature_set"]`` for the
    headline)."""

    cfg: dict
    data: Data
    best_data: Data

    @property
    def seed0(self) -> int:
        return self.cfg["seeds"][0]


# --------------------------------------------------------------------------- headline
def select_best_config(method: str, sp, best: dict, seed: int = 0) -> dict:
    """Validation-only hyper-parameter selection for the headline table.

    Calls :func:`fedep.evaluation.selection.grid_search` with the split's TRAINING rows
    and its VALIDATION rows/labels (carved from training) only: ``sp.X_test`` and
    ``sp.y_test`` are never read, so permuting or replacing them cannot change the
    result. Returns ``grid_search``'s dict plus ``grid``.
    """
    grid = best_grid(method, best, sp.X_train.shape[1])
    sel = grid_search(
        lambda p: make_detector(method, p, seed),
        grid,
        sp.X_train,
        sp.groups_train,
        sp.X_val,
        sp.y_val,
        base_params=best_base_params(method, best),
    )
    sel["grid"] = grid
    return sel


def _best_split(ctx: Context, name: str, seed: int):
    refit = ctx.cfg["best"].get("refit_train_rows", "cfg")
    return ctx.best_data.split(name, "clean", seed, max_train_rows=refit)


def _best_select(ctx: Context, name: str, method: str) -> Callable[[Values], Any]:
    def compute(values: Values) -> dict:
        sp = ctx.best_data.split(name, "clean", ctx.seed0)
        return select_best_config(method, sp, ctx.cfg["best"], ctx.seed0)

    return compute


def _best_fit(ctx: Context, name: str, method: str, seed: int) -> Callable[[Values], Any]:
    def compute(values: Values) -> dict:
        params = dict(values[f"best-{name}-select-{method}"]["best_params"])
        det = make_detector(method, params, seed)
        r = evaluate_detector(det, _best_split(ctx, name, seed), with_roc=seed == ctx.seed0)
        r.pop("per_class", None)
        return r

    return compute


def best_cells(ctx: Context, name: str) -> list[Cell]:
    """Headline cells of one dataset: per method a validation selection and one fit
    per seed; the trivial detector; the split's sizes."""
    sec = f"{name} (best honest configuration)"
    cells = []
    for method in BEST_METHODS:
        cells.append(Cell(f"best-{name}-select-{method}", sec, _best_select(ctx, name, method)))
        for seed in ctx.cfg["seeds"]:
            cells.append(
                Cell(f"best-{name}-{method}-s{seed}", sec, _best_fit(ctx, name, method, seed))
            )
    cells.append(
        Cell(
            f"best-{name}-trivial",
            sec,
            lambda v: trivial_detector_metrics(
                ctx.best_data.split(name, "clean", ctx.seed0).y_test
            ),
        )
    )
    cells.append(
        Cell(f"best-{name}-split", sec, lambda v: split_info(_best_split(ctx, name, ctx.seed0)))
    )
    return cells


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
                lambda p: make_detector(method, p, ctx.seed0),
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
        det = make_detector(method, params, seed)
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
            return evaluate_detector(make_detector("FedEP", params, ctx.seed0), sp)

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
            return evaluate_detector(make_detector(method, params, ctx.seed0), sp)

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
            det = make_detector(method, params, ctx.seed0)
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

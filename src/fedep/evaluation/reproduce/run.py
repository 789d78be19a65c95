"""``run_reproduce``: build the plan, compute (or reuse) its cells, write the outputs."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from fedep._json import jsonable
from fedep.evaluation.reproduce import collect
from fedep.evaluation.reproduce.cells import Cells, format_duration
from fedep.evaluation.reproduce.config import DATASETS, MODES, PAPER_NUMBERS, SCHEMA_VERSION
from fedep.evaluation.reproduce.contaminated import collect_contaminated
from fedep.evaluation.reproduce.data import Data
from fedep.evaluation.reproduce.figures import make_figures
from fedep.evaluation.reproduce.plan import Context, build_plan
from fedep.evaluation.reproduce.report import write_report

__all__ = ["run_reproduce", "run_plan"]


def _default_command(out, quick, data_dir, datasets, seeds) -> str:
    argv0 = Path(sys.argv[0]).name if sys.argv else ""
    if argv0 == "fedep":
        return " ".join(["fedep", *sys.argv[1:]])
    args = [repr(str(out)), f"quick={quick!r}"]
    if data_dir is not None:
        args.append(f"data_dir={str(data_dir)!r}")
    if datasets is not None:
        args.append(f"datasets={list(datasets)!r}")
    if seeds is not None:
        args.append(f"seeds={list(seeds)!r}")
    return (
        'python -c "from fedep.evaluation.reproduce import run_reproduce; '
        f'run_reproduce({", ".join(args)})"'
    )


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("fedep", "numpy", "scipy", "scikit-learn", "pandas", "matplotlib"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def best_data(data_dir, names, cfg: dict, feature_set: str | None = None) -> Data:
    best = cfg["best"]
    sub = {
        "n_clients": cfg["n_clients"],
        "seeds": cfg["seeds"],
        "rank": cfg["rank"],
        "max_train_rows": best["max_train_rows"],
        "max_val_rows": best["max_val_rows"],
        "max_test_rows": best["max_test_rows"],
    }
    return Data(data_dir, names, sub, feature_set=feature_set or best["feature_set"])


def run_plan(plan, cells: Cells, log: Callable[[str], None]) -> dict[str, Any]:
    """Compute or reuse every cell of ``plan`` in order; returns ``{key: value}``."""
    cells.plan([c.key for c in plan])
    values: dict[str, Any] = {}
    section = None
    for cell in plan:
        if cell.section != section:
            section = cell.section
            log(f"== {section}")
        values[cell.key] = cells.get(cell.key, lambda c=cell: c.compute(values))
    return values


def run_reproduce(
    out_dir,
    *,
    quick: bool = False,
    data_dir=None,
    datasets=None,
    seeds=None,
    log: Callable[[str], None] = print,
    command: str | None = None,
) -> Path:
    """Run the evaluation suite and write ``report.md``, ``results.json``, figures.

    Parameters
    ----------
    out_dir : path
        Output directory (created). Re-running with the same directory resumes.
    quick : bool
        Small configuration (one seed, subsampled rows, fewer rounds/ranks, default
        hyper-parameters): a few minutes on 2 cores. Full: 5 seeds, grid search.
    data_dir : path, optional
        Dataset directory (see :func:`fedep.data.resolve_data_dir`; default
        ``FEDEP_DATA_DIR``). Missing datasets are listed in the report; with none
        found the synthetic scenario runs instead.
    datasets : list of str, optional
        Subset of ``("nsl-kdd", "unsw-nb15", "ton-iot")``.
    seeds : list of int, optional
        Override the mode's seeds.
    log : callable
        Progress messages: a header per section and, per computed cell,
        ``[done/total] [seconds] key (about T left)``.
    command : str, optional
        The command line to print in the report (default: reconstructed call).

    Returns
    -------
    Path of ``report.md``.
    """
    t_start = time.perf_counter()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    mode = "quick" if quick else "full"
    cfg = json.loads(json.dumps(MODES[mode]))
    if seeds is not None:
        cfg["seeds"] = [int(s) for s in seeds]
    names = list(datasets) if datasets else list(DATASETS)
    for n in names:
        if n not in DATASETS:
            raise ValueError(f"unknown dataset {n!r}; choose from {DATASETS}")
    out = Path(out_dir)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    cells = Cells(out, mode, cfg, log)
    log(f"fedep reproduce ({mode}) -> {out}")
    data = Data(data_dir, names, cfg)
    if data.source == "synthetic":
        log("no dataset found: running the synthetic scenario")
        cfg["protocols"] = ["clean"]
    compare = {}
    if data.source == "real":
        compare = {
            fs: best_data(data_dir, names, cfg, fs)
            for fs in cfg["best"].get("compare_feature_sets", [])
        }
    ctx = Context(
        cfg=cfg, data=data, best_data=best_data(data_dir, names, cfg), compare_data=compare
    )
    values = run_plan(build_plan(ctx), cells, log)

    main = collect.collect_main(values, cfg, data.names)
    res: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "mode": mode,
        "command": command or _default_command(out, quick, data_dir, datasets, seeds),
        "versions": _versions(),
        "platform": f"{platform.platform()}, {os.cpu_count()} CPUs",
        "started": started,
        "config": cfg,
        "paper": PAPER_NUMBERS,
        "selection": {
            name: {m: values[f"{name}-select-{m}"] for m in cfg["grid"]} for name in data.names
        },
        "main": main["main"],
        "trivial": main["trivial"],
        "per_class": main["per_class"],
        "roc": main["roc"],
        "rounds": collect.collect_rounds(values, data.names),
        "contributions": main["contributions"],
        "ablation": collect.collect_ablation(values, data.names),
        "rank": collect.collect_rank(values, cfg, data.names),
        "scalability": collect.collect_scalability(values, cfg, data.names[0]),
        "best": collect.collect_best(values, cfg, ctx.best_data.names),
        "feature_sets": collect.collect_feature_sets(values, cfg, ctx),
        "contaminated": collect_contaminated(values, cfg, ctx.best_data.names),
        "data": {
            "source": data.source,
            "data_dir": str(data_dir) if data_dir is not None else os.environ.get("FEDEP_DATA_DIR"),
            "datasets": data.names,
            "missing": data.missing,
            "splits": main["splits"],
        },
        "cells": {"computed": cells.computed, "cached": cells.cached},
    }
    res["wall_time_s"] = time.perf_counter() - t_start
    figures = make_figures(res, out / "figures")
    (out / "results.json").write_text(json.dumps(jsonable(res), indent=1))
    report = write_report(res, figures, out / "report.md")
    log(
        f"done in {format_duration(res['wall_time_s'])} ({cells.computed} cells computed, "
        f"{cells.cached} cached): {report}"
    )
    return report

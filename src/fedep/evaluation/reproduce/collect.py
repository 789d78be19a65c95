"""Turn the plan's cell values into the sections of ``results.json``.

One function per section, each reading the cells by the keys of :mod:`.plan`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedep.detectors import ABLATION_CASES
from fedep.evaluation.reproduce.cells import Values
from fedep.evaluation.reproduce.config import (
    BEST_METHODS,
    METHOD_ORDER,
    PAPER_NUMBERS,
    ROUND_METHODS,
    SUMMARY_KEYS,
)

__all__ = [
    "num",
    "summarise",
    "short_row",
    "collect_best",
    "collect_feature_sets",
    "collect_main",
    "collect_rounds",
    "collect_ablation",
    "collect_rank",
    "collect_scalability",
]

_THRESHOLD_NAMES = {
    "honest": "honest",
    "personalised": "honest-personalised",
    "test_tuned": "test-tuned",
}


def num(v) -> float:
    """``None`` (a NaN in JSON) as NaN, anything else as float."""
    return float("nan") if v is None else float(v)


def summarise(values: list[dict]) -> tuple[dict, dict]:
    """Mean and std over seeds of every metric in :data:`SUMMARY_KEYS` (NaN-aware)."""
    mean, std = {}, {}
    for k in SUMMARY_KEYS:
        xs = np.array([num(v.get(k)) for v in values], dtype=float)
        mean[k] = float(np.nanmean(xs)) if np.isfinite(xs).any() else float("nan")
        std[k] = float(np.nanstd(xs)) if np.isfinite(xs).any() else float("nan")
    return mean, std


def _roc_entry(run: dict) -> dict:
    """A run's ROC points, its AUC and the honest operating point (FPR, TPR)."""
    h = run["honest"]
    return {
        "fpr": run["roc"]["fpr"],
        "tpr": run["roc"]["tpr"],
        "roc_auc": h["roc_auc"],
        "operating_point": {"fpr": h["fpr"], "tpr": h["rec"]},
    }


def collect_best(values: Values, cfg: dict, names: list[str]) -> dict:
    """``results.json["best"]``: the headline table, selections, ROC curves, trivial."""
    best = cfg["best"]
    out: dict[str, Any] = {
        "config": {**best, "n_clients": cfg["n_clients"], "seeds": cfg["seeds"]},
        "selection": {},
        "table": [],
        "roc": {},
        "trivial": {},
        "splits": {},
    }
    for name in names:
        out["selection"][name] = {}
        for method in BEST_METHODS:
            sel = values[f"best-{name}-select-{method}"]
            out["selection"][name][method] = sel
            params = dict(sel["best_params"])
            runs = [values[f"best-{name}-{method}-s{seed}"] for seed in cfg["seeds"]]
            mean, std = summarise([r["honest"] for r in runs])
            tmean, tstd = summarise([r["test_tuned"] for r in runs])
            out["table"].append(
                {
                    "dataset": name,
                    "method": method,
                    "params": params,
                    "rank": int(params["n_components"]),
                    "alpha": params.get("alpha"),
                    "val_roc_auc": float(sel["best_score"]),
                    "mean": mean,
                    "std": std,
                    "test_tuned_mean": tmean,
                    "test_tuned_std": tstd,
                    "n_seeds": len(runs),
                    "fit_time_s": float(np.mean([r["fit_time_s"] for r in runs])),
                    "n_iter": float(np.mean([r["n_iter"] for r in runs])),
                    "paper_fedep_roc_auc": PAPER_NUMBERS.get(name, {})
                    .get("FedEP", {})
                    .get("roc_auc"),
                }
            )
            if "roc" in runs[0]:
                out["roc"].setdefault(name, {})[method] = _roc_entry(runs[0])
        out["trivial"][name] = values[f"best-{name}-trivial"]
        out["splits"][name] = values[f"best-{name}-split"]
    return out


def collect_main(values: Values, cfg: dict, names: list[str]) -> dict:
    """Table 2 rows, trivial metrics, per-class rates, ROC curves, contributions and
    split sizes of the paper setting."""
    out: dict[str, Any] = {
        "main": [],
        "trivial": {},
        "per_class": {},
        "roc": {},
        "contributions": {},
        "splits": {},
    }
    for name in names:
        for protocol in cfg["protocols"]:
            for method in METHOD_ORDER:
                runs = [values[f"{name}-{protocol}-{method}-s{s}"] for s in cfg["seeds"]]
                for thr, label in _THRESHOLD_NAMES.items():
                    vals = [r[thr] for r in runs if r.get(thr)]
                    if not vals:
                        continue
                    mean, std = summarise(vals)
                    out["main"].append(
                        {
                            "dataset": name,
                            "protocol": protocol,
                            "method": method,
                            "threshold": label,
                            "mean": mean,
                            "std": std,
                            "n_seeds": len(vals),
                            "fit_time_s": float(np.mean([r["fit_time_s"] for r in runs])),
                            "params": runs[0].get("params"),
                        }
                    )
                r0 = runs[0]
                if protocol == "clean":
                    out["per_class"].setdefault(name, {})[method] = r0["per_class"]
                    if "roc" in r0:
                        out["roc"].setdefault(name, {})[method] = _roc_entry(r0)
                    if r0.get("contributions") is not None:
                        out["contributions"].setdefault(name, {})[method] = r0["contributions"]
            out["trivial"].setdefault(name, {})[protocol] = values[f"{name}-{protocol}-trivial"]
            out["splits"].setdefault(name, {})[protocol] = values[f"{name}-{protocol}-split"]
        if name in out["contributions"]:
            out["contributions"][name]["features"] = values[f"{name}-features"]
    return out


def collect_rounds(values: Values, names: list[str]) -> dict:
    """``results.json["rounds"]``: per dataset and method, one record per round."""
    return {name: {m: values[f"{name}-rounds-{m}"] for m in ROUND_METHODS} for name in names}


def short_row(name: str, r: dict, **extra) -> dict:
    """One row of the ablation / rank tables (honest metrics, test-tuned F1)."""
    if "note" in r:
        return {"dataset": name, **extra, "note": r["note"]}
    h = r["honest"]
    return {
        "dataset": name,
        **extra,
        "roc_auc": h["roc_auc"],
        "acc": h["acc"],
        "f1": h["f1"],
        "fpr": h["fpr"],
        "test_tuned_f1": r["test_tuned"]["f1"],
        "test_tuned_acc": r["test_tuned"]["acc"],
        "fit_time_s": r["fit_time_s"],
        "n_iter": r.get("n_iter"),
    }


def collect_ablation(values: Values, names: list[str]) -> list[dict]:
    return [
        short_row(name, values[f"{name}-ablation-{case}"], case=case)
        for name in names
        for case in ABLATION_CASES
    ]


def collect_rank(values: Values, cfg: dict, names: list[str]) -> list[dict]:
    return [
        short_row(name, values[f"{name}-rank{rank}-{m}"], method=m, rank=rank)
        for name in names
        for rank in cfg["ranks"]
        for m in ROUND_METHODS
    ]


def collect_scalability(values: Values, cfg: dict, name: str) -> list[dict]:
    return [
        {"dataset": name, "method": m, "n_clients": n, **values[f"{name}-scal{n}-{m}"]}
        for n in cfg["scal_clients"]
        for m in ROUND_METHODS
    ]


def collect_feature_sets(values: Values, cfg: dict, ctx) -> dict:
    """``results.json["feature_sets"]``: the headline protocol on every feature set
    (the headline's own cells for its set), and the generic path's scaling choice.

    ``table`` rows: dataset, feature_set, method, rank, params, val_roc_auc,
    n_features (encoded), mean / std of the honest test metrics over seeds.
    """
    out: dict[str, Any] = {"sets": [], "table": [], "scaling": {}}
    sets = [ctx.headline_set, *ctx.compare_sets]
    out["sets"] = [fs.feature_set for fs in sets]
    for fs in sets:
        for name in fs.data.names:
            pre = fs.prefix(name)
            for method in BEST_METHODS:
                sel = values[f"{pre}-select-{method}"]
                runs = [values[f"{pre}-{method}-s{seed}"] for seed in cfg["seeds"]]
                mean, std = summarise([r["honest"] for r in runs])
                params = dict(sel["best_params"])
                out["table"].append(
                    {
                        "dataset": name,
                        "feature_set": fs.feature_set,
                        "method": method,
                        "rank": int(params["n_components"]),
                        "params": params,
                        "val_roc_auc": float(sel["best_score"]),
                        "n_features": runs[0].get("n_features"),
                        "mean": mean,
                        "std": std,
                        "n_seeds": len(runs),
                        "fit_time_s": float(np.mean([r["fit_time_s"] for r in runs])),
                    }
                )
            if f"{pre}-scaling" in values:
                sc = values[f"{pre}-scaling"]
                out["scaling"][name] = {"chosen": sc["chosen"], "by_scaling": sc["by_scaling"]}
    return out

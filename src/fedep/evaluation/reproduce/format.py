"""Number and table formatting shared by the report sections."""

from __future__ import annotations

import math

from fedep.evaluation.metrics import format_metrics_table

__all__ = ["num", "pm", "one", "split_lines", "short_table"]


def num(v) -> float:
    return float("nan") if v is None else float(v)


def pm(mean, std, pct: bool) -> str:
    m, s = num(mean), num(std)
    if math.isnan(m):
        return "nan"
    k = 100.0 if pct else 1.0
    fmt = "{:.2f}" if pct else "{:.4f}"
    txt = fmt.format(k * m)
    if not math.isnan(s) and s > 0:
        txt += " ± " + fmt.format(k * s)
    return txt


def one(v, pct: bool) -> str:
    return pm(v, float("nan"), pct)


def _split_line(where: str, info: dict) -> str:
    line = (
        f"- {where}: {info['n_train']} train, {info['n_val']} validation "
        f"({100 * info['val_attack_share']:.1f} % attacks), {info['n_test']} test "
        f"({100 * info['test_attack_share']:.1f} % attacks), "
        f"{info['n_features']} features"
    )
    if info.get("fallback"):
        line += f". Split fallback: {info['fallback']}"
    return line + "\n"


def split_lines(splits: dict, what: str | None = None) -> list[str]:
    """Setup lines with the split sizes: ``splits`` is ``{dataset: {protocol: info}}``,
    or with ``what`` ``{dataset: info}``."""
    if what is not None:
        return [_split_line(f"{name} ({what})", info) for name, info in splits.items() if info]
    return [
        _split_line(f"{name}/{prot}", info)
        for name, per in splits.items()
        for prot, info in (per or {}).items()
        if info
    ]


def short_table(rows: list[dict], *keys: str) -> str:
    out = []
    for r in rows:
        e = {"dataset": r["dataset"], **{k: r.get(k) for k in keys}}
        if "note" in r:
            e["note"] = r["note"]
        else:
            e.update(
                {
                    "ROC AUC": one(r["roc_auc"], False),
                    "Acc %": one(r["acc"], True),
                    "F1 %": one(r["f1"], True),
                    "FPR %": one(r["fpr"], True),
                    "test-tuned F1 %": one(r["test_tuned_f1"], True),
                    "fit s": f"{r['fit_time_s']:.2f}",
                    "rounds": r.get("n_iter"),
                }
            )
        out.append(e)
    cols = [
        "dataset",
        *keys,
        "ROC AUC",
        "Acc %",
        "F1 %",
        "FPR %",
        "test-tuned F1 %",
        "fit s",
        "rounds",
        "note",
    ]
    return format_metrics_table(out, cols)

"""Figures of the reproduction report (PNG, print resolution).

ROC curves (a colour, line style and marker per method; the honest operating point
marked on each curve; curves that coincide named in the legend), accuracy / ROC AUC /
objective per round (one quantity per axes), mean residual contribution per feature
on test attacks, and time per round vs number of clients.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = [
    "DPI",
    "STYLES",
    "TOP_FEATURES",
    "COINCIDE_TOL",
    "style",
    "coincident_pairs",
    "top_features",
    "padded_limits",
    "make_figures",
]

#: Resolution of every saved figure (print quality).
DPI = 200
#: Features shown in a contribution plot.
TOP_FEATURES = 15
#: Two ROC curves "coincide" when their TPRs differ by less than this everywhere on a
#: common FPR grid.
COINCIDE_TOL = 0.01

#: One distinguishable style per method: colour, line style, marker.
STYLES: dict[str, dict] = {
    "FedEP": {"color": "tab:blue", "linestyle": "-", "marker": "o"},
    "FedPG": {"color": "tab:orange", "linestyle": "--", "marker": "s"},
    "PooledPCA": {"color": "tab:green", "linestyle": ":", "marker": "^"},
    "LocalPCA": {"color": "tab:red", "linestyle": "-.", "marker": "v"},
    "OneShotPCA": {"color": "tab:purple", "linestyle": (0, (5, 1, 1, 1)), "marker": "D"},
}
_FALLBACK = [
    {"color": c, "linestyle": ls, "marker": mk}
    for c, ls, mk in zip(
        ("tab:brown", "tab:pink", "tab:gray", "tab:olive", "tab:cyan"),
        ("-", "--", ":", "-.", "-"),
        ("P", "X", "*", "h", "<"),
        strict=True,
    )
]


def style(method: str, i: int = 0) -> dict:
    """Plot style of ``method`` (a fallback by position for unknown names)."""
    return dict(STYLES.get(method, _FALLBACK[i % len(_FALLBACK)]))


def _num(v) -> float:
    return float("nan") if v is None else float(v)


def coincident_pairs(
    curves: dict[str, dict], tol: float = COINCIDE_TOL, n_grid: int = 201
) -> list[tuple[str, str, float]]:
    """Pairs of ROC curves whose TPRs differ by less than ``tol`` at every FPR of a
    common grid (``n_grid`` points in [0, 1]; TPR interpolated): ``(a, b, max |dTPR|)``
    in the order of ``curves``."""
    grid = np.linspace(0.0, 1.0, n_grid)
    tprs = {}
    for m, c in curves.items():
        fpr = np.asarray(c.get("fpr") or [], dtype=float)
        tpr = np.asarray(c.get("tpr") or [], dtype=float)
        if fpr.size >= 2:
            tprs[m] = np.interp(grid, fpr, tpr)
    names = list(tprs)
    out = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            d = float(np.max(np.abs(tprs[a] - tprs[b])))
            if d < tol:
                out.append((a, b, d))
    return out


def top_features(
    contributions: dict[str, list], features: list[str], k: int = TOP_FEATURES
) -> list[int]:
    """Indices of the ``k`` features with the largest contribution of any method,
    largest first."""
    mat = np.array([np.asarray(v, dtype=float) for v in contributions.values()])
    order = np.argsort(-np.nanmax(mat, axis=0), kind="stable")
    return [int(i) for i in order[: min(k, len(features))]]


def padded_limits(values, lo: float | None = None, hi: float | None = None, pad=0.1):
    """Axis limits around the finite ``values`` with ``pad`` of their span on each side
    (at least 0.01), clipped to ``[lo, hi]``."""
    v = np.asarray([_num(x) for x in values], dtype=float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return (0.0 if lo is None else lo, 1.0 if hi is None else hi)
    span = max(float(v.max() - v.min()), 0.01)
    a, b = float(v.min()) - pad * span, float(v.max()) + pad * span
    if lo is not None:
        a = max(a, lo)
    if hi is not None:
        b = min(b, hi)
    return a, b


def _plot_roc(ax, curves: dict[str, dict]) -> list[tuple[str, str, float]]:
    same = coincident_pairs(curves)
    twin = {}
    for a, b, _ in same:
        twin.setdefault(b, a)
    for i, (m, c) in enumerate(curves.items()):
        st = style(m, i)
        label = f"{m} (AUC {_num(c.get('roc_auc')):.3f})"
        if m in twin:
            label += f", = {twin[m]}"
        fpr, tpr = np.asarray(c["fpr"], float), np.asarray(c["tpr"], float)
        n = max(fpr.size, 1)
        ax.plot(
            fpr,
            tpr,
            color=st["color"],
            linestyle=st["linestyle"],
            marker=st["marker"],
            markevery=max(1, n // 8),
            markersize=4,
            markerfacecolor="none",
            lw=1.4,
            label=label,
        )
        op = c.get("operating_point")
        if op and op.get("fpr") is not None and op.get("tpr") is not None:
            ax.plot(
                [op["fpr"]],
                [op["tpr"]],
                marker=st["marker"],
                markersize=9,
                color=st["color"],
                markeredgecolor="k",
                linestyle="none",
                zorder=5,
            )
    ax.plot([0, 1], [0, 1], color="0.6", lw=0.8, linestyle=":")
    ax.set(xlim=(0, 1), ylim=(0, 1.01), xlabel="false-positive rate", ylabel="true-positive rate")
    ax.legend(fontsize=6.5, loc="lower right")
    return same


def _roc_caption(ax) -> None:
    ax.text(
        0.02,
        0.98,
        "filled marker: honest threshold\n(95 % of validation normals)",
        transform=ax.transAxes,
        fontsize=6,
        va="top",
    )


def _save(fig, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path.name


def _roc_best(plt, best_roc: dict, fig_dir: Path) -> list[str]:
    if not best_roc:
        return []
    n = len(best_roc)
    fig, axes = plt.subplots(1, n, figsize=(3.8 * n, 3.8), squeeze=False)
    for ax, (name, curves) in zip(axes[0], best_roc.items(), strict=True):
        _plot_roc(ax, curves)
        _roc_caption(ax)
        ax.set_title(name, fontsize=9)
    fig.suptitle("Best honest configuration (rich features, validation-selected rank)", fontsize=9)
    return [_save(fig, fig_dir / "roc_best.png")]


def _roc_datasets(plt, roc: dict, fig_dir: Path) -> list[str]:
    out = []
    for name, curves in roc.items():
        fig, ax = plt.subplots(figsize=(4.6, 4.2))
        _plot_roc(ax, curves)
        _roc_caption(ax)
        ax.set_title(f"ROC, {name} (clean, paper features)", fontsize=9)
        out.append(_save(fig, fig_dir / f"roc_{name}.png"))
    return out


def _objective_axes(ax, m: str, rows: list[dict], i: int) -> None:
    st = style(m, i)
    rr = [r["round"] for r in rows]
    obj = np.array([_num(r["objective"]) for r in rows])
    ax.plot(rr, obj, color=st["color"], linestyle=st["linestyle"], marker=st["marker"], ms=3)
    fin = obj[np.isfinite(obj)]
    if fin.size and fin.min() > 0 and fin.max() / fin.min() >= 10:
        ax.set_yscale("log")
    else:
        ax.set_ylim(*padded_limits(obj))
    ax.set(xlabel="communication round", ylabel=f"{m} objective")
    ax.set_title(f"{m}: objective", fontsize=9)


def _rounds(plt, rounds: dict, fig_dir: Path) -> list[str]:
    out = []
    for name, by_m in rounds.items():
        n_obj = len(by_m)
        fig, axes = plt.subplots(1, 2 + n_obj, figsize=(3.4 * (2 + n_obj), 3.2))
        a_acc, a_auc = axes[0], axes[1]
        accs, aucs = [], []
        for i, (m, rows) in enumerate(by_m.items()):
            st = style(m, i)
            rr = [r["round"] for r in rows]
            acc = [_num(r["acc"]) for r in rows]
            auc = [_num(r["roc_auc"]) for r in rows]
            accs += acc
            aucs += auc
            kw = {"color": st["color"], "linestyle": st["linestyle"], "marker": st["marker"]}
            a_acc.plot(rr, acc, ms=3, label=m, **kw)
            a_auc.plot(rr, auc, ms=3, label=m, **kw)
            _objective_axes(axes[2 + i], m, rows, i)
        a_acc.set(xlabel="communication round", ylabel="test accuracy (honest threshold)")
        a_acc.set_ylim(*padded_limits(accs, 0.0, 1.0))
        a_acc.set_title(f"{name}: accuracy", fontsize=9)
        a_auc.set(xlabel="communication round", ylabel="test ROC AUC")
        a_auc.set_ylim(*padded_limits(aucs, 0.0, 1.0))
        a_auc.set_title(f"{name}: ROC AUC", fontsize=9)
        a_acc.legend(fontsize=7)
        out.append(_save(fig, fig_dir / f"rounds_{name}.png"))
    return out


def _contributions(plt, contributions: dict, fig_dir: Path) -> list[str]:
    out = []
    for name, entry in contributions.items():
        by_m = {m: v for m, v in entry.items() if m != "features"}
        if not by_m:
            continue
        feats = entry.get("features") or [str(j) for j in range(len(next(iter(by_m.values()))))]
        idx = top_features(by_m, feats)
        k, n_m = len(idx), len(by_m)
        y = np.arange(k)
        h = 0.8 / n_m
        fig, ax = plt.subplots(figsize=(7, max(3.0, 0.3 * k + 1.2)))
        for i, (m, v) in enumerate(by_m.items()):
            vals = np.asarray(v, dtype=float)[idx]
            ax.barh(
                y + (i - (n_m - 1) / 2) * h, vals, height=h, color=style(m, i)["color"], label=m
            )
        ax.set_yticks(y, [feats[j] for j in idx], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlim(left=0)
        ax.set_xlabel("mean residual contribution on test attacks (features sum to the mean score)")
        ax.set_title(
            f"What makes attacks anomalous, {name}: top {k} features by mean residual\n"
            "contribution over the test attacks (global basis, clean protocol, first seed)",
            fontsize=8,
        )
        ax.legend(fontsize=7, loc="lower right")
        out.append(_save(fig, fig_dir / f"contributions_{name}.png"))
    return out


def _scalability(plt, res: dict, fig_dir: Path) -> list[str]:
    if not res["scalability"]:
        return []
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.5))
    methods = list(dict.fromkeys(r["method"] for r in res["scalability"]))
    for i, m in enumerate(methods):
        st = style(m, i)
        rows = [r for r in res["scalability"] if r["method"] == m]
        a1.plot(
            [r["n_clients"] for r in rows],
            [r["time_per_round_s"] for r in rows],
            color=st["color"],
            linestyle=st["linestyle"],
            marker=st["marker"],
            label=m,
        )
    for name, by_m in res["rounds"].items():
        for i, (m, rows) in enumerate(by_m.items()):
            st = style(m, i)
            a2.plot(
                [r["round"] for r in rows],
                [r["cumulative_time_s"] for r in rows],
                color=st["color"],
                linestyle=st["linestyle"],
                marker=st["marker"],
                ms=3,
                label=f"{m}, {name}",
            )
    a1.set(xlabel="number of clients", ylabel="seconds per round")
    a1.set_ylim(bottom=0)
    a1.set_title(f"time per round ({res['scalability'][0]['dataset']})", fontsize=9)
    a2.set(xlabel="communication round", ylabel="cumulative training time (s)")
    a2.set_ylim(bottom=0)
    a2.set_title(f"cumulative time, {res['config']['n_clients']} clients", fontsize=9)
    a1.legend(fontsize=7)
    a2.legend(fontsize=6)
    return [_save(fig, fig_dir / "scalability.png")]


def make_figures(res: dict, fig_dir: Path) -> dict[str, list[str]]:
    """Draw every figure of ``res`` into ``fig_dir``; file names per report section."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig_dir = Path(fig_dir)
    fig_dir.mkdir(parents=True, exist_ok=True)
    return {
        "best": _roc_best(plt, res.get("best", {}).get("roc", {}), fig_dir),
        "roc": _roc_datasets(plt, res["roc"], fig_dir),
        "rounds": _rounds(plt, res["rounds"], fig_dir),
        "contributions": _contributions(plt, res.get("contributions", {}), fig_dir),
        "scalability": _scalability(plt, res, fig_dir),
    }

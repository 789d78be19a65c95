"""Figures of the reproduction report (PNG, print resolution).

Figures are for looking: every curve has its own colour, line style and marker; legends
sit outside the data at :data:`LEGEND_FONTSIZE` or more; titles name the setting.

- ROC curves on a log FPR axis (operating points lie at FPR 1-5 %), the honest
  operating point of each curve marked and labelled with the method's name (labels
  placed away from curves and each other), curves that coincide named in the legend,
  a caption under the legend naming any curve that lies below the diagonal.
- Accuracy / ROC AUC / objective per round, one quantity per axes, units and
  "higher/lower is better" on the axis (FedPG: its consensus's and clients' errors);
  a quantity whose range is below
  :data:`FLAT_REL` of its value is drawn in a window of :data:`FLAT_WINDOW` of its
  value and labelled "range x..y" (no steep decline drawn out of a flat curve).
- Mean residual contribution per feature on test attacks (log axis when the values
  span more than :data:`LOG_DECADES` decades).
- Time per round vs number of clients (a line only through :data:`MIN_LINE_POINTS`
  points or more; markers only below that) and cumulative time per round.
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
    "LEGEND_FONTSIZE",
    "FLAT_REL",
    "FLAT_WINDOW",
    "LOG_DECADES",
    "MIN_LINE_POINTS",
    "below_diagonal",
    "flat_range",
    "honest_limits",
    "roc_figure",
    "rounds_figure",
    "contributions_figure",
    "scalability_figure",
    "make_figures",
]

#: Resolution of every saved figure (print quality).
DPI = 200
#: Features shown in a contribution plot.
TOP_FEATURES = 15
#: Two ROC curves "coincide" when their TPRs differ by less than this everywhere on a
#: common FPR grid.
COINCIDE_TOL = 0.01
#: Font size of legends, labels of operating points and captions (points).
LEGEND_FONTSIZE = 8
#: A per-round quantity whose range is below this share of its value is "flat".
FLAT_REL = 0.01
#: A flat quantity is drawn in a window of this share of its value (its range printed).
FLAT_WINDOW = 0.05
#: A contribution axis is logarithmic when its positive values span more decades.
LOG_DECADES = 3
#: Fewest points joined by a line (fewer: markers only, no trend suggested).
MIN_LINE_POINTS = 3
#: A curve is "below the diagonal" when TPR < FPR - this on ...
BELOW_TOL = 0.01
#: ... at least this share of a linear FPR grid.
BELOW_SHARE = 0.1

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


def flat_range(values, rel: float = FLAT_REL) -> tuple[float, float] | None:
    """``(min, max)`` of the finite ``values`` when their range is below ``rel`` of
    their level (largest absolute value), else ``None``."""
    v = np.asarray([_num(x) for x in values], dtype=float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return None
    level = float(np.max(np.abs(v)))
    if level == 0 or float(v.max() - v.min()) >= rel * level:
        return None
    return float(v.min()), float(v.max())


def honest_limits(values, lo: float | None = None, hi: float | None = None, min_span: float = 0.0):
    """Axis limits that do not turn a flat curve into a steep one: for a
    :func:`flat_range` a window of :data:`FLAT_WINDOW` of the value around the data,
    else :func:`padded_limits`; at least ``min_span`` wide (e.g. 5 points of a
    percentage), clipped to ``[lo, hi]``."""
    fr = flat_range(values)
    if fr is None:
        a, b = padded_limits(values, lo, hi)
        if b - a >= min_span:
            return a, b
        fr = (a, b)
        half = 0.5 * min_span
    else:
        half = 0.5 * max(FLAT_WINDOW * max(abs(fr[0]), abs(fr[1])), min_span)
    c = 0.5 * (fr[0] + fr[1])
    a, b = c - half, c + half
    if lo is not None and a < lo:
        a, b = lo, min(lo + 2 * half, b + (lo - a))
    if hi is not None and b > hi:
        a, b = max(hi - 2 * half, a - (b - hi)), hi
    if lo is not None:
        a = max(a, lo)
    return a, b


def below_diagonal(
    curves: dict[str, dict], tol: float = BELOW_TOL, min_share: float = BELOW_SHARE
) -> list[tuple[str, float, float]]:
    """Curves below the chance diagonal (TPR < FPR - ``tol``) on at least ``min_share``
    of a linear FPR grid: ``(method, share of the grid, ROC AUC)``."""
    grid = np.linspace(0.0, 1.0, 201)
    out = []
    for m, c in curves.items():
        fpr = np.asarray(c.get("fpr") or [], dtype=float)
        tpr = np.asarray(c.get("tpr") or [], dtype=float)
        if fpr.size < 2:
            continue
        share = float(np.mean(np.interp(grid, fpr, tpr) < grid - tol))
        if share >= min_share:
            out.append((m, share, _num(c.get("roc_auc"))))
    return out


def _setting(res: dict) -> str:
    """The federation of the paper setting, for titles."""
    n = res.get("config", {}).get("n_clients")
    if res.get("data", {}).get("source") == "synthetic":
        return f"{n} clients, synthetic data"
    return f"{n} clients, non-IID (dst_bytes-sorted chunks)"


def _wrap(text: str, width: int) -> str:
    import textwrap

    return "\n".join(textwrap.fill(p, width) for p in text.split("\n"))


def _fpr_floor(curves: dict[str, dict]) -> float:
    """Left end of the log FPR axis: the decade of the smallest positive FPR, in
    [1e-4, 1e-2]."""
    pos = [float(f) for c in curves.values() for f in (c.get("fpr") or []) if f and f > 0]
    pos += [
        float(c["operating_point"]["fpr"])
        for c in curves.values()
        if (c.get("operating_point") or {}).get("fpr")
    ]
    if not pos:
        return 1e-3
    return float(np.clip(10 ** np.floor(np.log10(min(pos))), 1e-4, 1e-2))


def _densify(xy: np.ndarray, step: float = 2.0) -> np.ndarray:
    """Points every ``step`` display pixels along a polyline (label obstacles)."""
    xy = xy[np.all(np.isfinite(xy), axis=1)]
    if len(xy) < 2:
        return xy
    out = [xy[:1]]
    for a, b in zip(xy[:-1], xy[1:], strict=True):
        n = int(min(np.ceil(np.hypot(*(b - a)) / step), 2000))
        if n > 1:
            t = np.linspace(0, 1, n + 1)[1:, None]
            out.append(a + t * (b - a))
        else:
            out.append(b[None])
    return np.concatenate(out)


def _overlap(a, b) -> float:
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return max(w, 0.0) * max(h, 0.0)


def _label_points(ax, points: list[tuple[str, float, float, str]], lines) -> list:
    """Label each ``(text, x, y, colour)`` point next to its marker: of 40 candidate
    offsets the one whose label covers the fewest curve pixels (``lines``), no other
    label or marker, and stays inside the axes; a leader line when it sits away."""
    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    obst = [_densify(ax.transData.transform(ln.get_xydata())) for ln in lines]
    obst = np.concatenate(obst) if obst else np.empty((0, 2))
    marks = [ax.transData.transform((x, y)) for _, x, y, _ in points]
    ax_bb = ax.get_window_extent(renderer)
    placed, out = [], []
    for i in sorted(range(len(points)), key=lambda j: -points[j][2]):
        text, x, y, color = points[i]
        best = None
        for r in (9, 20, 34, 50, 70):
            for ang in (0, 30, -30, 60, -60, 120, -120, 150, -150, 180):
                dx, dy = r * np.cos(np.radians(ang)), r * np.sin(np.radians(ang))
                ha = "left" if dx > 1 else "right" if dx < -1 else "center"
                va = "bottom" if dy > 1 else "top" if dy < -1 else "center"
                t = ax.annotate(
                    text,
                    (x, y),
                    xytext=(dx, dy),
                    textcoords="offset points",
                    ha=ha,
                    va=va,
                    fontsize=LEGEND_FONTSIZE,
                )
                bb = t.get_window_extent(renderer).expanded(1.06, 1.15)
                t.remove()
                inside = (obst[:, 0] >= bb.x0) & (obst[:, 0] <= bb.x1)
                inside &= (obst[:, 1] >= bb.y0) & (obst[:, 1] <= bb.y1)
                pad = 6 * fig.dpi / 72
                hit = sum(
                    bb.x0 - pad <= mx <= bb.x1 + pad and bb.y0 - pad <= my <= bb.y1 + pad
                    for mx, my in marks
                )
                score = (
                    float(inside.sum())
                    + 200.0 * hit
                    + sum(_overlap(bb, p) for p in placed) / 4.0
                    + (1e4 if not ax_bb.contains(bb.x0, bb.y0) else 0.0)
                    + (1e4 if not ax_bb.contains(bb.x1, bb.y1) else 0.0)
                    + 0.3 * r
                )
                if best is None or score < best[0]:
                    best = (score, dx, dy, ha, va, bb, r)
        _, dx, dy, ha, va, bb, r = best
        placed.append(bb)
        arrow = (
            {"arrowstyle": "-", "color": color, "lw": 0.7, "shrinkA": 1, "shrinkB": 5}
            if r > 9
            else None
        )
        out.append(
            ax.annotate(
                text,
                (x, y),
                xytext=(dx, dy),
                textcoords="offset points",
                ha=ha,
                va=va,
                fontsize=LEGEND_FONTSIZE,
                color=color,
                fontweight="bold",
                arrowprops=arrow,
                zorder=6,
                bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8},
            )
        )
    return out


def _plot_roc(ax, curves: dict[str, dict]):
    """Curves on a log FPR axis, the diagonal, the honest operating points (marked,
    not yet labelled), legend below the axes. Returns the coinciding pairs, the curves
    below the diagonal, the operating points to label and the curve lines."""
    from matplotlib.lines import Line2D

    same = coincident_pairs(curves)
    below = below_diagonal(curves)
    twin = {}
    for a, b, _ in same:
        twin.setdefault(b, a)
    floor = _fpr_floor(curves)
    ax.set_xscale("log", nonpositive="clip")
    lines, points = [], []
    for i, (m, c) in enumerate(curves.items()):
        st = style(m, i)
        label = f"{m} (AUC {_num(c.get('roc_auc')):.3f})"
        if m in twin:
            label += f", = {twin[m]}"
        fpr, tpr = np.asarray(c["fpr"], float), np.asarray(c["tpr"], float)
        keep = fpr >= floor
        # the curve from the axis' left edge: TPR interpolated there
        fpr_p = np.concatenate([[floor], fpr[keep]])
        tpr_p = np.concatenate([[np.interp(floor, fpr, tpr)], tpr[keep]]) if fpr.size else fpr_p
        (ln,) = ax.plot(
            fpr_p,
            tpr_p,
            color=st["color"],
            linestyle=st["linestyle"],
            marker=st["marker"],
            markevery=0.12,
            markersize=4,
            markerfacecolor="none",
            lw=1.4,
            label=label,
        )
        lines.append(ln)
        op = c.get("operating_point")
        if op and op.get("fpr") is not None and op.get("tpr") is not None:
            ox = max(float(op["fpr"]), floor)
            ax.plot(
                [ox],
                [op["tpr"]],
                marker=st["marker"],
                markersize=8,
                color=st["color"],
                markeredgecolor="k",
                linestyle="none",
                zorder=5,
            )
            points.append((m, ox, float(op["tpr"]), st["color"]))
    xs = np.logspace(np.log10(floor), 0, 200)
    (diag,) = ax.plot(
        xs, xs, color="0.5", lw=0.9, linestyle=(0, (1, 2)), label="chance (TPR = FPR)"
    )
    lines.append(diag)
    ax.axvline(0.05, color="0.75", lw=0.8, linestyle="--", zorder=0)
    ax.grid(True, which="major", alpha=0.25)
    ax.set(
        xlim=(floor, 1),
        ylim=(0, 1.02),
        xlabel="false-positive rate (log scale)",
        ylabel="true-positive rate (recall)",
    )
    handles, labels = ax.get_legend_handles_labels()
    handles.append(Line2D([], [], marker="o", ms=8, color="0.6", mec="k", linestyle="none"))
    labels.append("honest operating point (labelled)")
    leg = ax.legend(
        handles,
        labels,
        fontsize=LEGEND_FONTSIZE,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.15),
        frameon=False,
    )
    return same, below, points, lines, leg


def _roc_caption_text(below, width: int) -> str:
    """Caption under the legend: the operating point, the dashed line, and the curves
    below the diagonal."""
    text = (
        "Large marker: operating point at the honest threshold (95 % quantile of "
        "validation-normal scores); grey dashed: target FPR 5 %."
    )
    if below:
        text += (
            "\nBelow the chance diagonal (share of the FPR range): "
            + ", ".join(
                f"{m} {100 * share:.0f} %" + (f" (AUC {auc:.3f} < 0.5)" if auc < 0.5 else "")
                for m, share, auc in below
            )
            + "; there the detector ranks attacks as more normal than normal records."
        )
    return _wrap(text, width)


def _roc_caption(ax, leg, text: str) -> None:
    ax.annotate(
        text,
        xy=(0.0, 0.0),
        xycoords=("axes fraction", leg),
        xytext=(0, -2),
        textcoords="offset points",
        ha="left",
        va="top",
        fontsize=LEGEND_FONTSIZE,
        color="0.25",
    )


def roc_figure(panels: dict[str, dict], titles: dict[str, str], suptitle: str | None = None):
    """One ROC axes per entry of ``panels`` (title from ``titles``), operating points
    labelled after the layout is fixed (labels in offset points). The figure is as
    tall as the legend and caption under the axes need (the axes keep their size)."""
    import matplotlib.pyplot as plt

    n = len(panels)
    w = 4.6 if n == 1 else 4.2
    captions = {
        name: _roc_caption_text(below_diagonal(curves), int(w * 12))
        for name, curves in panels.items()
    }
    n_leg = max(len(c) for c in panels.values()) + 2
    n_cap = max(c.count("\n") + 1 for c in captions.values())
    height = 4.4 + 0.19 * n_leg + 0.15 * n_cap + (0.3 if suptitle else 0.0)
    fig, axes = plt.subplots(1, n, figsize=(w * n, height), squeeze=False)
    todo = []
    for ax, (name, curves) in zip(axes[0], panels.items(), strict=True):
        same, below, points, lines, leg = _plot_roc(ax, curves)
        _roc_caption(ax, leg, captions[name])
        ax.set_title(_wrap(titles.get(name, name), int(w * 11)), fontsize=9)
        todo.append((ax, points, lines))
    if suptitle:
        fig.suptitle(suptitle, fontsize=10)
    fig.tight_layout()
    for ax, points, lines in todo:
        _label_points(ax, points, lines)
    return fig


def _save(fig, path: Path, layout: bool = True) -> str:
    import matplotlib.pyplot as plt

    if layout:
        fig.tight_layout()
    fig.savefig(path, dpi=DPI, bbox_inches="tight", pad_inches=0.08)
    plt.close(fig)
    return path.name


def _roc_best(plt, res: dict, fig_dir: Path) -> list[str]:
    best_roc = res.get("best", {}).get("roc", {})
    if not best_roc:
        return []
    titles = {name: f"{name}" for name in best_roc}
    fig = roc_figure(
        best_roc,
        titles,
        "ROC, best honest configuration: rich features, validation-selected rank, "
        f"clean protocol, {_setting(res)}, seed 0",
    )
    return [_save(fig, fig_dir / "roc_best.png", layout=False)]


def _roc_datasets(plt, res: dict, fig_dir: Path) -> list[str]:
    out = []
    for name, curves in res["roc"].items():
        title = f"ROC, {name}: paper features, clean protocol, {_setting(res)}, seed 0"
        fig = roc_figure({name: curves}, {name: title})
        out.append(_save(fig, fig_dir / f"roc_{name}.png", layout=False))
    return out


def _flat_note(ax, values, fmt: str = "{:.4g}") -> None:
    fr = flat_range(values)
    if fr is not None:
        ax.text(
            0.02,
            0.03,
            f"flat: range {fmt.format(fr[0])}..{fmt.format(fr[1])} (< {100 * FLAT_REL:g} %)",
            transform=ax.transAxes,
            fontsize=LEGEND_FONTSIZE,
            color="0.25",
        )


def _plain_y(ax) -> None:
    from matplotlib.ticker import ScalarFormatter

    f = ScalarFormatter(useOffset=False)
    f.set_scientific(False)
    ax.yaxis.set_major_formatter(f)


def _line_kw(st: dict, n_points: int) -> dict:
    """Colour, marker and the line style, or no line below :data:`MIN_LINE_POINTS`."""
    ls = st["linestyle"] if n_points >= MIN_LINE_POINTS else "none"
    return {"color": st["color"], "linestyle": ls, "marker": st["marker"]}


def _value_scale(ax, v: np.ndarray) -> str:
    """A log y axis when the positive values span a decade or more, else honest linear
    limits (a flat range labelled); returns the label's note (", log scale" or "")."""
    fin = v[np.isfinite(v)]
    if fin.size and fin.min() > 0 and fin.max() / fin.min() >= 10:
        ax.set_yscale("log")
        return ", log scale"
    ax.set_ylim(*honest_limits(v))
    _plain_y(ax)
    _flat_note(ax, v)
    return ""


def _objective_axes(ax, m: str, rows: list[dict], i: int) -> None:
    st = style(m, i)
    rr = [r["round"] for r in rows]
    obj = np.array([_num(r["objective"]) for r in rows])
    ax.plot(rr, obj, ms=3, label=m, **_line_kw(st, len(rr)))
    scale = _value_scale(ax, obj)
    ax.set(
        xlabel="communication round",
        ylabel=f"objective (fit + sparse penalties,\nsum over clients{scale}), lower is better",
    )
    ax.set_title(f"{m}: objective", fontsize=9)


#: Line style of FedPG's clients' own fits, beside its consensus's error.
LOCAL_FIT_LINESTYLE = ":"


def _fedpg_axes(ax, m: str, rows: list[dict], i: int) -> None:
    """FedPG's reconstruction errors per round: the consensus's (the record's
    ``objective``, of the consensus the round started from, so drawn at the round that
    produced it; 0: the start) and the clients' own bases' (``local_fit``, what its
    local steps decrease). Under the paper's ``rho = 0.01`` the first may rise while
    the second falls (docs/convergence.md)."""
    st = style(m, i)
    xc = [int(r["round"]) - 1 for r in rows]
    cons = np.array([_num(r["objective"]) for r in rows])
    own = [(int(r["round"]), _num(r["local_fit"])) for r in rows if r.get("local_fit") is not None]
    ax.plot(xc, cons, ms=3, label="consensus (global model)", **_line_kw(st, len(xc)))
    values = list(cons)
    if own:
        kw = _line_kw(st, len(own))
        if kw["linestyle"] != "none":
            kw["linestyle"] = LOCAL_FIT_LINESTYLE
        xo, yo = zip(*own, strict=True)
        ax.plot(xo, yo, ms=3, mfc="none", label="clients' own bases", **kw)
        values += list(yo)
        ax.legend(fontsize=LEGEND_FONTSIZE, frameon=False, loc="best")
    scale = _value_scale(ax, np.asarray(values, dtype=float))
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(
        xlabel="communication round (0: start)",
        ylabel=f"reconstruction error of training records\n(sum over clients{scale}), "
        "lower is better",
    )
    ax.set_title(f"{m}: consensus vs clients' own fits", fontsize=9)


def rounds_figure(name: str, by_m: dict[str, list[dict]], setting: str):
    """Accuracy, ROC AUC and each method's objective per round (FedPG: the
    reconstruction errors of its consensus and of the clients' own bases,
    :func:`_fedpg_axes`); one shared legend."""
    import matplotlib.pyplot as plt

    n_obj = len(by_m)
    fig, axes = plt.subplots(1, 2 + n_obj, figsize=(3.5 * (2 + n_obj), 3.8))
    a_acc, a_auc = axes[0], axes[1]
    accs, aucs = [], []
    for i, (m, rows) in enumerate(by_m.items()):
        st = style(m, i)
        rr = [r["round"] for r in rows]
        acc = [100 * _num(r["acc"]) for r in rows]
        auc = [_num(r["roc_auc"]) for r in rows]
        accs += acc
        aucs += auc
        a_acc.plot(rr, acc, ms=3, label=m, **_line_kw(st, len(rr)))
        a_auc.plot(rr, auc, ms=3, label=m, **_line_kw(st, len(rr)))
        (_fedpg_axes if m == "FedPG" else _objective_axes)(axes[2 + i], m, rows, i)
    a_acc.set(xlabel="communication round", ylabel="test accuracy (%), higher is better")
    a_acc.set_ylim(*honest_limits(accs, 0.0, 100.0, min_span=5.0))
    a_acc.set_title("accuracy (honest threshold per round)", fontsize=9)
    a_auc.set(xlabel="communication round", ylabel="test ROC AUC, higher is better")
    a_auc.set_ylim(*honest_limits(aucs, 0.0, 1.0, min_span=0.05))
    a_auc.set_title("ROC AUC", fontsize=9)
    for ax in (a_acc, a_auc):
        _plain_y(ax)
    _flat_note(a_acc, accs, "{:.2f}")
    _flat_note(a_auc, aucs)
    handles, labels = a_acc.get_legend_handles_labels()
    fig.legend(
        handles,
        labels,
        loc="lower center",
        ncol=len(labels),
        fontsize=LEGEND_FONTSIZE + 1,
        frameon=False,
    )
    fig.suptitle(
        f"{name}: per-round curves, paper features, clean protocol, {setting}, seed 0",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig


def _rounds(plt, res: dict, fig_dir: Path) -> list[str]:
    out = []
    for name, by_m in res["rounds"].items():
        fig = rounds_figure(name, by_m, _setting(res))
        out.append(_save(fig, fig_dir / f"rounds_{name}.png", layout=False))
    return out


def contributions_figure(name: str, entry: dict, setting: str):
    """Mean residual contribution of the top features per method (horizontal bars; a
    log axis when the values span more than :data:`LOG_DECADES` decades)."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    by_m = {m: v for m, v in entry.items() if m != "features"}
    if not by_m:
        return None
    feats = entry.get("features") or [str(j) for j in range(len(next(iter(by_m.values()))))]
    idx = top_features(by_m, feats)
    k, n_m = len(idx), len(by_m)
    y = np.arange(k)
    h = 0.8 / n_m
    shown = np.array([np.asarray(v, dtype=float)[idx] for v in by_m.values()])
    pos = shown[np.isfinite(shown) & (shown > 0)]
    log = pos.size > 0 and pos.max() / pos.min() > 10**LOG_DECADES
    fig, ax = plt.subplots(figsize=(8, max(3.4, 0.32 * k + 1.8)))
    if log:
        ax.set_xscale("log", nonpositive="clip")
    for i, (m, v) in enumerate(by_m.items()):
        vals = np.asarray(v, dtype=float)[idx]
        ax.barh(y + (i - (n_m - 1) / 2) * h, vals, height=h, color=style(m, i)["color"], label=m)
    ax.set_yticks(y, [feats[j] for j in idx], fontsize=LEGEND_FONTSIZE)
    ax.invert_yaxis()
    if log:
        ax.set_xlim(
            left=10 ** np.floor(np.log10(pos.min())), right=10 ** np.ceil(np.log10(pos.max()))
        )
        scale = "log scale"
    else:
        ax.set_xlim(left=0)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.3g}"))
        scale = "linear"
    ax.set_xlabel(
        f"mean residual contribution on test attacks ({scale}; a record's features sum to "
        "its score),\nlarger = drives the anomaly score more"
    )
    ax.set_title(
        f"{name}: top {k} of {len(feats)} paper features, ordered by the largest mean "
        "residual contribution of any method\n"
        f"test attacks, global basis, clean protocol, {setting}, seed 0",
        fontsize=9,
    )
    ax.legend(fontsize=LEGEND_FONTSIZE, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(True, axis="x", which="major", alpha=0.25)
    fig.tight_layout()
    return fig


def _contributions(plt, res: dict, fig_dir: Path) -> list[str]:
    out = []
    for name, entry in res.get("contributions", {}).items():
        fig = contributions_figure(name, entry, _setting(res))
        if fig is not None:
            out.append(_save(fig, fig_dir / f"contributions_{name}.png", layout=False))
    return out


#: Line style and marker per dataset in the cumulative-time panel (colour = method).
_DATASET_STYLES = [("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"), ((0, (5, 1, 1, 1)), "v")]


def scalability_figure(res: dict):
    """Seconds per round vs clients (markers only below :data:`MIN_LINE_POINTS` client
    counts) and cumulative time per round of the per-round curves; one style per
    series."""
    import matplotlib.pyplot as plt

    scal = res["scalability"]
    if not scal:
        return None
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4.6))
    methods = list(dict.fromkeys(r["method"] for r in scal))
    counts = sorted({r["n_clients"] for r in scal})
    for i, m in enumerate(methods):
        rows = sorted((r for r in scal if r["method"] == m), key=lambda r: r["n_clients"])
        a1.plot(
            [r["n_clients"] for r in rows],
            [r["time_per_round_s"] for r in rows],
            ms=7,
            label=m,
            **_line_kw(style(m, i), len(rows)),
        )
    r0 = scal[0]
    rows_txt = f", {r0['n_train']} training rows" if r0.get("n_train") else ""
    rounds_txt = res.get("config", {}).get("scal_rounds")
    a1.set(xlabel="number of clients", ylabel="seconds per round (s), lower is better")
    a1.set_xticks(counts)
    a1.set_ylim(bottom=0)
    t1 = f"time per round, {r0['dataset']}{rows_txt}" + (
        f", mean of {rounds_txt} rounds" if rounds_txt else ""
    )
    if len(counts) < MIN_LINE_POINTS:
        t1 += f"\n{len(counts)} client counts: markers only, no trend drawn"
    a1.set_title(_wrap(t1, 70), fontsize=9)
    for d, (name, by_m) in enumerate(res["rounds"].items()):
        ls, mk = _DATASET_STYLES[d % len(_DATASET_STYLES)]
        for i, (m, rows) in enumerate(by_m.items()):
            st = {"color": style(m, i)["color"], "linestyle": ls, "marker": mk}
            a2.plot(
                [r["round"] for r in rows],
                [r["cumulative_time_s"] for r in rows],
                ms=3.5,
                label=f"{m}, {name}",
                **_line_kw(st, len(rows)),
            )
    a2.set(xlabel="communication round", ylabel="cumulative training time (s)")
    a2.set_ylim(bottom=0)
    a2.set_title(
        f"cumulative training time, per-round curves\n{_setting(res)}\n"
        "colour = method; line style and marker = dataset",
        fontsize=9,
    )
    for ax in (a1, a2):
        ax.legend(
            fontsize=LEGEND_FONTSIZE,
            loc="upper center",
            bbox_to_anchor=(0.5, -0.16),
            ncol=2,
            frameon=False,
        )
        ax.grid(True, alpha=0.25)
    fig.tight_layout()
    return fig


def _scalability(plt, res: dict, fig_dir: Path) -> list[str]:
    fig = scalability_figure(res)
    return [] if fig is None else [_save(fig, fig_dir / "scalability.png", layout=False)]


def make_figures(res: dict, fig_dir: Path) -> dict[str, list[str]]:
    """Draw every figure of ``res`` into ``fig_dir``; file names per report section."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig_dir = Path(fig_dir)
    fig_dir.mkdir(parents=True, exist_ok=True)
    return {
        "best": _roc_best(plt, res, fig_dir),
        "roc": _roc_datasets(plt, res, fig_dir),
        "rounds": _rounds(plt, res, fig_dir),
        "contributions": _contributions(plt, res, fig_dir),
        "scalability": _scalability(plt, res, fig_dir),
    }

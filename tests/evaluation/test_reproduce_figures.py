"""Figures: coincident ROC curves, operating points, contributions, resolution, and
properties that make a figure readable (log FPR axis, labelled operating points,
distinct styles, legend size, honest ranges, no trend through two points)."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from fedep.evaluation.reproduce.collect import _roc_entry  # noqa: E402
from fedep.evaluation.reproduce.figures import (  # noqa: E402
    DPI,
    LEGEND_FONTSIZE,
    STYLES,
    below_diagonal,
    coincident_pairs,
    contributions_figure,
    flat_range,
    honest_limits,
    make_figures,
    padded_limits,
    roc_figure,
    rounds_figure,
    scalability_figure,
    top_features,
)
from fedep.evaluation.reproduce.report import ablation_ties, roc_notes  # noqa: E402


def _curve(tpr_shift=0.0):
    fpr = np.linspace(0, 1, 50)
    return {"fpr": list(fpr), "tpr": list(np.clip(np.sqrt(fpr) + tpr_shift, 0, 1))}


def test_coincident_pairs_detects_hidden_curve_only():
    curves = {"FedEP": _curve(), "FedPG": _curve(0.005), "PooledPCA": _curve(-0.2)}
    same = coincident_pairs(curves)
    assert [(a, b) for a, b, _ in same] == [("FedEP", "FedPG")]
    assert same[0][2] == pytest.approx(0.005, abs=1e-9)
    assert coincident_pairs({"FedEP": _curve(), "FedPG": _curve(0.02)}) == []


def test_styles_are_distinguishable():
    triples = {(s["color"], str(s["linestyle"]), s["marker"]) for s in STYLES.values()}
    assert len({t[0] for t in triples}) == len({t[1] for t in triples}) == len(STYLES)
    assert len({t[2] for t in triples}) == len(STYLES)


def test_operating_point_is_honest_fpr_and_recall():
    run = {
        "roc": {"fpr": [0, 0.5, 1], "tpr": [0, 0.9, 1]},
        "honest": {"roc_auc": 0.8, "fpr": 0.043, "rec": 0.71},
    }
    e = _roc_entry(run)
    assert e["operating_point"] == {"fpr": 0.043, "tpr": 0.71}
    assert e["roc_auc"] == 0.8


def test_top_features_and_limits():
    contrib = {"FedEP": [0.1, 5.0, 0.3, 2.0], "FedPG": [4.0, 0.2, 0.1, 0.0]}
    assert top_features(contrib, ["a", "b", "c", "d"], k=3) == [1, 0, 3]
    lo, hi = padded_limits([0.90, 0.95], 0.0, 1.0)
    assert 0.89 < lo < 0.90 and 0.95 < hi <= 1.0
    assert padded_limits([0.99, 1.0], 0.0, 1.0)[1] == 1.0


def _res():
    rounds = [
        {
            "round": r,
            "acc": 0.8 + 0.01 * r,
            "f1": 0.8,
            "roc_auc": 0.9,
            "objective": 10.0**-r,
            "cumulative_time_s": 0.1 * r,
        }
        for r in range(1, 6)
    ]
    roc = {
        m: {**_curve(), "roc_auc": 0.9, "operating_point": {"fpr": 0.05, "tpr": 0.3}}
        for m in ("FedEP", "FedPG")
    }
    return {
        "config": {"n_clients": 20},
        "best": {"roc": {"toy": roc}},
        "roc": {"toy": roc},
        "rounds": {"toy": {"FedEP": rounds, "FedPG": rounds}},
        "contributions": {
            "toy": {
                "features": [f"f{j}" for j in range(20)],
                "FedEP": list(np.arange(20.0)),
                "FedPG": list(np.ones(20)),
            }
        },
        "scalability": [
            {"dataset": "toy", "method": "FedEP", "n_clients": 10, "time_per_round_s": 0.1}
        ],
    }


def test_make_figures_print_resolution(tmp_path):
    import matplotlib.image as mpimg

    figs = make_figures(_res(), tmp_path)
    assert figs["contributions"] == ["contributions_toy.png"]
    assert figs["roc"] == ["roc_toy.png"] and figs["best"] == ["roc_best.png"]
    assert DPI >= 200
    h, w = mpimg.imread(tmp_path / "roc_toy.png").shape[:2]
    assert w >= 4.0 * DPI and h >= 4.0 * DPI


def _triples(fig):
    """(colour, line style, marker) of every line drawn through 2+ points."""
    from matplotlib.colors import to_hex

    out = []
    for ax in fig.axes:
        for ln in ax.get_lines():
            if len(ln.get_xdata()) >= 2 and ln.get_linestyle() not in ("None", "none", ""):
                out.append((ax, (to_hex(ln.get_color()), str(ln.get_linestyle()), ln.get_marker())))
    return out


def _legends(fig):
    return [ax.get_legend() for ax in fig.axes if ax.get_legend()] + list(fig.legends)


def _crowded_roc():
    """Five methods whose operating points pile up at FPR 3-5 %, one curve below the
    diagonal."""
    out = {}
    for i, m in enumerate(STYLES):
        fpr = np.linspace(0, 1, 300) ** 3
        tpr = fpr**1.5 if m == "LocalPCA" else fpr ** (1 / (4 + 0.01 * i))
        out[m] = {
            "fpr": list(fpr),
            "tpr": list(tpr),
            "roc_auc": float(np.trapezoid(tpr, fpr)),
            "operating_point": {"fpr": 0.04, "tpr": float(np.interp(0.04, fpr, tpr))},
        }
    return out


def test_roc_log_fpr_labelled_points_distinct_styles_readable_legend():
    curves = _crowded_roc()
    fig = roc_figure({"toy": curves}, {"toy": "ROC, toy"})
    try:
        ax = fig.axes[0]
        assert ax.get_xscale() == "log"
        assert ax.get_xlim()[0] <= 0.01
        labels = [t for t in ax.texts if t.get_text() in STYLES]
        assert sorted(t.get_text() for t in labels) == sorted(STYLES)
        # labels of piled-up points do not overlap each other
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        boxes = [t.get_window_extent(r) for t in labels]
        for i, a in enumerate(boxes):
            for b in boxes[i + 1 :]:
                assert not a.overlaps(b)
        triples = [t for _, t in _triples(fig)]
        assert len(triples) == len(set(triples)) == len(STYLES) + 2  # + chance, target FPR
        (leg,) = _legends(fig)
        assert all(t.get_fontsize() >= 8 for t in leg.get_texts())
        # legend outside the data: below the axes
        assert leg.get_window_extent(r).y1 < ax.get_window_extent(r).y0
        cap = " ".join(t.get_text() for t in ax.texts)
        cap = cap.replace("\n", " ")
        assert "Below the chance diagonal" in cap and "LocalPCA 9" in cap.replace("\u00a0", " ")
    finally:
        plt.close(fig)


def test_below_diagonal_and_roc_notes():
    curves = _crowded_roc()
    assert [m for m, _, _ in below_diagonal(curves)] == ["LocalPCA"]
    notes = roc_notes({"toy": curves})
    assert "BELOW the chance diagonal" in notes and "< 0.5" in notes
    assert below_diagonal({"FedEP": _curve()}) == []


def _rows(acc0, obj0, n=10):
    return [
        {
            "round": r,
            "acc": acc0 - 0.0005 * r,
            "roc_auc": 0.95 - 0.0001 * r,
            "objective": obj0 * (1 - 0.0004 * r),
            "cumulative_time_s": 0.3 * r,
        }
        for r in range(1, n + 1)
    ]


def test_flat_range_and_honest_limits():
    assert flat_range([0.910, 0.905]) == (0.905, 0.910)
    assert flat_range([0.9, 0.8]) is None
    a, b = honest_limits([5000.0, 4980.0])
    assert b - a >= 0.05 * 5000 - 1e-9  # not stretched to fill the axes
    a, b = honest_limits([99.5, 99.9], 0.0, 100.0, min_span=5.0)
    assert b == 100.0 and b - a == pytest.approx(5.0)
    a, b = honest_limits([90.0, 80.0], 0.0, 100.0, min_span=5.0)
    assert a < 80.0 and b > 90.0 and b - a < 15


def test_rounds_flat_ranges_printed_units_and_shared_legend():
    fig = rounds_figure("toy", {"FedEP": _rows(0.91, 5000), "FedPG": _rows(0.90, 4800)}, "20 c")
    try:
        texts = [t.get_text() for ax in fig.axes for t in ax.texts]
        # AUC and both objectives are flat; accuracy spans 1.45 points (> 1 % of 91)
        assert sum(t.startswith("flat: range") for t in texts) == 3
        for ax in fig.axes:
            lab = ax.get_ylabel()
            assert "higher is better" in lab or "lower is better" in lab
            assert ax.yaxis.get_offset_text().get_text() == ""
            lo, hi = ax.get_ylim()
            for ln in ax.get_lines():
                y = np.asarray(ln.get_ydata(), float)
                # the data fill at most a third of the axes: no steep decline
                assert (y.max() - y.min()) / (hi - lo) < 1 / 3
        (leg,) = fig.legends
        assert [t.get_text() for t in leg.get_texts()] == ["FedEP", "FedPG"]
        assert all(t.get_fontsize() >= LEGEND_FONTSIZE for t in leg.get_texts())
        triples = [t for _, t in _triples(fig)]
        assert len(set(triples)) == 2  # one style per method, repeated per panel
    finally:
        plt.close(fig)


def test_fedpg_round_axes_name_what_they_plot():
    """FedPG's per-round record holds the error of the consensus the round STARTED from
    (``objective``) and of the clients' own bases after it (``local_fit``): its axes
    draw the first at the round that produced the consensus (0: the start) and the
    second at its own round, both named as reconstruction errors, not as an objective
    that the rounds minimise (with the paper's rho the first rises, issue 35)."""
    rows = [
        {
            "round": r,
            "acc": 0.9,
            "roc_auc": 0.95,
            "objective": 52000.0 + 500.0 * r,
            "local_fit": 30000.0 - 100.0 * r,
            "cumulative_time_s": 0.3 * r,
        }
        for r in range(1, 6)
    ]
    fig = rounds_figure("toy", {"FedEP": _rows(0.91, 5000, 5), "FedPG": rows}, "20 c")
    try:
        ax = fig.axes[3]
        assert "objective" not in ax.get_ylabel() and "objective" not in ax.get_title()
        assert "reconstruction error" in ax.get_ylabel()
        cons, own = ax.get_lines()
        assert list(cons.get_xdata()) == [0, 1, 2, 3, 4]
        assert list(cons.get_ydata()) == [r["objective"] for r in rows]
        assert list(own.get_xdata()) == [1, 2, 3, 4, 5]
        assert list(own.get_ydata()) == [r["local_fit"] for r in rows]
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert labels == ["consensus (global model)", "clients' own bases"]
        assert "objective" in fig.axes[2].get_ylabel()  # FedEP's axes unchanged
    finally:
        plt.close(fig)


@pytest.mark.parametrize("big, scale", [(1e9, "log"), (50.0, "linear")])
def test_contributions_log_axis_when_values_span_decades(big, scale):
    entry = {
        "features": [f"f{j}" for j in range(20)],
        "FedEP": [big, *np.linspace(0.5, 5, 19)],
        "FedPG": [big / 2, *np.linspace(0.4, 4, 19)],
    }
    fig = contributions_figure("toy", entry, "20 clients")
    try:
        ax = fig.axes[0]
        assert ax.get_xscale() == scale
        fig.canvas.draw()
        assert ax.xaxis.get_offset_text().get_text() == ""
        title = ax.get_title()
        assert "paper features" in title and "top 15 of 20" in title and "ordered by" in title
        assert ax.get_legend().get_texts()[0].get_fontsize() >= LEGEND_FONTSIZE
    finally:
        plt.close(fig)


def test_scalability_no_line_through_two_points_and_distinct_series():
    res = {
        "config": {"n_clients": 20, "scal_rounds": 2},
        "scalability": [
            {"dataset": "a", "method": m, "n_clients": n, "time_per_round_s": t, "n_train": 60}
            for m in ("FedEP", "FedPG")
            for n, t in ((100, 0.635), (200, 0.231))
        ],
        "rounds": {d: {"FedEP": _rows(0.9, 10), "FedPG": _rows(0.9, 10)} for d in "abc"},
    }
    fig = scalability_figure(res)
    try:
        a1, a2 = fig.axes
        for ln in a1.get_lines():
            assert len(ln.get_xdata()) == 2 and ln.get_linestyle() == "None"
        assert "no trend drawn" in a1.get_title()
        triples = [t for ax, t in _triples(fig) if ax is a2]
        assert len(triples) == len(set(triples)) == 6
        for leg in _legends(fig):
            assert all(t.get_fontsize() >= LEGEND_FONTSIZE for t in leg.get_texts())
    finally:
        plt.close(fig)
    res["scalability"] += [
        {"dataset": "a", "method": m, "n_clients": 300, "time_per_round_s": 0.4}
        for m in ("FedEP", "FedPG")
    ]
    fig = scalability_figure(res)
    try:
        assert all(ln.get_linestyle() != "None" for ln in fig.axes[0].get_lines())
    finally:
        plt.close(fig)


def test_ablation_ties_said_to_four_decimals():
    def row(case, auc):
        return {"dataset": "d", "case": case, "roc_auc": auc, "acc": 0.9, "f1": 0.8, "fpr": 0.05}

    rows = [row("I", 0.91231), row("II", 0.95), row("III", 0.91229), row("IV", 0.95001)]
    txt = ablation_ties(rows)
    assert "cases I = III and II = IV" in txt and "4 decimals" in txt
    assert ablation_ties([row("I", 0.9), row("II", 0.8)]) == ""

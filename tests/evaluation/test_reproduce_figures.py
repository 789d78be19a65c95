"""Figures: coincident ROC curves, operating points, contributions, resolution."""

import numpy as np
import pytest

from fedep.evaluation.reproduce.collect import _roc_entry
from fedep.evaluation.reproduce.figures import (
    DPI,
    STYLES,
    coincident_pairs,
    make_figures,
    padded_limits,
    top_features,
)


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
    assert w >= 4.6 * DPI - 2 and h >= 4.2 * DPI - 2

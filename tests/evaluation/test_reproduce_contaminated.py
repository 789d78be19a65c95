"""The contaminated-training table of the reproduction: data, collection, section."""

import numpy as np
import pytest

from fedep.evaluation.reproduce.config import MODES
from fedep.evaluation.reproduce.contaminated import (
    CONTAMINATED_METHODS,
    collect_contaminated,
    contaminated_section,
    training_set,
)


@pytest.mark.parametrize("share", [0.0, 0.05, 0.2])
def test_training_set_injects_the_share_of_attack_rows(share):
    rng = np.random.default_rng(0)
    y = (rng.random(5000) < 0.4).astype(int)
    X = np.column_stack([y, rng.standard_normal(5000)])  # column 0 is the label
    Xc, true_share = training_set(X, y, share, 1000, np.random.default_rng(1))
    n_att = int(Xc[:, 0].sum())
    assert (Xc.shape[0] - n_att) == 1000
    assert true_share == pytest.approx(n_att / Xc.shape[0])
    assert abs(true_share - share) < 1e-3
    # rows are distinct draws (no row repeated)
    assert np.unique(Xc[:, 1]).size == Xc.shape[0]


def test_training_set_caps_at_the_available_attacks():
    y = np.r_[np.zeros(100, int), np.ones(3, int)]
    X = np.arange(103.0)[:, None]
    Xc, true_share = training_set(X, y, 0.2, 50, np.random.default_rng(0))
    assert Xc.shape[0] == 53 and true_share == pytest.approx(3 / 53)


def _fake_values(cfg, names):
    c, values = cfg["contaminated"], {}
    for seed in cfg["seeds"]:
        for i, name in enumerate(names):
            for share in c["shares"]:
                for j, m in enumerate(CONTAMINATED_METHODS):
                    values[f"contam-{name}-{float(share):g}-{m}-s{seed}"] = {
                        # seed k moves every ROC AUC by k / 100
                        "roc_auc": 0.9 - share * j / 10 - i / 100 + seed / 100,
                        "fpr": 0.05,
                        "f1": 0.5,
                        "contamination_": None if m == "MCD (centralised)" else share / 2,
                        "true_share": share,
                        "n_train": 1000,
                        "n_test": 100,
                        "fit_time_s": 1.0,
                        "n_trim_steps": None,
                        "n_iter": None,
                    }
    return values


def test_collect_and_section_give_every_cell_and_the_auc_lost():
    cfg = MODES["quick"]
    names = ["nsl-kdd", "unsw-nb15"]
    ct = collect_contaminated(_fake_values(cfg, names), cfg, names)
    shares = cfg["contaminated"]["shares"]
    assert len(ct["rows"]) == len(names) * len(shares) * len(CONTAMINATED_METHODS)
    assert ct["config"]["seeds"] == cfg["seeds"]
    text = "".join(contaminated_section({"contaminated": ct}))
    assert "## Training on traffic that already holds attacks" in text
    for m in CONTAMINATED_METHODS:
        assert f"| {m} |" in text
    # AUC lost = clean - contaminated, per method (0.2 * j / 10 for method j at 20 %)
    top = max(shares)
    lost = top * (len(CONTAMINATED_METHODS) - 1) / 10
    assert f"| nsl-kdd | {CONTAMINATED_METHODS[-1]} | {100 * top:.0f} | {lost:+.4f} |" in text
    assert f"| {CONTAMINATED_METHODS[-1]} | 0.9000 | 5.00 | 50.00 | - |" in text  # MCD: no estimate
    assert "lowest" not in text  # one seed: no spread
    assert contaminated_section({"contaminated": {"config": {}, "rows": []}}) == []
    assert contaminated_section({}) == []


def test_several_seeds_give_mean_spread_lowest_and_the_loss_of_the_means():
    cfg = {**MODES["quick"], "seeds": [0, 1, 2]}
    names = ["nsl-kdd"]
    values = _fake_values(cfg, names)
    values.pop(f"contam-nsl-kdd-0-{CONTAMINATED_METHODS[0]}-s2")  # left out, not zero
    ct = collect_contaminated(values, cfg, names)
    shares = cfg["contaminated"]["shares"]
    assert len(ct["rows"]) == len(shares) * len(CONTAMINATED_METHODS) * 3 - 1
    assert {r["seed"] for r in ct["rows"]} == {0, 1, 2}
    text = "".join(contaminated_section({"contaminated": ct}))
    assert "seeds 0, 1, 2" in text and "| lowest |" in text
    # MCD (j = 4) at the clean share: 0.90, 0.91, 0.92 -> mean 0.91, std 0.0082, lowest 0.90
    assert f"| 0.0 | {CONTAMINATED_METHODS[-1]} | 0.9100 ± 0.0082 | 0.9000 |" in text
    # method 0 clean over seeds 0 and 1 only: 0.905; at 20 % over 0, 1, 2: 0.91
    assert f"| nsl-kdd | {CONTAMINATED_METHODS[0]} | {100 * max(shares):.0f} | -0.0050 |" in text

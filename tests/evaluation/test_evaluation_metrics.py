import math

import numpy as np
import pytest

from fedep.evaluation.metrics import (
    METRIC_KEYS,
    best_f1_threshold,
    detection_metrics,
    format_metrics_table,
    per_class_recall,
    trivial_detector_metrics,
)


def test_detection_metrics_hand_computed():
    # scores > 0.5 flagged: predictions   1    0    1    1    0    0    1    0
    y = np.array([1, 1, 0, 1, 0, 0, 1, 1])
    s = np.array([0.9, 0.2, 0.7, 0.6, 0.1, 0.3, 0.8, 0.4])
    m = detection_metrics(y, s, 0.5)
    assert set(m) == set(METRIC_KEYS)
    # tp: idx 0,3,6 -> 3; fp: idx 2 -> 1; tn: idx 4,5 -> 2; fn: idx 1,7 -> 2
    assert (m["tp"], m["fp"], m["tn"], m["fn"]) == (3, 1, 2, 2)
    assert m["acc"] == pytest.approx(5 / 8)
    assert m["pre"] == pytest.approx(3 / 4)
    assert m["rec"] == pytest.approx(3 / 5)
    assert m["fnr"] == pytest.approx(2 / 5)
    assert m["fpr"] == pytest.approx(1 / 3)
    assert m["f1"] == pytest.approx(2 * 0.75 * 0.6 / (0.75 + 0.6))
    # ROC AUC by pair counting: positives {.9,.2,.6,.8,.4}, negatives {.7,.1,.3}
    pos, neg = s[y == 1], s[y == 0]
    auc = np.mean([p > n for p in pos for n in neg])
    assert m["roc_auc"] == pytest.approx(auc)
    assert 0.0 <= m["pr_auc"] <= 1.0
    assert m["threshold"] == 0.5


def test_threshold_is_strict():
    m = detection_metrics([0, 1], [0.5, 0.6], 0.5)
    assert (m["tp"], m["fp"]) == (1, 0)


def test_single_class_gives_nan_auc():
    m = detection_metrics([1, 1, 1], [0.1, 0.5, 0.9], 0.3)
    assert math.isnan(m["roc_auc"]) and math.isnan(m["pr_auc"])
    assert math.isnan(m["fpr"])
    assert m["rec"] == pytest.approx(2 / 3)


def test_no_flags_gives_zero_precision_and_f1():
    m = detection_metrics([0, 1, 1], [0.1, 0.2, 0.3], 1.0)
    assert m["pre"] == 0.0 and m["f1"] == 0.0 and m["rec"] == 0.0


def test_bad_labels_raise():
    with pytest.raises(ValueError):
        detection_metrics([0, 2], [0.1, 0.2], 0.0)
    with pytest.raises(ValueError):
        detection_metrics([0, 1], [0.1], 0.0)


def test_per_class_recall():
    cats = ["normal", "dos", "normal", "dos", "probe", "normal"]
    pred = [0, 1, 1, 1, 0, 0]
    r = per_class_recall(cats, pred)
    assert list(r)[0] == "normal"
    assert r == {"normal": pytest.approx(1 / 3), "dos": 1.0, "probe": 0.0}


def test_best_f1_threshold_is_optimal():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 300)
    s = rng.normal(size=300) + y
    t = best_f1_threshold(y, s)
    f1 = detection_metrics(y, s, t)["f1"]
    for cut in np.unique(s):
        assert detection_metrics(y, s, cut)["f1"] <= f1 + 1e-12
    # the top score can always be flagged
    assert detection_metrics(y, s, best_f1_threshold(y, s))["tp"] > 0


def test_trivial_detector():
    y = [1, 1, 1, 0]
    m = trivial_detector_metrics(y)
    assert (m["tp"], m["fp"], m["tn"], m["fn"]) == (3, 1, 0, 0)
    assert m["rec"] == 1.0 and m["fpr"] == 1.0
    assert m["f1"] == pytest.approx(2 * 3 / (2 * 3 + 1))
    assert m["roc_auc"] == 0.5 and m["pr_auc"] == pytest.approx(0.75)


def test_format_metrics_table():
    t = format_metrics_table(
        [{"method": "a|b", "f1": 0.5, "n": 3}, {"method": "c", "f1": float("nan")}]
    )
    lines = t.strip().splitlines()
    assert lines[0] == "| method | f1 | n |"
    assert lines[1] == "|---|---|---|"
    assert lines[2] == "| a\\|b | 0.5000 | 3 |"
    assert lines[3] == "| c | nan |  |"
    t2 = format_metrics_table([{"x": 1, "y": 2}], columns=["y"])
    assert "x" not in t2


def test_detection_metrics_with_per_record_thresholds():
    y = np.array([0, 0, 1, 1, 0, 1])
    s = np.array([0.2, 0.9, 0.8, 0.3, 0.1, 0.7])
    thr = np.array([0.5, 0.5, 0.5, 0.25, 0.05, 0.9])  # e.g. each gateway's own
    m = detection_metrics(y, s, thr)
    # flagged: rows 1, 2, 3, 4 -> tp = rows 2, 3; fp = rows 1, 4; fn = row 5
    assert (m["tp"], m["fp"], m["tn"], m["fn"]) == (2, 2, 1, 1)
    assert np.isnan(m["threshold"])
    assert m["roc_auc"] == detection_metrics(y, s, 0.5)["roc_auc"]  # threshold-free
    with pytest.raises(ValueError, match="different lengths"):
        detection_metrics(y, s, thr[:3])

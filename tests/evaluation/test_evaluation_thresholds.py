import numpy as np
import pytest

from fedep import FedEP, PooledPCA
from fedep.evaluation.experiment import evaluate_detector
from fedep.evaluation.reproduce import synthetic_split as _synthetic_split
from fedep.evaluation.thresholds import (
    honest_threshold,
    threshold_from_validation,
    threshold_from_validation_f1,
)


def test_validation_quantile_uses_normal_rows_only():
    s = np.r_[np.arange(100.0), 1000.0 + np.arange(50)]
    y = np.r_[np.zeros(100), np.ones(50)]
    assert threshold_from_validation(s, y, 0.05) == pytest.approx(
        np.quantile(np.arange(100.0), 0.95)
    )
    assert threshold_from_validation(s[:100], None, 0.1) == pytest.approx(
        np.quantile(np.arange(100.0), 0.9)
    )
    with pytest.raises(ValueError):
        threshold_from_validation(s, np.ones(150))
    with pytest.raises(ValueError):
        threshold_from_validation(s, y, 0.0)


def test_val_f1():
    s = np.arange(100.0)
    y = (s > 70).astype(int)
    t = threshold_from_validation_f1(s, y)
    assert 70 <= t < 71
    with pytest.raises(ValueError):
        threshold_from_validation_f1(s, np.zeros(100))


def test_honest_threshold_methods():
    sp = _synthetic_split(0)
    det = PooledPCA(5).fit(sp.X_train, groups=sp.groups_train)
    assert honest_threshold(det, sp.X_val, sp.y_val, method="contamination") == det.threshold_
    t = honest_threshold(det, sp.X_val, sp.y_val)
    s = det.decision_function(sp.X_val)
    assert np.mean(s[sp.y_val == 0] > t) == pytest.approx(0.05, abs=0.01)


def test_permuting_test_labels_leaves_threshold_unchanged():
    sp = _synthetic_split(1)
    det = FedEP(5, n_rounds=3, random_state=0)
    a = evaluate_detector(det, sp)
    perm = np.random.default_rng(0).permutation(len(sp.y_test))
    sp.y_test = sp.y_test[perm]
    sp.category_test = sp.category_test[perm]
    b = evaluate_detector(FedEP(5, n_rounds=3, random_state=0), sp)
    assert a["honest"]["threshold"] == b["honest"]["threshold"]
    assert a["personalised"]["threshold"] == b["personalised"]["threshold"]
    # the test-tuned threshold, by contrast, depends on the test labels
    assert a["test_tuned"]["threshold"] != b["test_tuned"]["threshold"]

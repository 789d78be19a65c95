"""evaluate_fitted: exact metrics from a hand-made detector with known scores."""

import numpy as np
import pytest

from fedep.evaluation.evaluate import evaluate_fitted


class StubDetector:
    """Scores are the first column; training threshold 0.5; client 'b' has its own."""

    threshold_ = 0.5
    clients_ = np.array(["a", "b"])

    def decision_function(self, X, groups=None):
        return np.asarray(X, dtype=float)[:, 0].copy()

    def row_thresholds(self, groups, n):
        if groups is None:
            return np.full(n, self.threshold_)
        g = np.asarray(groups)
        return np.where(g == "b", 0.85, np.where(g == "a", 0.5, self.threshold_))


X = np.array([[0.1], [0.2], [0.6], [0.3], [0.7], [0.8], [0.9], [0.4]])
y = np.array([0, 0, 0, 0, 1, 1, 1, 1])


def test_model_policy_exact_metrics():
    r = evaluate_fitted(StubDetector(), X, y, categories=["normal"] * 4 + ["dos"] * 3 + ["u2r"])
    m = r["model"]
    # flagged: 0.6 (normal), 0.7, 0.8, 0.9 (attacks); 0.4 attack missed
    assert (m["tp"], m["fp"], m["tn"], m["fn"]) == (3, 1, 3, 1)
    assert m["acc"] == pytest.approx(6 / 8)
    assert m["fpr"] == pytest.approx(0.25) and m["rec"] == pytest.approx(0.75)
    assert m["roc_auc"] == pytest.approx(15 / 16)
    assert r["threshold"] == 0.5 and r["n_test"] == 8 and r["n_attack"] == 4
    assert r["per_class"] == {"normal": 0.25, "dos": 1.0, "u2r": 0.0}
    assert r["trivial"]["rec"] == 1.0 and r["trivial"]["fpr"] == 1.0
    # test-tuned (optimistic) F1 is at least the model's
    assert r["test_tuned"]["f1"] >= m["f1"]
    assert "optimistic" in r["labels"]["test_tuned"]
    assert "honest" not in r and r["metrics_key"] == "model" and r["clients"] is None


def test_model_policy_per_gateway_thresholds():
    groups = np.array(["a", "a", "b", "a", "b", "b", "b", "zz"])
    r = evaluate_fitted(StubDetector(), X, y, groups=groups)
    m = r["model"]
    # b rows at 0.85: 0.6 normal not flagged, 0.7/0.8 missed, 0.9 flagged; zz: 0.4 < 0.5
    assert (m["tp"], m["fp"], m["tn"], m["fn"]) == (1, 0, 4, 3)
    assert np.isnan(m["threshold"])  # per-row thresholds
    assert r["threshold"] == 0.5
    assert r["clients"] == {"rows_of_known_clients": 7, "rows_scored_globally": 1}


def test_validation_policy_and_roc_operating_point():
    X_val = np.array([[0.0], [0.1], [0.2], [0.3], [0.4], [0.9]])
    y_val = np.array([0, 0, 0, 0, 0, 1])
    r = evaluate_fitted(
        StubDetector(),
        X,
        y,
        threshold_policy="validation",
        X_val=X_val,
        y_val=y_val,
        target_fpr=0.25,
        with_roc=True,
    )
    thr = np.quantile([0.0, 0.1, 0.2, 0.3, 0.4], 0.75)
    assert r["threshold"] == pytest.approx(thr)
    h = r["honest"]
    # 0.3 threshold: flags 0.6 (normal), 0.4, 0.7, 0.8, 0.9
    assert (h["tp"], h["fp"]) == (4, 1)
    assert r["val_roc_auc"] == pytest.approx(1.0)
    op = r["roc"]["operating_point"]
    assert (op["fpr"], op["tpr"]) == (0.25, 1.0)
    assert r["roc"]["fpr"][0] == 0.0 and r["roc"]["tpr"][-1] == 1.0
    with pytest.raises(ValueError):
        evaluate_fitted(StubDetector(), X, y, threshold_policy="validation")
    with pytest.raises(ValueError):
        evaluate_fitted(StubDetector(), X, y, threshold_policy="test")

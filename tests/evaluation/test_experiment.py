"""per_round_curve follows the detector's own fit; evaluate_detector via evaluate_fitted."""

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from fedep.detectors import make_estimator
from fedep.evaluation.experiment import evaluate_detector, per_round_curve
from fedep.evaluation.reproduce import synthetic_split


@pytest.mark.parametrize("method", ["FedEP", "FedPG"])
def test_per_round_curve_is_the_real_fit(method):
    sp = synthetic_split(2)
    params = {"n_components": 5, "init": "oneshot", "client_fraction": 0.5}
    curve = per_round_curve(method, params, sp, 4, random_state=3)
    assert [r["round"] for r in curve] == [1, 2, 3, 4]
    det = make_estimator(method, {**params, "n_rounds": 4, "tol": 0.0, "random_state": 3})
    det.fit(sp.X_train, groups=sp.groups_train)
    # the last point scores the same basis as the detector fitted with the same
    # parameters, init and client sampling
    auc = roc_auc_score(sp.y_test, det.decision_function(sp.X_test))
    assert curve[-1]["roc_auc"] == pytest.approx(auc, abs=1e-9)
    assert [r["objective"] for r in curve] == pytest.approx([h["objective"] for h in det.history_])
    times = [r["cumulative_time_s"] for r in curve]
    assert np.all(np.diff(times) >= 0)


def test_evaluate_detector_contributions_sum_to_attack_scores():
    from fedep import PooledPCA

    sp = synthetic_split(0)
    r = evaluate_detector(PooledPCA(5), sp, with_roc=True, with_contributions=True)
    det = PooledPCA(5).fit(sp.X_train, groups=sp.groups_train)
    att = sp.X_test[sp.y_test == 1]
    assert sum(r["contributions"]) == pytest.approx(det.decision_function(att).mean())
    op = r["roc"]["operating_point"]
    assert op == {"fpr": r["honest"]["fpr"], "tpr": r["honest"]["rec"]}

"""A warm start under differential privacy (in-process)."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
from scipy.linalg import subspace_angles

from fedep import FedEP
from fedep.data.synthetic import make_federated_data


def _fit(est, X, g, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(X, groups=g, **kw)


@pytest.fixture(scope="module")
def fed():
    return make_federated_data(
        n_clients=5, n_features=10, n_components=2, n_samples=300, random_state=0
    )


def test_warm_start_under_differential_privacy(fed):
    pytest.importorskip("dp_accounting")
    X, g = fed.X_train, fed.groups_train
    model = _fit(FedEP(n_components=2, random_state=0), X, g)
    dp = {"dp_clip": 20.0, "tol": 0.0, "n_rounds": 1}

    def warm(eps):
        est = copy.deepcopy(model).set_params(warm_start=True, dp_epsilon=eps, **dp)
        return _fit(est, X, g)

    # next to no noise: the gateways start at their carried states, so a noised round
    # stays at the model, nearer than a cold private round from a random start
    quiet = warm(1e6)
    angle = subspace_angles(quiet.components_.T, model.components_.T).max()
    cold = _fit(FedEP(n_components=2, random_state=0, dp_epsilon=1e6, init="random", **dp), X, g)
    assert (
        angle < 0.02
        and angle < 0.5 * subspace_angles(cold.components_.T, model.components_.T).max()
    )
    assert quiet.lineage_["parent"] == model.lineage_["id"]
    # the refit's own releases are accounted: within its budget
    noisy = warm(2.0)
    assert 0 < noisy.dp_epsilon_ <= 2.0
    assert noisy.dp_noise_multiplier_ > 0
    np.testing.assert_array_equal(noisy.mean_, model.mean_)  # the model's scaling kept

"""Federated standardisation equals pooled statistics."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedep.data import federated_standardization


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(2, 400),
    d=st.integers(1, 30),
    k=st.integers(1, 10),
    seed=st.integers(0, 2**31 - 1),
    loc=st.floats(-1e6, 1e6),
)
def test_equals_pooled(n, d, k, seed, loc):
    rng = np.random.default_rng(seed)
    X = loc + rng.lognormal(size=(n, d)) * 10
    g = rng.integers(0, k, n)
    mean, scale, const = federated_standardization(X, g)
    cols = np.ascontiguousarray(X.T)
    np.testing.assert_allclose(mean, cols.mean(axis=1), rtol=1e-12, atol=1e-12 * (1 + abs(loc)))
    np.testing.assert_allclose(scale, cols.std(axis=1), rtol=1e-9)
    assert not const.any()


def test_constant_features_reported():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(100, 4))
    X[:, 1] = 3.0
    X[:, 3] = 0.0
    g = np.repeat(np.arange(4), 25)
    mean, scale, const = federated_standardization(X, g)
    assert const.tolist() == [False, True, False, True]
    assert scale[1] == 1.0 and scale[3] == 1.0 and mean[1] == 3.0
    Z = (X - mean) / scale
    assert np.isfinite(Z).all() and np.all(Z[:, 1] == 0)


def test_per_client():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(60, 3))
    g = np.repeat([5, 2, 9], 20)
    X[g == 2, 0] = 7.0  # constant within client 2 only
    mean, scale, const = federated_standardization(X, g, per_client=True)
    assert mean.shape == (3, 3)
    for row, c in enumerate([2, 5, 9]):  # np.unique order
        np.testing.assert_allclose(mean[row], X[g == c].mean(axis=0), rtol=1e-12)
    assert const[0].tolist() == [True, False, False] and not const[1:].any()


def test_bad_input():
    with pytest.raises(ValueError, match="groups"):
        federated_standardization(np.zeros((3, 2)), np.zeros(4))
    with pytest.raises(ValueError, match="NaN"):
        federated_standardization(np.array([[np.nan]]), np.zeros(1))

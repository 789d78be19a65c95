"""Partitioners: coverage, sizes, determinism, errors (property tests)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedep.data import (
    format_partition_summary,
    partition_dirichlet,
    partition_iid,
    partition_sorted,
    partition_summary,
)

sizes = st.integers(min_value=1, max_value=600).flatmap(
    lambda n: st.tuples(st.just(n), st.integers(min_value=1, max_value=n))
)


def _check_cover(groups: np.ndarray, n: int, k: int) -> np.ndarray:
    assert groups.shape == (n,) and groups.dtype.kind == "i"
    assert groups.min() >= 0 and groups.max() < k
    counts = np.bincount(groups, minlength=k)
    assert counts.sum() == n and (counts >= 1).all()
    return counts


@settings(max_examples=60, deadline=None)
@given(nk=sizes, seed=st.integers(0, 2**31 - 1), n_distinct=st.integers(1, 50))
def test_sorted_covers_contiguous_near_equal(nk, seed, n_distinct):
    n, k = nk
    values = np.random.default_rng(seed).integers(0, n_distinct, n)
    g = partition_sorted(values, k)
    counts = _check_cover(g, n, k)
    assert counts.max() - counts.min() <= 1
    order = np.argsort(values, kind="stable")
    # walking rows in stable order, the client ids never decrease
    assert (np.diff(g[order]) >= 0).all()
    # ties broken by row index: within one value, lower row index -> lower-or-equal client
    for v in np.unique(values)[:5]:
        rows = np.flatnonzero(values == v)
        assert (np.diff(g[rows]) >= 0).all()


@settings(max_examples=60, deadline=None)
@given(nk=sizes, seed=st.integers(0, 2**31 - 1))
def test_iid_covers_and_is_seeded(nk, seed):
    n, k = nk
    g = partition_iid(n, k, seed)
    counts = _check_cover(g, n, k)
    assert counts.max() - counts.min() <= 1
    assert np.array_equal(g, partition_iid(n, k, seed))


@settings(max_examples=60, deadline=None)
@given(
    nk=sizes,
    seed=st.integers(0, 2**31 - 1),
    n_classes=st.integers(1, 12),
    concentration=st.floats(0.01, 100.0),
)
def test_dirichlet_covers_every_client(nk, seed, n_classes, concentration):
    n, k = nk
    labels = np.random.default_rng(seed).integers(0, n_classes, n)
    g = partition_dirichlet(labels, k, concentration, seed)
    _check_cover(g, n, k)
    assert np.array_equal(g, partition_dirichlet(labels, k, concentration, seed))


def test_dirichlet_small_alpha_is_skewed():
    labels = np.repeat(np.arange(5), 2000)
    g = partition_dirichlet(labels, 10, 0.05, 0)
    # with tiny alpha most clients are dominated by one class
    shares = [np.bincount(labels[g == c], minlength=5).max() / (g == c).sum() for c in range(10)]
    assert np.median(shares) > 0.8
    g_iid = partition_dirichlet(labels, 10, 1000.0, 0)
    shares = [
        np.bincount(labels[g_iid == c], minlength=5).max() / (g_iid == c).sum() for c in range(10)
    ]
    assert max(shares) < 0.35


def test_sorted_example_and_ties():
    g = partition_sorted(np.array([3, 1, 1, 2, 5]), 2)
    assert g.tolist() == [1, 0, 0, 0, 1]


@pytest.mark.parametrize(
    "call",
    [
        lambda: partition_sorted(np.arange(5), 0),
        lambda: partition_sorted(np.arange(5), 6),
        lambda: partition_iid(5, 0),
        lambda: partition_iid(5, 6),
        lambda: partition_dirichlet(np.zeros(5), 6, 1.0),
        lambda: partition_dirichlet(np.zeros(5), -1, 1.0),
    ],
)
def test_bad_n_clients_names_parameter(call):
    with pytest.raises(ValueError, match="n_clients"):
        call()


def test_other_bad_parameters():
    with pytest.raises(ValueError, match="concentration"):
        partition_dirichlet(np.zeros(5), 2, 0.0)
    with pytest.raises(ValueError, match="values"):
        partition_sorted(np.array([1.0, np.nan, 2.0]), 2)
    with pytest.raises(ValueError, match="n_rows"):
        partition_iid(0, 1)


@pytest.mark.parametrize("d", [2, 37, 500])
def test_summary_shapes_and_values(d):
    rng = np.random.default_rng(d)
    n, k = 1200, 7
    X = rng.normal(size=(n, d))
    X[:, 0] = 5.0  # constant feature: shift 0, no division by zero
    y = rng.integers(0, 2, n)
    g = partition_sorted(X[:, 1], k)
    df = partition_summary(g, y, X)
    assert list(df.index) == list(range(k))
    assert df["rows"].sum() == n
    np.testing.assert_allclose(df["attack_share"], [y[g == c].mean() for c in range(k)])
    # sorting on x1 shifts the extreme clients' x1 means far more than other features'
    assert df["max_shift_feature"].iloc[0] == df["max_shift_feature"].iloc[-1] == "x1"
    assert df["max_shift"].iloc[0] > 1.0
    if d > 2:  # the other (unsorted) features barely move
        assert df["mean_shift"].iloc[0] < 0.5
    assert (df["max_shift"] > df["mean_shift"]).all()
    text = format_partition_summary(df)
    assert f"{k} clients, {n} rows" in text and "attack share" in text


def test_summary_without_optional_columns():
    df = partition_summary(np.array([0, 0, 1]))
    assert list(df.columns) == ["rows", "row_share"] and df["rows"].tolist() == [2, 1]
    assert "3 rows" in format_partition_summary(df)

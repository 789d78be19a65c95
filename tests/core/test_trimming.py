"""Trimmed PPCA by C-steps and the count-only federated selection, against brute force."""

from itertools import combinations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedep.core.trimming import (
    ScoreCounts,
    _ppca_fit,
    coordinate_median,
    describe_trimming,
    estimate_contamination,
    keep_mask,
    kept_count,
    log_scores,
    median_distance,
    order_statistic,
    order_statistics,
    ppca_distance,
    ppca_objective,
    selection_step,
    trimmed_ppca,
)


def _brute_force(X, r, h):
    best = (np.inf, None)
    for sub in combinations(range(X.shape[0]), h):
        keep = np.zeros(X.shape[0], dtype=bool)
        keep[list(sub)] = True
        val = ppca_objective(X, keep, _ppca_fit(X[keep], r))
        best = min(best, (val, keep), key=lambda b: b[0])
    return best


@pytest.mark.parametrize("seed", range(5))
def test_order_statistic_from_counts_is_exact(seed):
    rng = np.random.default_rng(seed)
    parts = [rng.standard_normal(rng.integers(1, 50)) for _ in range(4)]
    allv = np.sort(np.concatenate(parts))
    c = ScoreCounts(parts)
    for k in (1, 2, allv.size // 2, allv.size - 1, allv.size):
        t = order_statistic(c.le, k, c.lo, c.hi)
        assert np.count_nonzero(allv <= t) == k
        assert allv[k - 1] <= t < (allv[k] if k < allv.size else np.inf)


@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(
        st.one_of(
            st.sampled_from([0.0, 1.0, 1.5, -2.0]),
            # (a gap of 1e-87 needs ~290 halvings: more than max_queries allows)
            st.floats(-1e6, 1e6).filter(lambda x: x == 0 or abs(x) > 1e-6),
        ),
        min_size=1,
        max_size=60,
    ),
    n_candidates=st.sampled_from([1, 2, 7, 64, 1024]),
    data=st.data(),
)
def test_order_statistic_is_the_kth_value_with_ties(values, n_candidates, data):
    # ties everywhere, the smallest value tied (its count answered by the first query),
    # any number of candidates per query: the cut keeps the k-th smallest value and
    # nothing between it and the next distinct value
    v = np.sort(np.asarray(values))
    k = data.draw(st.integers(1, v.size))
    c = ScoreCounts([v[::2], v[1::2]])
    t = order_statistic(c.le, k, c.lo, c.hi, n_candidates=n_candidates, max_queries=200)
    assert np.count_nonzero(v <= t) >= k
    assert v[k - 1] <= t
    assert not np.any((v > v[k - 1]) & (v <= t))  # no other value kept beyond s_(k)


def test_order_statistic_asks_for_the_minimum_in_its_first_query():
    # one count query fewer per search: the count at the smallest value rides along
    v = np.arange(1000.0)
    for k, want in [(1, 1), (500, 1)]:  # (500: two queries when asked apart)
        c = ScoreCounts([v])
        order_statistic(c.le, k, c.lo, c.hi)
        assert c.n_queries == want, (k, c.n_queries)


@pytest.mark.parametrize("seed", range(3))
def test_column_searches_in_lockstep_give_each_column_its_own_cut(seed):
    # One search over every feature (one count query per step for all of them) is
    # what a Flower server runs for the coordinate-wise median: each column's cut is
    # the one its search alone gives, ties and a constant column included.
    rng = np.random.default_rng(seed)
    blocks = [rng.standard_normal((rng.integers(2, 40), 5)) for _ in range(4)]
    blocks[0][:, 1] = 0.0
    for b in blocks:
        b[:, 3] = 2.5
    c = ScoreCounts(blocks)
    X = np.vstack(blocks)
    ks = np.array([1, X.shape[0] // 2, X.shape[0], 3, (X.shape[0] + 1) // 2])
    got = order_statistics(c.le, ks, c.lo, c.hi)
    for f in range(X.shape[1]):
        one = ScoreCounts([b[:, f] for b in blocks])
        assert got[f] == order_statistic(one.le, int(ks[f]), one.lo, one.hi)
        assert np.count_nonzero(X[:, f] <= got[f]) >= ks[f]


def test_estimate_contamination_counts_match_pooled_rule():
    rng = np.random.default_rng(0)
    v = np.concatenate([rng.standard_normal(900), 10 + rng.standard_normal(100)])
    c = ScoreCounts([v[:300], v[300:700], v[700:]])
    med = np.median(v)
    mad = np.median(np.abs(v - med))
    want = np.mean(v > med + 3 * 1.4826 * mad)
    assert estimate_contamination(c) == pytest.approx(want, abs=2e-3)
    assert estimate_contamination(c) == pytest.approx(0.1, abs=0.01)


@pytest.mark.parametrize("seed", range(6))
def test_c_steps_descend_and_stop_at_a_swap_optimum(seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((10, 3)) * [3.0, 1.0, 0.3]
    h = kept_count(10, 0.2)
    keep, theta, obj = trimmed_ppca(X, 1, h)
    assert keep.sum() == h
    assert np.all(np.diff(obj) <= 1e-9 * np.abs(obj[:-1]).max())
    # Fixed point: no swap of a kept and a trimmed record lowers L at the current fit.
    d = ppca_distance(X, *theta)
    assert d[keep].max() <= d[~keep].min() + 1e-12
    base = ppca_objective(X, keep, theta)
    for i in np.flatnonzero(keep):
        for j in np.flatnonzero(~keep):
            k2 = keep.copy()
            k2[[i, j]] = [False, True]
            assert ppca_objective(X, k2, theta) >= base - 1e-9
    assert base >= _brute_force(X, 1, h)[0] - 1e-9


def test_c_steps_reach_the_brute_force_optimum_on_an_easy_instance():
    rng = np.random.default_rng(1)
    X = np.outer(rng.standard_normal(8) * 3, [1.0, 0.5, 0.0]) + 0.05 * rng.standard_normal((8, 3))
    X = np.vstack([X, [[0.0, 0.0, 2.5], [0.3, -0.1, -2.5]]])  # two outlier records
    best, best_keep = _brute_force(X, 1, 8)
    keep, theta, obj = trimmed_ppca(X, 1, 8)
    assert np.array_equal(keep, best_keep)
    assert obj[-1] == pytest.approx(best)


def test_log_scores_keep_order_and_are_finite():
    v = np.array([0.0, 1e-300, 1.0, 5.0])
    ls = log_scores(v)
    assert np.all(np.isfinite(ls)) and np.all(np.diff(ls) >= 0)


@pytest.mark.parametrize("seed", range(4))
def test_coordinate_median_from_counts_is_the_pooled_median(seed):
    rng = np.random.default_rng(seed)
    blocks = [rng.standard_normal((rng.integers(1, 40), 4)) for _ in range(5)]
    blocks[0][:, 1] = 0.0  # ties
    blocks[1][:, 2] = np.round(blocks[1][:, 2])
    X = np.vstack(blocks)
    med = coordinate_median(blocks)
    k = (X.shape[0] + 1) // 2
    s = np.sort(X, axis=0)
    for f in range(X.shape[1]):
        # med is the lower median s_(k) or lies between it and the next larger value:
        # it keeps the same records as s_(k)
        assert s[k - 1, f] <= med[f]
        assert np.count_nonzero(X[:, f] <= med[f]) == np.count_nonzero(X[:, f] <= s[k - 1, f])
        if X.shape[0] % 2:
            assert np.median(X[:, f]) == s[k - 1, f]


def keep_at_or_below(values, h, min_rows):
    """The federated cut, composed: the global h-th smallest value from counts only
    (order_statistic over ScoreCounts), applied by each gateway (keep_mask)."""
    counts = ScoreCounts(values)
    cut = order_statistic(counts.le, h, counts.lo, counts.hi)
    return [keep_mask(v, cut, min_rows) for v in values]


@pytest.mark.parametrize("seed", range(4))
def test_keep_at_or_below_is_the_pooled_selection(seed):
    rng = np.random.default_rng(seed)
    values = [rng.standard_normal(rng.integers(3, 30)) for _ in range(4)]
    allv = np.concatenate(values)
    for h in (1, allv.size // 3, allv.size - 1):
        got = np.concatenate(keep_at_or_below(values, h, 0))
        np.testing.assert_array_equal(got, selection_step(allv, h))
    # a gateway whose records are all far keeps its min_rows smallest
    far = [values[0], values[1] + 100.0]
    keep = keep_at_or_below(far, values[0].size, 3)
    assert keep[0].all() and keep[1].sum() == 3
    assert np.array_equal(np.flatnonzero(keep[1]), np.sort(np.argsort(far[1])[:3]))


def test_median_distance_is_the_scaled_l1_distance():
    rng = np.random.default_rng(0)
    X, m, s = rng.standard_normal((6, 3)), rng.standard_normal(3), rng.uniform(0.5, 2, 3)
    want = [sum(abs(x[f] - m[f]) / s[f] for f in range(3)) for x in X]
    np.testing.assert_allclose(median_distance(X, m, s), want)


def test_describe_trimming_names_the_steps_the_share_the_kept_records_and_the_stop():
    assert describe_trimming([], 100) == "record trimming: off (trim_steps=0)"
    fixed = [
        {"share": 0.2, "n_kept": 80, "objective": 1.0, "changed": True},
        {"share": 0.2, "n_kept": 80, "objective": 0.9, "changed": False},
    ]
    text = describe_trimming(fixed, 100)
    assert text.startswith("record trimming: 2 selection steps, 20.0 % trimmed at each")
    assert "kept 80 of 100 records" in text and "the kept set stopped changing" in text
    cap = [
        {"share": 0.05, "n_kept": 95, "objective": 1.0, "changed": True},
        {"share": 0.071, "n_kept": 93, "objective": 0.9, "changed": True},
    ]
    text = describe_trimming(cap)
    assert "trimmed 5.0 -> 7.1 %" in text and "kept 93 records" in text
    assert "at the step cap" in text


@pytest.mark.parametrize("steps", [1, 2, 8])
def test_trim_history_says_whether_each_step_changed_the_kept_set(steps):
    from fedep import PooledPCA

    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 6)) * [4.0, 2.0, 1.0, 1.0, 1.0, 1.0]
    X[:30] += 8.0  # a cluster of outlying records
    det = PooledPCA(2, trim_steps=steps, trim_share=0.1).fit(X, groups=np.arange(300) % 3)
    hist = det.trim_history_
    assert [h["changed"] for h in hist[:-1]] == [True] * (len(hist) - 1)
    # the loop ends at a fixed point (the last step changed nothing) or at the cap
    assert (not hist[-1]["changed"]) or len(hist) == steps
    if len(hist) < steps:
        assert not hist[-1]["changed"]

"""Benign modes (``fedep.core.benign``) against independent NumPy references."""

from __future__ import annotations

import numpy as np
import pytest

from fedep.core.benign import (
    GUARD_STEPS,
    MODE_RADIUS,
    BenignModes,
    attack_counts,
    guard_modes,
    learn_modes,
    mode_sums,
    suppressing_mode,
)


def _clusters(rng, n=12, k=3, m=20, spread=0.05):
    """``k`` tight clusters of ``m`` records each, far apart (n features)."""
    centres = 10.0 * rng.standard_normal((k, n))
    X = np.vstack([c + spread * rng.standard_normal((m, n)) for c in centres])
    return X, centres


def test_mode_sums_is_a_loop_over_records():
    rng = np.random.default_rng(0)
    R = np.vstack([rng.standard_normal((57, 6)), np.full((2, 6), 50.0)])
    C = np.vstack([0.3 * rng.standard_normal((3, 6)), np.full(6, 49.0)])  # the last: 2
    counts, sums, grams = mode_sums(R, C, min_records=1)
    ref_c, ref_s, ref_g = np.zeros(4), np.zeros((4, 6)), np.zeros((4, 6, 6))
    for x in R:  # nearest centre by an explicit distance, record by record
        j = int(np.argmin([np.sum((x - c) ** 2) for c in C]))
        ref_c[j] += 1
        ref_s[j] += x
        ref_g[j] += np.outer(x, x)
    np.testing.assert_array_equal(counts, ref_c)
    np.testing.assert_allclose(sums, ref_s, atol=1e-12)
    np.testing.assert_allclose(grams, ref_g, atol=1e-12)
    empty = mode_sums(np.empty((0, 6)), C)
    assert empty[0].sum() == 0 and empty[2].shape == (4, 6, 6)
    # By default a centre nearest to fewer than MIN_MODE_RECORDS of the gateway's
    # records is withheld whole: no reply is a sum of 1-4 records.
    few = ref_c < 5
    assert few.any() and (~few).any()
    c5, s5, g5 = mode_sums(R, C)
    np.testing.assert_array_equal(c5, np.where(few, 0, ref_c))
    assert not s5[few].any() and not g5[few].any()
    np.testing.assert_allclose(s5[~few], ref_s[~few], atol=1e-12)
    np.testing.assert_allclose(g5[~few], ref_g[~few], atol=1e-12)


def test_learn_modes_finds_separated_groups_from_sums_only():
    rng = np.random.default_rng(2)
    X, centres = _clusters(rng)
    modes = learn_modes(lambda C: mode_sums(X, C), X.shape[1], max_modes=3)
    assert modes.centres.shape == (3, X.shape[1])
    # each learned centre is one cluster's mean, each cluster found once
    d = ((modes.centres[:, None, :] - centres[None]) ** 2).sum(-1)
    assert sorted(d.argmin(axis=1).tolist()) == [0, 1, 2]
    assert d.min(axis=1).max() < 0.05
    np.testing.assert_array_equal(np.sort(modes.counts), [20, 20, 20])
    # radius^2 = MODE_RADIUS x the mean squared distance of its records to its centre
    near = ((X[:, None, :] - modes.centres[None]) ** 2).sum(-1).argmin(axis=1)
    for j, r2 in enumerate(modes.radius2):
        own = X[near == j]
        msd = ((own - own.mean(0)) ** 2).sum(1).mean()
        assert r2 == pytest.approx(MODE_RADIUS * msd, rel=1e-9)


def test_learn_modes_sums_over_gateways_equal_the_pooled_records():
    rng = np.random.default_rng(3)
    X, _ = _clusters(rng, k=4, m=15)
    parts = np.array_split(rng.permutation(X.shape[0]), 5)  # five gateways

    def federated(C):
        sums = [mode_sums(X[p], C, min_records=1) for p in parts]
        return tuple(sum(s[i] for s in sums) for i in range(3))

    a = learn_modes(federated, X.shape[1])
    b = learn_modes(lambda C: mode_sums(X, C), X.shape[1])
    np.testing.assert_allclose(a.centres, b.centres, atol=1e-10)
    np.testing.assert_allclose(a.radius2, b.radius2, rtol=1e-9)
    np.testing.assert_array_equal(a.counts, b.counts)
    assert a.centres.shape[0] <= 8 and (a.counts >= 5).all()


def test_a_gateway_with_few_records_near_a_centre_sends_none_of_them():
    rng = np.random.default_rng(6)
    X, _ = _clusters(rng, k=2, m=20)
    lone = X[:3]  # a third gateway: 3 records of cluster 0, each within the cluster

    def federated(C):
        sums = [mode_sums(Z, C) for Z in (X[:20], X[20:], lone)]
        return tuple(sum(s[i] for s in sums) for i in range(3))

    modes = learn_modes(federated, X.shape[1], max_modes=2)
    np.testing.assert_array_equal(np.sort(modes.counts), [20, 20])  # the 3 never counted


def test_learn_modes_needs_min_records_and_caps_modes():
    rng = np.random.default_rng(4)
    X = rng.standard_normal((4, 5))
    assert learn_modes(lambda C: mode_sums(X, C), 5) is None  # 4 < MIN_MODE_RECORDS
    X, _ = _clusters(rng, k=6, m=12)
    modes = learn_modes(lambda C: mode_sums(X, C), X.shape[1], max_modes=2)
    assert modes.centres.shape[0] == 2
    modes = learn_modes(lambda C: mode_sums(X, C), X.shape[1], min_records=7)
    assert (modes.counts >= 7).all()  # a cluster of 12 never splits into groups under 7


def test_suppressing_mode_is_the_nearest_ball_that_holds_the_record():
    rng = np.random.default_rng(5)
    C = rng.standard_normal((3, 4)) * 3
    r2 = np.array([0.5, 2.0, 1.0])
    modes = BenignModes(C, r2, np.array([5, 6, 7]))
    R = np.vstack([C + 0.3 * rng.standard_normal((3, 4)) for _ in range(20)])
    R = np.vstack([R, rng.standard_normal((40, 4)) * 4])
    got = suppressing_mode(R, modes)
    for x, g in zip(R, got, strict=True):
        ratio = [np.sum((x - c) ** 2) / r for c, r in zip(C, r2, strict=True)]
        j = int(np.argmin(ratio))
        assert g == (j if ratio[j] <= 1.0 else -1)
    assert (got >= 0).any() and (got < 0).any()
    assert suppressing_mode(np.empty((0, 4)), modes).shape == (0,)


def test_attack_counts_and_guard_against_a_loop():
    rng = np.random.default_rng(6)
    C = rng.standard_normal((3, 5)) * 4
    modes = BenignModes(C, np.array([1.0, 2.0, 0.5]), np.array([5, 9, 6]))
    # attacks: one near mode 0's centre, one at 0.4 of mode 1's radius^2, none near 2
    A = np.vstack([C[0] + 0.01, C[1] + np.sqrt(0.4 * 2.0 / 5), rng.standard_normal((5, 5)) * 20])
    got = attack_counts(A, modes)
    ref = np.zeros((3, len(GUARD_STEPS)), dtype=int)
    for a in A:
        for k, (c, r2) in enumerate(zip(C, modes.radius2, strict=True)):
            for j, q in enumerate(GUARD_STEPS):
                ref[k, j] += np.sum((a - c) ** 2) / r2 <= q
    np.testing.assert_array_equal(got, ref)
    guarded = guard_modes(modes, got)
    # mode 0 holds an attack at its centre: dropped; mode 1 shrinks to 0.25 of its
    # squared radius (the attack at 0.4 is outside it); mode 2 is unchanged
    np.testing.assert_array_equal(guarded.counts, [9, 6])
    np.testing.assert_allclose(guarded.radius2, [2.0 * 0.25, 0.5])
    assert guard_modes(modes, np.ones_like(got)) is None
    assert attack_counts(np.empty((0, 5)), modes).sum() == 0

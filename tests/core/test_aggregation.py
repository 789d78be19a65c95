"""Robust server steps: the geometric median, the Grassmann-trimmed mean, the V-step."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize

from fedep.core.aggregation import (
    geometric_median,
    grassmann_distances,
    proposals,
    robust_step,
    trimmed_consensus,
)
from fedep.core.fedep import RoundReport, aggregate_consensus
from fedep.core.fedpg import aggregate_mean
from fedep.core.stiefel import polar, random_stiefel
from fedep.federation.server import server_round


def _objective(y, Z, w):
    return float(np.sum(w * np.linalg.norm(Z.reshape(len(Z), -1) - y.ravel(), axis=1)))


@pytest.mark.parametrize("seed", range(5))
def test_geometric_median_matches_an_independent_minimiser(seed):
    rng = np.random.default_rng(seed)
    k, n, r = 7, 4, 2
    Z = rng.normal(size=(k, n, r))
    w = rng.random(k) + 0.2
    gm = geometric_median(Z, w, tol=1e-12)
    assert gm.reason == "converged"
    ref = minimize(
        lambda y: _objective(y, Z, w), Z.mean(0).ravel(), method="Nelder-Mead",
        options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 200000, "maxfev": 200000},
    )  # fmt: skip
    assert _objective(gm.median, Z, w) <= ref.fun + 1e-9
    np.testing.assert_allclose(gm.median.ravel(), ref.x, atol=1e-4)
    # First-order optimality: the weighted unit vectors towards the points cancel.
    diff = Z - gm.median
    g = np.tensordot(w / np.linalg.norm(diff, axis=(1, 2)), diff, axes=1)
    assert np.linalg.norm(g) <= 1e-7
    np.testing.assert_allclose(gm.distances, np.linalg.norm(diff, axis=(1, 2)))


def test_geometric_median_of_identical_proposals_is_that_proposal():
    Z = np.broadcast_to(np.arange(6.0).reshape(3, 2), (5, 3, 2)).copy()
    gm = geometric_median(Z, np.arange(1.0, 6.0))
    assert gm.reason == "identical" and gm.n_iter == 0
    np.testing.assert_array_equal(gm.median, Z[0])


@pytest.mark.parametrize("init", [None, "outlier"])
def test_one_far_outlier_among_identical_points_gives_the_common_point(init):
    rng = np.random.default_rng(1)
    P = rng.normal(size=(5, 3))
    Z = np.stack([P] * 6 + [P + 1e3 * rng.normal(size=P.shape)])
    w = np.array([1.0, 2, 1, 1, 3, 1, 5])  # the outlier has the largest single weight
    start = None if init is None else Z[-1]
    gm = geometric_median(Z, w, init=start)
    assert gm.reason == "at_data_point"
    np.testing.assert_allclose(gm.median, P, atol=1e-12)


def test_safeguard_leaves_a_proposal_that_is_not_the_median():
    # Start exactly on a proposal that is not optimal: the plain Weiszfeld step is
    # undefined there; the Vardi-Zhang step moves on and reaches the median.
    rng = np.random.default_rng(2)
    Z = rng.normal(size=(6, 3, 2))
    gm = geometric_median(Z, init=Z[0], tol=1e-12)
    ref = geometric_median(Z, tol=1e-12)
    assert gm.reason == "converged"
    np.testing.assert_allclose(gm.median, ref.median, atol=1e-8)


def test_geometric_median_rejects_bad_weights():
    Z = np.zeros((3, 2, 1))
    for w in ([1.0, -1.0, 1.0], [0.0, 0.0, 0.0], [1.0, np.nan, 1.0], [1.0, 1.0]):
        with pytest.raises(ValueError, match="weights"):
            geometric_median(Z, np.array(w))


def _cluster(rng, k=10, n=12, r=3, spread=0.05, outliers=(3, 7)):
    V = random_stiefel(n, r, rng)
    Z = polar(V + spread * rng.normal(size=(k, n, r)))
    for i in outliers:
        Z[i] = random_stiefel(n, r, rng)
    return V, Z


def test_grassmann_distances_are_the_projector_distances():
    rng = np.random.default_rng(3)
    Z = rng.normal(size=(5, 8, 3))  # not orthonormal: the polar factor is used
    Q = polar(Z)
    P = Q @ np.swapaxes(Q, 1, 2)
    ref = np.linalg.norm(P[:, None] - P[None], axis=(2, 3))
    np.testing.assert_allclose(grassmann_distances(Z), ref, atol=1e-10)


def test_trimmed_rule_drops_the_planted_outliers():
    rng = np.random.default_rng(4)
    V, Z = _cluster(rng)
    w = rng.random(10) + 0.5
    tc = trimmed_consensus(Z, w, trim=0.2)
    assert np.flatnonzero(~tc.kept).tolist() == [3, 7]
    keep = tc.kept
    np.testing.assert_allclose(tc.mean, np.tensordot(w[keep] / w[keep].sum(), Z[keep], axes=1))
    # A majority always stays; trim=0 keeps everything.
    assert trimmed_consensus(Z, trim=0.49).kept.sum() == 6
    assert trimmed_consensus(Z, trim=0.0).kept.all()
    with pytest.raises(ValueError, match="trim"):
        trimmed_consensus(Z, trim=0.5)


def test_trimming_is_rotation_invariant():
    rng = np.random.default_rng(5)
    _, Z = _cluster(rng, spread=0.2, outliers=(0, 5))
    R = polar(rng.normal(size=(10, 3, 3)))  # one rotation per client
    a, b = trimmed_consensus(Z), trimmed_consensus(Z @ R)
    np.testing.assert_allclose(a.distances, b.distances, atol=1e-10)
    np.testing.assert_array_equal(a.kept, b.kept)
    assert np.flatnonzero(~a.kept).tolist() == [0, 5]


def _report(k=6, n=7, r=2, seed=0):
    rng = np.random.default_rng(seed)
    W = polar(rng.normal(size=(k, n, r)))
    keys = ("fit", "l1", "l21", "projection", "lam_terms", "data_residual", "manpg_iter")
    m = {key: rng.random(k) for key in keys}
    m.update(ssn_iter=np.zeros(k), x_norm2=np.ones(k), grad_scale=np.ones(k))
    return RoundReport(W=W, Pi=0.1 * rng.normal(size=W.shape), nu=rng.random(k) + 0.5, metrics=m)


def test_mean_is_the_exact_v_step_bit_for_bit():
    rep = _report()
    V, rec = server_round("fedep", rep, np.zeros((7, 2)), "mean")
    assert np.array_equal(V, aggregate_consensus(rep.W, rep.Pi, rep.nu))
    assert np.array_equal(server_round("fedep", rep, np.zeros((7, 2)))[0], V)
    assert rec["n_downweighted"] == 0 and rec["downweighted"] == []
    # FedPG reports carry its server weights as nu: ones give the plain mean.
    Vpg, _ = server_round("fedpg", rep, np.zeros((7, 2)), "mean")
    assert np.array_equal(Vpg, aggregate_mean(rep.W, rep.nu))
    rep.nu = np.ones_like(rep.nu)
    Vpg, _ = server_round("fedpg", rep, np.zeros((7, 2)), "mean")
    assert np.array_equal(Vpg, aggregate_mean(rep.W))
    # The V-step is the nu-weighted mean of the proposals Z_i = W_i + Pi_i / nu_i.
    rep = _report()
    Z, w = proposals("fedep", rep.W, rep.Pi, rep.nu)
    np.testing.assert_allclose(np.tensordot(w / w.sum(), Z, axes=1), V, atol=1e-14)


def test_robust_rules_exclude_outliers_from_the_stopping_residuals():
    rng = np.random.default_rng(6)
    k, n, r = 10, 12, 3
    V0, W = _cluster(rng, k, n, r, spread=1e-3, outliers=(2, 8))
    rep = _report(k, n, r)
    rep.W, rep.Pi, rep.nu = W, np.zeros_like(W), np.ones(k)
    _, mean_rec = server_round("fedep", rep, V0, "mean")
    for rule in ("median", "trimmed"):
        V, rec = server_round("fedep", rep, V0, rule)
        assert rec["downweighted"] == [2, 8] and rec["n_downweighted"] == 2
        honest = np.delete(W, [2, 8], axis=0)
        ref = np.sqrt(np.mean(np.sum((honest - V) ** 2, axis=(1, 2))) / r)
        np.testing.assert_allclose(rec["consensus_residual_rel"], ref)
        assert rec["consensus_residual_rel"] < 0.1 * mean_rec["consensus_residual_rel"]
    _, rec = server_round("fedep", rep, V0, "median")
    assert rec["median_reason"] == "converged" and rec["median_iter"] >= 1


def test_unknown_rule_is_rejected():
    rep = _report()
    with pytest.raises(ValueError, match="aggregation must be one of"):
        robust_step("fedep", rep.W, rep.Pi, rep.nu, "mode")

"""Robust server steps up to their textbook limits: colluders, nu inflation, lying metrics.

The Grassmannian median is checked against a plain NumPy Weiszfeld on explicit n x n
projectors; the breakdown properties on seeded synthetic proposals; the stopping test
in the one round loop with a client that lies about its metrics.
"""

from __future__ import annotations

import numpy as np
import pytest

from fedep import FedEP
from fedep.core.aggregation import (
    AGGREGATIONS,
    WEIGHT_CAP,
    bounded_weights,
    grassmann_median,
    robust_step,
)
from fedep.core.baselines import client_sketch, oneshot_merge
from fedep.core.cohort import cohort_spec, make_cohort
from fedep.core.fedep import FedEPSettings
from fedep.core.stiefel import polar, projector_distance, random_stiefel
from fedep.federation.rounds import run_rounds


def _reference_projector_median(Z, iters=20000):
    """Weiszfeld on explicit projectors P_i = Q_i Q_i^T (n x n), equal weights."""
    Q = polar(Z)
    P = np.einsum("kia,kja->kij", Q, Q)
    Y = P.mean(axis=0)
    for _ in range(iters):
        d = np.linalg.norm((P - Y).reshape(len(P), -1), axis=1)
        d = np.maximum(d, 1e-15)
        Y_new = np.tensordot(1 / d, P, axes=1) / np.sum(1 / d)
        if np.abs(Y_new - Y).max() < 1e-14:
            Y = Y_new
            break
        Y = Y_new
    return Y


def _cluster(rng, k, n=12, r=3, spread=0.02):
    V = random_stiefel(n, r, rng)
    return V, polar(V + spread * rng.standard_normal((k, n, r)))


def _rotate_out(V, angle, rng):
    """V with its last column turned by ``angle`` towards a direction outside span(V)."""
    n, r = V.shape
    u = rng.standard_normal(n)
    u -= V @ (V.T @ u)
    u /= np.linalg.norm(u)
    W = V.copy()
    W[:, -1] = np.cos(angle) * V[:, -1] + np.sin(angle) * u
    return W


def test_grassmann_median_matches_a_numpy_weiszfeld_on_projectors():
    rng = np.random.default_rng(0)
    _, Z = _cluster(rng, 7, spread=0.3)
    gm = grassmann_median(Z)
    Q = polar(Z)
    P_star = np.einsum("k,kia,kja->ij", gm.coef, Q, Q)
    ref = _reference_projector_median(Z)
    np.testing.assert_allclose(P_star, ref, atol=1e-7)
    # V spans the top-r eigenvectors of the median projector combination.
    vals, vecs = np.linalg.eigh(ref)
    U = vecs[:, np.argsort(vals)[::-1][:3]]
    assert projector_distance(gm.V, U) < 1e-6
    np.testing.assert_allclose(gm.V.T @ gm.V, np.eye(3), atol=1e-10)
    np.testing.assert_allclose(
        gm.distances, [np.linalg.norm(Q[i] @ Q[i].T - ref) for i in range(7)], atol=1e-6
    )


def test_grassmann_median_ignores_how_a_client_writes_its_span():
    rng = np.random.default_rng(1)
    _, Z = _cluster(rng, 6, spread=0.2)
    R = np.stack([np.linalg.qr(rng.standard_normal((3, 3)))[0] for _ in range(6)])
    a = grassmann_median(Z)
    b = grassmann_median(np.einsum("kij,kjl->kil", Z, R))
    np.testing.assert_allclose(a.coef, b.coef, atol=1e-9)
    assert projector_distance(a.V, b.V) < 1e-8


@pytest.mark.parametrize("rule", ["median", "grassmann"])
@pytest.mark.parametrize("f", [1, 2, 3, 4])
def test_medians_hold_below_half_against_colluders(rule, f):
    # 10 clients; f collude on one basis rotated 0.2 rad (identical, so a tight
    # cluster of their own) or on a far crafted basis: the consensus stays near the
    # honest span for every f < 5.
    rng = np.random.default_rng(2 + f)
    V, W = _cluster(rng, 10, spread=0.01)
    Pi = np.zeros_like(W)
    nu = np.ones(10)
    clean = robust_step("fedep", W[f:], Pi[f:], nu[f:], rule).V
    for bad in (_rotate_out(V, 0.2, rng), random_stiefel(*V.shape, rng)):
        Wb = W.copy()
        Wb[:f] = bad
        out = robust_step("fedep", Wb, Pi, nu, rule).V
        # the honest spread is ~0.01 per entry; the attack sits 0.2-1.4 away
        assert projector_distance(polar(out), polar(clean)) < 0.1


@pytest.mark.parametrize("f", [1, 2])
def test_trimmed_holds_up_to_its_share_against_colluders(f):
    rng = np.random.default_rng(7 + f)
    V, W = _cluster(rng, 10, spread=0.01)
    Pi, nu = np.zeros_like(W), np.ones(10)
    W[:f] = _rotate_out(V, 0.2, rng)
    st = robust_step("fedep", W, Pi, nu, "trimmed", trim=0.2)
    assert not st.kept[:f].any()
    assert projector_distance(polar(st.V), V) < 0.05


@pytest.mark.parametrize("rule", ["median", "trimmed", "grassmann"])
def test_nu_inflation_buys_no_say(rule):
    # One client inflates nu 999x (within the out-of-scale bound) and sends a basis
    # 0.15 rad off: the robust step stays where it is without the inflation, within the
    # bounded weight's effect. (Before: the weighted median followed the liar, whose
    # weight was above half the total.)
    rng = np.random.default_rng(11)
    V, W = _cluster(rng, 10, spread=0.01)
    W[0] = _rotate_out(V, 0.15, rng)
    Pi = np.zeros_like(W)
    fair = robust_step("fedep", W, Pi, np.ones(10), rule).V
    nu = np.ones(10)
    nu[0] = 999.0
    liar = robust_step("fedep", W, Pi, nu, rule).V
    assert projector_distance(polar(liar), polar(fair)) < 0.15 * WEIGHT_CAP / 10 + 1e-3
    assert projector_distance(polar(liar), V) < 0.5 * projector_distance(W[0], V)


def test_trimmed_mean_caps_weights():
    rng = np.random.default_rng(5)
    _, W = _cluster(rng, 10, spread=0.01)
    Pi = 0.01 * rng.standard_normal(W.shape)
    nu = rng.uniform(1.0, 1.5, 10)
    # Without a capped weight the kept clients' exact V-step, bit for bit as before.
    st = robust_step("fedep", W, Pi, nu, "trimmed")
    kept = st.kept
    exact = np.einsum("k,kij->ij", nu[kept], W[kept] + Pi[kept] / nu[kept, None, None])
    np.testing.assert_allclose(st.V, exact / nu[kept].sum(), atol=1e-12)
    nu[3] = 500.0
    st = robust_step("fedep", W, Pi, nu, "trimmed")
    w = bounded_weights(nu)
    assert w[3] == pytest.approx(WEIGHT_CAP * np.median(nu))
    k = st.kept
    Z = W + Pi / nu[:, None, None]
    np.testing.assert_allclose(st.V, np.tensordot(w[k] / w[k].sum(), Z[k], axes=1), atol=1e-12)


def test_grassmann_is_an_aggregation_option():
    assert "grassmann" in AGGREGATIONS
    FedEP(aggregation="grassmann")._validate_params()


class _LyingMetrics:
    """A cohort whose client 0 reports a huge data energy, no data residual and a
    frozen objective (every metric the old stopping test read from it)."""

    def __init__(self, honest):
        self.honest, self.d = honest, honest.d

    def local_round(self, V, clients=None, **kw):
        rep = self.honest.local_round(V, clients, **kw)
        m = rep.metrics
        m["x_norm2"][0] = 1e12
        m["data_residual"][0] = 0.0
        for key in ("fit", "projection", "lam_terms", "l1", "l21"):
            m[key][0] = 1.0
        return rep

    def __getattr__(self, name):
        return getattr(self.honest, name)


@pytest.mark.parametrize("rule", ["median", "grassmann"])
def test_a_client_lying_about_its_metrics_does_not_end_the_run(rule):
    rng = np.random.default_rng(0)
    n, r, d = 10, 2, 6
    base = rng.standard_normal((n, n)) * np.r_[3.0, 2.0, np.full(n - 2, 0.3)]
    blocks = [rng.standard_normal((80, n)) @ base for _ in range(d)]
    blocks = [(b - b.mean(0)) / b.std(0) for b in blocks]
    V0 = oneshot_merge([client_sketch(b, r) for b in blocks], r)
    V0 = polar(V0 + 0.3 * rng.standard_normal(V0.shape))  # a start far from the end
    p = FedEP().get_params()
    settings = FedEPSettings(
        alpha=float(p["alpha"]),
        mu=float(p["mu"]),
        use_sparse=False,
        inner_max_iter=int(p["inner_max_iter"]),
        penalty_scaling=p["penalty_scaling"],
        consensus_weights=p["consensus_weights"],
    )
    spec = cohort_spec("fedep", settings, beta=float(p["beta"]), nu=float(p["nu"]))

    def run(lie):
        c = make_cohort(spec, blocks, V0)
        return run_rounds(
            _LyingMetrics(c) if lie else c, "fedep", V0, n_rounds=60, tol=1e-6, aggregation=rule
        )

    honest, lied = run(False), run(True)
    print(rule, honest.n_rounds, lied.n_rounds, honest.stop_reason)
    assert honest.n_rounds > 12
    # The lie moves at most the median of the data residuals (one client of six).
    assert lied.n_rounds >= honest.n_rounds - 2
    assert "consensus_change" in lied.history[-1]

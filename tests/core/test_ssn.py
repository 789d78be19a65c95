"""The SSN direction against an independent solver of the same convex subproblem."""

import numpy as np
import pytest

from fedep.core.ssn import _eval, _jacobian, ssn_direction, unvech, vech
from fedep.core.stiefel import l21_norm, project_tangent, prox_l21, random_stiefel


def admm_direction(W, g, t, beta, rho=1.0, iters=20000, tol=1e-13):
    """Primal ADMM for min <g,D> + |D|^2/(2t) + beta |W + E|_{2,1}, D = E, D tangent.

    Independent of the SSN: no multiplier Lam, no Jacobian; the D-step minimises an
    isotropic quadratic over the tangent space (exactly a projection), the E-step is
    the l2,1 prox.
    """
    D = np.zeros_like(W)
    E = np.zeros_like(W)
    Y = np.zeros_like(W)
    for _ in range(iters):
        # argmin_D <g,D> + |D|^2/(2t) + rho/2 |D - E + Y|^2 over the tangent space.
        D_new = project_tangent(W, (E - Y) * rho - g) / (1.0 / t + rho)
        E_new = prox_l21(W + D_new + Y, beta / rho) - W
        Y += D_new - E_new
        done = np.linalg.norm(D_new - E_new) < tol and np.linalg.norm(E_new - E) * rho < tol
        D, E = D_new, E_new
        if done:
            break
    return D


def subproblem_value(W, g, t, beta, D):
    return np.sum(g * D) + np.sum(D * D) / (2 * t) + beta * l21_norm(W + D)


def _assert_ssn_solves_the_subproblem(rng, n, r, beta_max, tol):
    """SSN against the independent ADMM, and its KKT conditions, on one random instance."""
    W = random_stiefel(n, r, rng)
    g = rng.standard_normal((n, r)) * rng.uniform(0.5, 5)
    t = float(rng.uniform(0.05, 1.0))
    beta = float(rng.uniform(0.0, beta_max))
    sol = ssn_direction(W, g, t, t * beta, tol=tol)
    assert sol.converged[0]
    ref = admm_direction(W, g, t, beta)
    assert np.max(np.abs(sol.D - ref)) <= 1e-6
    # KKT: D is tangent, D = prox(B(Lam)) - W, and no feasible perturbation improves.
    assert np.linalg.norm(W.T @ sol.D + sol.D.T @ W) <= 1e-10
    B = W - t * (g - W @ sol.Lam)
    assert np.allclose(sol.D, prox_l21(B, t * beta) - W, atol=1e-12)
    assert np.allclose(sol.Lam, sol.Lam.T)
    f0 = subproblem_value(W, g, t, beta, sol.D)
    for _ in range(5):
        P = project_tangent(W, rng.standard_normal((n, r)))
        assert f0 <= subproblem_value(W, g, t, beta, sol.D + 1e-4 * P) + 1e-12


@pytest.mark.parametrize("seed", range(50))
def test_ssn_matches_independent_admm(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(4, 15))
    r = int(rng.integers(1, min(5, n - 1) + 1))
    _assert_ssn_solves_the_subproblem(rng, n, r, beta_max=1.5, tol=1e-13)


def test_beta_zero_gives_projected_gradient_step():
    rng = np.random.default_rng(1)
    W = random_stiefel(10, 3, rng)
    g = rng.standard_normal((10, 3))
    sol = ssn_direction(W, g, 0.3, 0.0)
    assert np.allclose(sol.D, -0.3 * project_tangent(W, g), atol=1e-10)


@pytest.mark.parametrize("r", [1, 4, 10])  # 10: above the dense-map rank, gather form
def test_jacobian_matches_finite_differences(r):
    rng = np.random.default_rng(2)
    d, n = 3, 12
    W = random_stiefel(n, r, rng, (d,))
    g = rng.standard_normal((d, n, r))
    t = np.full(d, 0.3)
    tau = np.full(d, 0.05)
    B0 = W - t[:, None, None] * g
    Lam = unvech(0.1 * rng.standard_normal((d, r * (r + 1) // 2)), r)
    B, _, E = _eval(W, B0, t, tau, Lam)
    J = _jacobian(W, B, t, tau)
    h = rng.standard_normal((d, r * (r + 1) // 2))
    eps = 1e-7
    _, _, E2 = _eval(W, B0, t, tau, Lam + eps * unvech(h, r))
    fd = (vech(E2) - vech(E)) / eps
    assert np.max(np.abs(fd - np.einsum("dab,db->da", J, h))) <= 1e-6


def test_warm_start_needs_no_iterations():
    rng = np.random.default_rng(3)
    W = random_stiefel(8, 3, rng, (2,))
    g = rng.standard_normal((2, 8, 3))
    first = ssn_direction(W, g, 0.2, 0.1)
    again = ssn_direction(W, g, 0.2, 0.1, first.Lam)
    assert np.all(again.n_iter == 0)
    assert np.allclose(again.D, first.D)


def test_batched_equals_single():
    rng = np.random.default_rng(4)
    W = random_stiefel(9, 2, rng, (5,))
    g = rng.standard_normal((5, 9, 2))
    t = rng.uniform(0.1, 0.5, 5)
    tau = rng.uniform(0.0, 0.3, 5)
    batch = ssn_direction(W, g, t, tau, tol=1e-13)
    for i in range(5):
        one = ssn_direction(W[i], g[i], t[i], tau[i], tol=1e-13)
        assert np.allclose(one.D, batch.D[i], atol=1e-10)


def test_jacobian_forms_agree(monkeypatch):
    import fedep.core.ssn as ssn

    rng = np.random.default_rng(8)
    d, n, r = 6, 15, 5
    W = random_stiefel(n, r, rng, (d,))
    B = rng.standard_normal((d, n, r))
    t = rng.uniform(0.1, 1.0, d)
    tau = np.full(d, 1.5)  # some rows cut to zero, some kept
    assert 0 < np.mean(np.linalg.norm(B, axis=-1) > 1.5) < 1
    dense = ssn._jacobian(W, B, t, tau)
    monkeypatch.setattr(ssn, "_DENSE_MAP_MAX_RANK", 0)
    gather = ssn._jacobian(W, B, t, tau)
    assert np.allclose(dense, gather, rtol=1e-12, atol=1e-12)


# --- The matrix-free Newton solve (from CG_MIN_UNKNOWNS unknowns) --------------------


def _newton_instance(seed, n=40, r=16, cut_share=0.0):
    """A point of the SSN iteration: W, B(Lam), t, tau, E, reg, with about
    ``cut_share`` of the rows of B at or below the threshold."""
    rng = np.random.default_rng(seed)
    W = random_stiefel(n, r, rng, (1,))
    g = rng.standard_normal((1, n, r)) * rng.uniform(0.5, 3.0)
    t = np.array([rng.uniform(0.05, 0.5)])
    B0 = W - t[:, None, None] * g
    norms = np.sort(np.linalg.norm(B0[0], axis=1))
    tau = np.array([norms[int(cut_share * (n - 1))] * (1.0 + 1e-9) if cut_share else 0.1])
    Lam = 0.5 * (np.swapaxes(W, 1, 2) @ g + np.swapaxes(g, 1, 2) @ W)
    B, _, E = _eval(W, B0, t, tau, Lam)
    reg = np.array([10.0 ** rng.uniform(-8, -1)]) * t
    return W, B, t, tau, E, reg


@pytest.mark.parametrize("cut_share", [0.0, 0.3, 0.8])
@pytest.mark.parametrize("seed", range(4))
def test_matrix_free_jacobian_equals_the_assembled_one(seed, cut_share):
    from fedep.core.ssn import _jacobian_apply, _jacobian_factors

    W, B, t, tau, _, reg = _newton_instance(seed, cut_share=cut_share)
    r = W.shape[-1]
    J = _jacobian(W, B, t, tau)[0]
    A, Bs = _jacobian_factors(W, B, tau)
    rng = np.random.default_rng(seed + 100)
    H = rng.standard_normal((r, r))
    H = (H + H.T)[None]
    got = _jacobian_apply(W, A, Bs, t, reg, H)
    ref = unvech(J @ vech(H[0]) + reg[0] * vech(H[0]), r)
    np.testing.assert_allclose(got[0], ref, rtol=1e-11, atol=1e-12 * np.abs(ref).max())


@pytest.mark.parametrize("cut_share", [0.0, 0.3, 0.8])
@pytest.mark.parametrize("seed", range(4))
def test_newton_cg_solves_the_dense_system(seed, cut_share):
    from fedep.core.ssn import _newton_cg, _solve

    W, B, t, tau, E, reg = _newton_instance(seed, cut_share=cut_share)
    r = W.shape[-1]
    J = _jacobian(W, B, t, tau)
    dense = unvech(_solve(J + reg[:, None, None] * np.eye(J.shape[-1]), -vech(E)), r)
    step, n_cg = _newton_cg(W, B, t, tau, E, reg)
    assert 1 <= n_cg[0] < 200
    assert np.allclose(step, np.swapaxes(step, 1, 2))
    np.testing.assert_allclose(step, dense, rtol=1e-7, atol=1e-8 * np.abs(dense).max())


def test_newton_cg_marks_non_finite_input():
    from fedep.core.ssn import _newton_cg

    W, B, t, tau, E, reg = _newton_instance(0)
    W2, B2, E2 = (np.concatenate([a, a]) for a in (W, B, E))
    E2[1, 0, 0] = np.nan
    step, n_cg = _newton_cg(W2, B2, np.r_[t, t], np.r_[tau, tau], E2, np.r_[reg, reg])
    assert np.all(np.isfinite(step[0])) and np.all(np.isnan(step[1]))
    assert n_cg[1] == 0


@pytest.mark.parametrize("seed", range(6))
def test_ssn_above_the_cg_threshold_matches_independent_admm(seed):
    # r = 16: 136 unknowns, solved matrix-free; the same KKT checks as above.
    from fedep.core.ssn import CG_MIN_UNKNOWNS

    rng = np.random.default_rng(seed)
    n, r = 30, 16
    assert r * (r + 1) // 2 >= CG_MIN_UNKNOWNS
    _assert_ssn_solves_the_subproblem(rng, n, r, beta_max=3.0, tol=1e-12)

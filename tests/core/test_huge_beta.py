"""Huge l2,1 weights: the threshold tau = t * beta exceeds every row norm of B(0).

At ``Lam = 0`` (and at the usual starts) every row of ``B = W - t grad`` is cut, so
``D(Lam) = -W`` and ``E = -2 I`` on a neighbourhood: the SSN used to stop there and
return ``D = -W``, which is not tangent, and the two kernels then retracted the zero
matrix differently. The direction subproblem is convex with a unique solution that
always keeps rows; these tests check it against conditions computed here.
"""

import numpy as np
import pytest

from fedep.core import _kernels as K
from fedep.core.manpg import manpg_w_step, w_objective
from fedep.core.ssn import ssn_direction
from fedep.core.stiefel import random_stiefel

N_INSTANCES = 60


def _instance(k):
    """Seeded W-step data with tau from 1.5x to 10x the largest row norm of B(0)."""
    rng = np.random.default_rng(20_000 + k)
    n = int(rng.integers(3, 18))
    r = int(rng.integers(1, min(5, n - 1) + 1))
    X = rng.standard_normal((3 * n, n)) * rng.uniform(0.5, 0.9) ** np.arange(n)
    G = X.T @ X
    W = random_stiefel(n, r, rng)
    Z = W + 0.3 * rng.standard_normal((n, r))
    nu = rng.uniform(0.1, 5.0)
    t = 1.0 / (2.0 * np.linalg.eigvalsh(G)[-1] + nu)
    g = -2.0 * G @ W + nu * (W - Z)
    factor = 1.5 + 8.5 * k / (N_INSTANCES - 1)
    tau = factor * np.linalg.norm(W - t * g, axis=1).max()
    return G, W, Z, nu, t, g, tau


def _prox_rows(B, tau):
    # Written out here (not fedep.core.stiefel.prox_l21): b -> max(0, 1 - tau/|b|) b.
    out = np.zeros_like(B)
    for j, b in enumerate(B):
        nb = np.sqrt(b @ b)
        if nb > tau:
            out[j] = (1.0 - tau / nb) * b
    return out


def _kkt_residual(W, g, t, tau, D, Lam):
    """KKT residual of min <g,D> + |D|^2/(2t) + (tau/t) |W + D|_{2,1}, W^T D + D^T W = 0.

    With a symmetric multiplier Lam the conditions are tangency and the fixed point
    W + D = prox_{tau |.|_{2,1}}(W - t (g - W Lam)); for this strongly convex problem
    they certify the unique minimiser.
    """
    tangency = np.linalg.norm(W.T @ D + D.T @ W)
    symmetry = np.linalg.norm(Lam - Lam.T)
    fixed_point = np.linalg.norm(W + D - _prox_rows(W - t * (g - W @ Lam), tau))
    return max(tangency, symmetry, fixed_point)


def _admm(W, g, t, tau, iters=20000, tol=1e-12):
    """Independent primal ADMM on D = E (D tangent, E carries the l2,1 term)."""
    rho = 1.0 / t
    D = np.zeros_like(W)
    E = np.zeros_like(W)
    Y = np.zeros_like(W)
    for _ in range(iters):
        V = (E - Y) * rho - g
        V = V - W @ (0.5 * (W.T @ V + V.T @ W))  # tangent projection
        D_new = V / (1.0 / t + rho)
        E_new = _prox_rows(W + D_new + Y, tau) - W
        Y += D_new - E_new
        done = np.linalg.norm(D_new - E_new) < tol and np.linalg.norm(E_new - E) < tol
        D, E = D_new, E_new
        if done:
            break
    return D


def _compiled_ssn(W, g, t, tau, tol=1e-10, max_iter=50):
    n, r = W.shape
    ia, ib, wgt, T1, sc = K.vech_maps(r)
    DT = np.empty((r, n))
    Lam = np.zeros((r, r))
    ws = K._ssn_workspace(n, r, ia.size)
    WT, gT = np.ascontiguousarray(W.T), np.ascontiguousarray(g.T)
    n_iter, res, code = K._ssn(WT, gT, t, tau, Lam, tol, max_iter, ia, ib, wgt, T1, sc, DT, ws)
    return DT.T.copy(), Lam, res, code


def test_instances_cut_every_row_at_the_start():
    for k in range(N_INSTANCES):
        _, W, _, _, t, g, tau = _instance(k)
        assert np.all(_prox_rows(W - t * g, tau) == 0.0)


@pytest.mark.parametrize("kernel", ["numpy", "numba"])
def test_ssn_returns_the_kkt_point_when_every_row_would_be_cut(kernel):
    for k in range(N_INSTANCES):
        _, W, _, _, t, g, tau = _instance(k)
        if kernel == "numpy":
            sol = ssn_direction(W, g, t, tau)
            D, Lam, res, reason = sol.D, sol.Lam, sol.residual[0], sol.stop_reason[0]
        else:
            D, Lam, res, code = _compiled_ssn(W, g, t, tau)
            reason = ("converged", "max_iter", "line_search_failed", "singular")[code]
        assert reason == "converged", k
        assert res <= 1e-10, k
        assert np.all(np.isfinite(D)), k
        assert not np.allclose(D, -W), k  # rows are kept
        assert _kkt_residual(W, g, t, tau, D, Lam) <= 1e-9, k
        assert np.max(np.abs(D - _admm(W, g, t, tau))) <= 1e-7, k


def test_compiled_and_numpy_ssn_agree_on_huge_beta():
    for k in range(N_INSTANCES):
        _, W, _, _, t, g, tau = _instance(k)
        D = _compiled_ssn(W, g, t, tau)[0]
        assert np.max(np.abs(D - ssn_direction(W, g, t, tau).D)) <= 1e-8, k


def test_w_step_on_huge_beta_descends_and_kernels_agree():
    for k in range(N_INSTANCES):
        G, W, Z, nu, t, _, tau = _instance(k)
        args = (G[None], W[None], Z[None], np.array([tau / t]), np.array([nu]))
        out = {kern: manpg_w_step(*args, max_iter=10, kernel=kern) for kern in ("numpy", "numba")}
        F0 = w_objective(*args[:3], args[3], args[4])[0]
        for res in out.values():
            assert np.all(np.isfinite(res.W)) and np.all(np.isfinite(res.F)), k
            assert res.F[0] <= F0 + 1e-9 * abs(F0), k
            assert np.allclose(res.W[0].T @ res.W[0], np.eye(W.shape[1]), atol=1e-10), k
        a, b = out["numpy"], out["numba"]
        assert np.max(np.abs(a.W - b.W)) <= 1e-8, k
        assert np.array_equal(a.stop_reason, b.stop_reason), k
        assert a.n_iter[0] >= 1, k  # a real step was taken, not a stop at D = -W


@pytest.mark.parametrize("retraction", ["polar", "qr"])
def test_unsolved_direction_is_never_retracted_through_a_rank_deficient_point(retraction):
    # With no SSN iteration the direction stays at the start, D = -W (every row cut,
    # ||E|| = 2 sqrt(r)): W + D = 0 and W + s D = (1 - s) W. The full-rank guard only
    # retracts steps with s ||E|| <= 1, where polar/QR give W back: no descent, the
    # line search fails and W is kept, identically in both kernels and without NaN.
    G, W, Z, nu, t, _, tau = _instance(30)
    args = (G[None], W[None], Z[None], np.array([tau / t]), np.array([nu]))
    for kern in ("numpy", "numba"):
        res = manpg_w_step(*args, ssn_max_iter=0, retraction=retraction, kernel=kern)
        assert res.stop_reason[0] == "line_search_failed"
        assert np.array_equal(res.W[0], W)
        assert np.isfinite(res.F[0])

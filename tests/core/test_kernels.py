"""Compiled kernels: small building blocks against NumPy/LAPACK, and the dispatch rule."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedep.core import _kernels as K
from fedep.core.stiefel import project_tangent, random_stiefel, retract_polar, retract_qr


def _inv_sqrt(M):
    lam, Q = np.linalg.eigh(M)
    return (Q / np.sqrt(lam)) @ Q.T


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 9), st.integers(0, 2**32 - 1), st.sampled_from([1e-4, 0.1, 3.0, 100.0]))
def test_inverse_square_root_matches_eigh(r, seed, spread):
    # Near the identity (Newton-Schulz branch) and far from it (Jacobi branch).
    rng = np.random.default_rng(seed)
    B = rng.standard_normal((r, r))
    M = np.eye(r) + spread * (B @ B.T) / r
    Kc, V = np.empty((r, r)), np.empty((r, r))
    K._inv_sqrt_spd(M.copy(), Kc, V)
    ref = _inv_sqrt(M)
    assert np.allclose(Kc, ref, rtol=1e-9, atol=1e-9 * np.abs(ref).max())


@pytest.mark.parametrize("retraction", [0, 1])
def test_compiled_retractions_match_numpy(retraction):
    rng = np.random.default_rng(0)
    n, r = 20, 4
    W = random_stiefel(n, r, rng)
    D = 0.7 * project_tangent(W, rng.standard_normal((n, r)))
    outT = np.empty((r, n))
    work = np.empty((r, n)), np.empty((r, r)), np.empty((r, r)), np.empty((r, r))
    K._retract(np.ascontiguousarray(W.T), np.ascontiguousarray(D.T), 0.5, retraction, outT, *work)
    ref = (retract_polar if retraction == 0 else retract_qr)(W, 0.5 * D)
    assert np.allclose(outT.T, ref, atol=1e-12)


def test_cholesky_solve_and_its_refusal():
    rng = np.random.default_rng(1)
    B = rng.standard_normal((6, 6))
    S = B @ B.T + 0.1 * np.eye(6)
    x = rng.standard_normal(6)
    y = x.copy()
    assert K._cholesky_solve(S.copy(), y)
    assert np.allclose(S @ y, x, atol=1e-10)
    indefinite = np.diag([1.0, -1.0, 2.0])
    z = np.ones(3)
    assert not K._cholesky_solve(indefinite, z)
    assert np.array_equal(z, np.ones(3))  # untouched on refusal
    M = rng.standard_normal((5, 5))
    w = np.ones(5)
    K._lu_solve(M.copy(), w)
    assert np.allclose(M @ w, np.ones(5), atol=1e-10)


def test_pick_dispatch(monkeypatch):
    monkeypatch.setenv("FEDEP_KERNELS", "numba")
    assert K.pick("numpy", "manpg_clients") is None
    assert K.pick("auto", "manpg_clients") is K.manpg_clients
    with pytest.raises(ValueError, match="kernel"):
        K.pick("cuda", "manpg_clients")
    monkeypatch.setenv("FEDEP_KERNELS", "numpy")
    assert K.pick("auto", "manpg_clients") is None  # the environment overrides "auto"
    assert K.pick("numba", "manpg_clients") is K.manpg_clients  # ... not an explicit choice
    monkeypatch.setenv("FEDEP_KERNELS", "gpu")
    with pytest.raises(ValueError, match="FEDEP_KERNELS"):
        K.pick("auto", "manpg_clients")
    monkeypatch.setenv("FEDEP_KERNELS", "auto")
    monkeypatch.setattr(K, "HAVE_NUMBA", False)
    assert K.pick("auto", "manpg_clients") is None  # falls back to NumPy
    with pytest.raises(ImportError, match="numba"):
        K.pick("numba", "manpg_clients")


def test_vech_index_map_reproduces_term_one():
    from fedep.core.ssn import _term1, _vech_index

    rng = np.random.default_rng(2)
    for r in (1, 3, 6):
        A = rng.standard_normal((1, r, r))
        ia, ib, _ = _vech_index(r)
        _, _, _, T1, sc = K.vech_maps(r)
        Aext = np.append(A[0].ravel(), 0.0)
        J = sc[None, :] * Aext[T1].sum(-1)
        assert np.allclose(J, _term1(A, ia, ib)[0], atol=1e-14)


@pytest.mark.parametrize("cut", [0.0, 0.5])
@pytest.mark.parametrize("seed", range(3))
def test_compiled_newton_cg_matches_numpy(seed, cut):
    from fedep.core.ssn import _eval, _newton_cg

    rng = np.random.default_rng(seed)
    n, r = 50, 18
    W = random_stiefel(n, r, rng, (1,))
    g = rng.standard_normal((1, n, r))
    t = np.array([0.2])
    B0 = W - t[:, None, None] * g
    tau = np.array([np.quantile(np.linalg.norm(B0[0], axis=1), cut) + 1e-3])
    B, _, E = _eval(W, B0, t, tau, np.zeros((1, r, r)))
    reg = np.array([1e-4])
    ref, n_ref = _newton_cg(W, B, t, tau, E, reg)
    x = np.empty((r, r))
    WT, BT = np.ascontiguousarray(W[0].T), np.ascontiguousarray(B[0].T)
    it = K._newton_cg(WT, BT, t[0], tau[0], E[0].copy(), reg[0], x)
    assert abs(it - n_ref[0]) <= 1
    np.testing.assert_allclose(x, ref[0], rtol=1e-9, atol=1e-11 * np.abs(ref).max())
    E_bad = E[0].copy()
    E_bad[2, 3] = np.inf
    assert K._newton_cg(WT, BT, t[0], tau[0], E_bad, reg[0], x) == -1
    assert np.all(np.isnan(x))


def test_compiled_inverse_square_root_by_lapack_from_eigh_min_rank():
    from fedep.core._kernels.wstep import EIGH_MIN_RANK

    rng = np.random.default_rng(5)
    r = EIGH_MIN_RANK + 4
    B = rng.standard_normal((r, r))
    M = np.eye(r) + (B @ B.T) / r
    Kc, V = np.empty((r, r)), np.empty((r, r))
    K._inv_sqrt_spd(M.copy(), Kc, V)
    np.testing.assert_allclose(Kc, _inv_sqrt(M), rtol=1e-9, atol=1e-12)

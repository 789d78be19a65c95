"""Every stop reason of the SSN and of the ManPG W-step, in constructed cases."""

import numpy as np
import pytest

from fedep.core import _kernels as K
from fedep.core.manpg import manpg_w_step
from fedep.core.ssn import STOP_REASONS, ssn_direction
from fedep.core.stiefel import random_stiefel

KERNELS = ["numpy", "numba"]


def test_stop_reason_names():
    assert STOP_REASONS == ("converged", "max_iter", "line_search_failed", "singular")


def _ssn(kernel, W, g, t, tau, tol, max_iter):
    """(reason, n_iter) of one SSN solve by the given kernel."""
    if kernel == "numpy":
        sol = ssn_direction(W, g, t, tau, tol=tol, max_iter=max_iter)
        assert sol.stop_reason.shape == (1,)
        return str(sol.stop_reason[0]), int(sol.n_iter[0])
    n, r = W.shape
    ia, ib, wgt, T1, sc = K.vech_maps(r)
    DT = np.empty((r, n))
    WT, gT = np.ascontiguousarray(W.T), np.ascontiguousarray(g.T)
    ws = K._ssn_workspace(n, r, ia.size)
    n_iter, _, code = K._ssn(
        WT, gT, t, tau, np.zeros((r, r)), tol, max_iter, ia, ib, wgt, T1, sc, DT, ws
    )
    return STOP_REASONS[code], n_iter


def _direction_problem(seed=7):
    rng = np.random.default_rng(seed)
    return random_stiefel(12, 3, rng), rng.standard_normal((12, 3))


@pytest.mark.parametrize("kernel", KERNELS)
def test_ssn_converged(kernel):
    W, g = _direction_problem()
    assert _ssn(kernel, W, g, 0.3, 0.3, 1e-10, 50)[0] == "converged"


@pytest.mark.parametrize("kernel", KERNELS)
def test_ssn_max_iter(kernel):
    W, g = _direction_problem()
    assert _ssn(kernel, W, g, 0.3, 0.3, 1e-300, 1) == ("max_iter", 1)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("seed", range(5))
def test_ssn_line_search_failed_at_round_off(kernel, seed):
    # tol = 0 cannot be met: once the residual sits at round-off no step decreases it
    # and the solve stops after three failed searches, long before the cap.
    W, g = _direction_problem(seed)
    reason, n_iter = _ssn(kernel, W, g, 0.3, 0.3, 0.0, 500)
    assert reason == "line_search_failed"
    assert n_iter < 100


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # non-finite input on purpose
@pytest.mark.parametrize("kernel", KERNELS)
def test_ssn_singular_on_non_finite_data(kernel):
    W, g = _direction_problem()
    g[0, 0] = np.nan
    assert _ssn(kernel, W, g, 0.3, 0.3, 1e-10, 50)[0] == "singular"


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # non-finite input on purpose
def test_ssn_batched_reasons():
    W, g = _direction_problem()
    g2 = g.copy()
    g2[3, 1] = np.inf
    sol = ssn_direction(np.stack([W, W]), np.stack([g, g2]), 0.3, 0.3)
    assert sol.stop_reason.tolist() == ["converged", "singular"]
    assert sol.converged.tolist() == [True, False]


def _w_problem(seed=1, n=12, r=3):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((200, n)) * 0.7 ** np.arange(n)
    G = (X.T @ X)[None]
    W0 = random_stiefel(n, r, rng, (1,))
    Z = W0 + 0.3 * rng.standard_normal(W0.shape)
    return G, W0, Z


@pytest.mark.parametrize("kernel", KERNELS)
def test_w_step_converged(kernel):
    G, W0, _ = _w_problem()
    res = manpg_w_step(G, W0, W0, np.zeros(1), np.zeros(1), max_iter=3000, kernel=kernel)
    assert res.stop_reason.tolist() == ["converged"]


@pytest.mark.parametrize("kernel", KERNELS)
def test_w_step_max_iter(kernel):
    G, W0, Z = _w_problem()
    res = manpg_w_step(G, W0, Z, np.array([1.0]), np.array([2.0]), max_iter=1, kernel=kernel)
    assert res.stop_reason.tolist() == ["max_iter"]
    assert res.n_iter.tolist() == [1]


@pytest.mark.parametrize("kernel", KERNELS)
def test_w_step_line_search_failed(kernel):
    # No SSN iteration and every row cut: the direction is -W, along which the
    # full-rank guard admits only steps that retract to W itself; no Armijo step.
    G, W0, Z = _w_problem()
    res = manpg_w_step(G, W0, Z, np.array([1e6]), np.array([2.0]), ssn_max_iter=0, kernel=kernel)
    assert res.stop_reason.tolist() == ["line_search_failed"]
    assert np.array_equal(res.W, W0)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # non-finite input on purpose
@pytest.mark.parametrize("kernel", KERNELS)
def test_w_step_singular(kernel):
    G, W0, Z = _w_problem()
    Z[0, 2, 1] = np.nan
    res = manpg_w_step(G, W0, Z, np.array([1.0]), np.array([2.0]), kernel=kernel)
    assert res.stop_reason.tolist() == ["singular"]
    assert np.array_equal(res.W, W0)
    assert res.n_iter.tolist() == [0]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # non-finite input on purpose
@pytest.mark.parametrize("kernel", KERNELS)
def test_w_step_reasons_per_client(kernel):
    # Two clients in one call stop for different reasons; the other is not affected.
    G, W0, Z = _w_problem()
    Z2 = np.concatenate([Z, Z])
    Z2[1, 0, 0] = np.nan
    res = manpg_w_step(
        np.concatenate([G, G]),
        np.concatenate([W0, W0]),
        Z2,
        np.array([0.5, 0.5]),
        np.array([2.0, 2.0]),
        max_iter=2,
        kernel=kernel,
    )
    assert res.stop_reason.tolist() == ["max_iter", "singular"]

"""Manifold proximal gradient (ManPG) for the FedEP W-subproblem, for a stack of clients.

For every client ``i`` (leading axis of the stacks) it minimises over St(n, r)::

    F(W) = ||U - U W W^T||_F^2 + nu/2 ||W - Z||_F^2 + beta ||W||_{2,1}
         = tr(G) - tr(W^T G W) + nu/2 ||W - Z||_F^2 + beta ||W||_{2,1},

where ``G = U^T U`` (n x n, formed once per W-step by the caller; ``U`` holds records
as rows) and the second line uses ``W^T W = I``. Smooth gradient
``grad H(W) = -2 G W + nu (W - Z)``. Each iteration finds the ManPG direction by
:func:`fedep.core.ssn.ssn_direction` (multiplier warm-started across iterations and
rounds), then backtracks along the retraction until the Armijo condition
``F(R(s D)) <= F(W) - s/(2t) ||D||^2`` holds (Chen, Ma, So, Zhang 2020).

Full-rank guard. Both retractions need ``W + s D`` of full column rank: the polar and
QR factors of a rank-deficient matrix are not unique (LAPACK returns arbitrary axes,
the compiled ``(A^T A)^{-1/2}`` divides by zero). For a unit vector ``x``,
``||(W + s D) x|| >= x^T W^T (W + s D) x = 1 + s x^T sym(W^T D) x >= 1 - s ||E||_F / 2``
with ``E = W^T D + D^T W`` the SSN residual. A tangent ``D`` (``E = 0``) therefore
never loses rank, and a step with ``s ||E||_F <= 1`` keeps every singular value of
``W + s D`` at or above 1/2. Both kernels skip (halve) trial steps with
``s ||E||_F > 1`` before retracting: a fixed rule, so they stay identical, and it only
acts when a direction solve ended far from tangent.

Every client reports why it stopped (``WStepResult.stop_reason``, names in
:data:`fedep.core.ssn.STOP_REASONS`).

Two implementations take the same steps: this module's NumPy code, batched over the
client axis (the reference), and a compiled per-client loop
(:func:`fedep.core._kernels.manpg_clients`), used by default when numba is installed.
At hundreds of clients the batched arrays are tiny and NumPy's per-call overhead
dominates; compiled, a client's whole W-step costs about as much as a few of its
``G W`` products.

Notation (paper -> code): W_i -> ``W``; U_i U_i^T -> ``G`` (records as rows here);
Z_i = V - Pi_i/nu -> ``Z``; beta, nu -> ``beta``, ``nu``; step t -> ``t``;
line-search factor gamma -> ``gamma``; T_max -> ``max_iter``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from fedep.core import _kernels
from fedep.core.ssn import (
    CONVERGED,
    LINE_SEARCH_FAILED,
    MAX_ITER,
    SINGULAR,
    STOP_REASONS,
    ssn_direction,
)
from fedep.core.stiefel import l21_norm, retract_polar, retract_qr

__all__ = ["WStepResult", "w_objective", "manpg_w_step"]


@dataclass
class WStepResult:
    """Result of :func:`manpg_w_step` for ``d`` clients.

    Attributes
    ----------
    W : ndarray of shape (d, n, r)
    Lam : ndarray of shape (d, r, r)
        Final SSN multipliers (warm start for the next call).
    F : ndarray of shape (d,)
        Objective ``F(W)`` (without the constant ``tr(G)``) at return.
    n_iter : ndarray of shape (d,)
        ManPG iterations taken.
    ssn_iter : ndarray of shape (d,)
        Total SSN Newton iterations.
    direction_norm : ndarray of shape (d,)
        ``||D||_F / t`` of the last direction (the stationarity measure).
    stop_reason : ndarray of str, shape (d,)
        Why each client stopped, one of :data:`fedep.core.ssn.STOP_REASONS`:
        ``"converged"`` (``direction_norm`` within ``tol``), ``"max_iter"``,
        ``"line_search_failed"`` (no Armijo step within ``max_backtrack`` halvings: no
        descent measurable in floating point, usually at a stationary point) or
        ``"singular"`` (the direction solve gave no finite direction; ``W`` kept).
    """

    W: np.ndarray
    Lam: np.ndarray
    F: np.ndarray
    n_iter: np.ndarray
    ssn_iter: np.ndarray
    direction_norm: np.ndarray
    stop_reason: np.ndarray


def w_objective(G, W, Z, beta, nu) -> np.ndarray:
    """``-tr(W^T G W) + nu/2 ||W - Z||^2 + beta ||W||_{2,1}`` per client, shape (d,)."""
    GW = G @ W
    quad = np.einsum("dij,dij->d", W, GW)
    diff = W - Z
    return -quad + 0.5 * nu * np.einsum("dij,dij->d", diff, diff) + beta * l21_norm(W)


def lipschitz_bound(G: np.ndarray, nu: np.ndarray) -> np.ndarray:
    """Lipschitz constant ``2 ||G||_2 + nu`` of the smooth gradient, per client."""
    return 2.0 * np.linalg.eigvalsh(G)[..., -1] + nu


def manpg_w_step(
    G: np.ndarray,
    W0: np.ndarray,
    Z: np.ndarray,
    beta: np.ndarray,
    nu: np.ndarray,
    Lam0: np.ndarray | None = None,
    *,
    t: np.ndarray | None = None,
    max_iter: int = 10,
    tol: float = 1e-8,
    gamma: float = 0.5,
    max_backtrack: int = 30,
    ssn_tol: float = 1e-10,
    ssn_max_iter: int = 30,
    retraction: str = "polar",
    kernel: str = "auto",
) -> WStepResult:
    """Run ManPG on the W-subproblem of every client in the stack.

    Parameters
    ----------
    G : ndarray of shape (d, n, n)
        Gram matrices ``U_i^T U_i`` (symmetric positive semi-definite).
    W0 : ndarray of shape (d, n, r)
        Starting points on St(n, r) (usually the previous round's ``W_i``).
    Z : ndarray of shape (d, n, r)
        Consensus targets ``V - Pi_i / nu_i``.
    beta, nu : ndarray of shape (d,)
        l2,1 weight (>= 0) and consensus penalty (>= 0) per client.
    Lam0 : ndarray of shape (d, r, r), optional
        Warm start of the SSN multiplier.
    t : ndarray of shape (d,), optional
        Proximal step; default ``1 / (2 ||G||_2 + nu)``.
    max_iter : int, default=10
        ManPG iterations per call (T_max of the paper).
    tol : float, default=1e-8
        Stop a client when ``||D||_F / t <= tol * (1 + ||grad||)``.
    gamma : float, default=0.5
        Backtracking factor in (0, 1).
    max_backtrack : int, default=30
    ssn_tol, ssn_max_iter : float, int
        Tolerance and cap of each direction solve.
    retraction : {"polar", "qr"}, default="polar"
    kernel : {"auto", "numba", "numpy"}, default="auto"
        ``"numba"`` runs the compiled per-client loop of :mod:`fedep.core._kernels`,
        ``"numpy"`` this batched reference; ``"auto"`` the compiled loop when numba's
        cache holds it, else this reference while it compiles in the background
        (:mod:`fedep.core._kernels._dispatch`). Both take the same steps (they agree to
        rounding).

    Returns
    -------
    WStepResult
    """
    retract = {"polar": retract_polar, "qr": retract_qr}[retraction]
    d, n, r = W0.shape
    beta = np.broadcast_to(np.asarray(beta, dtype=float), (d,))
    nu = np.broadcast_to(np.asarray(nu, dtype=float), (d,))
    if t is None:
        t = 1.0 / np.maximum(lipschitz_bound(G, nu), 1e-12)
    t = np.broadcast_to(np.asarray(t, dtype=float), (d,))
    Lam = np.zeros((d, r, r)) if Lam0 is None else np.array(Lam0, dtype=float)
    compiled = _kernels.pick(kernel, "manpg_clients")
    if compiled is not None:
        ia, ib, wgt, T1, sc = _kernels.vech_maps(r)
        W = np.empty((d, n, r))
        F = np.empty(d)
        n_iter = np.zeros(d, dtype=np.int64)
        ssn_iter = np.zeros(d, dtype=np.int64)
        dnorm = np.empty(d)
        stop = np.empty(d, dtype=np.int64)
        # One compiled signature: every array C-contiguous, float64 and writable (a
        # read-only broadcast ``beta`` would otherwise compile the kernel a second time).
        as_f = functools.partial(np.require, dtype=float, requirements=["C", "W"])
        compiled(
            as_f(G), as_f(W0), as_f(Z), as_f(beta), as_f(nu), as_f(Lam), as_f(t),
            int(max_iter), float(tol), float(gamma), int(max_backtrack), float(ssn_tol),
            int(ssn_max_iter), 0 if retraction == "polar" else 1, ia, ib, wgt, T1, sc,
            W, Lam, F, n_iter, ssn_iter, dnorm, stop,
        )  # fmt: skip
        return WStepResult(W, Lam, F, n_iter, ssn_iter, dnorm, np.asarray(STOP_REASONS)[stop])
    W = np.array(W0, dtype=float)
    F = w_objective(G, W, Z, beta, nu)
    n_iter = np.zeros(d, dtype=int)
    ssn_iter = np.zeros(d, dtype=int)
    dnorm = np.full(d, np.inf)
    stop = np.full(d, MAX_ITER)
    active = np.arange(d)
    for _ in range(max_iter):
        if active.size == 0:
            break
        a = active
        Wa = W[a]
        grad = -2.0 * (G[a] @ Wa) + nu[a, None, None] * (Wa - Z[a])
        sol = ssn_direction(
            Wa, grad, t[a], t[a] * beta[a], Lam[a], tol=ssn_tol, max_iter=ssn_max_iter
        )
        Lam[a] = sol.Lam
        ssn_iter[a] += sol.n_iter
        D = sol.D
        Dn2 = np.einsum("dij,dij->d", D, D)
        dnorm[a] = np.sqrt(Dn2) / t[a]
        gnorm = np.linalg.norm(grad, axis=(-2, -1))
        singular = (sol.stop_reason == STOP_REASONS[SINGULAR]) | ~np.isfinite(Dn2)
        small = ~singular & (dnorm[a] <= tol * (1.0 + gnorm))
        stop[a[singular]] = SINGULAR
        stop[a[small]] = CONVERGED
        # Armijo backtracking along the retraction, all clients at once, with the
        # full-rank guard of the module docstring (trial steps with s ||E|| > 1 are
        # halved without retracting).
        s = np.ones(a.size)
        done = small | singular
        for _bt in range(max_backtrack):
            todo = np.flatnonzero(~done)
            if todo.size == 0:
                break
            todo_safe = todo[s[todo] * sol.residual[todo] <= 1.0]
            idx = a[todo_safe]
            Wn = retract(W[idx], s[todo_safe, None, None] * D[todo_safe])
            Fn = w_objective(G[idx], Wn, Z[idx], beta[idx], nu[idx])
            armijo = F[idx] - s[todo_safe] / (2.0 * t[idx]) * Dn2[todo_safe]
            ok = Fn <= armijo + 1e-14 * np.abs(F[idx])
            acc = todo_safe[ok]
            W[a[acc]] = Wn[ok]
            F[a[acc]] = Fn[ok]
            done[acc] = True
            s[todo[~done[todo]]] *= gamma
        n_iter[a[~small & ~singular]] += 1
        # Clients whose line search failed are at a point where no descent is
        # measurable in floating point: stop them.
        stop[a[~done]] = LINE_SEARCH_FAILED
        active = a[~small & ~singular & done]
    return WStepResult(W, Lam, F, n_iter, ssn_iter, dnorm, np.asarray(STOP_REASONS)[stop])

"""Regularised semi-smooth Newton (SSN) solve of the ManPG direction subproblem.

At a point ``W`` of St(n, r), with Euclidean gradient ``g`` of the smooth part, step
``t > 0`` and ``tau = t * beta``, the ManPG direction solves the convex problem::

    min_D  <g, D> + 1/(2t) ||D||_F^2 + beta ||W + D||_{2,1}
    s.t.   D^T W + W^T D = 0                      (D in the tangent space at W)

With a symmetric multiplier ``Lam`` (r x r) of the constraint the minimiser is::

    D(Lam) = prox_{tau ||.||_{2,1}}(B(Lam)) - W,   B(Lam) = W - t (g - W Lam)

and ``Lam`` is a root of ``E(Lam) = D(Lam)^T W + W^T D(Lam)``. ``E`` is semi-smooth;
its generalised Jacobian in direction ``H`` (symmetric) is::

    dE[H] = t (W^T J[W H] + (W^T J[W H])^T),

where ``J`` acts row-wise: on a row ``b`` with ``||b|| > tau`` it is
``(1 - tau/||b||) I + tau b b^T / ||b||^3``; on rows cut to zero it is 0. The
Newton system is assembled in ``vech`` coordinates (``r(r+1)/2`` unknowns), solved with
the adaptive regularisation of Xiao et al. (2018) / the ManPG code, with a backtracking
safeguard on ``||E||``. Everything is batched over a leading client axis.

Notation (paper symbol -> code): W -> ``W``; grad H(W) -> ``grad``; t -> ``t``;
t*beta -> ``tau``; Lambda (tangent-space multiplier) -> ``Lam``; Q(Lambda) -> ``E``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from fedep.core.stiefel import prox_l21

__all__ = ["SSNResult", "ssn_direction", "vech", "unvech"]


@lru_cache(maxsize=64)
def _vech_index(r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ia, ib = np.triu_indices(r)
    w = np.where(ia == ib, 1.0, 2.0)
    return ia, ib, w


def vech(S: np.ndarray) -> np.ndarray:
    """Upper-triangular coordinates of symmetric matrices ``(..., r, r) -> (..., m)``."""
    ia, ib, _ = _vech_index(S.shape[-1])
    return S[..., ia, ib]


def unvech(v: np.ndarray, r: int) -> np.ndarray:
    """Inverse of :func:`vech`: ``(..., m) -> (..., r, r)`` symmetric."""
    ia, ib, _ = _vech_index(r)
    S = np.zeros((*v.shape[:-1], r, r))
    S[..., ia, ib] = v
    S[..., ib, ia] = v
    return S


@dataclass
class SSNResult:
    """Result of :func:`ssn_direction` for a stack of ``d`` subproblems.

    Attributes
    ----------
    D : ndarray of shape (d, n, r)
        Directions (tangent at ``W`` up to the residual).
    Lam : ndarray of shape (d, r, r)
        Symmetric multipliers (use them to warm-start the next solve).
    residual : ndarray of shape (d,)
        ``||E(Lam)||_F`` at return.
    n_iter : ndarray of shape (d,)
        Newton iterations taken per subproblem.
    converged : ndarray of bool, shape (d,)
    """

    D: np.ndarray
    Lam: np.ndarray
    residual: np.ndarray
    n_iter: np.ndarray
    converged: np.ndarray


def _T(A):
    return np.swapaxes(A, -1, -2)


def _eval(W, B0, t, tau, Lam):
    B = B0 + t[:, None, None] * (W @ Lam)
    P = prox_l21(B, tau[:, None, None])
    D = P - W
    WtD = _T(W) @ D
    E = WtD + _T(WtD)
    return B, D, E


# Up to this rank the Jacobian is assembled by small dense maps (fast for the usual
# r <= 8); above it the gather form below needs far less memory and work.
_DENSE_MAP_MAX_RANK = 8


@lru_cache(maxsize=16)
def _dense_maps(r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fixed linear maps of the Jacobian in vech coordinates for rank ``r``.

    ``K`` (r*r, m*m) takes ``vec(A)`` to term 1 (``H -> A H + H A``, as the gather
    form of :func:`_jacobian_gather` computes it); ``L`` (r*r, m) takes ``vec(Q)``
    to ``vech(sym(Q))``, and ``Lw`` is ``L`` with the off-diagonal weights folded in.
    """
    ia, ib, wgt = _vech_index(r)
    m = ia.size
    eye = np.eye(r * r).reshape(r * r, r, r)
    K = _term1(eye, ia, ib).reshape(r * r, m * m)
    L = np.zeros((r * r, m))
    L[ia * r + ib, np.arange(m)] += 0.5
    L[ib * r + ia, np.arange(m)] += 0.5
    return K, L, L * (2.0 * wgt)


def _term1(A, ia, ib):
    """Matrix of ``H -> A H + H A`` in vech coordinates, for a stack of ``A``."""
    # Basis E_p = e_i e_j^T + e_j e_i^T (e_i e_i^T when i == j): entry (a, b) of
    # A E_p + E_p A, gathered for all (q, p).
    qa, qb = ia[:, None], ib[:, None]
    pi, pj = ia[None, :], ib[None, :]
    J1 = (
        A[:, qa, pi] * (pj == qb)
        + A[:, qa, pj] * (pi == qb)
        + A[:, pj, qb] * (qa == pi)
        + A[:, pi, qb] * (qa == pj)
    )
    J1 *= np.where(ia == ib, 0.5, 1.0)[None, None, :]
    return J1


def _jacobian(W, B, t, tau):
    """Generalised Jacobian of E in vech coordinates, shape (d, m, m).

    With ``a_j = 1 - tau/||b_j||`` and ``c_j = tau/||b_j||`` on active rows (0 on
    rows cut to zero), it is ``t`` times term 1, ``H -> A H + H A`` with
    ``A = W^T diag(a) W``, plus term 2, ``sum_j c_j (sym(Q_j) : H) vech(2 sym(Q_j))``
    with ``Q_j = w_j^T bhat_j``.
    """
    d, n, r = W.shape
    nrm = np.sqrt(np.einsum("dnr,dnr->dn", B, B))
    active = nrm > tau[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        c = np.where(active, tau[:, None] / nrm, 0.0)
        # Rows of B scaled by sqrt(c)/||b||, so term 2 is one Gram product.
        f = np.where(active, np.sqrt(c) / nrm, 0.0)
    a = np.where(active, 1.0 - c, 0.0)
    A = _T(W) @ (a[..., None] * W)  # (d, r, r)
    ia, ib, wgt = _vech_index(r)
    if r <= _DENSE_MAP_MAX_RANK:
        K, L, Lw = _dense_maps(r)
        m = L.shape[1]
        J = (A.reshape(d, r * r) @ K).reshape(d, m, m)
        Q = (W[..., :, None] * (B * f[..., None])[..., None, :]).reshape(d * n, r * r)
        u = (Q @ L).reshape(d, n, m)  # rows: sqrt(c_j) vech(sym(Q_j))
        J += _T(u) @ (u * (2.0 * wgt))
    else:
        J = _term1(A, ia, ib)
        Bh = B * f[..., None]
        u = 0.5 * (W[..., ia] * Bh[..., ib] + W[..., ib] * Bh[..., ia])  # (d, n, m)
        J += 2.0 * _T(u) @ (u * wgt)
    J *= t[:, None, None]
    return J


def ssn_direction(
    W: np.ndarray,
    grad: np.ndarray,
    t: np.ndarray | float,
    tau: np.ndarray | float,
    Lam0: np.ndarray | None = None,
    *,
    tol: float = 1e-10,
    max_iter: int = 50,
) -> SSNResult:
    """Solve the ManPG direction subproblem for a stack of clients by regularised SSN.

    Parameters
    ----------
    W : ndarray of shape (d, n, r) or (n, r)
        Current points on St(n, r).
    grad : ndarray, same shape as ``W``
        Euclidean gradient of the smooth part at ``W``.
    t : float or ndarray of shape (d,)
        Proximal step sizes (> 0).
    tau : float or ndarray of shape (d,)
        ``t * beta``: the l2,1 threshold (>= 0; 0 gives the projected-gradient step).
    Lam0 : ndarray of shape (d, r, r), optional
        Warm start for the multiplier (zeros if omitted). The solve starts from
        whichever has the smallest residual of ``Lam0``, ``sym(W^T grad)`` (the exact
        multiplier for ``tau = 0``) and one Richardson step ``Lam - E/(2t)`` from the
        latter.
    tol : float, default=1e-10
        Stop a subproblem when ``||E(Lam)||_F <= tol``.
    max_iter : int, default=50
        Newton iteration cap.

    Returns
    -------
    SSNResult
    """
    single = W.ndim == 2
    if single:
        W, grad = W[None], grad[None]
        if Lam0 is not None:
            Lam0 = Lam0[None]
    d, n, r = W.shape
    t = np.broadcast_to(np.asarray(t, dtype=float), (d,)).copy()
    tau = np.broadcast_to(np.asarray(tau, dtype=float), (d,)).copy()
    Lam = np.zeros((d, r, r)) if Lam0 is None else np.array(Lam0, dtype=float)
    B0 = W - t[:, None, None] * grad
    B, D, E = _eval(W, B0, t, tau, Lam)
    res = np.linalg.norm(E, axis=(-2, -1))
    # Start from the best of: the warm start; sym(W^T g), the exact multiplier when
    # no row is shrunk (tau = 0); and one Richardson step from it, Lam - E/(2t)
    # (the Jacobian is about 2t I when few rows are shrunk), which typically leaves
    # one Newton step to do.
    Ls = 0.5 * (_T(W) @ grad + _T(grad) @ W)
    for _start in range(2):
        Bs, Ds, Es = _eval(W, B0, t, tau, Ls)
        rs = np.linalg.norm(Es, axis=(-2, -1))
        better = rs < res
        Lam[better], B[better], D[better], E[better] = (
            Ls[better],
            Bs[better],
            Ds[better],
            Es[better],
        )
        res[better] = rs[better]
        Ls = Ls - Es / (2.0 * t[:, None, None])
    kappa = np.full(d, 0.1)
    n_iter = np.zeros(d, dtype=int)
    stalls = np.zeros(d, dtype=int)
    m = r * (r + 1) // 2
    eye_m = np.eye(m)
    for _ in range(max_iter):
        # A client whose residual cannot be decreased three times running sits at
        # round-off level: stop it rather than burn backtracking evaluations.
        act = np.flatnonzero((res > tol) & (stalls < 3))
        if act.size == 0:
            break
        Wa, Ba, ta, taua = W[act], B[act], t[act], tau[act]
        Jac = _jacobian(Wa, Ba, ta, taua)
        # The Jacobian scales with t, so the regularisation does too.
        reg = kappa[act] * ta * np.maximum(np.minimum(res[act], 0.2), 1e-11)
        rhs = -vech(E[act])
        step = np.linalg.solve(Jac + reg[:, None, None] * eye_m, rhs[..., None])[..., 0]
        dLam = unvech(step, r)
        n_iter[act] += 1
        # Backtrack on the residual norm; accept the first step that decreases it.
        accepted = np.zeros(act.size, dtype=bool)
        s = 1.0
        for _bt in range(12):
            todo = ~accepted
            if not todo.any():
                break
            idx = act[todo]
            Lnew = Lam[idx] + s * dLam[todo]
            Bn, Dn, En = _eval(W[idx], B0[idx], t[idx], tau[idx], Lnew)
            rn = np.linalg.norm(En, axis=(-2, -1))
            ok = rn < (1.0 - 1e-4 * s) * res[idx]
            if ok.any():
                sel = idx[ok]
                Lam[sel], B[sel], D[sel], E[sel] = Lnew[ok], Bn[ok], Dn[ok], En[ok]
                good = rn[ok] <= 0.99 * res[sel]
                kappa[sel] = np.where(
                    good & (s == 1.0),
                    np.maximum(kappa[sel] / 2.0, 1e-3),
                    np.minimum(kappa[sel] * 2.0, 1e5),
                )
                res[sel] = rn[ok]
                stalls[sel] = 0
                accepted[np.flatnonzero(todo)[ok]] = True
            s *= 0.5
        failed = act[~accepted]
        kappa[failed] = np.minimum(kappa[failed] * 4.0, 1e5)
        stalls[failed] += 1
    out = SSNResult(D=D, Lam=Lam, residual=res, n_iter=n_iter, converged=res <= tol)
    if single:
        out = SSNResult(
            out.D[0], out.Lam[0], out.residual[0:1], out.n_iter[0:1], out.converged[0:1]
        )
    return out

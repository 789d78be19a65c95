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
Newton system, regularised adaptively as in Xiao et al. (2018) / the ManPG code and
safeguarded by backtracking on ``||E||``, has ``m = r(r+1)/2`` unknowns: below
:data:`CG_MIN_UNKNOWNS` it is assembled in ``vech`` coordinates and solved densely,
from there on it is solved matrix-free by preconditioned conjugate gradients
(:func:`_newton_cg`), whose cost grows like ``n r^2`` per iteration instead of the
dense ``r^6``. Everything is batched over a leading client axis.

Globalisation. ``E`` is the gradient, up to the factor ``t/2``, of the convex merit
``psi`` (``t`` times minus the dual function; :func:`_merit`), and the regularised
Newton direction is a descent direction of ``psi``. A step is accepted when it
satisfies the Armijo condition on ``psi``, or when it decreases ``||E||`` without
raising ``psi`` beyond round-off (near the root the decrease of ``psi`` drowns in
rounding while ``||E||`` still resolves), and never at a point where every row is cut.

Flat regions. Where every row of ``B(Lam)`` is cut (``||b_j|| <= tau`` for all ``j``,
e.g. when ``tau`` exceeds every row norm) the Jacobian vanishes and ``E = -2 I`` is
constant: no step decreases ``||E||`` locally, yet ``Lam`` is no solution (``D = -W``
is not tangent; the solution always keeps rows, as ``sym(W^T (W + D)) = I``). Where
only a few rows are kept the same holds on the directions they do not span. There
``psi`` is linear along the Newton direction, which the slope of ``psi`` at the full
step reveals; the step is then extended by an exact line search on ``psi``
(:func:`_expand_search`), which reaches the point where rows are kept and from which
Newton converges.

Every solve reports why it stopped (``SSNResult.stop_reason``, names in
:data:`STOP_REASONS`).

Notation (paper symbol -> code): W -> ``W``; grad H(W) -> ``grad``; t -> ``t``;
t*beta -> ``tau``; Lambda (tangent-space multiplier) -> ``Lam``; Q(Lambda) -> ``E``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from fedep.core.stiefel import _T, prox_l21

__all__ = ["STOP_REASONS", "SSNResult", "ssn_direction", "vech", "unvech"]

#: Names of the stop codes of the SSN and of the ManPG W-step (index = code; the
#: compiled kernels return the codes). ``"converged"``: tolerance met;
#: ``"max_iter"``: iteration cap reached; ``"line_search_failed"``: the backtracking
#: search accepted no step (SSN: three Newton steps running, i.e. the residual sits at
#: round-off; ManPG: no Armijo step within ``max_backtrack`` halvings); ``"singular"``:
#: no finite Newton step (a
#: singular or non-finite Newton system, e.g. from non-finite input; for ManPG, such a
#: direction).
STOP_REASONS = ("converged", "max_iter", "line_search_failed", "singular")
CONVERGED, MAX_ITER, LINE_SEARCH_FAILED, SINGULAR = range(4)


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
        ``residual <= tol``.
    stop_reason : ndarray of str, shape (d,)
        Why each solve stopped: one of :data:`STOP_REASONS`.
    """

    D: np.ndarray
    Lam: np.ndarray
    residual: np.ndarray
    n_iter: np.ndarray
    converged: np.ndarray
    stop_reason: np.ndarray


def _eval(W, B0, t, tau, Lam):
    B = B0 + t[:, None, None] * (W @ Lam)
    P = prox_l21(B, tau[:, None, None])
    D = P - W
    WtD = _T(W) @ D
    E = WtD + _T(WtD)
    return B, D, E


def _merit(W, B, tau):
    """Dual merit ``psi`` (times ``t``) and its magnitude scale, shape (d,) each.

    ``psi(Lam) = 1/2 ||B - W||^2 - sum_j h(b_j)`` with ``h`` the Huber function
    (``||b||^2 / 2`` for ``||b|| <= tau``, ``tau ||b|| - tau^2 / 2`` above) is ``t``
    times minus the dual function of the subproblem: convex in ``Lam`` with gradient
    ``(t/2) E`` (Frobenius inner product), since ``grad h(b) = b - prox(b)``.
    """
    nb2 = np.einsum("dnr,dnr->dn", B, B)
    nb = np.sqrt(nb2)
    h = np.where(nb > tau[:, None], tau[:, None] * nb - 0.5 * tau[:, None] ** 2, 0.5 * nb2)
    diff = B - W
    q = 0.5 * np.einsum("dnr,dnr->d", diff, diff)
    hs = h.sum(axis=1)
    return q - hs, q + np.abs(hs)


def _expand_search(W, B0, t, tau, Lam, dLam):
    """Exact line search of the dual merit along ``Lam + s dLam``, ``s >= 1``.

    For one subproblem (2-D arrays), when the slope of ``psi`` at ``s = 1`` is still
    at least half the slope at ``s = 0``: the Newton model over-estimated the
    curvature, as in a flat region where the Jacobian vanishes. ``psi`` is convex
    along the ray, so its slope ``(t/2) <E(Lam + s dLam), dLam>`` is nondecreasing:
    ``s`` is doubled until the slope is ``>= 0`` (at most 100 times), then the bracket
    is bisected to a relative width of 1e-10 and its upper end taken.
    ``fedep.core._kernels.wstep._expand_search`` is the same computation, step for step.
    Returns ``Lam, B, D, E, ||E||`` at the new point.
    """
    t1, tau1 = np.array([t]), np.array([tau])

    def at(s):
        return _eval(W[None], B0[None], t1, tau1, (Lam + s * dLam)[None])

    def slope(s):
        return np.sum(at(s)[2][0] * dLam)

    s_lo, s_hi = 1.0, 2.0
    for _ in range(100):
        if slope(s_hi) >= 0.0:
            break
        s_lo, s_hi = s_hi, 2.0 * s_hi
    for _ in range(100):
        if s_hi - s_lo <= 1e-10 * s_hi:
            break
        s = 0.5 * (s_lo + s_hi)
        if slope(s) < 0.0:
            s_lo = s
        else:
            s_hi = s
    B, D, E = at(s_hi)
    return Lam + s_hi * dLam, B[0], D[0], E[0], np.linalg.norm(E[0])


def _solve(M, rhs):
    """Batched ``M x = rhs``; NaN rows where a system cannot be solved."""
    try:
        return np.linalg.solve(M, rhs[..., None])[..., 0]
    except np.linalg.LinAlgError:
        out = np.full(rhs.shape, np.nan)
        for i in range(M.shape[0]):
            try:
                out[i] = np.linalg.solve(M[i], rhs[i])
            except np.linalg.LinAlgError:
                pass
        return out


#: From this many Newton unknowns ``m = r(r+1)/2`` (rank 15) the regularised Newton
#: system is solved matrix-free by preconditioned conjugate gradients
#: (:func:`_newton_cg`) instead of being assembled (``m^2 n``) and factorised
#: (``m^3 / 3``): at rank 80 the dense solve costs about a second per Newton step
#: while CG, a few products of cost ``n r^2`` each, takes milliseconds
#: (``benchmarks/bench_wstep.py``). Below it the dense system is cheap and exact.
CG_MIN_UNKNOWNS = 120
#: CG stops when the residual of the Newton system is at most this fraction of its
#: right-hand side (the dense solve's accuracy, give or take; measured against it in
#: the tests), or after ``CG_MAX_ITER`` iterations (a guard: it takes 3 to 30).
CG_RTOL = 1e-12
CG_MAX_ITER = 500


def _jacobian_factors(W, B, tau):
    """The two factors of the Jacobian in matrix form, for :func:`_jacobian_apply`.

    Returns ``A = W^T diag(a) W`` (d, r, r) and ``Bs`` (d, n, r), the rows of ``B``
    scaled to ``sqrt(c_j) bhat_j`` (zero on rows cut), with ``c_j = tau / ||b_j||``,
    ``a_j = 1 - c_j`` on the rows kept (see :func:`_jacobian`).
    """
    nrm = np.sqrt(np.einsum("dnr,dnr->dn", B, B))
    active = nrm > tau[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        c = np.where(active, tau[:, None] / nrm, 0.0)
        f = np.where(active, np.sqrt(c) / nrm, 0.0)
    a = np.where(active, 1.0 - c, 0.0)
    return _T(W) @ (a[..., None] * W), B * f[..., None]


def _jacobian_apply(W, A, Bs, t, reg, H):
    """``dE[H] + reg H`` for symmetric ``H`` (d, r, r), without forming the Jacobian.

    ``dE[H] = t (K + K^T)`` with ``K = W^T J[W H] = A H + W^T (Bs * s)``, where
    ``s_j = <Bs_j, (W H)_j>``: cost ``O(n r^2)`` per client. The map is self-adjoint
    and positive definite (``reg > 0``) in the Frobenius inner product on symmetric
    matrices, and equals the vech-coordinate system of :func:`_jacobian` plus
    ``reg I`` (the vech coordinates of ``H`` are its upper triangle).
    """
    s = np.einsum("dnr,dnr->dn", Bs, W @ H)
    K = A @ H + _T(W) @ (Bs * s[..., None])
    return t[:, None, None] * (K + _T(K)) + reg[:, None, None] * H


def _newton_cg(W, B, t, tau, E, reg):
    """Regularised Newton step ``(dE + reg I)[dLam] = -E`` by preconditioned CG.

    The preconditioner is the system's first term alone, ``H -> t (A H + H A) +
    reg H``, inverted exactly in the eigenbasis of ``A = Q diag(lam) Q^T``: entry
    ``(k, l)`` of ``Q^T H Q`` is divided by ``t (lam_k + lam_l) + reg``. The rest of
    the Jacobian, ``sum_j c_j sym(Q_j) (sym(Q_j) : H)``, has rank at most the number
    of rows kept and is small when ``tau`` is small against the row norms, so CG
    needs few iterations. Each client stops at ``||res|| <= CG_RTOL ||E||``.
    ``fedep.core._kernels.wstep._newton_cg`` is the same computation, step for step.

    Returns the steps (d, r, r) (non-finite where the inputs are) and the CG
    iterations (d,).
    """
    A, Bs = _jacobian_factors(W, B, tau)
    d = W.shape[0]
    x = np.zeros_like(E)
    n_cg = np.zeros(d, dtype=int)
    ok = np.all(np.isfinite(A), axis=(-2, -1)) & np.all(np.isfinite(E), axis=(-2, -1))
    x[~ok] = np.nan
    idx = np.flatnonzero(ok)
    if idx.size == 0:
        return x, n_cg
    W, A, Bs, t, reg = W[idx], A[idx], Bs[idx], t[idx], reg[idx]
    lam, Q = np.linalg.eigh(A)
    den = t[:, None, None] * (lam[:, :, None] + lam[:, None, :]) + reg[:, None, None]

    def precond(R, a):
        Qa = Q[a]
        return Qa @ ((_T(Qa) @ R @ Qa) / den[a]) @ _T(Qa)

    xs = np.zeros_like(E[idx])
    res = -E[idx]
    stop = CG_RTOL * np.linalg.norm(res, axis=(-2, -1))
    z = precond(res, slice(None))
    p = z.copy()
    rz = np.einsum("dab,dab->d", res, z)
    run = stop > 0.0  # ||E|| > CG_RTOL ||E||: every client with a non-zero residual
    it = np.zeros(idx.size, dtype=int)
    for _ in range(CG_MAX_ITER):
        a = np.flatnonzero(run)
        if a.size == 0:
            break
        it[a] += 1
        q = _jacobian_apply(W[a], A[a], Bs[a], t[a], reg[a], p[a])
        pq = np.einsum("dab,dab->d", p[a], q)
        # A non-positive curvature can only be rounding (the map is positive
        # definite): keep the iterate reached.
        curv = pq > 0.0
        run[a[~curv]] = False
        a, q, pq = a[curv], q[curv], pq[curv]
        alpha = rz[a] / pq
        xs[a] += alpha[:, None, None] * p[a]
        res[a] -= alpha[:, None, None] * q
        conv = np.linalg.norm(res[a], axis=(-2, -1)) <= stop[a]
        run[a[conv]] = False
        a = a[~conv]
        z = precond(res[a], a)
        rz_new = np.einsum("dab,dab->d", res[a], z)
        p[a] = z + (rz_new / rz[a])[:, None, None] * p[a]
        rz[a] = rz_new
    x[idx] = xs
    n_cg[idx] = it
    return x, n_cg


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
    # Rows of B scaled by sqrt(c)/||b|| (Bh), so term 2 is one Gram product.
    A, Bh = _jacobian_factors(W, B, tau)
    ia, ib, wgt = _vech_index(r)
    if r <= _DENSE_MAP_MAX_RANK:
        K, L, Lw = _dense_maps(r)
        m = L.shape[1]
        J = (A.reshape(d, r * r) @ K).reshape(d, m, m)
        Q = (W[..., :, None] * Bh[..., None, :]).reshape(d * n, r * r)
        u = (Q @ L).reshape(d, n, m)  # rows: sqrt(c_j) vech(sym(Q_j))
        J += _T(u) @ (u * (2.0 * wgt))
    else:
        J = _term1(A, ia, ib)
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
    psi, psi_scale = _merit(W, B, tau)
    kappa = np.full(d, 0.1)
    n_iter = np.zeros(d, dtype=int)
    stalls = np.zeros(d, dtype=int)
    singular = np.zeros(d, dtype=bool)
    m = r * (r + 1) // 2
    eye_m = np.eye(m) if m < CG_MIN_UNKNOWNS else None
    for _ in range(max_iter):
        # A client whose residual cannot be decreased three times running sits at
        # round-off level: stop it rather than burn backtracking evaluations.
        run = ~(res <= tol) & (stalls < 3) & ~singular
        singular |= run & ~np.isfinite(res)
        act = np.flatnonzero(run & np.isfinite(res))
        if act.size == 0:
            break
        n_iter[act] += 1
        Wa, Ba, ta, taua = W[act], B[act], t[act], tau[act]
        # The Jacobian scales with t, so the regularisation does too.
        reg = kappa[act] * ta * np.maximum(np.minimum(res[act], 0.2), 1e-11)
        if m >= CG_MIN_UNKNOWNS:
            dLam, _ = _newton_cg(Wa, Ba, ta, taua, E[act], reg)
        else:
            Jac = _jacobian(Wa, Ba, ta, taua)
            dLam = unvech(_solve(Jac + reg[:, None, None] * eye_m, -vech(E[act])), r)
        finite = np.all(np.isfinite(dLam), axis=(1, 2))
        singular[act[~finite]] = True
        act, dLam = act[finite], dLam[finite]
        # Slope of psi along the step: (t/2) <E, dLam> < 0 (a descent direction).
        slope = 0.5 * t[act] * np.einsum("dab,dab->d", E[act], dLam)
        # Backtrack; accept the first step that satisfies Armijo on psi, or that
        # decreases the residual without raising psi beyond round-off (near the root
        # the decrease of psi, O(||E||^2), drowns in rounding while ||E|| still
        # resolves). psi keeps the iteration from walking back into a flat region.
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
            pn, scale = _merit(W[idx], Bn, tau[idx])
            kept = np.any(np.einsum("dnr,dnr->dn", Bn, Bn) > tau[idx, None] ** 2, axis=1)
            armijo = (pn <= psi[idx] + 1e-4 * s * slope[todo]) & (pn < psi[idx] - 1e-13 * scale)
            ok = kept & (
                armijo | ((rn < (1.0 - 1e-4 * s) * res[idx]) & (pn <= psi[idx] + 1e-13 * scale))
            )
            if _bt == 0:
                # Full step too short (slope of psi still >= half of its initial value
                # and the residual not halved): a flat region; search psi beyond s = 1.
                slope1 = 0.5 * t[idx] * np.einsum("dab,dab->d", En, dLam)
                expand = (
                    (slope < -1e-13 * psi_scale[idx])
                    & (slope1 <= 0.5 * slope)
                    & (rn >= 0.5 * res[idx])
                )
                for j in np.flatnonzero(expand):
                    i = idx[j]
                    Le, Be, De, Ee, re = _expand_search(W[i], B0[i], t[i], tau[i], Lam[i], dLam[j])
                    pe, se = (v[0] for v in _merit(W[i][None], Be[None], tau[i : i + 1]))
                    if pe <= psi[i] + 1e-4 * slope[j] and pe < psi[i] - 1e-13 * psi_scale[i]:
                        Lam[i], B[i], D[i], E[i], res[i] = Le, Be, De, Ee, re
                        psi[i], psi_scale[i] = pe, se
                        kappa[i] = max(kappa[i] / 2.0, 1e-3)
                        stalls[i] = 0
                        accepted[j] = True
                ok &= ~accepted
            if ok.any():
                sel = idx[ok]
                Lam[sel], B[sel], D[sel], E[sel] = Lnew[ok], Bn[ok], Dn[ok], En[ok]
                psi[sel], psi_scale[sel] = pn[ok], scale[ok]
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
    converged = res <= tol
    code = np.select(
        [converged, singular, stalls >= 3],
        [CONVERGED, SINGULAR, LINE_SEARCH_FAILED],
        MAX_ITER,
    )
    reason = np.asarray(STOP_REASONS)[code]
    out = SSNResult(D, Lam, res, n_iter, converged, reason)
    if single:
        out = SSNResult(out.D[0], out.Lam[0], *(a[0:1] for a in (res, n_iter, converged, reason)))
    return out

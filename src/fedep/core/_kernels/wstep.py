"""The ManPG W-step per client, compiled: SSN direction, Armijo search, retraction.

Same computation, step for step, as the NumPy reference in :mod:`fedep.core.ssn`,
:mod:`fedep.core.manpg` and :mod:`fedep.core.stiefel` (tested for parity).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from fedep.core._kernels._jit import jit as _jit
from fedep.core._kernels.retraction import EIGH_MIN_RANK as EIGH_MIN_RANK
from fedep.core._kernels.retraction import _retract
from fedep.core.ssn import CG_MAX_ITER, CG_MIN_UNKNOWNS, CG_RTOL, _vech_index

# ----------------------------------------------------------------------------------
# ManPG W-step, one client at a time (mirrors fedep.core.manpg / fedep.core.ssn).
#
# The NumPy W-step batches clients, but its arrays are tiny (n x r, r x r), so at
# hundreds of clients it is bound by per-call overhead, not arithmetic. Compiled, the
# same iteration runs client by client with no temporaries. Every branch below
# follows the NumPy reference line for line, so the two agree to rounding (tested).
#
# Layout: the compiled W-step holds every n x r matrix transposed, r x n (a trailing
# "T" in the name: WT = W^T), so that every inner loop runs over the n features in
# contiguous memory and vectorises; G is symmetric, so its rows serve as columns.


@lru_cache(maxsize=16)
def vech_maps(r: int) -> tuple[np.ndarray, ...]:
    """Index maps of the vech coordinates for rank ``r`` (inputs of manpg_clients).

    ``ia, ib, wgt`` as in :func:`fedep.core.ssn._vech_index`; ``T1`` (m, m, 4) holds,
    for each Jacobian entry (q, p), the flat indices into ``A`` (``r*r`` = a zero) of
    the up to four terms of ``(A E_p + E_p A)[qa, qb]``; ``sc`` the 1/2 on diagonal
    basis elements. It is the same gather as ``fedep.core.ssn._term1``. From
    ``CG_MIN_UNKNOWNS`` unknowns the Newton system is solved matrix-free and ``T1`` is
    empty.
    """
    ia, ib, wgt = _vech_index(r)
    m = ia.size
    sc = np.where(ia == ib, 0.5, 1.0)
    if m >= CG_MIN_UNKNOWNS:  # the matrix-free Newton solve needs no index map
        return ia.astype(np.int64), ib.astype(np.int64), wgt, np.zeros((0, 0, 4), np.int64), sc
    T1 = np.full((m, m, 4), r * r, dtype=np.int64)
    for q in range(m):
        qa, qb = ia[q], ib[q]
        for p in range(m):
            pi, pj = ia[p], ib[p]
            terms = [
                qa * r + pi if pj == qb else r * r,
                qa * r + pj if pi == qb else r * r,
                pj * r + qb if qa == pi else r * r,
                pi * r + qb if qa == pj else r * r,
            ]
            T1[q, p] = terms
    return ia.astype(np.int64), ib.astype(np.int64), wgt, T1, sc


def _gw(G, WT, out):  # pragma: no cover - compiled
    # out = W^T G  (r x n): contiguous dot products of the rows of G (G symmetric).
    r, n = WT.shape
    for i in range(n):
        Gi = G[i]
        for p in range(r):
            w = WT[p]
            acc = 0.0
            for k in range(n):
                acc += Gi[k] * w[k]
            out[p, i] = acc


def _objective(WT, GWT, ZT, beta, nu, nrm):  # pragma: no cover - compiled
    # -tr(W^T G W) + nu/2 ||W - Z||^2 + beta ||W||_{2,1}
    r, n = WT.shape
    quad = 0.0
    diff = 0.0
    for i in range(n):
        nrm[i] = 0.0
    for p in range(r):
        w = WT[p]
        gw = GWT[p]
        z = ZT[p]
        for i in range(n):
            quad += w[i] * gw[i]
            dz = w[i] - z[i]
            diff += dz * dz
            nrm[i] += w[i] * w[i]
    l21 = 0.0
    for i in range(n):
        l21 += np.sqrt(nrm[i])
    return -quad + 0.5 * nu * diff + beta * l21


def _eval(WT, B0T, t, tau, Lam, BT, DT, E, nrm):  # pragma: no cover - compiled
    # B = B0 + t W Lam;  D = prox_{tau ||.||_{2,1}}(B) - W;  E = W^T D + D^T W.
    r, n = WT.shape
    for i in range(n):
        nrm[i] = 0.0
    for p in range(r):
        b = BT[p]
        b0 = B0T[p]
        for i in range(n):
            b[i] = b0[i]
        for k in range(r):
            lk = t * Lam[k, p]
            w = WT[k]
            for i in range(n):
                b[i] += lk * w[i]
        for i in range(n):
            nrm[i] += b[i] * b[i]
    for i in range(n):
        nv = np.sqrt(nrm[i])
        nrm[i] = 1.0 - tau / nv if nv > tau else 0.0  # the prox factor of row i
    for p in range(r):
        b = BT[p]
        dp = DT[p]
        w = WT[p]
        for i in range(n):
            dp[i] = nrm[i] * b[i] - w[i]
    res = 0.0
    for a in range(r):
        wa = WT[a]
        da = DT[a]
        for b in range(a, r):
            wb = WT[b]
            db = DT[b]
            acc = 0.0
            for i in range(n):
                acc += wa[i] * db[i] + da[i] * wb[i]
            E[a, b] = acc
            E[b, a] = acc
            res += acc * acc if a == b else 2.0 * acc * acc
    return np.sqrt(res)


def _row_factors(BT, tau, aa, f):  # pragma: no cover - compiled
    # Row j of B with ||b_j|| > tau has c_j = tau/||b_j||: aa[j] = a_j = 1 - c_j and
    # f[j] = sqrt(c_j)/||b_j|| (both 0 on rows cut), as fedep.core.ssn._jacobian_factors.
    r, n = BT.shape
    for i in range(n):
        aa[i] = 0.0
    for p in range(r):
        b = BT[p]
        for i in range(n):
            aa[i] += b[i] * b[i]
    for i in range(n):
        nv = np.sqrt(aa[i])
        if nv > tau:
            c = tau / nv
            aa[i] = 1.0 - c
            f[i] = np.sqrt(c) / nv
        else:
            aa[i] = 0.0
            f[i] = 0.0


def _jacobian(WT, BT, t, tau, wgt, T1, sc, J, UT, f, aa):  # pragma: no cover - compiled
    # Term 2 is the Gram matrix of the rows of UT, whose column j is
    # sqrt(c_j) vech(sym(w_j bhat_j^T)); term 1 is H -> A H + H A, A = W^T diag(a) W.
    r, n = WT.shape
    m = wgt.size
    _row_factors(BT, tau, aa, f)
    # vech order is the row-major upper triangle: (0, 0), (0, 1), ..., (1, 1), ...
    Aext = np.zeros(r * r + 1)  # slot r*r stays 0 for the index map T1
    p = 0
    for k in range(r):
        wk = WT[k]
        bk = BT[k]
        for q in range(k, r):
            wq = WT[q]
            bq = BT[q]
            u = UT[p]
            acc = 0.0
            for i in range(n):
                u[i] = 0.5 * f[i] * (wk[i] * bq[i] + wq[i] * bk[i])
                acc += aa[i] * wk[i] * wq[i]
            Aext[k * r + q] = acc
            Aext[q * r + k] = acc
            p += 1
    for q in range(m):
        uq = UT[q]
        p = q
        while p + 3 < m:
            # Four dot products per pass over uq: the same sums, one load of uq.
            u0, u1, u2, u3 = UT[p], UT[p + 1], UT[p + 2], UT[p + 3]
            a0 = a1 = a2 = a3 = 0.0
            for i in range(n):
                x = uq[i]
                a0 += x * u0[i]
                a1 += x * u1[i]
                a2 += x * u2[i]
                a3 += x * u3[i]
            for k, acc in enumerate((a0, a1, a2, a3)):
                J[q, p + k] = 2.0 * acc * wgt[p + k]
                J[p + k, q] = 2.0 * acc * wgt[q]
            p += 4
        while p < m:
            up = UT[p]
            acc = 0.0
            for i in range(n):
                acc += uq[i] * up[i]
            J[q, p] = 2.0 * acc * wgt[p]
            J[p, q] = 2.0 * acc * wgt[q]
            p += 1
    for q in range(m):
        for p in range(m):
            tq = T1[q, p]
            v = Aext[tq[0]] + Aext[tq[1]] + Aext[tq[2]] + Aext[tq[3]]
            J[q, p] = t * (J[q, p] + sc[p] * v)


def _lu_solve(M, x):  # pragma: no cover - compiled
    # Gaussian elimination with partial pivoting, in place (M is overwritten, x
    # becomes the solution). LAPACK's per-call set-up costs more than the whole
    # elimination at these sizes (m < CG_MIN_UNKNOWNS; above it the Newton system is
    # solved matrix-free).
    m = x.size
    for k in range(m):
        piv = k
        big = abs(M[k, k])
        for i in range(k + 1, m):
            if abs(M[i, k]) > big:
                big = abs(M[i, k])
                piv = i
        if piv != k:
            for j in range(m):
                tmp = M[k, j]
                M[k, j] = M[piv, j]
                M[piv, j] = tmp
            tmp = x[k]
            x[k] = x[piv]
            x[piv] = tmp
        for i in range(k + 1, m):
            f = M[i, k] / M[k, k]
            if f != 0.0:
                for j in range(k + 1, m):
                    M[i, j] -= f * M[k, j]
                x[i] -= f * x[k]
    for k in range(m - 1, -1, -1):
        acc = x[k]
        for j in range(k + 1, m):
            acc -= M[k, j] * x[j]
        x[k] = acc / M[k, k]


def _cholesky_solve(S, x):  # pragma: no cover - compiled
    # Solve S y = x for symmetric positive definite S (lower triangle used, S
    # overwritten by its factor), y into x. Returns False, x untouched, if a pivot is
    # not positive.
    m = x.size
    for j in range(m):
        acc = S[j, j]
        for k in range(j):
            acc -= S[j, k] * S[j, k]
        if not acc > 0.0:
            return False
        piv = np.sqrt(acc)
        S[j, j] = piv
        for i in range(j + 1, m):
            acc = S[i, j]
            for k in range(j):
                acc -= S[i, k] * S[j, k]
            S[i, j] = acc / piv
    for i in range(m):
        acc = x[i]
        for k in range(i):
            acc -= S[i, k] * x[k]
        x[i] = acc / S[i, i]
    for i in range(m - 1, -1, -1):
        acc = x[i]
        for k in range(i + 1, m):
            acc -= S[k, i] * x[k]
        x[i] = acc / S[i, i]
    return True


def _jacobian_apply(WT, A, BsT, t, reg, H, out):  # pragma: no cover - compiled
    # dE[H] + reg H (fedep.core.ssn._jacobian_apply): K = A H + W^T (Bs * s),
    # s_i = <Bs_i, (W H)_i>; (W H)^T = H W^T as H is symmetric.
    YT = H @ WT
    s = np.sum(BsT * YT, axis=0)
    K = A @ H + WT @ (BsT * s).T
    for a in range(H.shape[0]):
        for b in range(H.shape[0]):
            out[a, b] = t * (K[a, b] + K[b, a]) + reg * H[a, b]


def _newton_cg(WT, BT, t, tau, E, reg, x):  # pragma: no cover - compiled
    # Preconditioned CG on (dE + reg I)[x] = -E (fedep.core.ssn._newton_cg, step for
    # step); x is the output. Returns the CG iterations, -1 if the inputs are not
    # finite (x is then NaN).
    r, n = WT.shape
    aw = np.empty(n)
    f = np.empty(n)
    _row_factors(BT, tau, aw, f)
    A = (WT * aw) @ WT.T
    BsT = BT * f
    if not (np.all(np.isfinite(A)) and np.all(np.isfinite(E))):
        x[:, :] = np.nan
        return -1
    lam, Q = np.linalg.eigh(A)
    den = np.empty((r, r))
    for a in range(r):
        for b in range(r):
            den[a, b] = t * (lam[a] + lam[b]) + reg
    QT = np.ascontiguousarray(Q.T)
    x[:, :] = 0.0
    res = -E
    stop = CG_RTOL * np.sqrt(np.sum(res * res))
    z = Q @ ((QT @ res @ Q) / den) @ QT
    p = z.copy()
    rz = np.sum(res * z)
    q = np.empty((r, r))
    it = 0
    if not np.sqrt(np.sum(res * res)) > stop:
        return it
    for _ in range(CG_MAX_ITER):
        it += 1
        _jacobian_apply(WT, A, BsT, t, reg, p, q)
        pq = np.sum(p * q)
        if not pq > 0.0:  # rounding: keep the iterate reached
            break
        alpha = rz / pq
        x += alpha * p
        res -= alpha * q
        if np.sqrt(np.sum(res * res)) <= stop:
            break
        z = Q @ ((QT @ res @ Q) / den) @ QT
        rz_new = np.sum(res * z)
        p = z + (rz_new / rz) * p
        rz = rz_new
    return it


def _merit(WT, BT, tau, nb):  # pragma: no cover - compiled
    # Dual merit psi = 1/2 ||B - W||^2 - sum_j huber(b_j) and its scale
    # (fedep.core.ssn._merit); nb is scratch (n,).
    r, n = WT.shape
    for i in range(n):
        nb[i] = 0.0
    q = 0.0
    for p in range(r):
        for i in range(n):
            dv = BT[p, i] - WT[p, i]
            q += dv * dv
            nb[i] += BT[p, i] * BT[p, i]
    hs = 0.0
    for i in range(n):
        nv = np.sqrt(nb[i])
        hs += tau * nv - 0.5 * tau * tau if nv > tau else 0.5 * nb[i]
    q *= 0.5
    return q - hs, q + abs(hs)


def _slope_at(WT, B0T, t, tau, Lam, dL, s, Lnew, BnT, DnT, En, nrm):  # pragma: no cover
    # <E(Lam + s dL), dL>: the slope of psi along dL, up to the factor t/2.
    r = WT.shape[0]
    for a in range(r):
        for b in range(r):
            Lnew[a, b] = Lam[a, b] + s * dL[a, b]
    _eval(WT, B0T, t, tau, Lnew, BnT, DnT, En, nrm)
    acc = 0.0
    for a in range(r):
        for b in range(r):
            acc += En[a, b] * dL[a, b]
    return acc


def _expand_search(WT, B0T, t, tau, Lam, dL, Lnew, BnT, DnT, En, nrm):  # pragma: no cover
    # Exact line search of psi along Lam + s dL, s >= 1 (fedep.core.ssn._expand_search,
    # step for step). Leaves Lnew, BnT, DnT, En at the returned point; returns ||E||.
    s_lo = 1.0
    s_hi = 2.0
    for _ in range(100):
        if _slope_at(WT, B0T, t, tau, Lam, dL, s_hi, Lnew, BnT, DnT, En, nrm) >= 0.0:
            break
        s_lo = s_hi
        s_hi = 2.0 * s_hi
    for _ in range(100):
        if s_hi - s_lo <= 1e-10 * s_hi:
            break
        sm = 0.5 * (s_lo + s_hi)
        if _slope_at(WT, B0T, t, tau, Lam, dL, sm, Lnew, BnT, DnT, En, nrm) < 0.0:
            s_lo = sm
        else:
            s_hi = sm
    r = WT.shape[0]
    for a in range(r):
        for b in range(r):
            Lnew[a, b] = Lam[a, b] + s_hi * dL[a, b]
    return _eval(WT, B0T, t, tau, Lnew, BnT, DnT, En, nrm)


def _all_cut(BT, tau):  # pragma: no cover - compiled
    r, n = BT.shape
    for i in range(n):
        bb = 0.0
        for p in range(r):
            bb += BT[p, i] * BT[p, i]
        if bb > tau * tau:
            return False
    return True


def _ssn(WT, gradT, t, tau, Lam, tol, max_iter, ia, ib, wgt, T1, sc, DT, ws):  # pragma: no cover
    # One client's regularised SSN (fedep.core.ssn.ssn_direction); DT is the output,
    # ws the work arrays of _ssn_workspace (allocated once per W-step, not per call).
    r, n = WT.shape
    m = ia.size
    B0T, BT, BnT, DnT, E, En, Lnew, dL, J, Sm, UT, step, step2, nrm, f, aa = ws
    for p in range(r):
        for i in range(n):
            B0T[p, i] = WT[p, i] - t * gradT[p, i]
    res = _eval(WT, B0T, t, tau, Lam, BT, DT, E, nrm)
    # Start from the best of the warm start, sym(W^T g) (exact for tau = 0) and one
    # Richardson step Lam - E/(2t) from it (as fedep.core.ssn.ssn_direction).
    for a in range(r):
        for b in range(a, r):
            acc = 0.0
            for i in range(n):
                acc += WT[a, i] * gradT[b, i] + gradT[a, i] * WT[b, i]
            Lnew[a, b] = 0.5 * acc
            Lnew[b, a] = 0.5 * acc
    for _start in range(2):
        rs = _eval(WT, B0T, t, tau, Lnew, BnT, DnT, En, nrm)
        if rs < res:
            Lam[:, :] = Lnew
            BT[:, :] = BnT
            DT[:, :] = DnT
            E[:, :] = En
            res = rs
        for a in range(r):
            for b in range(r):
                Lnew[a, b] -= En[a, b] / (2.0 * t)
    psi, psi_scale = _merit(WT, BT, tau, aa)
    kappa = 0.1
    n_iter = 0
    stalls = 0
    singular = False
    for _ in range(max_iter):
        if res <= tol or stalls >= 3:
            break
        if not np.isfinite(res):
            singular = True
            break
        n_iter += 1
        reg = kappa * t * max(min(res, 0.2), 1e-11)
        if m >= CG_MIN_UNKNOWNS:
            _newton_cg(WT, BT, t, tau, E, reg, dL)
        else:
            _jacobian(WT, BT, t, tau, wgt, T1, sc, J, UT, f, aa)
            for p in range(m):
                J[p, p] += reg
                step[p] = -E[ia[p], ib[p]]
            # diag(wgt) J is symmetric positive semi-definite (the Jacobian of a
            # monotone map in vech coordinates), so the regularised system is solved by
            # Cholesky; LU with pivoting is the fallback should rounding leave a pivot
            # <= 0.
            for q in range(m):
                step2[q] = wgt[q] * step[q]
                for p in range(m):
                    Sm[q, p] = wgt[q] * J[q, p]
            if _cholesky_solve(Sm, step2):
                step[:] = step2
            else:
                _lu_solve(J, step)
            for p in range(m):
                dL[ia[p], ib[p]] = step[p]
                dL[ib[p], ia[p]] = step[p]
        if not np.all(np.isfinite(dL)):
            singular = True
            break
        # Slope of psi along the step, (t/2) <E, dL>; acceptance as the reference.
        slope = 0.0
        for a in range(r):
            for b in range(r):
                slope += E[a, b] * dL[a, b]
        slope *= 0.5 * t
        accepted = False
        s = 1.0
        for _bt in range(12):
            for a in range(r):
                for b in range(r):
                    Lnew[a, b] = Lam[a, b] + s * dL[a, b]
            rn = _eval(WT, B0T, t, tau, Lnew, BnT, DnT, En, nrm)
            pn, scale = _merit(WT, BnT, tau, aa)
            kept = not _all_cut(BnT, tau)
            armijo = pn <= psi + 1e-4 * s * slope and pn < psi - 1e-13 * scale
            resid = rn < (1.0 - 1e-4 * s) * res and pn <= psi + 1e-13 * scale
            ok = kept and (armijo or resid)
            if _bt == 0:
                slope1 = 0.0
                for a in range(r):
                    for b in range(r):
                        slope1 += En[a, b] * dL[a, b]
                slope1 *= 0.5 * t
                if slope < -1e-13 * psi_scale and slope1 <= 0.5 * slope and rn >= 0.5 * res:
                    re = _expand_search(WT, B0T, t, tau, Lam, dL, Lnew, BnT, DnT, En, nrm)
                    pe, se = _merit(WT, BnT, tau, aa)
                    if pe <= psi + 1e-4 * slope and pe < psi - 1e-13 * psi_scale:
                        kappa = max(kappa / 2.0, 1e-3)
                        Lam[:, :] = Lnew
                        BT[:, :] = BnT
                        DT[:, :] = DnT
                        E[:, :] = En
                        res = re
                        psi = pe
                        psi_scale = se
                        stalls = 0
                        accepted = True
                        break
                    # Rejected: back to the full step for the ordinary test.
                    for a in range(r):
                        for b in range(r):
                            Lnew[a, b] = Lam[a, b] + dL[a, b]
                    rn = _eval(WT, B0T, t, tau, Lnew, BnT, DnT, En, nrm)
            if ok:
                good = rn <= 0.99 * res
                if good and s == 1.0:
                    kappa = max(kappa / 2.0, 1e-3)
                else:
                    kappa = min(kappa * 2.0, 1e5)
                Lam[:, :] = Lnew
                BT[:, :] = BnT
                DT[:, :] = DnT
                E[:, :] = En
                res = rn
                psi = pn
                psi_scale = scale
                stalls = 0
                accepted = True
                break
            s *= 0.5
        if not accepted:
            kappa = min(kappa * 4.0, 1e5)
            stalls += 1
    # Stop codes as fedep.core.ssn.STOP_REASONS.
    if res <= tol:
        code = 0
    elif singular:
        code = 3
    elif stalls >= 3:
        code = 2
    else:
        code = 1
    return n_iter, res, code


def _ssn_workspace(n, r, m):  # pragma: no cover - compiled
    # The dense Newton system's arrays (J, Sm, UT, step, step2) only below
    # CG_MIN_UNKNOWNS: at rank 80 they would take 170 MB.
    if m >= CG_MIN_UNKNOWNS:
        m = 0
        n_u = 0
    else:
        n_u = n
    return (
        np.empty((r, n)), np.empty((r, n)), np.empty((r, n)), np.empty((r, n)),
        np.empty((r, r)), np.empty((r, r)), np.empty((r, r)), np.empty((r, r)),
        np.empty((m, m)), np.empty((m, m)), np.empty((m, n_u)), np.empty(m), np.empty(m),
        np.empty(n), np.empty(n), np.empty(n),
    )  # fmt: skip


def _manpg(
    G, W0, Z, beta, nu, Lam0, t, max_iter, tol, gamma, max_backtrack, ssn_tol,
    ssn_max_iter, retraction, ia, ib, wgt, T1, sc, W_out, Lam_out, F_out, n_iter,
    ssn_iter, dnorm, stop,
):  # fmt: skip  # pragma: no cover - compiled
    # stop[q]: W-step stop code (fedep.core.ssn.STOP_REASONS), as fedep.core.manpg.
    d, n, r = W0.shape
    WT = np.empty((r, n))
    ZT = np.empty((r, n))
    GWT = np.empty((r, n))
    gradT = np.empty((r, n))
    DT = np.empty((r, n))
    WnT = np.empty((r, n))
    GWnT = np.empty((r, n))
    tmp = np.empty((r, n))
    M = np.empty((r, r))
    K = np.empty((r, r))
    V = np.empty((r, r))
    nrm = np.empty(n)
    sws = _ssn_workspace(n, r, ia.size)
    for q in range(d):
        for i in range(n):
            for p in range(r):
                WT[p, i] = W0[q, i, p]
                ZT[p, i] = Z[q, i, p]
        Lam = Lam_out[q]
        Lam[:, :] = Lam0[q]
        tq = t[q]
        _gw(G[q], WT, GWT)
        F = _objective(WT, GWT, ZT, beta[q], nu[q], nrm)
        dnorm[q] = np.inf
        n_iter[q] = 0
        ssn_iter[q] = 0
        stop[q] = 1  # max_iter unless another reason ends the loop
        for _ in range(max_iter):
            gn = 0.0
            for p in range(r):
                for i in range(n):
                    g = -2.0 * GWT[p, i] + nu[q] * (WT[p, i] - ZT[p, i])
                    gradT[p, i] = g
                    gn += g * g
            it, sres, scode = _ssn(
                WT, gradT, tq, tq * beta[q], Lam, ssn_tol, ssn_max_iter, ia, ib, wgt, T1, sc,
                DT, sws,
            )  # fmt: skip
            ssn_iter[q] += it
            Dn2 = 0.0
            for p in range(r):
                for i in range(n):
                    Dn2 += DT[p, i] * DT[p, i]
            dnorm[q] = np.sqrt(Dn2) / tq
            if scode == 3 or not np.isfinite(Dn2):
                stop[q] = 3
                break
            if dnorm[q] <= tol * (1.0 + np.sqrt(gn)):
                stop[q] = 0
                break
            n_iter[q] += 1
            s = 1.0
            done = False
            for _bt in range(max_backtrack):
                # Full-rank guard (see fedep.core.manpg): retract only if s ||E|| <= 1.
                if s * sres <= 1.0:
                    _retract(WT, DT, s, retraction, WnT, tmp, M, K, V)
                    _gw(G[q], WnT, GWnT)
                    Fn = _objective(WnT, GWnT, ZT, beta[q], nu[q], nrm)
                    if Fn <= F - s / (2.0 * tq) * Dn2 + 1e-14 * abs(F):
                        WT[:, :] = WnT
                        GWT[:, :] = GWnT
                        F = Fn
                        done = True
                        break
                s *= gamma
            if not done:
                # No measurable descent in floating point (as the reference).
                stop[q] = 2
                break
        for i in range(n):
            for p in range(r):
                W_out[q, i, p] = WT[p, i]
        F_out[q] = F


_gw = _jit(_gw)
_objective = _jit(_objective)
_eval = _jit(_eval)
_row_factors = _jit(_row_factors)
_jacobian = _jit(_jacobian)
_lu_solve = _jit(_lu_solve)
_cholesky_solve = _jit(_cholesky_solve)
_jacobian_apply = _jit(_jacobian_apply)
_newton_cg = _jit(_newton_cg)
_merit = _jit(_merit)
_slope_at = _jit(_slope_at)
_expand_search = _jit(_expand_search)
_all_cut = _jit(_all_cut)
_ssn = _jit(_ssn)
_ssn_workspace = _jit(_ssn_workspace)
manpg_clients = _jit(_manpg)

"""The W-step's retractions, compiled: polar (by ``(A^T A)^{-1/2}``) and QR.

Same factors, to rounding, as :func:`fedep.core.stiefel.retract_polar` and
:func:`fedep.core.stiefel.retract_qr` (tested). Called by the compiled W-step
(:mod:`fedep.core._kernels.wstep`). numba's cache keys a kernel on its own source file
only: after editing this module, clear numba's cache of ``wstep`` (or run with a fresh
``NUMBA_CACHE_DIR``) so the W-step links the new code.
"""

from __future__ import annotations

import numpy as np

from fedep.core._kernels._jit import jit as _jit


def _matmul_small(A, B, out):  # pragma: no cover - compiled
    r = A.shape[0]
    for a in range(r):
        for b in range(r):
            acc = 0.0
            for k in range(r):
                acc += A[a, k] * B[k, b]
            out[a, b] = acc


#: Rank from which the compiled polar retraction takes LAPACK's eigh for (A^T A)^{-1/2}.
EIGH_MIN_RANK = 16


def _inv_sqrt_spd(M, K, V):  # pragma: no cover - compiled
    # K = M^{-1/2} for symmetric positive definite M (overwritten). Near the identity
    # (every retraction of a small step) the coupled Newton-Schulz iteration
    # converges quadratically in a few r x r products; otherwise cyclic Jacobi
    # rotations. Both are cheaper than a LAPACK call's set-up at r ~ 5; from
    # EIGH_MIN_RANK their r^3 loops cost more than LAPACK's eigh (at rank 80 a
    # retraction took 40 ms by Jacobi rotations).
    r = M.shape[0]
    if r >= EIGH_MIN_RANK:
        lam, Q = np.linalg.eigh(M)
        K[:, :] = (Q / np.sqrt(lam)) @ Q.T
        return
    dist = 0.0
    for a in range(r):
        for b in range(r):
            e = M[a, b] - (1.0 if a == b else 0.0)
            dist += e * e
    if dist < 0.25:
        Y = M.copy()
        Z = np.eye(r)
        T = np.empty((r, r))
        P = np.empty((r, r))
        for _ in range(20):
            # T = (3 I - Z Y) / 2;  Y <- Y T;  Z <- T Z
            _matmul_small(Z, Y, P)
            err = 0.0
            for a in range(r):
                for b in range(r):
                    e = P[a, b] - (1.0 if a == b else 0.0)
                    err += e * e
                    T[a, b] = -0.5 * e + (1.0 if a == b else 0.0)
            if err <= 1e-30:
                K[:, :] = Z
                return
            if err <= 1e-16:
                # ||I - Z Y|| <= 1e-8: the error contracts to 3/4 of its square per
                # step, so this last Z is exact to rounding; skip Y and the check.
                _matmul_small(T, Z, K)
                return
            _matmul_small(Y, T, P)
            Y[:, :] = P
            _matmul_small(T, Z, P)
            Z[:, :] = P
    for a in range(r):
        for b in range(r):
            V[a, b] = 1.0 if a == b else 0.0
    for _sweep in range(100):
        off = 0.0
        diag = 0.0
        for a in range(r):
            diag += M[a, a] * M[a, a]
            for b in range(a + 1, r):
                off += M[a, b] * M[a, b]
        if off <= 1e-32 * diag:
            break
        for a in range(r - 1):
            for b in range(a + 1, r):
                if M[a, b] == 0.0:
                    continue
                theta = (M[b, b] - M[a, a]) / (2.0 * M[a, b])
                tt = 1.0 / (abs(theta) + np.sqrt(theta * theta + 1.0))
                if theta < 0.0:
                    tt = -tt
                c = 1.0 / np.sqrt(tt * tt + 1.0)
                sn = tt * c
                for k in range(r):
                    mka = M[k, a]
                    mkb = M[k, b]
                    M[k, a] = c * mka - sn * mkb
                    M[k, b] = sn * mka + c * mkb
                for k in range(r):
                    mak = M[a, k]
                    mbk = M[b, k]
                    M[a, k] = c * mak - sn * mbk
                    M[b, k] = sn * mak + c * mbk
                for k in range(r):
                    vka = V[k, a]
                    vkb = V[k, b]
                    V[k, a] = c * vka - sn * vkb
                    V[k, b] = sn * vka + c * vkb
    for a in range(r):
        for b in range(r):
            acc = 0.0
            for k in range(r):
                acc += V[a, k] * V[b, k] / np.sqrt(M[k, k])
            K[a, b] = acc


def _retract(WT, DT, s, retraction, outT, tmp, M, K, V):  # pragma: no cover - compiled
    r, n = WT.shape
    for p in range(r):
        for i in range(n):
            outT[p, i] = WT[p, i] + s * DT[p, i]
    if retraction == 0:
        # Polar factor A (A^T A)^{-1/2}, from the r x r Gram matrix.
        for a in range(r):
            for b in range(a, r):
                acc = 0.0
                for i in range(n):
                    acc += outT[a, i] * outT[b, i]
                M[a, b] = acc
                M[b, a] = acc
        _inv_sqrt_spd(M, K, V)
        for p in range(r):
            for i in range(n):
                tmp[p, i] = 0.0
            for k in range(r):
                kk = K[k, p]
                for i in range(n):
                    tmp[p, i] += kk * outT[k, i]
        outT[:, :] = tmp
    else:
        # Q factor with positive diagonal of R: Gram-Schmidt, orthogonalised twice.
        for p in range(r):
            op = outT[p]
            for _twice in range(2):
                for k in range(p):
                    ok = outT[k]
                    acc = 0.0
                    for i in range(n):
                        acc += ok[i] * op[i]
                    for i in range(n):
                        op[i] -= acc * ok[i]
            nv = 0.0
            for i in range(n):
                nv += op[i] * op[i]
            nv = np.sqrt(nv)
            for i in range(n):
                op[i] /= nv


_matmul_small = _jit(_matmul_small)
_inv_sqrt_spd = _jit(_inv_sqrt_spd)
_retract = _jit(_retract)

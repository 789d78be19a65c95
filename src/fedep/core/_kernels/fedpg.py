"""FedPG's local epochs, compiled: Riemannian gradient steps with a QR retraction.

Same iterates, to rounding, as the batched NumPy path of
:class:`fedep.core.fedpg.FedPGCohort` (the reference, tested for parity), computed in
each client's eigenbasis. With ``C_i = E_i diag(lam_i) E_i^T`` (formed once, at the
cohort's set-up) and every n x r matrix rotated, ``W~ = E_i^T W``, the data term of an
epoch's gradient ``-2 C_i W`` is ``-2 lam_i * W~`` (row-wise): O(n r) instead of
O(n^2 r). The rest of an epoch commutes with the rotation (inner products ``W^T g``,
the products ``W (W^T g)`` and the QR factor: ``qf(E^T A) = E^T qf(A)`` for orthogonal
``E``), so a round costs four n x n by n x r products per client (the rotations of
``W``, ``Y``, ``Z`` and of the consensus basis for the objective, and ``W`` back)
plus O(n r^2) per epoch, whatever its record count.
"""

from __future__ import annotations

import numpy as np

from fedep.core._kernels._jit import jit as _jit


def _cholesky_qr(AT, R):  # pragma: no cover - compiled
    # AT (r x n, the transpose of A) <- its Q factor, A = Q R with R upper triangular of
    # positive diagonal (the QR retraction's factor): R from the Cholesky factor of
    # A^T A, then Q = A R^{-1} row by row of AT. One pass, exact to rounding for the
    # well-conditioned A of a retraction (A^T A = I + lr^2 rg^T rg, as W^T rg is skew
    # or zero); Gram-Schmidt twice costs about twice as much.
    r, n = AT.shape
    for u in range(r):
        for v in range(u, r):
            acc = 0.0
            for j in range(n):
                acc += AT[u, j] * AT[v, j]
            R[u, v] = acc
    for u in range(r):
        acc = R[u, u]
        for k in range(u):
            acc -= R[k, u] * R[k, u]
        R[u, u] = np.sqrt(acc)
        for v in range(u + 1, r):
            acc = R[u, v]
            for k in range(u):
                acc -= R[k, u] * R[k, v]
            R[u, v] = acc / R[u, u]
    for p in range(r):
        for k in range(p):
            f = R[k, p]
            for j in range(n):
                AT[p, j] -= f * AT[k, j]
        f = 1.0 / R[p, p]
        for j in range(n):
            AT[p, j] *= f


def _fedpg(E, lam, W, Y, Z, Qz, inv_n, lr, rho, epochs, stiefel, trX, out):  # pragma: no cover
    # FedPG's local epochs for every client, in place on W (fedep.core.fedpg):
    # g = (-2 C W + Y + rho_i (W - Z)) / N_i,  W <- qf(W - lr rg) with the Riemannian
    # gradient rg = g - W sym(W^T g) (Stiefel) or (I - W W^T) g (Grassmann); in the
    # eigenbasis E_i of C_i (rotated matrices held transposed, r x n: contiguous rows).
    # out[0, q]: tr(C) - tr(Qz^T C Qz), the objective of the consensus basis Qz;
    # out[1, q]: ||C W||_F at the new W.
    d, n, r = W.shape
    WT = np.empty((r, n))
    cT = np.empty((r, n))
    QT = np.empty((r, n))
    gT = np.empty((r, n))
    WtG = np.empty((r, r))
    tmp = np.empty((r, n))
    M = np.empty((r, r))
    a = np.empty(n)
    for q in range(d):
        Eq = E[q]
        lq = lam[q]
        WT[:, :] = 0.0
        cT[:, :] = 0.0
        QT[:, :] = 0.0
        # Rotations, row by row of E (axpy form: contiguous, no reductions).
        for i in range(n):
            Ei = Eq[i]
            for p in range(r):
                w = W[q, i, p]
                c = Y[q, i, p] - rho[q] * Z[i, p]
                z = Qz[i, p]
                for j in range(n):
                    WT[p, j] += Ei[j] * w
                    cT[p, j] += Ei[j] * c
                    QT[p, j] += Ei[j] * z
        fit = 0.0
        for p in range(r):
            for j in range(n):
                fit += lq[j] * QT[p, j] * QT[p, j]
        out[0, q] = trX[q] - fit
        for j in range(n):
            a[j] = inv_n[q] * (rho[q] - 2.0 * lq[j])
        for p in range(r):
            for j in range(n):
                cT[p, j] *= inv_n[q]
        for _ in range(epochs):
            for p in range(r):
                for j in range(n):
                    gT[p, j] = a[j] * WT[p, j] + cT[p, j]
            for u in range(r):
                for v in range(r):
                    acc = 0.0
                    for j in range(n):
                        acc += WT[u, j] * gT[v, j]
                    WtG[u, v] = acc
            if stiefel:
                for u in range(r):
                    for v in range(u + 1, r):
                        m = 0.5 * (WtG[u, v] + WtG[v, u])
                        WtG[u, v] = m
                        WtG[v, u] = m
            # W - lr (g - W (W^T g)), then its Q factor.
            for p in range(r):
                for j in range(n):
                    tmp[p, j] = gT[p, j]
                for k in range(r):
                    wk = WtG[k, p]
                    for j in range(n):
                        tmp[p, j] -= WT[k, j] * wk
            for p in range(r):
                for j in range(n):
                    WT[p, j] -= lr[q] * tmp[p, j]
            _cholesky_qr(WT, M)
        gs = 0.0
        for p in range(r):
            for j in range(n):
                cw = lq[j] * WT[p, j]
                gs += cw * cw
        out[1, q] = np.sqrt(gs)
        # Back to the features: W = E W~.
        for i in range(n):
            Ei = Eq[i]
            for p in range(r):
                acc = 0.0
                wp = WT[p]
                for j in range(n):
                    acc += Ei[j] * wp[j]
                W[q, i, p] = acc


_cholesky_qr = _jit(_cholesky_qr)
fedpg_clients = _jit(_fedpg)

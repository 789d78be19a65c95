"""FedPG's client pass, compiled: the dual update and the local epochs (Riemannian
gradient steps with a QR retraction).

Same iterates, to rounding, as the batched NumPy path of
:class:`fedep.core.fedpg.FedPGCohort` (the reference, tested for parity), computed in
each client's eigenbasis. With ``C_i = E_i diag(lam_i) E_i^T`` (formed once, at the
cohort's set-up) and every n x r matrix rotated, ``W~ = E_i^T W``, the data term of an
epoch's gradient ``-2 C_i W`` is ``-2 lam_i * W~`` (row-wise): O(n r) instead of
O(n^2 r). The rest of an epoch commutes with the rotation (inner products ``W^T g``,
the products ``W (W^T g)`` and the QR factor: ``qf(E^T A) = E^T qf(A)`` for orthogonal
``E``), so a round costs four n x n by n x r products per client (the rotations of
``W``, of ``Y - rho_i Z`` and of the consensus basis for the objective, and ``W``
back) plus O(n r^2) per epoch, whatever its record count.
"""

from __future__ import annotations

import numpy as np

from fedep.core._kernels._jit import jit as _jit
from fedep.core._kernels._jit import jit_inline as _jit_inline

# The epochs' products are of tiny matrices (r rows of length n, r ~ 5): a loop over
# one pair of rows spends more on entering and leaving it (and on a sum's final
# reduction) than on its arithmetic. The loops below therefore take four rows at a
# time (four dot products, or four scaled rows added to one), then the rest one by
# one: about 40 loops an epoch instead of 95. They are written out in the kernel, not
# called: a call, inlined or not, updates the reference counts of the arrays it is
# passed (atomic operations), and rows are indexed in place, not sliced, for the same
# reason.


def _rotate_in(Eq, Wq, Yq, Z, Qz, rq, WT, cT, QT):  # pragma: no cover - compiled
    # Row j of E^T X for X = W, Y - rho Z and Qz, held transposed (r x n):
    # XT[p] = sum_i X[i, p] E[i], four rows of E at a time.
    n, r = Wq.shape
    for p in range(r):
        for j in range(n):
            WT[p, j] = 0.0
            cT[p, j] = 0.0
            QT[p, j] = 0.0
    i = 0
    while i + 4 <= n:
        for p in range(r):
            w0, w1, w2, w3 = Wq[i, p], Wq[i + 1, p], Wq[i + 2, p], Wq[i + 3, p]
            c0 = Yq[i, p] - rq * Z[i, p]
            c1 = Yq[i + 1, p] - rq * Z[i + 1, p]
            c2 = Yq[i + 2, p] - rq * Z[i + 2, p]
            c3 = Yq[i + 3, p] - rq * Z[i + 3, p]
            z0, z1, z2, z3 = Qz[i, p], Qz[i + 1, p], Qz[i + 2, p], Qz[i + 3, p]
            for j in range(n):
                a0, a1, a2, a3 = Eq[i, j], Eq[i + 1, j], Eq[i + 2, j], Eq[i + 3, j]
                WT[p, j] += a0 * w0 + a1 * w1 + a2 * w2 + a3 * w3
                cT[p, j] += a0 * c0 + a1 * c1 + a2 * c2 + a3 * c3
                QT[p, j] += a0 * z0 + a1 * z1 + a2 * z2 + a3 * z3
        i += 4
    while i < n:
        for p in range(r):
            w0, c0, z0 = Wq[i, p], Yq[i, p] - rq * Z[i, p], Qz[i, p]
            for j in range(n):
                a0 = Eq[i, j]
                WT[p, j] += a0 * w0
                cT[p, j] += a0 * c0
                QT[p, j] += a0 * z0
        i += 1


def _fedpg(
    E, lam, W, Y, Z, Qz, inv_n, lr, rho, epochs, stiefel, trX, W_out, Y_out, out
):  # pragma: no cover
    # FedPG's client step for every client (fedep.core.fedpg): the dual update
    # Y_out = Y + rho_i (W - Z), then the local epochs from W, the result in W_out:
    # g = (-2 C W + Y_out + rho_i (W - Z)) / N_i,  W <- qf(W - lr rg) with the Riemannian
    # gradient rg = g - W sym(W^T g) (Stiefel) or (I - W W^T) g (Grassmann); in the
    # eigenbasis E_i of C_i (rotated matrices held transposed, r x n: contiguous rows).
    # out[0, q]: tr(C) - tr(Qz^T C Qz), the objective of the consensus basis Qz;
    # out[1, q]: ||C W||_F at the new W;
    # out[2, q]: tr(C) - tr(W^T C W), the client's own fit at the new W.
    d, n, r = W.shape
    WT = np.empty((r, n))
    AT = np.empty((r, n))
    cT = np.empty((r, n))
    QT = np.empty((r, n))
    gT = np.empty((r, n))
    B = np.empty((r, r))
    R = np.empty((r, r))
    Ri = np.empty((r, r))
    a = np.empty(n)
    for q in range(d):
        Eq = E[q]
        Wq = W[q]
        Yq = Y_out[q]
        rq = rho[q]
        for i in range(n):
            for p in range(r):
                Yq[i, p] = Y[q, i, p] + rq * (Wq[i, p] - Z[i, p])
        _rotate_in(Eq, Wq, Yq, Z, Qz, rq, WT, cT, QT)
        Wq = W_out[q]
        fit = 0.0
        for p in range(r):
            for j in range(n):
                fit += lam[q, j] * QT[p, j] * QT[p, j]
        out[0, q] = trX[q] - fit
        for j in range(n):
            a[j] = inv_n[q] * (rho[q] - 2.0 * lam[q, j])
        for p in range(r):
            for j in range(n):
                cT[p, j] *= inv_n[q]
        lrq = lr[q]
        for _ in range(epochs):
            for p in range(r):
                for j in range(n):
                    gT[p, j] = a[j] * WT[p, j] + cT[p, j]
            # B = W^T g (B[u, v] = <W~[u], g~[v]>), four dot products a pass.
            for u in range(r):
                v = 0
                while v + 4 <= r:
                    s0 = s1 = s2 = s3 = 0.0
                    for j in range(n):
                        x = WT[u, j]
                        s0 += x * gT[v, j]
                        s1 += x * gT[v + 1, j]
                        s2 += x * gT[v + 2, j]
                        s3 += x * gT[v + 3, j]
                    B[u, v], B[u, v + 1], B[u, v + 2], B[u, v + 3] = s0, s1, s2, s3
                    v += 4
                while v < r:
                    s0 = 0.0
                    for j in range(n):
                        s0 += WT[u, j] * gT[v, j]
                    B[u, v] = s0
                    v += 1
            if stiefel:
                for u in range(r):
                    for v in range(u + 1, r):
                        s0 = 0.5 * (B[u, v] + B[v, u])
                        B[u, v] = s0
                        B[v, u] = s0
            # A = W - lr (g - W B) = W - lr g + sum_k (lr B[k, p]) W[k], four rows a pass
            # (the first pass also forms W - lr g).
            for p in range(r):
                k = 0
                if r >= 4:
                    c0, c1, c2, c3 = lrq * B[0, p], lrq * B[1, p], lrq * B[2, p], lrq * B[3, p]
                    for j in range(n):
                        AT[p, j] = (WT[p, j] - lrq * gT[p, j]) + (
                            c0 * WT[0, j] + c1 * WT[1, j] + c2 * WT[2, j] + c3 * WT[3, j]
                        )
                    k = 4
                else:
                    for j in range(n):
                        AT[p, j] = WT[p, j] - lrq * gT[p, j]
                while k + 4 <= r:
                    c0, c1 = lrq * B[k, p], lrq * B[k + 1, p]
                    c2, c3 = lrq * B[k + 2, p], lrq * B[k + 3, p]
                    for j in range(n):
                        AT[p, j] += (
                            c0 * WT[k, j]
                            + c1 * WT[k + 1, j]
                            + c2 * WT[k + 2, j]
                            + c3 * WT[k + 3, j]
                        )
                    k += 4
                while k < r:
                    c0 = lrq * B[k, p]
                    for j in range(n):
                        AT[p, j] += c0 * WT[k, j]
                    k += 1
            # QR retraction: R from the Cholesky factor of A^T A (upper triangle first),
            # then W = Q = A R^{-1}. Exact to rounding for the well-conditioned A of a
            # retraction (A^T A = I + lr^2 rg^T rg, as W^T rg is skew or zero).
            for u in range(r):
                v = u
                while v + 4 <= r:
                    s0 = s1 = s2 = s3 = 0.0
                    for j in range(n):
                        x = AT[u, j]
                        s0 += x * AT[v, j]
                        s1 += x * AT[v + 1, j]
                        s2 += x * AT[v + 2, j]
                        s3 += x * AT[v + 3, j]
                    R[u, v], R[u, v + 1], R[u, v + 2], R[u, v + 3] = s0, s1, s2, s3
                    v += 4
                while v < r:
                    s0 = 0.0
                    for j in range(n):
                        s0 += AT[u, j] * AT[v, j]
                    R[u, v] = s0
                    v += 1
            for u in range(r):
                s0 = R[u, u]
                for k in range(u):
                    s0 -= R[k, u] * R[k, u]
                R[u, u] = np.sqrt(s0)
                Ri[u, u] = 1.0 / R[u, u]
                for v in range(u + 1, r):
                    s0 = R[u, v]
                    for k in range(u):
                        s0 -= R[k, u] * R[k, v]
                    R[u, v] = s0 * Ri[u, u]
            for p in range(r):  # R^{-1}, upper triangular, column by column
                for k in range(p - 1, -1, -1):
                    s0 = 0.0
                    for i in range(k + 1, p + 1):
                        s0 += R[k, i] * Ri[i, p]
                    Ri[k, p] = -s0 * Ri[k, k]
            # W~[p] = sum_{k <= p} Ri[k, p] A~[k], four rows a pass (the first assigns).
            for p in range(r):
                k = 0
                if p >= 3:
                    c0, c1, c2, c3 = Ri[0, p], Ri[1, p], Ri[2, p], Ri[3, p]
                    for j in range(n):
                        WT[p, j] = c0 * AT[0, j] + c1 * AT[1, j] + c2 * AT[2, j] + c3 * AT[3, j]
                    k = 4
                else:
                    c0 = Ri[0, p]
                    for j in range(n):
                        WT[p, j] = c0 * AT[0, j]
                    k = 1
                while k + 4 <= p + 1:
                    c0, c1, c2, c3 = Ri[k, p], Ri[k + 1, p], Ri[k + 2, p], Ri[k + 3, p]
                    for j in range(n):
                        WT[p, j] += (
                            c0 * AT[k, j]
                            + c1 * AT[k + 1, j]
                            + c2 * AT[k + 2, j]
                            + c3 * AT[k + 3, j]
                        )
                    k += 4
                while k < p + 1:
                    c0 = Ri[k, p]
                    for j in range(n):
                        WT[p, j] += c0 * AT[k, j]
                    k += 1
        gs = 0.0
        fit = 0.0
        for p in range(r):
            for j in range(n):
                cw = lam[q, j] * WT[p, j]
                gs += cw * cw
                fit += cw * WT[p, j]
        out[1, q] = np.sqrt(gs)
        out[2, q] = trX[q] - fit
        # Back to the features: W[i, p] = <E[i], W~[p]>.
        for i in range(n):
            p = 0
            while p + 4 <= r:
                s0 = s1 = s2 = s3 = 0.0
                for j in range(n):
                    x = Eq[i, j]
                    s0 += x * WT[p, j]
                    s1 += x * WT[p + 1, j]
                    s2 += x * WT[p + 2, j]
                    s3 += x * WT[p + 3, j]
                Wq[i, p], Wq[i, p + 1], Wq[i, p + 2], Wq[i, p + 3] = s0, s1, s2, s3
                p += 4
            while p < r:
                s0 = 0.0
                for j in range(n):
                    s0 += Eq[i, j] * WT[p, j]
                Wq[i, p] = s0
                p += 1


_rotate_in = _jit_inline(_rotate_in)
fedpg_clients = _jit(_fedpg)

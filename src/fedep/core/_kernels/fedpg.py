"""FedPG's local epochs, compiled: Riemannian gradient steps with a QR retraction.

Same iterates as the batched NumPy path of :class:`fedep.core.fedpg.FedPGCohort`.
"""

from __future__ import annotations

import numpy as np

from fedep.core._kernels._jit import jit as _jit
from fedep.core._kernels.wstep import _gw, _retract


def _fedpg(C, W, Y, Z, inv_n, lr, rho, epochs, stiefel):  # pragma: no cover - compiled
    # FedPG's local epochs for every client, in place on W (fedep.core.fedpg):
    # g = (-2 C W + Y + rho_i (W - Z)) / N_i,  W <- qf(W - lr rg) with the Riemannian
    # gradient rg = g - W sym(W^T g) (Stiefel) or (I - W W^T) g (Grassmann).
    d, n, r = W.shape
    WT = np.empty((r, n))
    CWT = np.empty((r, n))
    gT = np.empty((r, n))
    outT = np.empty((r, n))
    WtG = np.empty((r, r))
    tmp = np.empty((r, n))
    M = np.empty((r, r))
    K = np.empty((r, r))
    V = np.empty((r, r))
    for q in range(d):
        for i in range(n):
            for p in range(r):
                WT[p, i] = W[q, i, p]
        for _ in range(epochs):
            _gw(C[q], WT, CWT)
            for p in range(r):
                for i in range(n):
                    gT[p, i] = inv_n[q] * (
                        -2.0 * CWT[p, i] + Y[q, i, p] + rho[q] * (WT[p, i] - Z[i, p])
                    )
            # Riemannian gradient g - W (W^T g) (its symmetric part on Stiefel), then -lr * rg.
            for a in range(r):
                for b in range(r):
                    acc = 0.0
                    for i in range(n):
                        acc += WT[a, i] * gT[b, i]
                    WtG[a, b] = acc
            if stiefel:
                for a in range(r):
                    for b in range(a + 1, r):
                        m = 0.5 * (WtG[a, b] + WtG[b, a])
                        WtG[a, b] = m
                        WtG[b, a] = m
            for p in range(r):
                for i in range(n):
                    acc = gT[p, i]
                    for k in range(r):
                        acc -= WT[k, i] * WtG[k, p]
                    gT[p, i] = -lr[q] * acc
            _retract(WT, gT, 1.0, 1, outT, tmp, M, K, V)
            WT[:, :] = outT
        for i in range(n):
            for p in range(r):
                W[q, i, p] = WT[p, i]


fedpg_clients = _jit(_fedpg)

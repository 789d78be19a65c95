"""Fused per-record kernel of FedEP's S-, U- and dual steps (compiled with numba).

The data step touches every record of every client once per round. Written as NumPy
expressions it costs about fifteen passes over the ``(N_i, n)`` arrays; fused, it is
one read of ``X``, ``U``, ``A`` and one write of ``U``, ``A`` per record, which is what
keeps a FedEP round within a few Gram matrices of time. The NumPy path in
:mod:`fedep.core.fedep` computes the same updates and is the reference the tests
compare this kernel with.

Per record (row) ``x`` with state ``u``, ``a`` (``a = Lam/mu``) and basis ``W`` the
kernel computes, in the notation of :mod:`fedep.core.fedep`::

    m  = x - u + a;  c = clip(m, -alpha/mu, alpha/mu);  s = m - c   (S-step)
    y  = x - s + a = u + c
    a' = 2/(mu+2) (y - W W^T y);  u' = y - a'                       (U- and dual steps)

and accumulates per client ``||(I - W W^T)(x - s)||^2``, ``alpha ||s||_1``, the
multiplier terms ``mu <a', R> + mu/2 ||R||^2`` and ``||R||^2`` of ``R = a' - a``.
"""

from __future__ import annotations

import numpy as np

try:
    import numba
except ImportError:  # pragma: no cover - numba is a declared dependency
    numba = None

__all__ = ["HAVE_NUMBA", "fused_data_step"]

HAVE_NUMBA = numba is not None

# Reassociation lets LLVM vectorise the per-record dot products; no flag assumes
# finite values, so a NaN would still propagate (inputs are validated upstream).
_FASTMATH = {"reassoc", "contract", "nsz"}


def _fused_data_step(X, U, A, WT, k0, r0, r1, lengths, alpha, mu, out):  # pragma: no cover
    # Compiled by numba; coverage cannot see inside.
    kq, r, n = WT.shape
    thr = alpha / mu
    c = 2.0 / (mu + 2.0)
    z = np.empty(n)
    pb = np.empty(n)
    for q in range(kq):
        g = k0 + q
        hi = min(r1, lengths[g])
        fit = 0.0
        l1 = 0.0
        lam = 0.0
        r2 = 0.0
        w = WT[q]
        for i in range(r0, hi):
            x = X[g, i]
            u = U[g, i]
            a = A[g, i]
            for j in range(n):
                mv = x[j] - u[j] + a[j]
                cv = min(max(mv, -thr), thr)
                l1 += abs(mv - cv)
                yv = u[j] + cv
                u[j] = yv  # u holds y until the U-step below
                zz = yv - a[j]  # x - s
                z[j] = zz
                fit += zz * zz
            for j in range(n):
                pb[j] = 0.0
            for p in range(r):
                yw = 0.0
                zw = 0.0
                for j in range(n):
                    yw += u[j] * w[p, j]
                    zw += z[j] * w[p, j]
                fit -= zw * zw
                for j in range(n):
                    pb[j] += yw * w[p, j]
            for j in range(n):
                yv = u[j]
                an = c * (yv - pb[j])
                rr = an - a[j]
                r2 += rr * rr
                lam += an * rr
                u[j] = yv - an
                a[j] = an
        out[0, q] += fit
        out[1, q] += alpha * l1
        out[2, q] += mu * lam + 0.5 * mu * r2
        out[3, q] += r2


if HAVE_NUMBA:
    fused_data_step = numba.njit(cache=True, nogil=True, fastmath=_FASTMATH, error_model="numpy")(
        _fused_data_step
    )
else:  # pragma: no cover
    fused_data_step = None

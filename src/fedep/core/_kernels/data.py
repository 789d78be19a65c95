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

A client with many records keeps no ``A`` (:mod:`fedep.core.large_clients`): after a
data step ``a' = 2/mu (I - W W^T) u'``, so the next step recomputes it from ``U``. There
the projections are BLAS products over a chunk of rows and the per-element work is two
kernels, :func:`s_step_rows` (the S-step, ``y`` and ``x - s``) and :func:`u_step_rows`
(the U- and dual steps), both on 2-D ``(rows, n)`` arrays.
"""

from __future__ import annotations

import numpy as np

from fedep.core._kernels._jit import jit as _jit


def _fused_data_step(X, U, A, WT, k0, k1, r0, r1, lengths, alpha, mu, out):  # pragma: no cover
    # Clients k0..k1-1 of a padded group, rows r0..r1-1; WT[g] = W_g^T, out (4, k).
    # Compiled by numba; coverage cannot see inside.
    _, r, n = WT.shape
    thr = alpha / mu
    c = 2.0 / (mu + 2.0)
    z = np.empty(n)
    pb = np.empty(n)
    for g in range(k0, k1):
        hi = min(r1, lengths[g])
        fit = 0.0
        l1 = 0.0
        lam = 0.0
        r2 = 0.0
        w = WT[g]
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
        out[0, g] += fit
        out[1, g] += alpha * l1
        out[2, g] += mu * lam + 0.5 * mu * r2
        out[3, g] += r2


def _s_step_rows(X, U, P, Z, scale, thr):  # pragma: no cover - compiled
    # Rows of one client. In: P = U B B^T (B the basis of the last data step). Out, in
    # place: P <- a = scale (U - P), U <- y = u + clip(x - u + a), Z <- x - s = y - a.
    # Returns (sum ||x - s||^2, sum |s|).
    rows, n = X.shape
    fit = 0.0
    l1 = 0.0
    for i in range(rows):
        x = X[i]
        u = U[i]
        p = P[i]
        z = Z[i]
        for j in range(n):
            a = scale * (u[j] - p[j])
            mv = x[j] - u[j] + a
            cv = min(max(mv, -thr), thr)
            l1 += abs(mv - cv)
            yv = u[j] + cv
            u[j] = yv
            p[j] = a
            zz = yv - a
            z[j] = zz
            fit += zz * zz
    return fit, l1


def _u_step_rows(U, PB, A, ZW, c):  # pragma: no cover - compiled
    # In: U = y, PB = y W W^T, A = a, ZW = (x - s) W. Out: U <- y - a', a' = c (y - PB).
    # Returns (sum <a', R>, sum ||R||^2, sum ||ZW||^2), R = a' - a.
    rows, n = U.shape
    lam = 0.0
    r2 = 0.0
    for i in range(rows):
        u = U[i]
        pb = PB[i]
        a = A[i]
        for j in range(n):
            yv = u[j]
            an = c * (yv - pb[j])
            rr = an - a[j]
            r2 += rr * rr
            lam += an * rr
            u[j] = yv - an
    zw2 = 0.0
    for i in range(ZW.shape[0]):
        for p in range(ZW.shape[1]):
            zw2 += ZW[i, p] * ZW[i, p]
    return lam, r2, zw2


def _dual_step(W, V, Pi, nu, Z):  # pragma: no cover - compiled
    # Pi_i <- Pi_i + nu_i (W_i - V) in place, and the W-step targets Z_i = V - Pi_i/nu_i.
    d, n, r = W.shape
    for q in range(d):
        nq = nu[q]
        for i in range(n):
            for p in range(r):
                v = V[i, p]
                pi = Pi[q, i, p] + nq * (W[q, i, p] - v)
                Pi[q, i, p] = pi
                Z[q, i, p] = v - pi / nq


def _gram_terms(G, W, top, steps, out):  # pragma: no cover - compiled
    # Per client: tr(G) - tr(W^T G W), ||G W||_F, ||W||_{2,1}, and the Rayleigh
    # quotient after `steps` power steps on `top` (updated in place); out (4, d).
    # Every inner loop is a contiguous dot product over a row of G.
    d, n, r = W.shape
    WT = np.empty((r, n))
    v = np.empty(n)
    for q in range(d):
        Gq = G[q]
        l21 = 0.0
        for i in range(n):
            rn = 0.0
            for p in range(r):
                wv = W[q, i, p]
                WT[p, i] = wv
                rn += wv * wv
            l21 += np.sqrt(rn)
        tr = 0.0
        quad = 0.0
        gs = 0.0
        for i in range(n):
            Gi = Gq[i]
            tr += Gi[i]
            for p in range(r):
                wp = WT[p]
                acc = 0.0
                for k in range(n):
                    acc += Gi[k] * wp[k]
                quad += wp[i] * acc
                gs += acc * acc
        t = top[q]
        for _ in range(steps):
            nv = 0.0
            for i in range(n):
                Gi = Gq[i]
                acc = 0.0
                for k in range(n):
                    acc += Gi[k] * t[k]
                v[i] = acc
                nv += acc * acc
            nv = max(np.sqrt(nv), 1e-300)
            for i in range(n):
                t[i] = v[i] / nv
        ray = 0.0
        for i in range(n):
            Gi = Gq[i]
            acc = 0.0
            for k in range(n):
                acc += Gi[k] * t[k]
            ray += t[i] * acc
        out[0, q] = tr - quad
        out[1, q] = np.sqrt(gs)
        out[2, q] = l21
        out[3, q] = ray


fused_data_step = _jit(_fused_data_step)
s_step_rows = _jit(_s_step_rows)
u_step_rows = _jit(_u_step_rows)
dual_step = _jit(_dual_step)
gram_terms = _jit(_gram_terms)

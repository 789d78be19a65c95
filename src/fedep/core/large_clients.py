"""FedEP's data step for a client with many records: no dual array ``A`` kept.

FedEP's robust split keeps, per record, the auxiliary ``U = X - S`` and the scaled dual
``A = Lam/mu`` (:mod:`fedep.core.fedep`): with the records themselves, three arrays of
the records' size. The U-step's optimality condition removes one of them. After a data
step at basis ``W``::

    a' = c (y - W W^T y),  u' = y - a',  c = 2/(mu + 2)
    =>  (I - W W^T) u' = (1 - c)(I - W W^T) y  and  a' = 2/mu (I - W W^T) u'

(``Lam' = 2 U' (I - W W^T)``, the gradient of the fit term at ``U'``). So ``A`` is a
function of ``U`` and the basis ``B`` of the last data step, ``A = scale (U - U B B^T)``
with ``scale = 2/mu``, or ``scale = 0`` before the first step (``A = 0``). The next data
step recomputes it; the iterates are those of the stored ``A`` to rounding (tested
against the stored-``A`` path and the paper's dense reference).

Recomputing ``A`` costs two products per record, so it pays where BLAS does them: a
chunk of rows at a time (``CHUNK_ROWS``, in cache) goes through the products ``U B``,
``(U B) B^T``, ``y W``, ``(x - s) W``, ``(y W) W^T`` and ``U^T U`` (the Gram matrix) and
two compiled per-element passes (:func:`fedep.core._kernels.s_step_rows`,
:func:`~fedep.core._kernels.u_step_rows`). A client of many rows runs its blocks of
``BLOCK_CHUNKS`` chunks on the threads of :func:`step_threads` (each with one BLAS
thread; the compiled passes release the GIL), each block's sums added in the blocks'
order: the same result on any number of threads. The NumPy reference
(``FedEPCohort._data_step`` with the compiled kernels off) recomputes ``A`` by
:func:`recompute_duals` and runs the stored-``A`` reference on it.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from fedep.core._threads import choose_threads

__all__ = ["BLOCK_CHUNKS", "CHUNK_ROWS", "data_step_rows", "recompute_duals", "step_threads"]

#: Rows per chunk: the chunk's records, ``U``, and three work arrays of the same width
#: (about 1.4 MB at 34 features) stay in a core's cache between the products.
CHUNK_ROWS = 1024

#: Chunks per block, the unit of work of a thread: fixed, so that the sums (added in
#: the blocks' order) do not depend on the thread count.
BLOCK_CHUNKS = 32


def step_threads(rows: int, n: int, r: int, chunk: int = CHUNK_ROWS) -> int:
    """Worker threads for :func:`data_step_rows` on ``rows`` records: one below two
    blocks (nothing to share), else :func:`fedep.core._threads.choose_threads` of the
    step's work (so ``FEDEP_THREADS``, and one thread on a busy machine)."""
    if rows < 2 * BLOCK_CHUNKS * max(1, chunk):
        return 1
    return choose_threads(2.0 * rows * n * (5 * r + n))


def recompute_duals(U: np.ndarray, B: np.ndarray, scale: float) -> np.ndarray:
    """The scaled duals ``A = scale (U - U B B^T)`` of a client's rows.

    Parameters
    ----------
    U : ndarray of shape (rows, n)
    B : ndarray of shape (n, r)
        The basis at the client's last data step.
    scale : float
        ``2/mu`` after a data step, 0 before the first (then ``A = 0``).

    Returns
    -------
    ndarray of shape (rows, n)
    """
    if scale == 0.0:
        return np.zeros_like(U)
    return scale * (U - (U @ B) @ B.T)


def data_step_rows(
    X: np.ndarray,
    U: np.ndarray,
    B: np.ndarray,
    scale: float,
    W: np.ndarray,
    alpha: float,
    mu: float,
    G: np.ndarray,
    s_step,
    u_step,
    chunk: int = CHUNK_ROWS,
    threads: int = 1,
) -> np.ndarray:
    """S-, U- and dual steps of one client's rows, ``U`` in place; ``G = U^T U``.

    The rows are cut into blocks of ``BLOCK_CHUNKS`` chunks; each block's Gram matrix
    and sums are formed apart and added in the blocks' order, so the result does not
    depend on ``threads`` (bit for bit). Call it with single-threaded BLAS (the
    cohort's round runs under :func:`fedep.core._threads.single_threaded_blas`): each
    worker's products stay on its own core.

    Parameters
    ----------
    X, U : ndarray of shape (rows, n), C-contiguous
        The client's records and auxiliary records (updated in place).
    B : ndarray of shape (n, r)
        Basis of the client's last data step (its duals: :func:`recompute_duals`).
    scale : float
        ``2/mu``, or 0 before the client's first data step.
    W : ndarray of shape (n, r)
        The client's current basis.
    alpha, mu : float
    G : ndarray of shape (n, n)
        Receives the Gram matrix of the updated ``U``.
    s_step, u_step : callable
        The compiled per-element passes (:func:`fedep.core._kernels.s_step_rows`,
        :func:`~fedep.core._kernels.u_step_rows`); they release the GIL.
    chunk : int, default=CHUNK_ROWS
    threads : int, default=1
        Worker threads over the blocks (:func:`step_threads` chooses it).

    Returns
    -------
    ndarray of shape (4,)
        ``||(I - W W^T)(X - S)||^2``, ``alpha ||S||_1``, ``mu <A', R> + mu/2 ||R||^2``
        and ``||R||^2`` (``R = A' - A``), as the fused kernel reports them.
    """
    rows = U.shape[0]
    h = max(1, min(chunk, rows))
    step = h * BLOCK_CHUNKS
    starts = range(0, rows, step)
    B = np.ascontiguousarray(B)
    W = np.ascontiguousarray(W)
    consts = (B, np.ascontiguousarray(B.T), scale, W, np.ascontiguousarray(W.T))
    coef = (alpha / mu, 2.0 / (mu + 2.0))

    def block(r0: int) -> tuple[np.ndarray, np.ndarray]:
        r1 = min(rows, r0 + step)
        return _block_rows(X[r0:r1], U[r0:r1], consts, coef, (s_step, u_step), h)

    if threads > 1 and len(starts) > 1:
        with ThreadPoolExecutor(min(threads, len(starts))) as pool:
            parts = list(pool.map(block, starts))
    else:
        parts = map(block, starts)
    sums = np.zeros(4)
    G[...] = 0.0
    for Gb, sb in parts:  # the blocks' order, whatever the threads
        G += Gb
        sums += sb
    fit, l1, lam, r2 = sums
    return np.array([fit, alpha * l1, mu * lam + 0.5 * mu * r2, r2])


def _block_rows(X, U, consts, coef, kernels, h) -> tuple[np.ndarray, np.ndarray]:
    """:func:`data_step_rows` on one block of rows, ``h`` rows at a time; returns the
    block's Gram matrix ``(n, n)`` and its sums (fit, sum |s|, <A', R>, ||R||^2)."""
    rows, n = U.shape
    B, BT, scale, W, WT = consts
    thr, c = coef
    s_step, u_step = kernels
    r = W.shape[1]
    P, Z = np.empty((h, n)), np.empty((h, n))
    T, ZW = np.empty((h, r)), np.empty((h, r))
    G = np.zeros((n, n))
    fit = l1 = lam = r2 = 0.0
    for r0 in range(0, rows, h):
        k = min(rows, r0 + h) - r0
        Xc, Uc = X[r0 : r0 + k], U[r0 : r0 + k]
        Pc, Zc, Tc, ZWc = P[:k], Z[:k], T[:k], ZW[:k]
        if scale != 0.0:
            np.matmul(Uc, B, out=Tc)
            np.matmul(Tc, BT, out=Pc)  # U B B^T; the S-step turns it into A
        else:
            Pc.fill(0.0)
        f, a1 = s_step(Xc, Uc, Pc, Zc, scale, thr)  # U <- y, P <- A, Z <- X - S
        np.matmul(Uc, W, out=Tc)
        np.matmul(Zc, W, out=ZWc)
        np.matmul(Tc, WT, out=Zc)  # y W W^T
        la, rr, zw = u_step(Uc, Zc, Pc, ZWc, c)  # U <- y - A'
        fit += f - zw
        l1 += a1
        lam += la
        r2 += rr
        G += Uc.T @ Uc
    return G, np.array([fit, l1, lam, r2])

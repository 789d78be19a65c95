"""Anomaly scores: residual energy of a record outside a subspace.

``score(x) = ||x - B B^T x||^2`` for a basis ``B`` (n_features, n_components) with
orthonormal columns; records are rows of ``X`` (n_samples, n_features).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedep.core._threads import (
    blas_threads,
    choose_threads,
    over_row_spans,
    single_threaded_blas_block,
)

__all__ = ["residuals", "residual_energy", "residual_energies", "feature_contributions"]


def residuals(X: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``X - (X B) B^T`` without forming the n x n projector, shape of ``X``."""
    P = (X @ B) @ B.T
    return np.subtract(X, P, out=P)  # into the fresh product: one n x d array, not two


#: Records per block of :func:`residual_energies`: the block, its products and its
#: residuals (about 0.3 MB at 34 features) stay in a core's cache between the steps.
ENERGY_BLOCK_ROWS = 1 << 10

#: Inputs of more records than this (64 blocks) are scored on several threads.
ENERGY_TASK_ROWS = 1 << 16


def residual_energy(X: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Squared norm of each record's residual, shape (n_samples,).

    :func:`residual_energies` of one basis: a block of :data:`ENERGY_BLOCK_ROWS`
    records at a time (scoring a large training set adds no copy of it to the peak).
    """
    return residual_energies(X, (B,))[0]


def residual_energies(X: np.ndarray, bases: Sequence[np.ndarray]) -> np.ndarray:
    """Each record's residual energy under each basis, in one pass over ``X``.

    A block of :data:`ENERGY_BLOCK_ROWS` records is read once for all the bases (a
    fit scores its training records under the consensus and each client's own
    basis). Inputs of more than :data:`ENERGY_TASK_ROWS` records run on the threads of
    :func:`~fedep.core._threads.choose_threads`, a span of whole blocks each
    (:func:`~fedep.core._threads.over_row_spans`, one-threaded BLAS in each): the
    blocks are the same whatever the thread count, so every record's energy is
    computed by the same operations, whichever other bases are given too.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
    bases : sequence of ndarray of shape (n_features, r_k)
        Orthonormal columns each.

    Returns
    -------
    ndarray of shape (len(bases), n_samples)
    """
    N, n = X.shape
    out = np.empty((len(bases), N))
    if N == 0 or not bases:
        return out
    pairs = [(np.ascontiguousarray(B), np.ascontiguousarray(B.T)) for B in bases]
    dtype = np.result_type(X.dtype, *(B.dtype for B in bases))
    h = min(ENERGY_BLOCK_ROWS, N)
    flops = 4.0 * N * n * sum(B.shape[1] for B in bases)
    threads = choose_threads(flops) if N > ENERGY_TASK_ROWS else 1

    def span(lo: int, hi: int) -> None:
        R = np.empty((h, n), dtype=dtype)
        T = [np.empty((h, B.shape[1]), dtype=dtype) for B, _ in pairs]
        for b0 in range(lo, hi, h):
            Xb = X[b0 : min(hi, b0 + h)]
            k, rows = Xb.shape[0], slice(b0, b0 + Xb.shape[0])
            for i, (B, BT) in enumerate(pairs):
                Rk = R[:k]
                np.matmul(np.matmul(Xb, B, out=T[i][:k]), BT, out=Rk)
                np.subtract(Xb, Rk, out=Rk)
                np.einsum("ij,ij->i", Rk, Rk, out=out[i, rows])

    with single_threaded_blas_block():
        over_row_spans(span, N, h, threads)
    return out


def feature_contributions(X: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Per-feature squared residuals (rows sum to :func:`residual_energy`)."""
    with blas_threads(4.0 * X.shape[0] * B.shape[0] * B.shape[1]):
        R = residuals(X, B)
    return np.square(R, out=R)

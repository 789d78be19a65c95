"""Anomaly scores: residual energy of a record outside a subspace.

``score(x) = ||x - B B^T x||^2`` for a basis ``B`` (n_features, n_components) with
orthonormal columns; records are rows of ``X`` (n_samples, n_features).
"""

from __future__ import annotations

import numpy as np

from fedep.core._threads import blas_threads, over_row_spans, worker_threads

__all__ = ["residuals", "residual_energy", "feature_contributions"]


def residuals(X: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``X - (X B) B^T`` without forming the n x n projector, shape of ``X``."""
    P = (X @ B) @ B.T
    return np.subtract(X, P, out=P)  # into the fresh product: one n x d array, not two


#: Records per block of :func:`residual_energy`: its temporary residuals take at most
#: this many rows (16 MB at 32 features) instead of a copy of the whole input.
ENERGY_BLOCK_ROWS = 1 << 16


def residual_energy(X: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Squared norm of each record's residual, shape (n_samples,).

    Computed a block of :data:`ENERGY_BLOCK_ROWS` records at a time, so that scoring a
    large training set (every fit scores its records) adds no copy of it to the peak.
    When a block's products are small enough for one BLAS thread (the thread rule's
    :data:`~fedep.core._threads.SMALL_FLOPS`), the blocks are shared among worker
    threads, each block computed exactly as on one thread (the same single-threaded
    products of the same rows), so the scores do not depend on the threads.
    """
    out = np.empty(X.shape[0])
    step = ENERGY_BLOCK_ROWS
    block = min(X.shape[0], step)

    def span(lo: int, hi: int) -> None:
        for start in range(lo, hi, step):
            R = residuals(X[start : min(start + step, hi)], B)
            out[start : start + len(R)] = np.einsum("ij,ij->i", R, R)

    with blas_threads(4.0 * block * B.shape[0] * B.shape[1]) as blas:
        over_row_spans(span, X.shape[0], step, worker_threads() if blas == 1 else 1)
    return out


def feature_contributions(X: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Per-feature squared residuals (rows sum to :func:`residual_energy`)."""
    with blas_threads(4.0 * X.shape[0] * B.shape[0] * B.shape[1]):
        R = residuals(X, B)
    return np.square(R, out=R)

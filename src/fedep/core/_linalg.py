"""A thin SVD that does not give up where LAPACK's divide-and-conquer does.

NumPy's ``svd`` calls LAPACK's ``gesdd`` (divide and conquer), which on some
rank-deficient matrices stops with "SVD did not converge" (measured: a 28,000 x 176
block of standardised TON-IoT records with exact zero singular values, numpy 2.4 /
OpenBLAS 0.3.31), although the matrix is finite and well scaled. ``gesvd`` (QR
iteration) converges on such matrices; it is slower, so it is only the fallback.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg

__all__ = ["thin_svd"]


def thin_svd(A: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``U, s, Vt`` of ``A`` (..., m, n) with ``k = min(m, n)`` singular values.

    Same shapes and conventions as ``np.linalg.svd(A, full_matrices=False)``; where
    ``gesdd`` does not converge, each matrix of the stack is decomposed by ``gesvd``.
    Non-finite input still raises ``LinAlgError``.
    """
    try:
        return np.linalg.svd(A, full_matrices=False)
    except np.linalg.LinAlgError:
        A = np.asarray(A, dtype=float)
        if not np.isfinite(A).all():
            raise
        m, n = A.shape[-2:]
        k = min(m, n)
        lead = A.shape[:-2]
        U = np.empty((*lead, m, k))
        s = np.empty((*lead, k))
        Vt = np.empty((*lead, k, n))
        for idx in np.ndindex(*lead):
            U[idx], s[idx], Vt[idx] = scipy.linalg.svd(
                A[idx], full_matrices=False, lapack_driver="gesvd", check_finite=False
            )
        return U, s, Vt

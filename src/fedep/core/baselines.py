"""Reference baselines: pooled PCA, local-only PCA and one-shot federated PCA.

All bases are (n_features, n_components) with orthonormal columns; records are rows.
"""

from __future__ import annotations

import numpy as np

from fedep.core._linalg import thin_svd
from fedep.core._threads import blas_threads

__all__ = [
    "START_CLIP",
    "start_sketch",
    "top_subspace",
    "pooled_pca",
    "pooled_pca_blocks",
    "local_pca",
    "oneshot_merge",
    "client_sketch",
]


def top_subspace(G: np.ndarray, r: int) -> np.ndarray:
    """Leading ``r`` eigenvectors of symmetric ``G`` (..., n, n) -> (..., n, r)."""
    _, vecs = np.linalg.eigh(G)
    return vecs[..., ::-1][..., :r]


def pooled_pca(X: np.ndarray, r: int) -> np.ndarray:
    """Top-r right singular subspace of the pooled (centred) records ``X`` (N, n).

    A tall ``X`` (``N >= 2 n``) takes it from the eigendecomposition of its n x n Gram
    matrix, as :func:`client_sketch` does: the SVD would hold an N x n ``U`` and
    LAPACK's copy of ``X`` (measured on 2,000,000 x 34: 6x the records at the peak of
    ``fedep fit --method pca``) and does twice the arithmetic. Directions whose
    singular values are below ``sqrt(eps)`` of the largest lose their relative
    accuracy; they carry no variance worth a basis.
    """
    X = np.asarray(X, dtype=float)
    N, n = X.shape
    if N >= 2 * n:
        with blas_threads(2.0 * N * n * n):
            G = X.T @ X
        return top_subspace(G, r)
    with blas_threads(4.0 * N * n * min(N, n)):
        _, _, vt = thin_svd(X)
    return vt[:r].T


def pooled_pca_blocks(blocks: list[np.ndarray], r: int) -> np.ndarray:
    """:func:`pooled_pca` of the records of ``blocks`` stacked, without stacking them.

    Parameters
    ----------
    blocks : list of ndarray of shape (N_i, n)
        Centred records, one block per client.
    r : int

    Returns
    -------
    ndarray of shape (n, r)

    Notes
    -----
    Tall in all (``sum N_i >= 2 n``): the leading eigenvectors of the sum of the blocks'
    n x n Gram matrices, which is the Gram matrix of the stacked records, so no pooled
    copy of the records is made (``np.vstack`` would double the peak of a large fit).
    Otherwise the few records are stacked and go through the SVD.
    """
    n = blocks[0].shape[1]
    N = sum(b.shape[0] for b in blocks)
    if N < 2 * n:
        return pooled_pca(np.vstack(blocks), r)
    G = np.zeros((n, n))
    for b in blocks:
        b = np.asarray(b, dtype=float)
        with blas_threads(2.0 * b.shape[0] * n * n):
            G += b.T @ b
    return top_subspace(G, r)


def local_pca(grams: np.ndarray, r: int) -> np.ndarray:
    """Each client's own top-r subspace from its Gram matrix, (d, n, r)."""
    return top_subspace(grams, r)


def client_sketch(X: np.ndarray, k: int) -> np.ndarray:
    """What a client sends in one-shot federated PCA: ``U_k Sigma_k`` of ``X^T``.

    Parameters
    ----------
    X : ndarray of shape (N_i, n)
    k : int
        Truncation rank (>= the model rank; ``n`` makes the merge exact).

    Returns
    -------
    ndarray of shape (n, min(k, n, N_i))
        Left singular vectors of ``X^T`` scaled by their singular values; its Gram
        ``sketch sketch^T`` is the best rank-k approximation of ``X^T X``.

    Notes
    -----
    A tall block (``N_i >= 2 n``, a gateway's usual shape) takes the singular pairs
    from the eigendecomposition of its n x n Gram matrix: the SVD of ``X`` would hold an
    N_i x n ``U`` and LAPACK's copy of ``X`` beside the records (twice the data again, the
    peak of a large fit). Squaring loses the relative accuracy of singular values below
    ``sqrt(eps)`` of the largest, directions that carry no variance worth a basis.
    """
    X = np.asarray(X, dtype=float)
    N, n = X.shape
    if N >= 2 * n:
        with blas_threads(2.0 * N * n * n):
            G = X.T @ X
        lam, V = np.linalg.eigh(G)
        s = np.sqrt(np.clip(lam[::-1], 0.0, None))
        k = min(k, n)
        return V[:, ::-1][:, :k] * s[:k]
    with blas_threads(4.0 * N * n * min(N, n)):
        _, s, vt = thin_svd(X)
    k = min(k, s.size)
    return vt[:k].T * s[:k]


#: Standardised values beyond this magnitude are clipped in the sketch an iterative
#: fit starts from (:func:`start_sketch`).
START_CLIP = 3.0


def start_sketch(X: np.ndarray, k: int, spec: dict) -> np.ndarray:
    """The one-shot sketch an iterative fit starts from: for a fit that models sparse
    corruption ``S`` (FedEP's cohort ``spec`` with ``use_sparse``), that of the records
    with every standardised value clipped to ``[-START_CLIP, START_CLIP]``; else (FedPG,
    FedEP without ``S``, whose optimum is the raw records' subspace) the raw sketch.

    A rare huge value (a near-constant column with a few spikes of z-score 100) holds
    a direction of the raw records' top subspace; the fit's ``S`` absorbs such spikes
    only outside the current basis, so a start that spent a direction on them stays in
    that basin: measured on 5,000 normal rows of each official dataset (sorted split,
    20 gateways), the fit from the raw sketch ended 4-30 % above the fit from this one
    (docs/convergence.md). Clipping changes no record, only where the rounds start.

    Parameters
    ----------
    X : ndarray of shape (N_i, n)
        Standardised records.
    k : int
    spec : dict
        The cohort specification (:func:`fedep.core.cohort.cohort_spec`).

    Returns
    -------
    ndarray of shape (n, min(k, n, N_i))
    """
    if not spec.get("settings", {}).get("use_sparse", False):
        return client_sketch(X, k)
    return client_sketch(np.clip(X, -START_CLIP, START_CLIP), k)


def oneshot_merge(sketches: list[np.ndarray], r: int) -> np.ndarray:
    """Server merge of client sketches (Grammenos et al., NeurIPS 2020, one level).

    The top-r left singular subspace of ``[s_1, ..., s_d]``; exact pooled PCA when
    every client sends its full-rank sketch.
    """
    M = np.hstack(sketches)
    u, _, _ = thin_svd(M)
    return u[:, :r]

"""Geometry of the Stiefel manifold and the proximal maps used by FedEP.

``St(n, r) = {W in R^{n x r} : W^T W = I_r}``. All functions accept a single matrix
``(n, r)`` or a stack ``(d, n, r)`` (one basis per client) and broadcast over leading
axes, so the federation runners can treat hundreds of clients in one call.
"""

from __future__ import annotations

import numpy as np

from fedep.core._linalg import thin_svd

__all__ = [
    "sym",
    "project_tangent",
    "retract_qr",
    "retract_polar",
    "polar",
    "prox_l1",
    "prox_l21",
    "l21_norm",
    "random_stiefel",
    "projector_distance",
]


def _T(A: np.ndarray) -> np.ndarray:
    """Transpose of the last two axes (a batch of matrices); shared by the core."""
    return np.swapaxes(A, -1, -2)


def sym(A: np.ndarray) -> np.ndarray:
    """Symmetric part ``(A + A^T) / 2`` of square matrices (last two axes)."""
    return 0.5 * (A + _T(A))


def project_tangent(W: np.ndarray, G: np.ndarray) -> np.ndarray:
    """Orthogonal projection of ``G`` onto the tangent space of St(n, r) at ``W``.

    ``P_W(G) = G - W sym(W^T G)``; the result ``D`` satisfies ``W^T D + D^T W = 0``.

    Parameters
    ----------
    W : ndarray of shape (..., n, r)
        Point on the manifold (orthonormal columns).
    G : ndarray of shape (..., n, r)

    Returns
    -------
    ndarray of shape (..., n, r)
    """
    return G - W @ sym(_T(W) @ G)


def _qr_positive(A: np.ndarray) -> np.ndarray:
    Q, R = np.linalg.qr(A)
    # Fix the sign ambiguity of QR so that the retraction is a smooth map.
    s = np.sign(np.diagonal(R, axis1=-2, axis2=-1)).copy()
    s[s == 0] = 1.0
    return Q * s[..., None, :]


def retract_qr(W: np.ndarray, D: np.ndarray) -> np.ndarray:
    """QR retraction ``qf(W + D)`` (Q factor with positive diagonal of R).

    Parameters
    ----------
    W, D : ndarray of shape (..., n, r)

    Returns
    -------
    ndarray of shape (..., n, r) with orthonormal columns.
    """
    return _qr_positive(W + D)


def polar(A: np.ndarray) -> np.ndarray:
    """Polar factor ``A (A^T A)^{-1/2}``: the closest matrix with orthonormal columns.

    Computed from a thin SVD ``A = P S Q^T`` as ``P Q^T``. Unique only when ``A`` has
    full column rank: for a rank-deficient ``A`` the singular vectors of the zero
    singular values, hence the result, are whatever LAPACK returns. Callers keep ``A``
    full rank (the ManPG W-step retracts only steps with ``sigma_min >= 1/2``; see
    :mod:`fedep.core.manpg`).

    Parameters
    ----------
    A : ndarray of shape (..., n, r), n >= r

    Returns
    -------
    ndarray of shape (..., n, r)
    """
    P, _, Qt = thin_svd(A)
    return P @ Qt


def retract_polar(W: np.ndarray, D: np.ndarray) -> np.ndarray:
    """Polar retraction ``polar(W + D)``."""
    return polar(W + D)


def prox_l1(M: np.ndarray, tau: float | np.ndarray) -> np.ndarray:
    """Soft threshold, the prox of ``tau * ||.||_1``: ``sign(M) max(|M| - tau, 0)``."""
    return M - np.clip(M, -tau, tau)


def l21_norm(W: np.ndarray) -> np.ndarray:
    """``||W||_{2,1}``: sum of the Euclidean norms of the rows (over the last two axes)."""
    return np.linalg.norm(W, axis=-1).sum(axis=-1)


def prox_l21(B: np.ndarray, tau: float | np.ndarray) -> np.ndarray:
    """Prox of ``tau * ||.||_{2,1}``: each row ``b -> max(0, 1 - tau/||b||) b``.

    Parameters
    ----------
    B : ndarray of shape (..., n, r)
    tau : float or ndarray broadcastable to (..., 1, 1)

    Returns
    -------
    ndarray of shape (..., n, r)
    """
    nrm = np.linalg.norm(B, axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        f = np.where(nrm > tau, 1.0 - tau / nrm, 0.0)
    return B * f


def random_stiefel(n: int, r: int, rng: np.random.Generator, size: tuple = ()) -> np.ndarray:
    """A random point of St(n, r) (Haar distributed), optionally a stack of them."""
    return _qr_positive(rng.standard_normal((*size, n, r)))


def projector_distance(A: np.ndarray, B: np.ndarray) -> float | np.ndarray:
    """Distance ``||A A^T - B B^T||_F / sqrt(2)`` between the spans of two bases.

    Equals the 2-norm of the sines of the principal angles; 0 for the same subspace,
    ``sqrt(r)`` for orthogonal ones.
    """
    PA = A @ _T(A)
    PB = B @ _T(B)
    return np.linalg.norm(PA - PB, axis=(-2, -1)) / np.sqrt(2.0)

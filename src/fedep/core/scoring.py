"""Anomaly scores: residual energy of a record outside a subspace.

``score(x) = ||x - B B^T x||^2`` for a basis ``B`` (n_features, n_components) with
orthonormal columns; records are rows of ``X`` (n_samples, n_features).
"""

from __future__ import annotations

import numpy as np

__all__ = ["residuals", "residual_energy", "feature_contributions"]


def residuals(X: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``X - (X B) B^T`` without forming the n x n projector, shape of ``X``."""
    P = (X @ B) @ B.T
    return np.subtract(X, P, out=P)  # into the fresh product: one n x d array, not two


def residual_energy(X: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Squared norm of each record's residual, shape (n_samples,)."""
    R = residuals(X, B)
    return np.einsum("ij,ij->i", R, R)


def feature_contributions(X: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Per-feature squared residuals (rows sum to :func:`residual_energy`)."""
    R = residuals(X, B)
    return np.square(R, out=R)

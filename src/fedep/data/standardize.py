"""Federated z-score statistics for data pipelines and tests.

Built on :mod:`fedep.core.stats`: every client computes its own moments
``(count, mean, m2)``, the moments are combined exactly (no record is pooled), and the
z-score parameters follow. The estimators do the same internally; this helper is for
pipelines, the CLI and tests.
"""

from __future__ import annotations

import numpy as np

from fedep.core.stats import client_moments, combine_moments, standardization_from_moments

__all__ = ["federated_standardization"]


def federated_standardization(
    X: np.ndarray,
    groups: np.ndarray,
    per_client: bool = False,
    *,
    ddof: int = 0,
    eps: float = 1e-12,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Z-score parameters from per-client moments.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
    groups : ndarray of shape (n_samples,)
        Client id of every row.
    per_client : bool, default=False
        False: one global ``(mean, scale, constant)`` from the combined moments (equal to
        the pooled statistics to round-off). True: one per client (personalisation),
        rows ordered like ``np.unique(groups)``.
    ddof : int, default=0
    eps : float, default=1e-12
        Constant-feature tolerance, see
        :func:`fedep.core.stats.standardization_from_moments`.

    Returns
    -------
    mean : ndarray of shape (n_features,) or (n_clients, n_features)
    scale : ndarray, same shape
        Standard deviation; 1 for constant features (so they are centred, never divided
        by zero).
    constant_mask : ndarray of bool, same shape
        Features that are constant (globally, or within the client).
    """
    X = np.asarray(X, dtype=np.float64)
    groups = np.asarray(groups)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (n_samples, n_features); got shape {X.shape}")
    if groups.shape != (X.shape[0],):
        raise ValueError(f"groups must have shape ({X.shape[0]},) to match X; got {groups.shape}")
    if X.shape[0] == 0:
        raise ValueError("X has no rows")
    if not np.isfinite(X).all():
        raise ValueError("X holds NaN or infinite values")
    clients, inverse = np.unique(groups, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(clients) + 1))
    parts = [client_moments(X[order[bounds[k] : bounds[k + 1]]]) for k in range(len(clients))]
    if not per_client:
        return standardization_from_moments(combine_moments(parts), ddof=ddof, eps=eps)
    res = [standardization_from_moments(m, ddof=ddof, eps=eps) for m in parts]
    return (
        np.vstack([r[0] for r in res]),
        np.vstack([r[1] for r in res]),
        np.vstack([r[2] for r in res]),
    )

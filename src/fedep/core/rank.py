"""Rank without labels: the optimal hard threshold on the merged spectrum.

Each client sends the Gram matrix ``Z_i^T Z_i`` (n_features x n_features) of its
standardised records, centred at the global mean; their sum is the scatter matrix of
the pooled records, exactly, so the server sees the spectrum of pooled PCA without
any record leaving a client.

The rank is the number of eigenvalues above Gavish and Donoho's optimal hard
threshold for an unknown noise level ("The optimal hard threshold for singular values
is 4/sqrt(3)", IEEE Trans. Inf. Theory 60(8), 2014): for a records matrix ``N x p``
that is a low-rank signal plus white noise, keep the singular values above
``omega(beta) * median singular value``, ``beta = min(N, p) / max(N, p)``, where
``omega(beta) = lambda*(beta) / sqrt(mu_beta)``, ``lambda*`` the optimal threshold
for a known noise level and ``mu_beta`` the median of the Marchenko-Pastur law. The
median estimates the noise level, so the rule has no tuning constant. With many more
records than features (``beta -> 0``) it keeps the directions whose signal variance
exceeds the noise variance (eigenvalues above twice the median): where modelling a
direction reduces the error of the reconstruction, which is what the residual score
measures.

Degenerate directions (eigenvalues at round-off of zero: columns constant in the
training records, the linear dependence of a one-hot block) are no noise; they are
excluded from the median and from ``p``. Since the threshold is above the median,
at most half of the non-degenerate directions are kept: the residual always keeps
some variance of normal records. The rank is then bounded: at least 1, at most the
smallest client's number of records (each client fits its own basis), and at most
``max_rank`` when the caller has a bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.integrate import quad
from scipy.optimize import brentq

from fedep.core._threads import blas_threads

__all__ = [
    "RankChoice",
    "client_gram",
    "marchenko_pastur_median",
    "optimal_threshold_coefficient",
    "choose_rank",
]

#: Eigenvalues at or below this share of the largest are degenerate (round-off of 0).
DEGENERATE_RTOL = 1e-10


@dataclass(frozen=True)
class RankChoice:
    """A rank chosen from a merged spectrum.

    Attributes
    ----------
    rank : int
        The chosen rank (>= 1).
    reason : str
        One line saying how (printed by ``fedep fit``, stored in model files).
    eigenvalues : ndarray of shape (n_features,)
        Eigenvalues of the pooled covariance, decreasing.
    threshold : float
        The eigenvalue threshold (``omega(beta)**2 * median``).
    n_above : int
        Eigenvalues above the threshold (``rank`` before the bounds).
    """

    rank: int
    reason: str
    eigenvalues: np.ndarray
    threshold: float
    n_above: int


def client_gram(
    X: np.ndarray,
    mean: np.ndarray | None = None,
    scale: np.ndarray | None = None,
    *,
    block_rows: int = 65_536,
) -> np.ndarray:
    """What a client sends: ``Z^T Z`` of its standardised records, shape (n, n).

    ``Z = (X - mean) / scale`` is formed ``block_rows`` records at a time, so no
    standardised copy of all the client's records is made (a gateway of millions of
    records would otherwise hold its data twice).

    Parameters
    ----------
    X : ndarray of shape (N_i, n)
        The client's records.
    mean, scale : ndarray of shape (n,), optional
        The global centring and scale (None: ``X`` is already standardised).
    block_rows : int, default=65536
        Records per block.
    """
    X = np.asarray(X)
    n = X.shape[1]
    G = np.zeros((n, n))
    for i in range(0, X.shape[0], block_rows):
        Z = np.asarray(X[i : i + block_rows], dtype=float)
        if mean is not None:
            Z = Z - mean
        if scale is not None:
            Z = Z / scale
        with blas_threads(2.0 * Z.shape[0] * n * n):
            G += Z.T @ Z
    return G


@lru_cache(maxsize=256)
def marchenko_pastur_median(beta: float) -> float:
    """Median of the Marchenko-Pastur law of ratio ``beta`` in (0, 1] (unit variance).

    The law of the eigenvalues of ``X^T X / N`` for an ``N x p`` white-noise matrix,
    ``beta = p / N``: density ``sqrt((b - x)(x - a)) / (2 pi beta x)`` on ``[a, b]``,
    ``a, b = (1 -+ sqrt(beta))**2``. Found by root-finding on the numerically
    integrated distribution function.
    """
    beta = float(beta)
    if not 0.0 < beta <= 1.0:
        raise ValueError(f"beta must be in (0, 1]; got {beta!r}")
    a, b = (1.0 - np.sqrt(beta)) ** 2, (1.0 + np.sqrt(beta)) ** 2

    def density(x):
        return np.sqrt(max((b - x) * (x - a), 0.0)) / (2.0 * np.pi * beta * x)

    def cdf_minus_half(m):
        return quad(density, a, m, limit=200)[0] - 0.5

    return float(brentq(cdf_minus_half, a, b, xtol=1e-14 * b))


def optimal_threshold_coefficient(beta: float) -> float:
    """Gavish and Donoho's ``omega(beta)``: keep singular values above ``omega`` times
    their median (noise level unknown); ``omega(1) = 2.858``, ``omega(0+) = sqrt(2)``."""
    beta = float(beta)
    root = np.sqrt(beta**2 + 14.0 * beta + 1.0)
    lam = np.sqrt(2.0 * (beta + 1.0) + 8.0 * beta / (beta + 1.0 + root))
    return float(lam / np.sqrt(marchenko_pastur_median(beta)))


def choose_rank(
    gram: np.ndarray,
    counts: Sequence[int],
    *,
    max_rank: int | None = None,
    max_rank_reason: str = "",
) -> RankChoice:
    """The rank of the merged spectrum (see the module docstring).

    Parameters
    ----------
    gram : ndarray of shape (n_features, n_features)
        The sum of the clients' :func:`client_gram`.
    counts : sequence of int
        Each client's number of records (their sum is ``N``; the smallest bounds the
        rank).
    max_rank : int, optional
        A further bound from the caller (e.g. a sketch rank).
    max_rank_reason : str, default=""
        What ``max_rank`` is, for the reason string.

    Returns
    -------
    RankChoice
    """
    G = np.asarray(gram, dtype=float)
    if G.ndim != 2 or G.shape[0] != G.shape[1] or G.shape[0] == 0:
        raise ValueError(f"gram must be a square (n_features, n_features) matrix; got {G.shape}")
    counts = [int(c) for c in counts]
    if not counts or min(counts) < 1:
        raise ValueError(f"every client needs at least one record; got counts {counts}")
    n_features, N = G.shape[0], sum(counts)
    lam = np.linalg.eigvalsh((G + G.T) / 2.0)[::-1] / N
    lam = np.maximum(lam, 0.0)
    top = float(lam[0])
    live = lam[lam > DEGENERATE_RTOL * top] if top > 0 else lam[:0]
    p = int(live.size)
    head = f"{n_features} features, {N} records"
    if p < 2:
        # At most one direction with variance: nothing to threshold.
        thr, above, rule = float("inf"), min(p, 1), f"at most one non-degenerate direction ({head})"
    else:
        beta = min(p, N) / max(p, N)
        omega = optimal_threshold_coefficient(beta)
        med = float(np.median(live))
        thr = omega**2 * med
        # Strictly above: an eigenvalue equal to the threshold is not signal.
        above = int(np.count_nonzero(live > thr))
        rule = (
            f"{above} of {p} non-degenerate eigenvalues of the merged covariance ({head}) "
            f"exceed the Gavish-Donoho threshold {omega**2:.3g} x their median"
        )
    bounds = [(min(counts), f"smallest client has {min(counts)} records")]
    if max_rank is not None:
        bounds.append((int(max_rank), max_rank_reason or f"max_rank={max_rank}"))
    rank, notes = max(above, 1), []
    if above < 1:
        notes.append("at least one component")
    for bound, why in bounds:
        if rank > bound:
            rank = max(bound, 1)
            notes.append(f"capped at {rank}: {why}")
    reason = f"r={rank}: {rule}" + "".join(f"; {n}" for n in notes)
    return RankChoice(rank=rank, reason=reason, eigenvalues=lam, threshold=thr, n_above=above)

"""Federated feature statistics: per-client moments and their exact combination.

A client sends ``(count, mean, m2)`` per feature, where ``m2`` is the sum of squared
deviations from the client's own mean. This carries exactly the information of
``(count, sum, sum of squares)`` (``sum = count * mean``,
``sumsq = m2 + count * mean**2``) but combines without the cancellation that raw sums
of squares suffer, so the federated mean and variance equal the pooled ones to
round-off (Chan, Golub and LeVeque's pairwise update). No record leaves a client.

Shapes: ``X`` is ``(n_samples, n_features)``; moments are ``(n_features,)`` arrays.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

__all__ = [
    "Moments",
    "client_moments",
    "combine_moments",
    "standardization_from_moments",
    "value_moments",
]


@dataclass(frozen=True)
class Moments:
    """Per-feature sufficient statistics of one client (or of several, combined).

    Attributes
    ----------
    count : int
        Number of records.
    mean : ndarray of shape (n_features,)
        Per-feature mean.
    m2 : ndarray of shape (n_features,)
        Per-feature sum of squared deviations from ``mean``.
    """

    count: int
    mean: np.ndarray
    m2: np.ndarray

    @property
    def sum(self) -> np.ndarray:
        """Per-feature sum of the records."""
        return self.count * self.mean

    @property
    def sumsq(self) -> np.ndarray:
        """Per-feature sum of squares of the records."""
        return self.m2 + self.count * self.mean**2

    @classmethod
    def from_sums(cls, count: int, total: np.ndarray, sumsq: np.ndarray) -> Moments:
        """Build moments from ``(count, sum, sum of squares)``."""
        total = np.asarray(total, dtype=float)
        mean = total / count if count else np.zeros_like(total)
        m2 = np.maximum(np.asarray(sumsq, dtype=float) - count * mean**2, 0.0)
        return cls(int(count), mean, m2)


def client_moments(X: np.ndarray) -> Moments:
    """Moments of one client's records.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)

    Returns
    -------
    Moments
        The mean is finite for finite records of any magnitude: a column whose sums
        overflow float64 is recomputed in scaled units (its ``m2`` is ``inf`` only
        when the true value exceeds float64).
    """
    X = np.asarray(X, dtype=float)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (n_samples, n_features); got shape {X.shape}")
    n = X.shape[0]
    if n == 0:
        z = np.zeros(X.shape[1])
        return Moments(0, z, z.copy())
    with np.errstate(over="ignore", invalid="ignore"):  # such columns are redone below
        mean = X.mean(axis=0)
        m2 = _m2_about(X, mean)
    for j in np.flatnonzero(~(np.isfinite(mean) & np.isfinite(m2))).tolist():
        mean[j], m2[j] = _scaled_moments(X[:, j])
    return Moments(n, mean, m2)


#: Rows per block of the squared deviations in :func:`client_moments` (about 2 MB at
#: 34 features): a temporary of one block instead of one the size of ``X``.
MOMENT_BLOCK_ROWS = 1 << 13


def _m2_about(X: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """Per-feature sum of squared deviations of the rows of ``X`` from ``mean``.

    The same sums as ``np.square(X - mean).sum(axis=0)``, bit for bit, without its
    temporary the size of ``X``: for a C-contiguous ``X`` of two or more features,
    numpy sums along axis 0 one row after the other, so the blocks are summed with the
    running total carried in as the first row of the next block's sum. Other layouts
    (one feature, Fortran order: numpy's pairwise sums) keep the direct formula.
    """
    n, k = X.shape
    if n <= MOMENT_BLOCK_ROWS or k < 2 or not X.flags.c_contiguous:
        dev = X - mean
        np.square(dev, out=dev)  # in place: one temporary the size of X, not two
        return dev.sum(axis=0)
    buf = np.empty((MOMENT_BLOCK_ROWS + 1, k))
    acc = None
    for start in range(0, n, MOMENT_BLOCK_ROWS):
        blk = X[start : start + MOMENT_BLOCK_ROWS]
        lo = 0 if acc is None else 1
        part = buf[lo : lo + len(blk)]
        np.subtract(blk, mean, out=part)
        np.square(part, out=part)
        if acc is not None:
            buf[0] = acc
        acc = buf[: lo + len(blk)].sum(axis=0)
    return acc


def _scaled_moments(col: np.ndarray) -> tuple[float, float]:
    """Mean and m2 of a column whose sum or squares overflow float64 (beyond ~1e154):
    :func:`value_moments`; a column holding inf or NaN is left as numpy computes it
    (NaN / inf moments)."""
    if not np.isfinite(col).all():
        with np.errstate(over="ignore", invalid="ignore"):
            return float(col.mean()), float(np.square(col - col.mean()).sum())
    return value_moments(col)


def value_moments(v: np.ndarray, counts: np.ndarray | None = None) -> tuple[float, float]:
    """Mean and sum of squared deviations of finite values ``v`` with ``counts``.

    Values beyond about 1e154 overflow the sum or the squares in float64 (with a
    RuntimeWarning and an ``inf`` / NaN result). Those are recomputed on ``v / 2**e``
    (a power of two: exact) and scaled back: the mean is then always finite (it lies
    within ``[min, max]``), and ``m2`` is ``inf`` only when the true value exceeds the
    largest float64 -- which the feature decisions read as "float64 moments overflow"
    (:func:`fedep.features.decide_columns`). Other values keep the direct formulas.

    Parameters
    ----------
    v : ndarray of shape (k,), finite floats, k >= 1
    counts : ndarray of shape (k,), int, optional
        How often each value occurs (a column's distinct values); None when every value
        counts once (no weight array, and one product per value less).

    Returns
    -------
    mean : float
    m2 : float
        Non-negative, possibly ``inf``.
    """
    n = len(v) if counts is None else int(counts.sum())

    def mean_of(x: np.ndarray) -> float:
        return float((x.sum() if counts is None else np.dot(x, counts)) / n)

    def m2_about(x: np.ndarray, mu: float) -> float:
        d = x - mu
        d *= d
        # unweighted: numpy's pairwise sum (a BLAS dot of a fresh array is slower here)
        return float(d.sum() if counts is None else np.dot(d, counts))

    with np.errstate(over="ignore", invalid="ignore"):
        mean = mean_of(v)
        m2 = m2_about(v, mean)
    if math.isfinite(mean) and math.isfinite(m2):
        return mean, m2
    # 2**(e-1) with |v| < 2**e: |u| < 2, and 2**(e-1) itself never overflows
    s = math.ldexp(1.0, math.frexp(float(np.max(np.abs(v))))[1] - 1)
    u = v / s
    mu = mean_of(u)  # |mu| < 2
    # One correction pass: at this scale the mean's round-off alone, squared and
    # scaled back, would overflow (a constant 1e307 column would get m2 = inf).
    mu += mean_of(u - mu)
    m2u = m2_about(u, mu)  # <= 16 n
    # Python floats: an overflowing product is inf, no warning
    return mu * s, m2u * s * s


def combine_moments(parts: Iterable[Moments]) -> Moments:
    """Combine client moments into the moments of the pooled records.

    Parameters
    ----------
    parts : iterable of Moments
        One entry per client; clients with zero records are ignored.

    Returns
    -------
    Moments
        Equal (to round-off) to :func:`client_moments` of the stacked records.
    """
    count = 0
    mean: np.ndarray | None = None
    m2: np.ndarray | None = None
    for p in parts:
        if p.count == 0:
            continue
        if mean is None:
            count, mean, m2 = p.count, p.mean.astype(float).copy(), p.m2.astype(float).copy()
            continue
        tot = count + p.count
        delta = p.mean - mean
        mean = mean + delta * (p.count / tot)
        m2 = m2 + p.m2 + delta**2 * (count * p.count / tot)
        count = tot
    if mean is None:
        raise ValueError("combine_moments: no client holds any record")
    return Moments(count, mean, m2)


def standardization_from_moments(
    moments: Moments, *, ddof: int = 0, eps: float = 1e-12
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Z-score parameters from combined moments.

    Parameters
    ----------
    moments : Moments
        Pooled moments, usually from :func:`combine_moments`.
    ddof : int, default=0
        Delta degrees of freedom of the variance.
    eps : float, default=1e-12
        A feature whose standard deviation is at most ``eps`` times (1 + |mean|) is
        constant: its scale is set to 1 so that it is centred but never divided by 0.

    Returns
    -------
    mean : ndarray of shape (n_features,)
    scale : ndarray of shape (n_features,)
    constant : ndarray of bool, shape (n_features,)
        Which features were constant in the training records.
    """
    denom = max(moments.count - ddof, 1)
    std = np.sqrt(moments.m2 / denom)
    constant = std <= eps * (1.0 + np.abs(moments.mean))
    scale = np.where(constant, 1.0, std)
    return moments.mean.copy(), scale, constant


#: The records a count or sum query is about: the training records, or a gateway's
#: trusted reference (``fedep.core.reference``), whole or one of its halves (its
#: even rows fit a model, its odd rows score out of sample).
SUBSETS = ("train", "reference", "reference-fit", "reference-held")


def subset_rows(R: np.ndarray, subset: str) -> np.ndarray:
    """The rows of a gateway's reference ``R`` a query with ``subset`` is about."""
    if subset == "reference-fit":
        return R[0::2]
    if subset == "reference-held":
        return R[1::2]
    if subset == "reference":
        return R
    raise ValueError(f"unknown record subset {subset!r}; expected one of {SUBSETS}")


def subset_sums(Z: np.ndarray):
    """One gateway's count, sum (n,) and Gram matrix (n, n) of its records ``Z``."""
    return int(Z.shape[0]), Z.sum(axis=0), Z.T @ Z

"""What a trusted reference set and analyst feedback tell a fit: from aggregates only.

A gateway may name records it trusts (a quiet hour, a capture after a rebuild, an
allow-listed subnet, alerts an analyst confirmed benign): its *reference*. The
reference records never leave their gateway; the server sees only their count, sums,
Gram matrix and counts of their values at or below candidate cuts (the count queries
of :mod:`fedep.core.trimming`). From those:

- :func:`ppca_from_gram`: a PPCA fitted on the reference alone (the start of the
  concentration steps that attacks in the training traffic cannot have steered);
- :func:`estimate_share`: the contamination share of the training traffic, from the
  share of training records above a high quantile of the reference's values,
  corrected for the reference's own exceedance;
- :func:`contamination_evidence`: whether the training traffic holds more records
  above the reference's tail than the reference's noise explains (cross-fitted on
  the reference's two halves, at several tails);
- :func:`reference_threshold`: a threshold at a stated false-positive rate on the
  trusted traffic;
- analyst feedback: confirmed false positives join the reference; confirmed attacks
  and the records near them (:func:`fedep.core.feedback.near_attacks`) leave the fit.

The rules and their measured limits are in ``docs/reference.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fedep.core.trimming import order_statistic, ppca_from_sums

__all__ = [
    "DETECTION_TAILS",
    "Evidence",
    "ShareEstimate",
    "contamination_evidence",
    "exceedance_level",
    "estimate_share",
    "share_noise",
    "reference_threshold",
    "ppca_from_gram",
]


@dataclass(frozen=True)
class ShareEstimate:
    """The contamination share of the training records and how it was estimated.

    Attributes
    ----------
    share : float
        The estimate, in ``[0, 0.5]``.
    level : float
        The reference quantile the cut was taken at (``1 - level`` the nominal
        exceedance).
    reference_exceedance : float
        Share of reference records above the cut.
    training_exceedance : float
        Share of training records above the cut.
    n_reference, n_training : int
    noise : float
        One standard deviation of the estimate from the reference's size alone
        (:func:`share_noise`).
    """

    share: float
    level: float
    reference_exceedance: float
    training_exceedance: float
    n_reference: int
    n_training: int
    noise: float

    def describe(self) -> str:
        """One line: the estimate and how it was made."""
        return (
            f"{100 * self.share:.1f} % estimated from {self.n_reference} reference records: "
            f"{100 * self.training_exceedance:.1f} % of {self.n_training} training records "
            f"above the reference's {100 * self.level:.1f} % quantile (reference "
            f"{100 * self.reference_exceedance:.1f} %), +-{100 * self.noise:.1f} points "
            "from the reference's size"
        )

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


#: The reference tails ``p`` at which :func:`contamination_evidence` compares the
#: training records with the reference: a share of attacks above the reference's
#: ``1 - p`` quantile shows at one of them (a low tail has little noise, a higher one
#: counts the attacks that score inside the reference's upper range).
DETECTION_TAILS = (0.05, 0.1, 0.2)


@dataclass(frozen=True)
class Evidence:
    """Whether the training records exceed the reference's tails more than noise.

    Attributes
    ----------
    tails : tuple of float
        The tails ``p`` looked at (:data:`DETECTION_TAILS`).
    shares : tuple of float
        Per tail, the mean over the reference halves of ``(e - eps) / (1 - eps)``
        (:func:`estimate_share`, not clipped: an unbiased difference).
    noises : tuple of float
        Per tail, its standard deviation from the halves' sizes alone.
    detected : bool
        Whether some share exceeds twice its noise.
    n_reference : int
    """

    tails: tuple
    shares: tuple
    noises: tuple
    detected: bool
    n_reference: int

    def describe(self) -> str:
        """One line: the comparison at each tail and the verdict."""
        parts = ", ".join(
            f"{100 * s:+.1f} % (noise {100 * z:.1f}) above the {100 * (1 - p):.0f} % quantile"
            for p, s, z in zip(self.tails, self.shares, self.noises, strict=True)
        )
        verdict = "contamination shown" if self.detected else "no contamination shown"
        return (
            f"{verdict} by the {self.n_reference} reference records (cross-fitted halves, "
            f"excess share {parts}; shown when above twice its noise)"
        )


def contamination_evidence(pairs, tails=DETECTION_TAILS) -> Evidence:
    """Whether the training records exceed the reference's tails by more than noise.

    Each pair is a model fitted on one half of the reference, with count queries over
    the training records' and the *other* half's values under it (out of sample). At
    a tail ``p``, each pair gives ``(e - eps) / (1 - eps)`` (:func:`estimate_share` at
    ``level = 1 - p``, before clipping, with ``eps = (m + 1) / (n + 1)`` for the ``m`` of
    the ``n`` held values above the cut: the mean exceedance of that order statistic);
    their mean has noise
    ``share_noise(p, n_half) / sqrt(len(pairs))`` (independent halves). Contamination
    is shown when some tail's mean exceeds twice its noise.

    Parameters
    ----------
    pairs : list of (train, held)
        ScoreCounts (or remote equivalents) of the training records and of the held
        half under each half's model.
    tails : tuple of float
        The tails ``p`` (each in ``(0, 0.5)``).

    Returns
    -------
    Evidence
    """
    if not pairs:
        raise ValueError("contamination_evidence needs at least one reference half")
    shares, noises = [], []
    for p in tails:
        vals, sizes = [], []
        for train, held in pairs:
            e = estimate_share(train, held, level=1.0 - p)
            # the true exceedance of the m-th largest of n held values is (m + 1)/(n + 1)
            # on average, not m / n (one point more at 50 records)
            m = round(e.reference_exceedance * e.n_reference)
            eps = (m + 1) / (e.n_reference + 1)
            vals.append((e.training_exceedance - eps) / (1.0 - eps) if eps < 1 else 0.0)
            sizes.append(e.n_reference)
        shares.append(float(np.mean(vals)))
        noises.append(share_noise(p, min(sizes)) / math.sqrt(len(pairs)))
    detected = any(s > 2 * z for s, z in zip(shares, noises, strict=True))
    n_ref = int(sum(held.n for _, held in pairs))
    return Evidence(tuple(tails), tuple(shares), tuple(noises), bool(detected), n_ref)


def exceedance_level(n_reference: int) -> float:
    """The reference quantile of :func:`estimate_share`: ``1 - p`` with ``p`` =
    ``5 / n_reference`` clipped to ``[0.01, 0.05]`` (about five reference records above
    the cut; a higher quantile lowers the noise, :func:`share_noise`, while attacks
    rarely score between the reference's 95th and 99th percentiles)."""
    p = min(max(5.0 / max(n_reference, 1), 0.01), 0.05)
    return 1.0 - p


def share_noise(p: float, n_reference: int) -> float:
    """Standard deviation of the share estimate from the reference's size: the true
    exceedance of a cut at a reference quantile ``1 - p`` has standard deviation
    ``sqrt(p (1 - p) / n)``, divided by ``1 - p`` in the correction."""
    if n_reference <= 0:
        return float("inf")
    return math.sqrt(p / ((1.0 - p) * n_reference))


def estimate_share(train, reference, level: float | None = None) -> ShareEstimate:
    """The contamination share of the training records from the reference's values.

    With ``e`` the share of training values above the reference's ``level`` quantile
    and ``eps`` the reference's own share above it, a training set of normal records
    (exceedance ``eps``) and a share ``pi`` of attacks above the cut gives ``e = pi +
    (1 - pi) eps``, so ``pi = (e - eps) / (1 - eps)``, clipped to ``[0, 0.5]``. Attacks
    that score below the cut are missed (the estimate is then low); the reference
    must be scored out of sample (not by a model fitted on it) or ``eps`` is low and
    the estimate high.

    Parameters
    ----------
    train, reference : ScoreCounts or a remote equivalent
        Count queries over the training and the reference records' values (the same
        kind, the same model).
    level : float, optional
        The reference quantile (default :func:`exceedance_level`).

    Returns
    -------
    ShareEstimate
    """
    n_ref, n = int(reference.n), int(train.n)
    if n_ref == 0 or n == 0:
        raise ValueError("estimate_share needs reference and training records")
    level = exceedance_level(n_ref) if level is None else float(level)
    k = min(max(math.ceil(level * n_ref), 1), n_ref)
    cut = order_statistic(reference.le, k, reference.lo, reference.hi)
    eps = (n_ref - int(np.asarray(reference.le(cut))[0])) / n_ref
    e = (n - int(np.asarray(train.le(cut))[0])) / n
    share = min(max((e - eps) / (1.0 - eps), 0.0), 0.5) if eps < 1 else 0.0
    return ShareEstimate(
        share=float(share),
        level=level,
        reference_exceedance=float(eps),
        training_exceedance=float(e),
        n_reference=n_ref,
        n_training=n,
        noise=share_noise(1.0 - level, n_ref),
    )


def reference_threshold(reference, fpr: float) -> float:
    """The cut with at most ``fpr`` of the reference values above it: the
    ``ceil((1 - fpr) n)``-th smallest reference value (from counts only).

    Parameters
    ----------
    reference : ScoreCounts or a remote equivalent
    fpr : float in (0, 1)

    Returns
    -------
    float
        A value of the counted scale (log-scores for the logged kinds).
    """
    n = int(reference.n)
    if n == 0:
        raise ValueError("reference_threshold needs reference records")
    k = min(max(math.ceil((1.0 - float(fpr)) * n), 1), n)
    return order_statistic(reference.le, k, reference.lo, reference.hi)


def ppca_from_gram(count: int, total: np.ndarray, gram: np.ndarray, r: int):
    """Maximum-likelihood PPCA from a set's count, sum (n,) and Gram matrix (n, n).

    Returns
    -------
    mean : ndarray of shape (n,)
    V : ndarray of shape (n, r), orthonormal columns
    lam : ndarray of shape (r,)
    sigma2 : float
    """
    if count < 2:
        raise ValueError(f"a PPCA needs at least 2 records, got {count}")
    mean = np.asarray(total, dtype=float) / count
    cov = (np.asarray(gram, dtype=float) - count * np.outer(mean, mean)) / count
    cov = (cov + cov.T) / 2
    w, U = np.linalg.eigh(cov)
    order = np.argsort(w)[::-1]
    w, U = np.maximum(w[order], 0.0), U[:, order]
    V = np.ascontiguousarray(U[:, :r])
    lam, sigma2 = ppca_from_sums(count, w[:r] * count, float(w[r:].sum()) * count, cov.shape[0])
    return mean, V, lam, sigma2

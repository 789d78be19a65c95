"""Benign modes: suppression rules learned from confirmed false positives.

Security tools turn triaged false positives into allow-list rules. Here a rule is a
*benign mode*: a ball in the model's standardised feature space around the mean of a
group of at least :data:`MIN_MODE_RECORDS` confirmed-benign records. A record within a
mode's radius has its alert suppressed, and the alert names the mode
(:func:`suppressing_mode`). (The position in the scaled feature space was chosen over
the residual vector off the subspace on the training split: docs/reference.md.)

The modes are learned from sums only (:func:`learn_modes`): each gateway answers, for
the current centres, the count, sum and Gram matrix of its standardised
confirmed-benign records nearest each centre (:func:`mode_sums`); the server splits
the widest group along its principal direction and moves the centres (the LBG form of
k-means) until
:data:`MAX_MODES` groups or no group can split into two of at least
:data:`MIN_MODE_RECORDS`. No record leaves its gateway; a centre is a mean of at least
:data:`MIN_MODE_RECORDS` records.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = [
    "MAX_MODES",
    "MIN_MODE_RECORDS",
    "MODE_RADIUS",
    "LLOYD_STEPS",
    "MODE_SUMS",
    "GUARD_STEPS",
    "attack_counts",
    "guard_modes",
    "BenignModes",
    "mode_sums",
    "learn_modes",
    "suppressing_mode",
]

#: At most this many modes per model (a bound on the model file, checked on load).
MAX_MODES = 8
#: A mode is the mean of at least this many confirmed-benign records.
MIN_MODE_RECORDS = 5
#: A mode's squared radius is ``MODE_RADIUS`` times its records' mean squared distance
#: to its centre (chosen on the training split: docs/reference.md).
MODE_RADIUS = 0.5
#: Lloyd steps after each split.
LLOYD_STEPS = 5
#: The names of :func:`mode_sums`' three sums (in messages).
MODE_SUMS = ("counts", "sums", "grams")
#: A rule never suppresses a confirmed attack of the same triage: a mode's squared
#: radius shrinks to the largest of these fractions of it that holds none of the
#: gateways' confirmed attacks (:func:`attack_counts`), and the mode is dropped when
#: even the smallest holds one (:func:`guard_modes`).
GUARD_STEPS = (1.0, 0.5, 0.25, 0.125)


@dataclass(frozen=True)
class BenignModes:
    """Suppression rules of a fitted model.

    Attributes
    ----------
    centres : ndarray of shape (k, n_features)
        Each mode's centre in the standardised features.
    radius2 : ndarray of shape (k,)
        Each mode's squared radius (> 0).
    counts : ndarray of int, shape (k,)
        The confirmed-benign records each mode was learned from (>= MIN_MODE_RECORDS).
    """

    centres: np.ndarray
    radius2: np.ndarray
    counts: np.ndarray

    def as_dict(self) -> dict:
        return {"centres": self.centres, "radius2": self.radius2, "counts": self.counts}


def _nearest(R: np.ndarray, centres: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index (N,) of each row's nearest centre and its squared distance (N,)."""
    d2 = (
        np.einsum("ij,ij->i", R, R)[:, None]
        - 2.0 * R @ centres.T
        + np.einsum("ij,ij->i", centres, centres)[None, :]
    )
    d2 = np.maximum(d2, 0.0)
    j = d2.argmin(axis=1)
    return j, d2[np.arange(R.shape[0]), j]


def mode_sums(R: np.ndarray, centres: np.ndarray, min_records: int = MIN_MODE_RECORDS):
    """One gateway's sums of its standardised confirmed-benign records ``R`` (N, n) per
    nearest centre of ``centres`` (k, n): counts (k,), sums (k, n) and Gram matrices (k, n, n).

    A centre nearest to fewer than ``min_records`` of this gateway's records is withheld
    (zero count, sum and Gram matrix): no reply is a sum of fewer than ``min_records``
    records, so none reveals a record (the sums leave the gateway as they are).
    """
    k, n = centres.shape
    counts = np.zeros(k, dtype=np.int64)
    sums = np.zeros((k, n))
    grams = np.zeros((k, n, n))
    if R.shape[0] == 0:
        return counts, sums, grams
    j, _ = _nearest(R, centres)
    for c in range(k):
        Rc = R[j == c]
        counts[c] = Rc.shape[0]
        sums[c] = Rc.sum(axis=0)
        grams[c] = Rc.T @ Rc
    few = counts < min_records
    counts[few], sums[few], grams[few] = 0, 0.0, 0.0
    return counts, sums, grams


def _scatter(count, total, gram):
    mu = total / max(count, 1)
    return gram / max(count, 1) - np.outer(mu, mu)


def learn_modes(
    stats: Callable[[np.ndarray], tuple],
    n_features: int,
    *,
    max_modes: int = MAX_MODES,
    min_records: int = MIN_MODE_RECORDS,
    radius: float = MODE_RADIUS,
    lloyd_steps: int = LLOYD_STEPS,
) -> BenignModes | None:
    """Benign modes from sums only.

    Parameters
    ----------
    stats : callable
        ``stats(centres)`` -> ``(counts (k,), sums (k, n), grams (k, n, n))`` of every
        gateway's standardised confirmed-benign records per nearest centre, summed over the
        gateways (:func:`mode_sums`).
    n_features : int
    max_modes, min_records, radius, lloyd_steps
        :data:`MAX_MODES`, :data:`MIN_MODE_RECORDS`, :data:`MODE_RADIUS`,
        :data:`LLOYD_STEPS`.

    Returns
    -------
    BenignModes or None
        None when fewer than ``min_records`` confirmed-benign records.
    """
    counts, sums, grams = stats(np.zeros((1, n_features)))
    if int(counts[0]) < min_records:
        return None
    centres = sums / counts[:, None]
    while centres.shape[0] < max_modes:
        counts, sums, grams = stats(centres)
        spread = np.array(
            [np.trace(_scatter(c, s, g)) if c >= 2 * min_records else -1.0
             for c, s, g in zip(counts, sums, grams, strict=True)]
        )  # fmt: skip
        g = int(np.argmax(spread))
        if spread[g] <= 0.0:
            break
        w, U = np.linalg.eigh(_scatter(counts[g], sums[g], grams[g]))
        step = np.sqrt(max(float(w[-1]), 0.0)) * U[:, -1]
        trial = np.vstack([centres, centres[g] + step])
        trial[g] = centres[g] - step
        ok = False
        for _ in range(lloyd_steps):
            c2, s2, _g = stats(trial)
            if c2.min() < min_records:
                break
            ok = True
            moved = s2 / c2[:, None]
            if np.allclose(moved, trial, rtol=0.0, atol=1e-12):
                break
            trial = moved
        if not ok:
            break
        c2, s2, _g = stats(trial)
        if c2.min() < min_records:
            break
        centres = s2 / c2[:, None]
    counts, sums, grams = stats(centres)
    keep = counts >= min_records
    centres, counts, sums, grams = centres[keep], counts[keep], sums[keep], grams[keep]
    msd = np.array(
        [np.trace(_scatter(c, s, g)) for c, s, g in zip(counts, sums, grams, strict=True)]
    )
    tiny = np.finfo(float).tiny
    return BenignModes(
        centres=np.ascontiguousarray(sums / counts[:, None]),
        radius2=np.maximum(radius * msd, tiny),
        counts=counts.astype(np.int64),
    )


def suppressing_mode(R: np.ndarray, modes: BenignModes) -> np.ndarray:
    """The mode that suppresses each standardised record of ``R`` (N, n): the index of the nearest
    centre whose ball holds it (by squared distance over squared radius), -1 for none;
    shape (N,)."""
    if R.shape[0] == 0 or modes.centres.shape[0] == 0:
        return np.full(R.shape[0], -1, dtype=np.int64)
    C = modes.centres
    d2 = np.einsum("ij,ij->i", R, R)[:, None] - 2.0 * R @ C.T + np.einsum("ij,ij->i", C, C)[None, :]
    ratio = np.maximum(d2, 0.0) / modes.radius2[None, :]
    j = ratio.argmin(axis=1)
    return np.where(ratio[np.arange(R.shape[0]), j] <= 1.0, j, -1).astype(np.int64)


def attack_counts(A: np.ndarray, modes: BenignModes, steps=GUARD_STEPS) -> np.ndarray:
    """One gateway's confirmed attacks ``A`` (N, n, standardised) within each mode at
    each fraction of its squared radius: counts of shape (k, len(steps)), int64."""
    C = modes.centres
    out = np.zeros((C.shape[0], len(steps)), dtype=np.int64)
    if A.shape[0] == 0:
        return out
    d2 = np.einsum("ij,ij->i", A, A)[:, None] - 2.0 * A @ C.T + np.einsum("ij,ij->i", C, C)[None, :]
    ratio = np.maximum(d2, 0.0) / modes.radius2[None, :]
    for j, q in enumerate(steps):
        out[:, j] = (ratio <= q).sum(axis=0)
    return out


def guard_modes(modes: BenignModes, counts: np.ndarray, steps=GUARD_STEPS):
    """The modes shrunk so that none holds a confirmed attack: each mode's squared
    radius times the largest fraction of ``steps`` (decreasing) whose count in
    ``counts`` (k, len(steps), summed over the gateways) is 0; a mode with a confirmed
    attack within even the smallest is dropped. None when every mode is dropped."""
    counts = np.asarray(counts)
    factor = np.zeros(counts.shape[0])
    for k in range(counts.shape[0]):
        free = [q for q, c in zip(steps, counts[k], strict=True) if c == 0]
        factor[k] = max(free) if free else 0.0
    keep = factor > 0
    if not keep.any():
        return None
    return BenignModes(
        centres=modes.centres[keep],
        radius2=modes.radius2[keep] * factor[keep],
        counts=modes.counts[keep],
    )

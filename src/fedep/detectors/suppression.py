"""Suppression rules from analyst feedback: benign modes in a fitted detector.

After the fit, the one fit driver (:func:`fedep.detectors.driver.fit_gateways`) learns
the gateways' benign modes (:func:`learn`; :mod:`fedep.core.benign`) from their
confirmed false positives, by sums only, in the final model's standardised features
(shrunk or dropped where a confirmed attack lies within). At scoring time a record
above its threshold within a mode has its alert suppressed: :func:`suppressed_by`
names the rule (its index in ``benign_centres_``), ``predict`` and
``fedep score`` / ``fedep watch`` do not flag it, and the alert record says which rule
suppressed it. ``decision_function`` stays the residual energy; :func:`suppressed_scores`
is the score with the suppression applied (a suppressed record's score lowered below
its threshold), for rankings.

The modes are fitted arrays of the model (:data:`MODE_ARRAYS`), saved, signed and
checked on load like the others (:func:`check_mode_arrays`: at most
:data:`~fedep.core.benign.MAX_MODES`, finite, positive radii, counts of at least
:data:`~fedep.core.benign.MIN_MODE_RECORDS`).
"""

from __future__ import annotations

import numpy as np

from fedep.core.benign import (
    MAX_MODES,
    MIN_MODE_RECORDS,
    BenignModes,
    guard_modes,
    learn_modes,
    suppressing_mode,
)

__all__ = [
    "MODE_ARRAYS",
    "learn",
    "modes_of",
    "set_modes",
    "suppressed_by",
    "suppressed_scores",
    "check_mode_arrays",
    "describe_rule",
]

#: The fitted arrays of the benign modes (all three, or none): centres
#: (n_modes, n_features) in the model's standardised features, squared
#: radii (n_modes,) and the confirmed-benign records of each (n_modes,).
MODE_ARRAYS = ("benign_centres_", "benign_radius2_", "benign_counts_")


def learn(gateways, std) -> BenignModes | None:
    """The gateways' benign modes under the final model, shrunk so that none holds a
    confirmed attack (:func:`fedep.core.benign.guard_modes`), or None (no transport
    support, fewer than :data:`MIN_MODE_RECORDS` confirmed false positives, or every
    mode held a confirmed attack).

    Parameters
    ----------
    gateways : Gateways
        Their ``benign_sums(std, centres)`` (every gateway's
        :func:`fedep.core.benign.mode_sums` of its standardised confirmed-benign
        records, summed), ``attack_counts(std, modes)`` (their confirmed attacks within
        each mode, :func:`fedep.core.benign.attack_counts`, summed) and
        ``records().has_feedback``.
    std : Standardization
        The final standardisation.
    """
    ask = getattr(gateways, "benign_sums", None)
    if ask is None or not getattr(gateways.records(), "has_feedback", True):
        return None
    modes = learn_modes(lambda C: ask(std, C), std.mean.shape[0])
    if modes is None:
        return None
    # no rule may suppress a confirmed attack of the same triage (counts only)
    return guard_modes(modes, gateways.attack_counts(std, modes))


def modes_of(det) -> BenignModes | None:
    """The fitted detector's benign modes (None without)."""
    C = getattr(det, "benign_centres_", None)
    if C is None or len(C) == 0:
        return None
    return BenignModes(C, det.benign_radius2_, det.benign_counts_)


def set_modes(det, modes: BenignModes | None) -> None:
    """Set (or remove, for None) the detector's :data:`MODE_ARRAYS`."""
    for k in MODE_ARRAYS:
        det.__dict__.pop(k, None)
    if modes is None:
        return
    det.benign_centres_ = np.asarray(modes.centres, dtype=float)
    det.benign_radius2_ = np.asarray(modes.radius2, dtype=float)
    det.benign_counts_ = np.asarray(modes.counts, dtype=np.int64)


def _standardized(det, X) -> np.ndarray:
    return det._transform_input(X)


def _rows(X, rows: np.ndarray):
    return X.iloc[rows] if hasattr(X, "iloc") else np.asarray(X)[rows]


def suppressed_by(det, X, flagged: np.ndarray | None = None) -> np.ndarray | None:
    """The benign mode that suppresses each record's alert (index into the modes,
    -1 for none), shape (n_samples,); None when the detector has no modes.

    Parameters
    ----------
    det : BaseFederatedDetector
        Fitted.
    X : array-like or DataFrame of shape (n_samples, n_features)
        As ``decision_function`` takes it.
    flagged : ndarray of bool, shape (n_samples,), optional
        The records above their threshold: only those are looked at (the others are
        -1: there is no alert to suppress). Default: every record.
    """
    modes = modes_of(det)
    if modes is None:
        return None
    n = len(X)
    out = np.full(n, -1, dtype=np.int64)
    todo = np.arange(n) if flagged is None else np.flatnonzero(flagged)
    step = det.scoring_block_rows()
    for i in range(0, todo.size, step):
        rows = todo[i : i + step]
        out[rows] = suppressing_mode(_standardized(det, _rows(X, rows)), modes)
    return out


def suppressed_scores(det, X, groups=None) -> np.ndarray:
    """``decision_function`` with the suppression applied: a suppressed record's score
    is at most its row's threshold (it is not flagged), lowered with its distance to the
    mode's centre: ``min(s, t * d2 / radius2)`` of the nearest mode (in units of its
    radius); shape (n_samples,). Without modes, ``decision_function``."""
    s = det.decision_function(X, groups)
    modes = modes_of(det)
    if modes is None:
        return s
    t = det.row_thresholds(groups, s.shape[0])
    R = _standardized(det, X)
    C = modes.centres
    d2 = np.einsum("ij,ij->i", R, R)[:, None] - 2.0 * R @ C.T + np.einsum("ij,ij->i", C, C)[None, :]
    ratio = (np.maximum(d2, 0.0) / modes.radius2[None, :]).min(axis=1)
    return np.where(ratio <= 1.0, np.minimum(s, t * ratio), s)


def check_mode_arrays(arrays: dict, n_features: int) -> None:
    """The benign modes of a model file (arrays or the manifest's stand-ins with
    ``dtype``, ``shape``): all of :data:`MODE_ARRAYS` or none, at most
    :data:`MAX_MODES` of ``n_features``; with values, finite centres, finite positive
    radii and counts of at least :data:`MIN_MODE_RECORDS`. One line on the first fault."""
    present = [k for k in MODE_ARRAYS if k in arrays]
    if not present:
        return
    if len(present) != len(MODE_ARRAYS):
        missing = [k for k in MODE_ARRAYS if k not in arrays]
        raise ValueError(f"benign modes: array {missing[0]!r} is missing")
    C, r2, cnt = (arrays[k] for k in MODE_ARRAYS)
    if C.dtype.kind != "f" or r2.dtype.kind != "f" or cnt.dtype.kind not in "iu":
        raise ValueError("benign modes: centres and radii must be float, counts integer")
    k = C.shape[0] if len(C.shape) == 2 else -1
    if k < 1 or C.shape != (k, n_features) or r2.shape != (k,) or cnt.shape != (k,):
        raise ValueError(
            f"benign modes: shapes {tuple(C.shape)}, {tuple(r2.shape)}, {tuple(cnt.shape)}; "
            f"expected (k, {n_features}), (k,), (k,) with k >= 1"
        )
    if k > MAX_MODES:
        raise ValueError(f"benign modes: {k} modes, more than {MAX_MODES}")
    if not isinstance(C, np.ndarray):
        return  # the manifest's stand-ins: no values yet
    if not np.isfinite(C).all():
        raise ValueError("benign modes: centres hold NaN or inf")
    if not (np.isfinite(r2).all() and (r2 > 0).all()):
        raise ValueError("benign modes: radii must be finite and positive")
    if (cnt < MIN_MODE_RECORDS).any():
        raise ValueError(f"benign modes: a mode of fewer than {MIN_MODE_RECORDS} records")


def describe_rule(det, j: int) -> str:
    """One line naming benign mode ``j`` of ``det`` (for alerts and audits)."""
    return f"benign-mode-{j} ({int(det.benign_counts_[j])} confirmed false positives)"

"""One block of records scored as ``fedep score`` and ``fedep watch`` score them: the
anomaly score, the flag, ``P(anomaly)`` and the top contributing features, in one pass
of the model."""

from __future__ import annotations

import numpy as np
import pandas as pd

from fedep.data._tails import top_k
from fedep.detectors.suppression import suppressed_by

__all__ = ["score_block", "score_block_rules", "feature_shares"]


def score_block(det, X, groups, names, k, thresholds=None):
    """:func:`score_block_rules` without the suppression rules (the first five)."""
    return score_block_rules(det, X, groups, names, k, thresholds)[:5]


def score_block_rules(det, X, groups, names, k, thresholds=None):
    """Scores, 0/1 flags, anomaly probabilities and top-feature indices/values of one
    block.

    Parameters
    ----------
    det : BaseFederatedDetector
        A fitted detector.
    X : DataFrame or ndarray of shape (n_samples, n_columns)
        A DataFrame (read by the model's feature pipeline by column name), or an array
        of the columns ``names``.
    groups : ndarray of shape (n_samples,) or None
        Client id per row in the model's dtype
        (:func:`fedep.detectors.columns.client_ids`): a known client's rows are scored
        by its personalised basis and flagged at its threshold.
    names : list of str
        Column names of an array ``X``.
    k : int
        Top features per row (0: none).
    thresholds : ndarray of shape (n_samples,), optional
        The threshold of each row; default ``det.row_thresholds(groups, n)``.

    Returns
    -------
    scores : ndarray of float64, shape (n_samples,)
        Residual energy (``decision_function``).
    flags : ndarray of int, shape (n_samples,)
        1 where the score is above the row's threshold and no benign mode suppresses
        the alert (``predict``'s rule).
    probs : ndarray of float64, shape (n_samples,)
        ``det.anomaly_probability(scores)``.
    idx, vals : ndarray of shape (n_samples, min(k, n_features)), or None when k is 0
        Column indices (into ``det.get_feature_names_out()``) and values of each row's
        largest contributions, largest first (:func:`fedep.data._tails.top_k`).
    rules : ndarray of int64, shape (n_samples,)
        The benign mode that suppressed the row's alert
        (:func:`fedep.detectors.suppression.suppressed_by`), -1 for none.
    """
    frame = X if isinstance(X, pd.DataFrame) else pd.DataFrame(X, columns=names, copy=False)
    idx = vals = None
    if k > 0:
        # One pass: contributions' rows sum to decision_function (documented).
        contrib = det.feature_contributions(frame, groups)
        scores = contrib.sum(axis=1)
        idx, vals = top_k(contrib, k)
    else:
        scores = det.decision_function(frame, groups)
    # predict()'s rule (score above the row's client threshold), without a second pass.
    if thresholds is None:
        thresholds = det.row_thresholds(groups, len(frame))
    above = scores > thresholds
    rules = suppressed_by(det, frame, above)
    if rules is None:
        rules = np.full(len(frame), -1, dtype=np.int64)
    flags = (above & (rules < 0)).astype(int)
    return scores, flags, det.anomaly_probability(scores), idx, vals, rules


def feature_shares(vals: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Top contributions as shares of each row's residual energy.

    Parameters
    ----------
    vals : ndarray of shape (n_samples, k)
        Contributions (squared residuals, >= 0) of :func:`score_block`.
    scores : ndarray of shape (n_samples,)
        The rows' scores (the sums of all their contributions).

    Returns
    -------
    ndarray of shape (n_samples, k)
        ``vals / scores`` in [0, 1] (0 for a row of score 0); a row's shares sum to at
        most 1.
    """
    s = np.asarray(scores, dtype=np.float64)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(s > 0, np.asarray(vals, dtype=np.float64) / s, 0.0)
    return np.clip(out, 0.0, 1.0)

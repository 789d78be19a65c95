"""Decision thresholds chosen without test data.

Every function here takes scores of TRAINING or VALIDATION records (the validation
split is carved from the training rows, see :func:`fedep.data.make_client_split`)
and never sees test labels or test scores. The only test-tuned threshold in the
package is :func:`fedep.evaluation.metrics.best_f1_threshold`, kept for comparison
with the paper and labelled as such wherever it is reported.
"""

from __future__ import annotations

import numpy as np

from fedep.evaluation.metrics import best_f1_threshold

__all__ = [
    "DEFAULT_TARGET_FPR",
    "threshold_from_validation",
    "threshold_from_validation_f1",
    "honest_threshold",
]

#: Default target false-positive rate on validation-normal records.
DEFAULT_TARGET_FPR = 0.05


def threshold_from_validation(
    val_scores, y_val=None, target_fpr: float = DEFAULT_TARGET_FPR
) -> float:
    """The ``1 - target_fpr`` quantile of the scores of validation-NORMAL records.

    ``y_val`` are validation labels (from the training data, which is allowed); when
    omitted every validation record is treated as normal. The expected false-positive
    rate on new normal traffic from the same distribution is ``target_fpr``.
    """
    s = np.asarray(val_scores, dtype=float).ravel()
    if not 0.0 < target_fpr < 1.0:
        raise ValueError(f"target_fpr must be in (0, 1); got {target_fpr!r}")
    if y_val is not None:
        y = np.asarray(y_val).ravel()
        if y.shape != s.shape:
            raise ValueError("val_scores and y_val have different lengths")
        s = s[y == 0]
    if s.size == 0:
        raise ValueError("no validation-normal scores to set a threshold from")
    return float(np.quantile(s, 1.0 - target_fpr))


def threshold_from_validation_f1(val_scores, y_val) -> float:
    """Threshold maximising F1 on the VALIDATION split (carved from training).

    Honest (no test data), but it inherits the validation split's class balance, which
    may differ from the test set's.
    """
    y = np.asarray(y_val).ravel()
    if y.sum() == 0 or y.sum() == y.size:
        raise ValueError("validation split needs both classes for an F1-tuned threshold")
    return best_f1_threshold(y, val_scores)


def honest_threshold(
    detector,
    X_val,
    y_val=None,
    groups_val=None,
    *,
    method: str = "val_quantile",
    target_fpr: float = DEFAULT_TARGET_FPR,
) -> float:
    """Threshold for a fitted detector from training/validation data only.

    ``method``: ``"val_quantile"`` (:func:`threshold_from_validation`),
    ``"val_f1"`` (:func:`threshold_from_validation_f1`) or ``"contamination"`` (the
    detector's own ``threshold_`` from its training scores).
    """
    if method == "contamination":
        return float(detector.threshold_)
    scores = detector.decision_function(X_val, groups_val)
    if method == "val_quantile":
        return threshold_from_validation(scores, y_val, target_fpr)
    if method == "val_f1":
        return threshold_from_validation_f1(scores, y_val)
    raise ValueError(f"method must be 'val_quantile', 'val_f1' or 'contamination'; got {method!r}")

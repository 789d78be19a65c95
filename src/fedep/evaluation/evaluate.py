"""Score a FITTED detector on labelled records: :func:`evaluate_fitted`.

One function for every evaluation in the package: the command line's ``fedep
evaluate`` (the model's own thresholds, from its training scores) and the
reproduction (:func:`fedep.evaluation.experiment.evaluate_detector`: the honest
threshold from validation-normal scores). Test labels only ever enter the reported
metrics and the separately labelled, optimistic ``test_tuned`` row.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.metrics import roc_curve

from fedep.evaluation.metrics import (
    best_f1_threshold,
    detection_metrics,
    per_class_recall,
    trivial_detector_metrics,
)
from fedep.evaluation.thresholds import DEFAULT_TARGET_FPR, threshold_from_validation

__all__ = ["evaluate_fitted", "roc_points", "THRESHOLD_POLICIES", "ROW_LABELS"]

#: ``threshold_policy`` values and the key of the metrics they produce.
THRESHOLD_POLICIES = {"model": "model", "validation": "honest"}

#: How each metrics row is to be labelled when printed.
ROW_LABELS = {
    "model": "model (training threshold)",
    "honest": "honest (validation threshold)",
    "trivial": "trivial all-attack detector",
    "test_tuned": "test-tuned (as in the paper; optimistic)",
}


def roc_points(y, scores, max_points: int = 200) -> dict[str, list[float]]:
    """Test ROC curve points, at most ``max_points`` (TPR interpolated on an even FPR
    grid when longer); empty lists when ``y`` has one class."""
    if len(np.unique(y)) < 2:
        return {"fpr": [], "tpr": []}
    fpr, tpr, _ = roc_curve(y, scores)
    if fpr.size > max_points:
        grid = np.linspace(0.0, 1.0, max_points)
        tpr = np.interp(grid, fpr, tpr)
        fpr = grid
    return {"fpr": [float(v) for v in fpr], "tpr": [float(v) for v in tpr]}


def evaluate_fitted(
    det,
    X,
    y,
    *,
    groups=None,
    categories=None,
    threshold_policy: str = "model",
    X_val=None,
    y_val=None,
    groups_val=None,
    target_fpr: float = DEFAULT_TARGET_FPR,
    with_roc: bool = False,
) -> dict[str, Any]:
    """Evaluate a fitted detector on records ``X`` with labels ``y`` (1 = attack).

    Parameters
    ----------
    det : fitted detector
        Needs ``decision_function(X, groups)``; policy ``"model"`` also needs
        ``threshold_`` and ``row_thresholds(groups, n)``.
    X, y : test records and labels
    groups : array-like, optional
        Client (gateway) of each test row: rows of known clients are scored by their
        personalised basis and, under ``"model"``, flagged at their client's own
        threshold. Omitted: the global basis and threshold.
    categories : array-like, optional
        Attack category of each row for ``per_class`` (default ``normal``/``attack``
        from ``y``).
    threshold_policy : {"model", "validation"}
        ``"model"``: the detector's thresholds from its TRAINING scores (result key
        ``"model"``). ``"validation"``: the ``1 - target_fpr`` quantile of the scores
        of validation-normal rows ``X_val[y_val == 0]`` (result key ``"honest"``;
        :func:`~fedep.evaluation.thresholds.threshold_from_validation`).
    X_val, y_val, groups_val : validation rows (from training data), labels, clients
        Required by ``"validation"``.
    target_fpr : float, default=0.05
    with_roc : bool, default=False
        Add the test ROC curve points.

    Returns
    -------
    dict with
        ``"model"`` or ``"honest"``: :func:`~fedep.evaluation.metrics.detection_metrics`
        at the policy's threshold; ``"trivial"``: the flag-everything detector;
        ``"test_tuned"``: metrics at the best-F1 threshold ON THE TEST LABELS
        (optimistic, as in the paper; for comparison only); ``"per_class"``: share of
        each category flagged at the policy's threshold (recall for attacks, FPR for
        normal); ``"n_test"``, ``"n_attack"``; ``"threshold"``: the global threshold
        (float); ``"threshold_policy"``; ``"metrics_key"`` (``"model"`` or
        ``"honest"``); ``"labels"``: a printable label per metrics row; ``"clients"``:
        None, or with ``groups`` ``{"rows_of_known_clients", "rows_scored_globally"}``
        (when the detector has ``clients_``); ``"val_roc_auc"`` (policy
        ``"validation"``); ``"roc"`` (with ``with_roc``): ``{"fpr", "tpr",
        "operating_point": {"fpr", "tpr"}}``, the operating point being the policy's
        threshold.
    """
    if threshold_policy not in THRESHOLD_POLICIES:
        raise ValueError(
            f"threshold_policy must be one of {sorted(THRESHOLD_POLICIES)}; "
            f"got {threshold_policy!r}"
        )
    y = np.asarray(y).ravel()
    scores = np.asarray(det.decision_function(X, groups), dtype=float)
    out: dict[str, Any] = {}
    if threshold_policy == "model":
        threshold = float(det.threshold_)
        row_thr = det.row_thresholds(groups, scores.shape[0]) if groups is not None else threshold
    else:
        if X_val is None or y_val is None:
            raise ValueError("threshold_policy='validation' needs X_val and y_val")
        s_val = np.asarray(det.decision_function(X_val, groups_val), dtype=float)
        threshold = threshold_from_validation(s_val, y_val, target_fpr)
        row_thr = threshold
        out["val_roc_auc"] = detection_metrics(y_val, s_val, threshold)["roc_auc"]
    key = THRESHOLD_POLICIES[threshold_policy]
    metrics = detection_metrics(y, scores, row_thr)
    pred = (scores > row_thr).astype(int)
    if categories is None:
        categories = np.where(y == 0, "normal", "attack")
    clients = None
    if groups is not None and hasattr(det, "clients_"):
        known = np.isin(np.asarray(groups).astype(str), np.asarray(det.clients_).astype(str))
        clients = {
            "rows_of_known_clients": int(known.sum()),
            "rows_scored_globally": int((~known).sum()),
        }
    out.update(
        {
            key: metrics,
            "trivial": trivial_detector_metrics(y),
            "test_tuned": detection_metrics(y, scores, best_f1_threshold(y, scores)),
            "per_class": per_class_recall(categories, pred),
            "n_test": int(y.size),
            "n_attack": int(np.sum(y)),
            "threshold": threshold,
            "threshold_policy": threshold_policy,
            "metrics_key": key,
            "labels": {k: ROW_LABELS[k] for k in (key, "trivial", "test_tuned")},
            "clients": clients,
        }
    )
    if with_roc:
        out["roc"] = {
            **roc_points(y, scores),
            "operating_point": {"fpr": metrics["fpr"], "tpr": metrics["rec"]},
        }
    return out

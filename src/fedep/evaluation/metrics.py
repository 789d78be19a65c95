"""Detection metrics for anomaly scores.

Conventions: label 1 = attack (positive), 0 = normal; scores are "higher = more
anomalous"; a record is flagged when ``score > threshold``.  Percentages are NOT
used: every rate is a fraction in [0, 1].
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from sklearn.metrics import average_precision_score, precision_recall_curve, roc_auc_score

METRIC_KEYS = (
    "acc",
    "pre",
    "rec",
    "fnr",
    "fpr",
    "f1",
    "roc_auc",
    "pr_auc",
    "tp",
    "fp",
    "tn",
    "fn",
    "threshold",
)

NORMAL_LABELS = ("normal", "benign", "0")


def _as_binary(y_true) -> np.ndarray:
    y = np.asarray(y_true).ravel()
    if y.dtype == bool:
        return y.astype(int)
    y = y.astype(int)
    if not np.isin(y, (0, 1)).all():
        raise ValueError("y_true must contain only 0 (normal) and 1 (attack)")
    return y


def _safe_div(a: float, b: float) -> float:
    return float(a) / float(b) if b else float("nan")


def confusion_counts(y_true, y_pred) -> dict[str, int]:
    """Counts ``tp, fp, tn, fn`` of binary predictions (1 = attack)."""
    y = _as_binary(y_true)
    p = _as_binary(y_pred)
    if y.shape != p.shape:
        raise ValueError("y_true and y_pred have different lengths")
    return {
        "tp": int(np.sum((p == 1) & (y == 1))),
        "fp": int(np.sum((p == 1) & (y == 0))),
        "tn": int(np.sum((p == 0) & (y == 0))),
        "fn": int(np.sum((p == 0) & (y == 1))),
    }


def rates_from_counts(tp: int, fp: int, tn: int, fn: int) -> dict[str, float]:
    """Accuracy, precision, recall, FNR, FPR and F1 from confusion counts.

    Undefined ratios (zero denominator) are NaN, except precision and F1 of a
    detector that flags nothing, which are 0 when there are positives to find.
    """
    n = tp + fp + tn + fn
    pre = _safe_div(tp, tp + fp)
    rec = _safe_div(tp, tp + fn)
    if tp + fp == 0 and tp + fn > 0:
        pre = 0.0
    if tp == 0 and (tp + fn) > 0:
        f1 = 0.0
    else:
        f1 = _safe_div(2 * tp, 2 * tp + fp + fn)
    return {
        "acc": _safe_div(tp + tn, n),
        "pre": pre,
        "rec": rec,
        "fnr": _safe_div(fn, tp + fn),
        "fpr": _safe_div(fp, fp + tn),
        "f1": f1,
    }


def _auc_pair(y: np.ndarray, s: np.ndarray) -> tuple[float, float]:
    if len(np.unique(y)) < 2:
        return float("nan"), float("nan")
    return float(roc_auc_score(y, s)), float(average_precision_score(y, s))


def detection_metrics(y_true, scores, threshold) -> dict:
    """All detection metrics of ``scores`` flagged at ``score > threshold``.

    ``threshold`` is a float, or an array with one threshold per record (e.g. each
    gateway's own); then the returned ``threshold`` is NaN.

    Returns a dict with keys ``acc, pre, rec, fnr, fpr, f1`` (fractions), ``roc_auc``
    and ``pr_auc`` (threshold-free; ``pr_auc`` is average precision; both NaN when
    ``y_true`` has a single class), ``tp, fp, tn, fn`` (ints) and ``threshold``.
    """
    y = _as_binary(y_true)
    s = np.asarray(scores, dtype=float).ravel()
    if y.shape != s.shape:
        raise ValueError("y_true and scores have different lengths")
    if np.isnan(s).any():
        raise ValueError("scores contain NaN")
    thr = np.asarray(threshold, dtype=float)
    if thr.ndim and thr.shape != s.shape:
        raise ValueError("per-record thresholds and scores have different lengths")
    pred = (s > thr).astype(int)
    counts = confusion_counts(y, pred)
    out: dict = dict(rates_from_counts(**counts))
    out["roc_auc"], out["pr_auc"] = _auc_pair(y, s)
    out.update(counts)
    out["threshold"] = float(thr) if thr.ndim == 0 else float("nan")
    return {k: out[k] for k in METRIC_KEYS}


def per_class_recall(categories, y_pred) -> dict[str, float]:
    """Share of records flagged (``y_pred == 1``) per category.

    For attack classes this is the detection rate (recall); for the normal class
    (``'normal'``/``'benign'``, case-insensitive) it is the false-positive rate.
    """
    cats = np.asarray(categories).astype(str).ravel()
    p = _as_binary(y_pred)
    if cats.shape != p.shape:
        raise ValueError("categories and y_pred have different lengths")
    out: dict[str, float] = {}
    for c in sorted(np.unique(cats), key=lambda v: (v.lower() not in NORMAL_LABELS, v)):
        m = cats == c
        out[str(c)] = float(p[m].mean())
    return out


def best_f1_threshold(y_true, scores) -> float:
    """Threshold maximising F1 ON THE GIVEN LABELS.

    WARNING: this is TEST-TUNED when called with test labels. It exists only to
    reproduce the paper's (optimistic) protocol for comparison and must never be used
    for the honest result. The returned value t flags ``score > t``; it is placed just
    below the optimal score cut so that the cut score itself is flagged.
    """
    y = _as_binary(y_true)
    s = np.asarray(scores, dtype=float).ravel()
    if y.sum() == 0:
        return float(np.max(s))
    pre, rec, thr = precision_recall_curve(y, s)
    pre, rec = pre[:-1], rec[:-1]
    with np.errstate(invalid="ignore", divide="ignore"):
        f1 = np.where(pre + rec > 0, 2 * pre * rec / (pre + rec), 0.0)
    i = int(np.argmax(f1))
    cut = float(thr[i])  # precision_recall_curve flags score >= cut
    lower = s[s < cut]
    if lower.size:
        return float((cut + lower.max()) / 2.0)
    return float(np.nextafter(cut, -np.inf))


def trivial_detector_metrics(y_true) -> dict:
    """Metrics of the trivial detector that flags every record as an attack.

    AUCs are those of a constant score (ROC AUC 0.5, PR AUC = attack prevalence).
    """
    y = _as_binary(y_true)
    counts = confusion_counts(y, np.ones_like(y))
    out: dict = dict(rates_from_counts(**counts))
    if len(np.unique(y)) < 2:
        out["roc_auc"] = out["pr_auc"] = float("nan")
    else:
        out["roc_auc"] = 0.5
        out["pr_auc"] = float(y.mean())
    out.update(counts)
    out["threshold"] = float("-inf")
    return {k: out[k] for k in METRIC_KEYS}


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        v = float(v)
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        if v != 0 and (abs(v) >= 1e5 or abs(v) < 1e-3):
            return f"{v:.3g}"
        return f"{v:.4f}"
    return str(v).replace("|", "\\|").replace("\n", " ")


def format_metrics_table(rows: list[dict], columns: Sequence[str] | None = None) -> str:
    """Render ``rows`` (dicts) as a GitHub markdown table.

    ``columns`` defaults to the union of keys in first-seen order. Floats are printed
    with 4 decimals (or 3 significant digits when very small/large), missing cells
    are empty, NaN is ``nan``.
    """
    if columns is None:
        columns = []
        for r in rows:
            for k in r:
                if k not in columns:
                    columns.append(k)
    columns = list(columns)
    if not columns:
        return ""
    lines = [
        "| " + " | ".join(str(c) for c in columns) + " |",
        "|" + "|".join("---" for _ in columns) + "|",
    ]
    for r in rows:
        lines.append("| " + " | ".join(_fmt(r.get(c)) for c in columns) + " |")
    return "\n".join(lines) + "\n"

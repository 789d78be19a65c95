"""Hyper-parameter selection on the validation split carved from TRAINING data.

The score of a candidate is its ROC AUC on the validation split of a
:class:`fedep.data.ClientSplit` (rows held out of each client's training part; under
the ``clean`` protocol they keep their attacks and labels, which come from training
data). Test data are never touched here: :func:`grid_search` receives no test arrays
it would use.
"""

from __future__ import annotations

import itertools
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import roc_auc_score

__all__ = ["parameter_grid", "validation_auc", "grid_search"]


def parameter_grid(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """All combinations of ``grid`` (dict of lists), in a deterministic order."""
    keys = list(grid)
    return [dict(zip(keys, vals, strict=True)) for vals in itertools.product(*grid.values())]


def validation_auc(det, X_val, y_val, groups_val=None) -> float:
    """ROC AUC of a fitted detector on validation rows (NaN for one class)."""
    y = np.asarray(y_val)
    if len(np.unique(y)) < 2:
        return float("nan")
    return float(roc_auc_score(y, det.decision_function(X_val, groups_val)))


def grid_search(
    make,
    grid: Mapping[str, Sequence[Any]],
    X_train,
    groups_train,
    X_val,
    y_val,
    groups_val=None,
    *,
    base_params: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Fit ``make(params)`` for every point of ``grid`` and rank by validation ROC AUC.

    Parameters
    ----------
    make : callable
        ``make(params) -> unfitted detector``.
    grid : dict of lists
    X_train, groups_train : training rows and clients
    X_val, y_val, groups_val : validation rows (from training data), labels, clients
        (``groups_val`` given: personalised scoring).
    base_params : dict, optional
        Merged under every grid point.

    Returns
    -------
    dict with ``best_params`` (base + best grid point), ``best_score`` and ``results``
    (one dict per grid point: ``params``, ``val_roc_auc``, ``fit_time_s``). Ties and
    NaN scores resolve to the first grid point.
    """
    base = dict(base_params or {})
    results = []
    for point in parameter_grid(grid):
        params = {**base, **point}
        det = make(params)
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            det.fit(X_train, groups=groups_train)
        dt = time.perf_counter() - t0
        score = validation_auc(det, X_val, y_val, groups_val)
        results.append({"params": point, "val_roc_auc": score, "fit_time_s": dt})
    scores = np.array([r["val_roc_auc"] for r in results], dtype=float)
    if np.all(np.isnan(scores)):
        best = 0
    else:
        best = int(np.nanargmax(scores))
    return {
        "best_params": {**base, **results[best]["params"]},
        "best_score": float(scores[best]),
        "results": results,
    }

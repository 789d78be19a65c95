"""Warm starts: what a fitted detector carries into its next fit (``warm_start=True``).

The model's feature pipeline, standardisation and rank are kept; each of its gateways
carries ``W_i`` (``client_components_``), its consensus dual (``client_duals_``, zero
for a model without it) and its SSN multiplier; the rounds start at ``consensus_``
(``components_`` for a model without it). See ``docs/lineage.md``.
"""

from __future__ import annotations

import numpy as np
from sklearn.utils.validation import check_array, validate_data

from fedep._errors import one_line
from fedep.detectors.driver import WarmStart
from fedep.federation.gateways import Standardization


def warm_start(det) -> WarmStart | None:
    """The state ``det`` refits from.

    Parameters
    ----------
    det : BaseFederatedDetector
        A fitted detector (a fit, or a loaded model file) with ``warm_start=True``.

    Returns
    -------
    WarmStart or None
        None for a cold fit (``warm_start`` off, or ``det`` not fitted: as
        scikit-learn's ``warm_start`` on an unfitted estimator).

    Raises
    ------
    ValueError
        One line: a method without rounds, or ``n_components`` other than the model's rank.
    """
    if not (getattr(det, "warm_start", False) and hasattr(det, "components_")):
        return None
    if not det.runs_rounds:
        raise ValueError(f"warm start: {type(det).__name__} has no rounds to start")
    r, n = det.components_.shape
    if det.n_components != "auto" and int(det.n_components) != r:
        raise ValueError(
            f"warm start: n_components={det.n_components} but the model has rank {r}; "
            "a warm start keeps the model's rank (fit without warm_start to change it)"
        )
    V = getattr(det, "consensus_", None)
    if V is None or np.shape(V) != (n, r):
        V = det.components_.T
    duals = getattr(det, "client_duals_", None)
    ssn = getattr(det, "client_multipliers_", None)
    states = {}
    for i, label in enumerate(det.clients_.tolist()):
        st = {
            "W": det.client_components_[i].T,
            "dual": np.zeros((n, r)) if duals is None else duals[i].T,
        }
        if ssn is not None:
            st["ssn"] = ssn[i]
        states[label] = st
    std = Standardization(
        np.asarray(det.mean_), np.asarray(det.scale_), np.asarray(det.constant_features_)
    )
    return WarmStart(
        std=std,
        rank=r,
        V=np.asarray(V, dtype=float),
        states=states,
        features=getattr(det, "features_", None),
        parent=getattr(det, "lineage_", None),
        parent_sha256=getattr(det, "file_sha256_", None),
    )


def warm_input(det, X):
    """The warm start's training matrix.

    Parameters
    ----------
    det : BaseFederatedDetector
        The detector refitting from its own state.
    X : array-like of shape (n_samples, n_features) or DataFrame
        New records: numeric features as the model's, or a table of the columns its
        feature pipeline reads (the pipeline is applied, not refitted).

    Returns
    -------
    X : ndarray of shape (n_samples, n_model_features)
    pipe : FeaturePipeline or None
    names : list of str or None
        The model's input feature names.

    Raises
    ------
    ValueError
        One line, starting ``warm start:``, on a mismatch with the model's features.
    """
    pipe = getattr(det, "features_", None)
    names = getattr(det, "feature_names_in_", None)
    try:
        if pipe is None:
            X = validate_data(det, X, dtype=np.float64, ensure_min_samples=2, reset=False)
        else:
            if not hasattr(X, "columns"):
                raise ValueError(
                    "the model has a feature pipeline: give a DataFrame with its columns "
                    f"{list(pipe.feature_names_in_)[:5]}..."
                )
            X = check_array(pipe.transform(X), dtype=np.float64, ensure_min_samples=2)
    except ValueError as exc:
        raise ValueError(f"warm start: {one_line(exc)}") from None
    return X, pipe, None if names is None else list(names)

"""Anomaly detectors with the scikit-learn / PyOD conventions.

Every detector learns a low-rank model of normal traffic from records spread over
clients (gateways) and scores a record by its residual energy outside the subspace:
higher score = more anomalous.

Shapes: ``X`` is (n_samples, n_features); ``groups`` (n_samples,) gives the client of
each row. ``components_`` is (n_components, n_features) with orthonormal rows, like
:class:`sklearn.decomposition.PCA`; ``client_components_`` is
(n_clients, n_components, n_features).

Conventions (PyOD): ``decision_function`` (higher = more anomalous),
``decision_scores_`` (training scores), ``threshold_`` (the ``1 - contamination``
quantile of the training scores: never test data), ``labels_`` and ``predict``
returning 0 (normal) / 1 (anomaly). ``score_samples`` is the scikit-learn sign
(higher = more normal).

By name (:mod:`fedep.detectors.registry`): :data:`DETECTORS` (class name -> class),
:data:`METHODS` (method name -> class and fixed parameters) and
:func:`make_estimator`, the one factory every surface builds its detectors with.
"""

from fedep.detectors.base import (
    ABLATION_CASES,
    FITTED_ARRAYS,
    STATE_ARRAYS,
    BaseFederatedDetector,
)
from fedep.detectors.baselines import LocalPCA, OneShotPCA, PooledPCA
from fedep.detectors.federated import FedEP, FedPG
from fedep.detectors.registry import (
    DETECTORS,
    METHODS,
    Method,
    detector_param_table,
    make_estimator,
)

__all__ = [
    "DETECTORS",
    "METHODS",
    "Method",
    "detector_param_table",
    "make_estimator",
    "BaseFederatedDetector",
    "FedEP",
    "FedPG",
    "PooledPCA",
    "LocalPCA",
    "OneShotPCA",
    "ABLATION_CASES",
    "FITTED_ARRAYS",
    "STATE_ARRAYS",
]

"""fedep: personalised, robust, federated PCA for IoT anomaly detection.

Layout: :mod:`fedep.core` (pure numerics), :mod:`fedep.federation` (who talks to
whom), :mod:`fedep.data` (loaders, features, partitions, synthetic data),
:mod:`fedep.detectors` (estimators), :mod:`fedep.evaluation` (metrics, reproduction),
:mod:`fedep.cli` (command line).
"""

from fedep.detectors import (
    ABLATION_CASES,
    FedEP,
    FedPG,
    LocalPCA,
    OneShotPCA,
    PooledPCA,
)

__version__ = "0.1.0"


def load(path):
    """Load a detector saved with ``det.save(path)`` (see :mod:`fedep.persistence`)."""
    from fedep.persistence import load_model

    return load_model(path)


__all__ = ["FedEP", "FedPG", "PooledPCA", "LocalPCA", "OneShotPCA", "ABLATION_CASES", "load"]

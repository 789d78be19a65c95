"""fedep: personalised, robust, federated PCA for IoT anomaly detection.

Layout: :mod:`fedep.core` (pure numerics), :mod:`fedep.federation` (who talks to
whom), :mod:`fedep.data` (loaders, features, partitions, synthetic data),
:mod:`fedep.detectors` (estimators), :mod:`fedep.evaluation` (metrics, reproduction),
:mod:`fedep.cli` (command line).

The estimators are imported lazily (PEP 562), so ``import fedep`` stays cheap for
processes that only need the core, such as a Flower ClientApp started per message.
"""

from __future__ import annotations

__version__ = "0.1.0"

_DETECTORS = ("FedEP", "FedPG", "PooledPCA", "LocalPCA", "OneShotPCA", "ABLATION_CASES")

__all__ = [*_DETECTORS, "load", "__version__"]


def __getattr__(name):
    if name in _DETECTORS:
        from fedep import detectors

        return getattr(detectors, name)
    raise AttributeError(f"module 'fedep' has no attribute {name!r}")


def load(path):
    """Load a detector saved with ``det.save(path)`` (see :mod:`fedep.persistence`)."""
    from fedep.persistence import load_model

    return load_model(path)

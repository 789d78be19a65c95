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

__all__ = [*_DETECTORS, "load", "save", "__version__"]


def __getattr__(name):
    if name in _DETECTORS:
        # start-up time: every Flower ClientApp process (one per message) imports this
        # package; the estimators (scikit-learn, numba) load on first use
        from fedep import detectors

        return getattr(detectors, name)
    raise AttributeError(f"module 'fedep' has no attribute {name!r}")


def save(det, path, *, sign_key=None) -> None:
    """Write a fitted detector to ``path``: versioned, checksummed, no pickle, atomic.

    See :func:`fedep.modelfile.estimator.save_model`.
    """
    from fedep.modelfile.estimator import save_model  # start-up time (see __getattr__)

    save_model(det, path, sign_key=sign_key)


def load(path, *, verify_key=None, require_signature=False):
    """Load a detector written by :func:`save`.

    See :func:`fedep.modelfile.estimator.load_model`.
    """
    from fedep.modelfile.estimator import load_model  # start-up time (see __getattr__)

    return load_model(path, verify_key=verify_key, require_signature=require_signature)

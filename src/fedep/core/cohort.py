"""A core cohort from a plain specification (the estimator's translation, made once).

An estimator turns its hyper-parameters into a specification once
(``FedEP._cohort_spec()``): the method, the scalar ``beta`` and ``nu`` and the
settings dataclass as a dict. :func:`make_cohort` builds the cohort from it. A Flower
gateway stores the specification after validating the estimator once and rebuilds
its cohort of one from it at every round, without importing the estimators.
"""

from __future__ import annotations

from dataclasses import asdict

import numpy as np

from fedep.core.fedep import FedEPCohort, FedEPSettings
from fedep.core.fedpg import FedPGCohort, FedPGSettings

__all__ = ["make_cohort", "cohort_spec"]


def cohort_spec(method: str, settings, **scalars) -> dict:
    """A JSON-able specification: ``{"method", "settings": {...}, **scalars}``."""
    return {"method": method, "settings": asdict(settings), **scalars}


def make_cohort(spec: dict, blocks: list[np.ndarray], V0: np.ndarray):
    """The cohort of ``spec`` over ``blocks`` (list of (N_i, n)), started at ``V0`` (n, r)."""
    if spec["method"] == "fedep":
        return FedEPCohort(
            blocks, V0, float(spec["beta"]), float(spec["nu"]), FedEPSettings(**spec["settings"])
        )
    if spec["method"] == "fedpg":
        return FedPGCohort(blocks, V0, FedPGSettings(**spec["settings"]))
    raise ValueError(f"no cohort for method {spec['method']!r}")

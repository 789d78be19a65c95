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

__all__ = ["make_cohort", "cohort_spec", "check_start", "client_states", "START_KEYS"]

#: What a warm start carries per gateway (its personalised state from the previous
#: model): ``W`` (n, r), its basis; ``dual`` (n, r), its consensus dual (FedEP's
#: ``Pi_i``, FedPG's ``Y_i``); ``ssn`` (r, r), FedEP's SSN multiplier of the W-step
#: (optional). Not carried: ``S_i`` and the data-side dual, one row per record of the
#: previous period's data (new records start at ``S = 0``).
START_KEYS = {"W": ("n", "r"), "dual": ("n", "r"), "ssn": ("r", "r")}

#: Data steps a FedEP warm start runs locally before its first round
#: (:meth:`fedep.core.fedep.FedEPCohort.settle_data`).
SETTLE_STEPS = 20

#: Largest ``|W^T W - I|`` entry accepted for a carried basis (a W-step keeps
#: ``W`` on the Stiefel manifold to ~1e-12; an edited one is refused).
ORTHONORMAL_TOL = 1e-6


def cohort_spec(method: str, settings, **scalars) -> dict:
    """A JSON-able specification: ``{"method", "settings": {...}, **scalars}``."""
    return {"method": method, "settings": asdict(settings), **scalars}


def check_start(state, n: int, r: int, where: str) -> dict[str, np.ndarray]:
    """A gateway's carried state (:data:`START_KEYS`) checked against the run's
    dimensions: known keys, ``W`` and ``dual`` present, shapes from ``n`` features and
    rank ``r``, finite values, ``W`` orthonormal. ``where`` names the gateway in the
    one-line error."""
    if not isinstance(state, dict):
        raise ValueError(f"{where}: warm-start state must be a dict of arrays")
    unknown = sorted(set(state) - set(START_KEYS))
    missing = sorted({"W", "dual"} - set(state))
    if unknown or missing:
        raise ValueError(f"{where}: warm-start state has unknown {unknown}, missing {missing}")
    size = {"n": n, "r": r}
    out = {}
    for key, value in state.items():
        a = np.asarray(value)
        want = tuple(size[d] for d in START_KEYS[key])
        if a.shape != want or a.dtype.kind not in "fiu":
            raise ValueError(
                f"{where}: warm-start {key} has shape {a.shape} ({a.dtype}), expected "
                f"{want} numbers (n_features={n}, rank={r})"
            )
        a = a.astype(float)
        if not np.isfinite(a).all():
            raise ValueError(f"{where}: warm-start {key} holds NaN or inf")
        out[key] = a
    off = np.abs(out["W"].T @ out["W"] - np.eye(r)).max()
    if off > ORTHONORMAL_TOL:
        raise ValueError(f"{where}: warm-start W is not orthonormal (|W^T W - I| = {off:.2g})")
    return out


def make_cohort(spec: dict, blocks: list[np.ndarray], V0: np.ndarray, start=None):
    """The cohort of ``spec`` over ``blocks`` (list of (N_i, n)), started at ``V0`` (n, r).

    ``start`` (one entry per block, None for a gateway new to the federation): the
    carried state of each gateway (:data:`START_KEYS`, checked by
    :func:`check_start`); such a gateway starts at its own ``W_i`` and dual instead
    of ``V0`` and zero.
    """
    if spec["method"] == "fedep":
        cohort = FedEPCohort(
            blocks, V0, float(spec["beta"]), float(spec["nu"]), FedEPSettings(**spec["settings"])
        )
        dual = cohort.Pi
    elif spec["method"] == "fedpg":
        cohort = FedPGCohort(blocks, V0, FedPGSettings(**spec["settings"]))
        dual = cohort.Y
    else:
        raise ValueError(f"no cohort for method {spec['method']!r}")
    if start is not None:
        if len(start) != len(blocks):
            raise ValueError(f"{len(start)} warm-start states for {len(blocks)} gateways")
        n, r = V0.shape
        for i, st in enumerate(start):
            if st is None:
                continue
            st = check_start(st, n, r, f"gateway {i}")
            cohort.W[i], dual[i] = st["W"], st["dual"]
            if "ssn" in st and spec["method"] == "fedep":
                cohort.Lam_ssn[i] = st["ssn"]
        if spec["method"] == "fedep":
            cohort.settle_data(SETTLE_STEPS)
    return cohort


def client_states(cohort) -> dict[str, np.ndarray]:
    """Every gateway's personalised state after the rounds, stacked (:data:`START_KEYS`
    with a leading gateway axis): what a warm start carries."""
    if isinstance(cohort, FedEPCohort):
        return {"W": cohort.W.copy(), "dual": cohort.Pi.copy(), "ssn": cohort.Lam_ssn.copy()}
    return {"W": cohort.W.copy(), "dual": cohort.Y.copy()}

"""The detectors by name: the class table, the method table and the one factory.

Two vocabularies name a detector:

- a *detector class name* (:data:`DETECTORS`: ``"FedEP"``, ``"PooledPCA"``, ...), as
  model files and the reproduction's tables spell it;
- a *method name* (:data:`METHODS`: ``"fedep"``, ``"case1"``, ``"pca"``, ...), the
  command line's and the Flower run config's ``method``: a detector class with the
  parameters the method fixes (FedEP's ablation cases).

:func:`make_estimator` builds the estimator of either name; every surface (command
line, Flower apps, evaluation, reproduction) builds its detectors through it.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fedep.detectors.base import ABLATION_CASES, BaseFederatedDetector
from fedep.detectors.baselines import LocalPCA, OneShotPCA, PooledPCA
from fedep.detectors.federated import FedEP, FedPG
from fedep.params import ParamSpec, option_name, param_table, validate_params

__all__ = ["DETECTORS", "Method", "METHODS", "detector_param_table", "make_estimator"]

#: Every detector class by its name: model files, the reproduction, the parameter table.
DETECTORS: dict[str, type[BaseFederatedDetector]] = {
    c.__name__: c for c in (FedEP, FedPG, PooledPCA, LocalPCA, OneShotPCA)
}


@dataclass(frozen=True)
class Method:
    """What a method name stands for.

    Attributes
    ----------
    estimator : type
        The detector class.
    fixed : mapping of str -> Any
        Parameters the method sets and a caller may not change (an ablation case).
    """

    estimator: type[BaseFederatedDetector]
    fixed: Mapping[str, Any] = field(default_factory=dict)


#: Method names of the command line and the Flower run config (``--method``,
#: ``method``): the detector class and, for FedEP's ablation cases ``case1``..``case3``,
#: the paper's case (:data:`~fedep.detectors.base.ABLATION_CASES`).
METHODS: dict[str, Method] = {
    "fedep": Method(FedEP),
    "fedpg": Method(FedPG),
    "case1": Method(FedEP, ABLATION_CASES["I"]),
    "case2": Method(FedEP, ABLATION_CASES["II"]),
    "case3": Method(FedEP, ABLATION_CASES["III"]),
    "pca": Method(PooledPCA),
    "local-pca": Method(LocalPCA),
    "oneshot": Method(OneShotPCA),
}


def detector_param_table() -> dict[str, ParamSpec]:
    """Every hyper-parameter of every detector class (:func:`fedep.params.param_table`
    of :data:`DETECTORS`): one command-line option / run-config key each."""
    return param_table(DETECTORS.values())


def _method(method: str) -> Method:
    if method in METHODS:
        return METHODS[method]
    if method in DETECTORS:
        return Method(DETECTORS[method])
    raise ValueError(
        f"method must be one of {', '.join(METHODS)} (or a detector class: "
        f"{', '.join(DETECTORS)}); got {method!r}"
    )


def make_estimator(method: str, params: dict[str, Any] | None = None, *, validate: bool = True):
    """The estimator of a method name (or detector class name) with the given parameters.

    Parameters
    ----------
    method : str
        A method name of :data:`METHODS` (``case1``..``case3`` are FedEP's ablation
        cases, whose fixed parameters may not be overridden with other values), or a
        detector class name of :data:`DETECTORS` (no fixed parameters).
    params : dict, optional
        Parameters by Python name; one that the method's estimator does not accept
        is an error naming the option.
    validate : bool, default=True
        Check the values by the estimator's own rules
        (:func:`fedep.params.validate_params`) before returning.

    Returns
    -------
    BaseFederatedDetector
        Unfitted.

    Raises
    ------
    ValueError
        Unknown method, a parameter that does not apply, or (``validate``) the
        estimator's own message for a bad value.
    """
    spec = _method(method)
    cls, fixed = spec.estimator, spec.fixed
    params = dict(params or {})
    accepted = set(inspect.signature(cls.__init__).parameters) - {"self"}
    for name in params:
        if name not in accepted:
            raise ValueError(f"{option_name(name)} does not apply to method {method}")
    clash = [k for k in fixed if k in params and params[k] != fixed[k]]
    if clash:
        raise ValueError(f"{option_name(clash[0])} is fixed by method {method} ({dict(fixed)})")
    est = cls(**{**params, **fixed})
    if validate:
        validate_params(est)
    return est

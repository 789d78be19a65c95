"""The one fit driver: every phase of a federated fit, the same over every transport.

:func:`fit_gateways` runs a detector's fit over :class:`~fedep.federation.gateways.Gateways`:

1. the feature pipeline of gateways holding raw tables (``Gateways.features``);
2. the moments of their features -> the standardisation (:func:`standardization`);
3. the rank: ``n_components``, or for ``"auto"`` the optimal hard threshold of the
   spectrum of the summed Gram matrices (:func:`choose_gateway_rank`);
4. record trimming's concentration steps (:func:`fedep.core.trimming.concentration_steps`)
   around
5. a fit on the kept records: the detector's own step (the setup and rounds of FedEP
   and FedPG, with the one-shot start from the gateways' sketches; the closed form of a
   baseline);
6. the finish (``Gateways.finalize``).

``BaseFederatedDetector.fit`` calls it over :class:`~fedep.federation.gateways.LocalGateways`,
the Flower ServerApp over its own transport (``fedep.flower.gateways.FlowerGateways``):
one sequence, so both give the same model (tested). A new phase is one step here plus
one method per transport.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from fedep.core.rank import choose_rank
from fedep.core.stats import Moments, combine_moments, standardization_from_moments
from fedep.federation.gateways import Gateways, Standardization
from fedep.federation.rounds import FederationResult

__all__ = [
    "FitOutcome",
    "check_rank",
    "choose_gateway_rank",
    "fit_gateways",
    "standardization",
]


@dataclass
class FitOutcome:
    """What :func:`fit_gateways` found.

    Attributes
    ----------
    std : Standardization
        The final standardisation (after record trimming's, when it moved it).
    rank : int
    rank_reason : str
        How the rank was chosen (one line, the estimators' ``rank_reason_``).
    features : FeaturePipeline or None
        The fitted feature pipeline (gateways holding raw tables).
    components : ndarray of shape (n_components, n_features)
        The global basis, orthonormal rows.
    client_bases : ndarray of shape (n_clients, n_features, n_components) or None
        The personalised bases ``W_i`` (None where they stay on the gateways).
    federation : FederationResult or None
        The last fit's rounds (FedEP, FedPG).
    trim_history : list of dict
        One record per concentration step of record trimming.
    labels : list
        The gateways of the last fit, in aggregation order.
    finalized : list
        The gateways that confirmed the final model.
    """

    std: Standardization
    rank: int
    rank_reason: str
    features: object
    components: np.ndarray
    client_bases: np.ndarray | None
    federation: FederationResult | None
    trim_history: list[dict]
    labels: list
    finalized: list = field(default_factory=list)


def standardization(pooled: Moments, *, pipeline=None, standardize: bool = True) -> Standardization:
    """The standardisation of the merged moments ``pooled``: the one rule.

    With a feature pipeline that scales, its own federated scaling replaces this one
    (mean 0, scale 1); ``standardize=False`` keeps the centring only.
    """
    if not (np.isfinite(pooled.mean).all() and np.isfinite(pooled.m2).all()):
        j = int(np.flatnonzero(~(np.isfinite(pooled.mean) & np.isfinite(pooled.m2)))[0])
        raise ValueError(
            f"feature {j}: the gateways' moments are not finite (values beyond float64's "
            "range); rescale it (e.g. log1p) or fit a DataFrame with features='auto'"
        )
    mean, scale, constant = standardization_from_moments(pooled)
    if pipeline is not None and pipeline.scale_rule is not None:
        mean, scale = np.zeros_like(mean), np.ones_like(scale)
    elif not standardize:
        scale = np.ones_like(scale)
    return Standardization(mean, scale, constant)


def check_rank(n_components, n_features: int) -> None:
    """Refuse a given rank above the number of features (one line)."""
    if n_components != "auto" and n_components > n_features:
        raise ValueError(f"n_components={n_components} must be <= n_features={n_features}")


def choose_gateway_rank(est, gateways: Gateways, std: Standardization) -> tuple[int, str]:
    """The rank and why: ``n_components``, or for ``"auto"`` the optimal hard threshold
    of the merged spectrum (:func:`fedep.core.rank.choose_rank`).

    Each gateway sends the Gram matrix of its standardised records (n_features x
    n_features; no record); the transport sums them in gateway order.
    """
    if est.n_components != "auto":
        r = int(est.n_components)
        return r, f"r={r}: n_components={r} given"
    cap, why = est._rank_cap()
    gram, counts = gateways.gram(std)
    choice = choose_rank(gram, counts, max_rank=cap, max_rank_reason=why)
    return choice.rank, choice.reason


def fit_gateways(
    est,
    gateways: Gateways,
    *,
    on_round: Callable[[int, np.ndarray, dict], None] | None = None,
    warn: bool = True,
) -> FitOutcome:
    """Fit ``est``'s model over ``gateways``: every phase, in order.

    Parameters
    ----------
    est : BaseFederatedDetector
        Validated; its hyper-parameters drive every phase. Sets the fit's attributes
        of the rounds and of record trimming (``n_components_``, ``rank_reason_``,
        ``history_``, ``n_iter_``, ``stop_reason_``, ``trim_history_``, ...); the
        fitted arrays are the caller's to set from the outcome (in-process:
        ``set_fitted``; over Flower each gateway fits its own).
    gateways : Gateways
    on_round : callable, optional
        ``on_round(round, V, record)`` after each round.
    warn : bool, default=True
        Warn (``ConvergenceWarning``) when the rounds stop before ``tol``.

    Returns
    -------
    FitOutcome
    """
    pipe = gateways.features()

    def merged_std() -> Standardization:
        # the moments of the gateways still in the run (a transport may drop one)
        return standardization(
            combine_moments(gateways.moments()), pipeline=pipe, standardize=bool(est.standardize)
        )

    std = merged_std()
    check_rank(est.n_components, std.mean.shape[0])
    while True:
        labels = list(gateways.labels)
        est.n_components_, est.rank_reason_ = choose_gateway_rank(est, gateways, std)
        if list(gateways.labels) == labels:
            break
        # A gateway left while the rank was chosen: its moments leave the scaling, and
        # the others' Gram matrices are asked again in the new units.
        std = merged_std()
    rng = np.random.default_rng(est.random_state)

    def fit_kept(mean, scale, V, same):
        kept_std = Standardization(mean, scale, std.constant)
        # Set before the rounds, so that a callback can score with them.
        est.mean_, est.scale_, est.constant_features_ = mean, scale, std.constant
        V0 = V if est._warm_start(V, same) else None
        V, client_bases, res = est._fit_kept(
            gateways, kept_std, V0, rng, on_round=on_round, warn=warn
        )
        return V, (client_bases, res, kept_std)

    _, _, V, (client_bases, res, final_std) = est._trimmed_fit(
        gateways.records(), fit_kept, std.mean, std.scale
    )
    outcome = FitOutcome(
        std=final_std,
        rank=est.n_components_,
        rank_reason=est.rank_reason_,
        features=pipe,
        components=np.ascontiguousarray(V.T),
        client_bases=client_bases,
        federation=res,
        trim_history=list(est.trim_history_),
        labels=list(gateways.labels),
    )
    outcome.finalized = gateways.finalize(outcome)
    return outcome

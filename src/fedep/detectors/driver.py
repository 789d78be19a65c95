"""The one fit driver: every phase of a federated fit, the same over every transport.

:func:`fit_gateways` runs a detector's fit over :class:`~fedep.federation.gateways.Gateways`:

1. the feature pipeline of gateways holding raw tables (``Gateways.features``);
2. the moments of their features -> the standardisation (:func:`standardization`);
3. the rank: ``n_components``, or for ``"auto"`` the optimal hard threshold of the
   spectrum of the summed Gram matrices (:func:`choose_gateway_rank`);
4. what operators know (:mod:`fedep.detectors.trust`: a trusted reference, analyst
   feedback) and record trimming's concentration steps
   (:func:`fedep.core.trimming.concentration_steps`) around
5. a fit on the kept records: the detector's own step (the setup and rounds of FedEP
   and FedPG, with the one-shot start from the gateways' sketches; the closed form of a
   baseline);
6. the finish (``Gateways.finalize``).

A warm start (:class:`WarmStart`, a previous model) replaces steps 1-3 by the
model's own feature pipeline, standardisation and rank, and starts step 5 at its
consensus, each gateway at its own carried state (new gateways at the consensus),
without the one-shot sketches (re-merges, when the estimator makes them, test whether
the data moved: see ``_FederatedMixin._fit_kept``).

``BaseFederatedDetector.fit`` calls it over :class:`~fedep.federation.gateways.LocalGateways`,
the Flower ServerApp over its own transport (``fedep.flower.gateways.FlowerGateways``):
one sequence, so both give the same model (tested). A new phase is one step here plus
one method per transport.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from fedep.core._threads import blas_threads
from fedep.core.benign import BenignModes
from fedep.core.rank import choose_rank
from fedep.core.stats import Moments, combine_moments, standardization_from_moments
from fedep.detectors import suppression
from fedep.detectors import trust as trusted
from fedep.detectors.lineage import new_lineage
from fedep.federation.gateways import Gateways, Standardization
from fedep.federation.rounds import FederationResult

__all__ = [
    "FitOutcome",
    "WarmStart",
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
    trust : dict or None
        What a trusted reference gave (:func:`fedep.detectors.trust.finish`): the
        threshold, the estimated share and how, the trimming decision, the feedback's
        counts; None without a reference.
    feedback : dict or None
        The confirmed attacks and the records they excluded, summed over the gateways
        (None without confirmed attacks).
    client_states : dict of str -> ndarray or None
        The personalised states after the rounds (``W``, ``dual``, ``ssn`` stacked in
        ``labels`` order; :func:`fedep.core.cohort.client_states`), what a later warm
        start carries; None where they stay on the gateways or for a closed form.
    benign_modes : BenignModes or None
        Suppression rules from the gateways' confirmed false positives
        (:func:`fedep.detectors.suppression.learn`); None without.
    lineage : dict
        The new model's lineage (:func:`fedep.detectors.lineage.new_lineage`: a fresh
        id, the warm start's model as parent, the rows and the gateways).
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
    trust: dict | None = None
    feedback: dict | None = None
    client_states: dict | None = None
    lineage: dict = field(default_factory=dict)
    benign_modes: BenignModes | None = None


@dataclass(frozen=True)
class WarmStart:
    """A previous model to refit from (:func:`fit_gateways` ``start``).

    Attributes
    ----------
    std : Standardization
        The model's standardisation (kept: the carried bases are in its units).
    rank : int
    V : ndarray of shape (n_features, rank)
        The consensus the rounds start at.
    states : dict
        Gateway label -> its carried state (:data:`fedep.core.cohort.START_KEYS`);
        a gateway absent from it (new to the federation) starts at ``V``.
    features : FeaturePipeline or None
        The model's fitted feature pipeline (kept, not refitted).
    parent : dict or None
        The model's ``lineage_`` (the new model's parent).
    parent_sha256 : str or None
        The integrity digest of the model's file, when it was loaded from one.
    """

    std: Standardization
    rank: int
    V: np.ndarray
    states: dict
    features: object = None
    parent: dict | None = None
    parent_sha256: str | None = None


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
    start: WarmStart | None = None,
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
    start : WarmStart, optional
        Refit from a previous model (see the module docstring); the first fit on the
        kept records starts there, record trimming's refits as usual.

    Returns
    -------
    FitOutcome

    The fit runs under the BLAS thread limit of a large product
    (:func:`fedep.core._threads.blas_threads`: the free cores), so a product not
    limited by its own call takes no more threads than a busy machine can give.
    """
    with blas_threads(math.inf):
        return _fit_phases(est, gateways, on_round=on_round, warn=warn, start=start)


def _fit_phases(est, gateways, *, on_round, warn, start) -> FitOutcome:
    """:func:`fit_gateways`' phases, in order."""
    if start is None:
        pipe = gateways.features()
        moments: list = []

        def merged_std() -> Standardization:
            # the moments of the gateways still in the run (a transport may drop one)
            moments[:] = gateways.moments()
            return standardization(
                combine_moments(moments), pipeline=pipe, standardize=bool(est.standardize)
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
    else:
        pipe = gateways.features(start.features)
        n = start.std.mean.shape[0]
        moments = gateways.moments()
        widths = {m.mean.shape[0] for m in moments}
        if widths != {n}:
            raise ValueError(
                f"warm start: the gateways' records have {sorted(widths)} features, the "
                f"model {n}; a warm start needs the model's features"
            )
        std = start.std
        est.n_components_ = int(start.rank)
        est.rank_reason_ = f"r={start.rank}: the rank of the warm-start model"
    rng = np.random.default_rng(est.random_state)
    first = [start]

    def fit_kept(mean, scale, V, same):
        kept_std = Standardization(mean, scale, std.constant)
        # Set before the rounds, so that a callback can score with them.
        est.mean_, est.scale_, est.constant_features_ = mean, scale, std.constant
        V0 = V if est._warm_start(V, same) else None
        warm, first[0] = first[0], None  # the carried state: the first fit only
        if warm is not None:
            V0 = warm.V
        V, client_bases, res = est._fit_kept(
            gateways, kept_std, V0, rng, on_round=on_round, warn=warn,
            start=warm,
        )  # fmt: skip
        return V, (client_bases, res, kept_std, gateways.client_states())

    records = gateways.records()
    trust = trusted.plan(est, records, std)
    _, _, V, (client_bases, res, final_std, states) = est._trimmed_fit(
        records, fit_kept, std.mean, std.scale, trust=trust
    )
    est.trust_ = trusted.finish(est, records, trust, final_std.mean, final_std.scale, V)
    modes = suppression.learn(gateways, final_std) if est.suppression_rules else None
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
        trust=est.trust_,
        feedback=trust.feedback,
        client_states=states,
        benign_modes=modes,
    )
    counts = [int(m.count) for m in moments]
    outcome.lineage = new_lineage(
        None if start is None else start.parent,
        outcome.labels,
        {"rows": sum(counts)},
        parent_sha256=None if start is None else start.parent_sha256,
        sizes=counts if len(counts) == len(outcome.labels) else None,
    )
    outcome.finalized = gateways.finalize(outcome)
    return outcome

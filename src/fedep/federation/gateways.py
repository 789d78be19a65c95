"""The gateways of a fit, as the one fit driver sees them, and their in-process transport.

A fit is a sequence of phases (:func:`fedep.detectors.driver.fit_gateways`): the
feature pipeline, the moments of the features (the standardisation), the Gram matrix
of the standardised records (the rank), record trimming's count queries, the setup of
a fit on the kept records (with the sketches of the one-shot start), the rounds and the
finish. Each phase is one method of :class:`Gateways`; a transport only moves its
messages:

- :class:`LocalGateways`: the records held in this process (``fit``);
- ``fedep.flower.gateways.FlowerGateways``: one Flower message per gateway and phase.

A new phase is one driver step plus one method per transport. No record leaves a
gateway in either: a phase sends standardisations, bases and queries and gets back
moments, sums, counts, sketches and model-side quantities.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from fedep.core.baselines import start_sketch
from fedep.core.benign import attack_counts, mode_sums
from fedep.core.cohort import client_states, make_cohort
from fedep.core.rank import client_gram
from fedep.core.stats import Moments, client_moments, combine_moments
from fedep.core.trimming import LocalRecords, TrimRecords
from fedep.federation.rounds import RoundClients

__all__ = ["Gateways", "GatewaySetup", "LocalGateways", "Standardization"]


@dataclass(frozen=True)
class Standardization:
    """The federated standardisation every gateway applies to its records.

    Attributes
    ----------
    mean, scale : ndarray of shape (n_features,)
    constant : ndarray of bool, shape (n_features,)
        Features constant over every record (their scale is 1).
    """

    mean: np.ndarray
    scale: np.ndarray
    constant: np.ndarray


@dataclass(frozen=True)
class GatewaySetup:
    """What a fit on the kept records tells every gateway before its rounds.

    Attributes
    ----------
    params : dict
        The estimator's parameters (``get_params(deep=False)``, JSON-able, no
        ``callback``): a remote gateway rebuilds and validates the estimator from
        them.
    spec : dict
        The core cohort specification of these parameters
        (:func:`fedep.core.cohort.cohort_spec`).
    rank : int
    rank_reason : str
    sketch_rank : int
        Rank of the one-shot sketch of its kept records each gateway replies (0: none).
    """

    params: dict[str, Any]
    spec: dict[str, Any]
    rank: int
    rank_reason: str
    sketch_rank: int = 0


@runtime_checkable
class Gateways(Protocol):
    """Every phase of a fit, one method each; the gateways keep their records.

    ``labels`` are the gateways still in the fit, in aggregation order (client-label
    order: the order of the in-process blocks). A transport may drop a gateway that
    fails a phase (and say why); it raises when too few are left.
    """

    labels: list

    def features(self, fitted=None):
        """The fitted :class:`~fedep.features.FeaturePipeline` of gateways holding raw
        tables (column summaries -> decisions, moments of the encoded features ->
        scaling), after which their records are its outputs; None when they hold
        numeric records. ``fitted`` (a warm start): that pipeline, fitted before, is
        the run's; nothing is summarised."""

    def moments(self) -> list[Moments]:
        """Each gateway's per-feature moments (count, mean, m2) of its records."""

    def gram(self, std: Standardization) -> tuple[np.ndarray, list[int]]:
        """The sum of the gateways' Gram matrices of their standardised records
        (n_features x n_features) and each gateway's record count."""

    def records(self) -> TrimRecords:
        """Record trimming's view of the gateways (count and sum queries only)."""

    def benign_sums(self, std: Standardization, centres: np.ndarray) -> tuple:
        """The gateways' :func:`fedep.core.benign.mode_sums` of their standardised
        confirmed false positives per nearest centre of ``centres`` (k, n), summed in
        gateway order: counts (k,), sums (k, n), Gram matrices (k, n, n)."""

    def attack_counts(self, std: Standardization, modes) -> np.ndarray:
        """The gateways' :func:`fedep.core.benign.attack_counts` of their standardised
        confirmed attacks within each of ``modes``, summed: (k, len(GUARD_STEPS))."""

    def setup(
        self, std: Standardization, setup: GatewaySetup, start: dict | None = None
    ) -> list[np.ndarray] | None:
        """Start a fit on the kept records: every gateway takes ``std`` and ``setup``,
        and drops any model state of an earlier fit. Returns the gateways' one-shot
        sketches (``setup.sketch_rank`` > 0), else None.

        ``start`` (a warm start): label -> that gateway's carried state
        (:data:`fedep.core.cohort.START_KEYS`); each gateway gets its own only, and
        starts its rounds there (a gateway without one starts at the consensus)."""

    def round_clients(self, V0: np.ndarray) -> RoundClients:
        """The gateways as the round loop sees them, starting at ``V0`` (n, r)."""

    def client_bases(self) -> np.ndarray | None:
        """The personalised bases ``W_i`` (d, n, r) after the rounds, or None where
        they stay on the gateways."""

    def client_states(self) -> dict[str, np.ndarray] | None:
        """Every gateway's personalised state after the rounds
        (:func:`fedep.core.cohort.client_states`: ``W``, ``dual``, ``ssn``, stacked in
        label order), what a later warm start carries; None where it stays on the
        gateways."""

    def kept_blocks(self, std: Standardization) -> list[np.ndarray]:
        """The kept standardised records themselves, for the closed-form baselines
        that need them in one place (a remote transport refuses)."""

    def finalize(self, outcome) -> list:
        """Send the final model (:class:`~fedep.detectors.driver.FitOutcome`) to every
        gateway still in the fit; returns the labels of those that confirmed."""


class LocalGateways:
    """:class:`Gateways` over records held in this process (the estimators' ``fit``).

    Parameters
    ----------
    labels : sequence
        Client ids, in the order of ``blocks``.
    blocks : list of ndarray of shape (N_i, n_features)
        Each gateway's model features (after the feature pipeline when there is one).
    pipeline : FeaturePipeline or None
        The pipeline fitted per gateway on their frames (``FeaturePipeline.fit`` with
        ``groups``: each gateway summarised separately), or None.
    feature_names : sequence of str, optional
        Names of the features (for the one-line error on values whose moments overflow).
    reference : list of ndarray of shape (M_i, n_features), optional
        Each gateway's trusted records (:mod:`fedep.core.reference`); only aggregates
        of them leave :class:`~fedep.core.trimming.LocalRecords`.
    attack, benign : list of ndarray of bool, shape (N_i,), optional
        Each gateway's records an analyst confirmed as attacks / as false positives.
    """

    def __init__(
        self,
        labels,
        blocks: list[np.ndarray],
        pipeline=None,
        feature_names=None,
        reference=None,
        attack=None,
        benign=None,
    ):
        self.labels = list(labels)
        self.blocks = blocks
        self.pipeline = pipeline
        self.feature_names = feature_names
        self._records = LocalRecords(blocks, reference, attack, benign)
        # set by setup(): what the next round_clients() builds its cohort from
        self._std: Standardization | None = None
        self._spec: dict | None = None
        self._cohort = None
        self._start: list | None = None

    def features(self, fitted=None):
        return self.pipeline

    def moments(self) -> list[Moments]:
        with np.errstate(over="ignore", invalid="ignore"):
            parts = [client_moments(b) for b in self.blocks]
            pooled = combine_moments(parts)
        bad = np.flatnonzero(~(np.isfinite(pooled.mean) & np.isfinite(pooled.m2)))
        if bad.size:
            # the sums of squares of values beyond ~1e154 overflow float64: a scale of
            # inf would make every score 0 (the feature pipeline log-transforms such
            # columns; the numeric path takes the values as they are)
            j = int(bad[0])
            names = self.feature_names
            what = f"feature {str(names[j])!r}" if names is not None else f"feature {j}"
            top = max(float(np.max(np.abs(b[:, j]))) if len(b) else 0.0 for b in self.blocks)
            raise ValueError(
                f"{what}: values up to {top:.3g} overflow float64 moments; rescale it "
                "(e.g. log1p) or fit a DataFrame with features='auto'"
            )
        return parts

    def gram(self, std: Standardization) -> tuple[np.ndarray, list[int]]:
        gram: Any = 0.0
        for b in self.blocks:
            gram = gram + client_gram(b, std.mean, std.scale)
        return gram, [b.shape[0] for b in self.blocks]

    def records(self) -> LocalRecords:
        return self._records

    def standardized(self, std: Standardization) -> list[np.ndarray]:
        """Every record of each gateway, standardised (kept for the next call)."""
        return self._records.standardized(std.mean, std.scale)

    def benign_sums(self, std: Standardization, centres: np.ndarray) -> tuple:
        Z = self.standardized(std)
        benign = self._records.benign or [np.zeros(z.shape[0], dtype=bool) for z in Z]
        parts = [mode_sums(z[b], centres) for z, b in zip(Z, benign, strict=True)]
        return tuple(sum(p[i] for p in parts) for i in range(3))

    def attack_counts(self, std: Standardization, modes) -> np.ndarray:
        Z = self.standardized(std)
        attack = self._records.attack or [np.zeros(z.shape[0], dtype=bool) for z in Z]
        return sum(attack_counts(z[a], modes) for z, a in zip(Z, attack, strict=True))

    def kept_blocks(self, std: Standardization) -> list[np.ndarray]:
        return self._records.kept(self.standardized(std))

    def setup(
        self, std: Standardization, setup: GatewaySetup, start: dict | None = None
    ) -> list[np.ndarray] | None:
        self._std, self._spec, self._cohort = std, setup.spec, None
        self._start = None if start is None else [start.get(lab) for lab in self.labels]
        if not setup.sketch_rank:
            return None
        k, spec = setup.sketch_rank, setup.spec
        return [start_sketch(b, k, spec) for b in self.kept_blocks(std)]

    def round_clients(self, V0: np.ndarray):
        self._cohort = make_cohort(self._spec, self.kept_blocks(self._std), V0, self._start)
        return self._cohort

    def client_bases(self) -> np.ndarray | None:
        # W alone: state_arrays() would also copy every record's U and A (FedEP)
        return None if self._cohort is None else self._cohort.W.copy()

    def client_states(self) -> dict[str, np.ndarray] | None:
        return None if self._cohort is None else client_states(self._cohort)

    def finalize(self, outcome) -> list:
        # The estimator holds every gateway's model: nothing to send.
        return list(self.labels)

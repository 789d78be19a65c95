"""The baselines a reviewer asks for: pooled, local-only and one-shot federated PCA."""

from __future__ import annotations

import numpy as np

from fedep.core.baselines import client_sketch, local_pca, oneshot_merge, pooled_pca_blocks
from fedep.detectors.base import (
    _COMMON_CONSTRAINTS,
    _COMMON_SUMMARIES,
    _POSITIVE_INT,
    BaseFederatedDetector,
)


class _ClosedForm(BaseFederatedDetector):
    """A baseline fitted in closed form (no rounds): the common parameters only.

    Parameters
    ----------
    n_components, features, standardize, contamination, trim_steps, trim_share,
        trim_start, reference_fpr, suppression_rules, random_state
        As in :class:`fedep.FedEP`.
    """

    def __init__(
        self,
        n_components="auto",
        *,
        features="auto",
        standardize=True,
        contamination=0.05,
        trim_steps=0,
        trim_share=None,
        trim_start="all",
        reference_fpr=0.01,
        suppression_rules=False,
        random_state=None,
    ):
        self.n_components = n_components
        self.features = features
        self.standardize = standardize
        self.contamination = contamination
        self.trim_steps = trim_steps
        self.trim_share = trim_share
        self.trim_start = trim_start
        self.reference_fpr = reference_fpr
        self.suppression_rules = suppression_rules
        self.random_state = random_state


class PooledPCA(_ClosedForm):
    """Centralised PCA on the pooled records: the upper bound a federation is compared with.

    ``groups`` only sets the per-client thresholds; the basis ignores them (this
    baseline moves every record to one place, which a federation must not do).
    """

    warns_one_client = False  # pooled by design: one client is what it is

    def _fit_clients(self, blocks, rng, V0=None):
        V = pooled_pca_blocks(blocks, self._rank())  # no pooled copy of the records
        return V, np.broadcast_to(V, (len(blocks), *V.shape)).copy()


class LocalPCA(_ClosedForm):
    """Local-only PCA: every client fits its own subspace, nothing is shared.

    Scoring with ``groups`` uses each client's own basis. Without ``groups`` (a record
    of no known gateway) the score is the mean of the clients' residual energies,
    stored as ``components_``-free scoring; ``components_`` holds the top subspace of
    the average client projector for reference.
    """

    def _fit_clients(self, blocks, rng, V0=None):
        G = np.stack([b.T @ b for b in blocks])
        Wc = local_pca(G, self._rank())
        P = np.mean(Wc @ np.swapaxes(Wc, 1, 2), axis=0)
        V = local_pca(P[None], self._rank())[0]
        return V, Wc

    def _global_scores(self, Z, fn):
        # A record of no known gateway: the mean of the clients' scores.
        return np.mean([fn(Z, B.T) for B in self.client_components_], axis=0)


class OneShotPCA(BaseFederatedDetector):
    """One-shot federated PCA: clients send ``U_k Sigma_k`` once, the server merges.

    Parameters
    ----------
    n_components : int or "auto", default="auto"
        As in :class:`FedEP`; ``"auto"`` is at most ``sketch_rank`` when given.
    sketch_rank : int or None, default=None
        Rank ``k`` of each client's sketch (default ``2 * n_components_``); ``k`` equal to
        ``n_features`` reproduces pooled PCA exactly.
    features, standardize, contamination, trim_steps, trim_share,
        trim_start, reference_fpr, suppression_rules, random_state
        As in :class:`FedEP`.
    """

    def __init__(
        self,
        n_components="auto",
        *,
        sketch_rank=None,
        features="auto",
        standardize=True,
        contamination=0.05,
        trim_steps=0,
        trim_share=None,
        trim_start="all",
        reference_fpr=0.01,
        suppression_rules=False,
        random_state=None,
    ):
        self.n_components = n_components
        self.sketch_rank = sketch_rank
        self.features = features
        self.standardize = standardize
        self.contamination = contamination
        self.trim_steps = trim_steps
        self.trim_share = trim_share
        self.trim_start = trim_start
        self.reference_fpr = reference_fpr
        self.suppression_rules = suppression_rules
        self.random_state = random_state

    _parameter_constraints: dict = {**_COMMON_CONSTRAINTS, "sketch_rank": [*_POSITIVE_INT, None]}
    _parameter_summaries: dict = {
        **_COMMON_SUMMARIES,
        "sketch_rank": "rank of each client's sketch (none: 2 x the rank)",
    }

    def _check_param_combinations(self) -> None:
        """``sketch_rank >= n_components`` (called by :func:`fedep.params.validate_params`)."""
        if (
            self.sketch_rank is not None
            and self.n_components != "auto"
            and self.sketch_rank < self.n_components
        ):
            raise ValueError(
                f"sketch_rank must be >= n_components={self.n_components}; got {self.sketch_rank!r}"
            )

    def _rank_cap(self):
        if self.sketch_rank is None:
            return None, ""
        return int(self.sketch_rank), f"sketch_rank={self.sketch_rank}"

    def _fit_clients(self, blocks, rng, V0=None):
        r = self._rank()
        k = 2 * r if self.sketch_rank is None else self.sketch_rank
        V = oneshot_merge([client_sketch(b, k) for b in blocks], r)
        return V, np.broadcast_to(V, (len(blocks), *V.shape)).copy()

"""Anomaly detectors with the scikit-learn / PyOD conventions.

Every detector learns a low-rank model of normal traffic from records spread over
clients (gateways) and scores a record by its residual energy outside the subspace:
higher score = more anomalous.

Shapes: ``X`` is (n_samples, n_features); ``groups`` (n_samples,) gives the client of
each row. ``components_`` is (n_components, n_features) with orthonormal rows, like
:class:`sklearn.decomposition.PCA`; ``client_components_`` is
(n_clients, n_components, n_features).

Conventions (PyOD): ``decision_function`` (higher = more anomalous),
``decision_scores_`` (training scores), ``threshold_`` (the ``1 - contamination``
quantile of the training scores: never test data), ``labels_`` and ``predict``
returning 0 (normal) / 1 (anomaly). ``score_samples`` is the scikit-learn sign
(higher = more normal).
"""

from __future__ import annotations

import numbers
import time
import warnings
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import check_is_fitted, validate_data

from fedep.core.baselines import client_sketch, local_pca, oneshot_merge, pooled_pca
from fedep.core.fedep import FedEPCohort, FedEPSettings
from fedep.core.fedpg import FedPGCohort, FedPGSettings
from fedep.core.scoring import feature_contributions, residual_energy
from fedep.core.stats import client_moments, combine_moments, standardization_from_moments
from fedep.core.stiefel import polar, random_stiefel
from fedep.federation.inprocess import run_inprocess

__all__ = [
    "BaseFederatedDetector",
    "FedEP",
    "FedPG",
    "PooledPCA",
    "LocalPCA",
    "OneShotPCA",
    "ABLATION_CASES",
]

#: The paper's ablation cases as FedEP parameters (Case IV is FedEP itself).
ABLATION_CASES: dict[str, dict[str, Any]] = {
    "I": {"sparse_corruption": False, "beta": 0.0},
    "II": {"sparse_corruption": True, "beta": 0.0},
    "III": {"sparse_corruption": False},
    "IV": {},
}


def _check_number(name, value, *, low=None, high=None, low_open=False, integer=False):
    kind = numbers.Integral if integer else numbers.Real
    if isinstance(value, bool) or not isinstance(value, kind) or not np.isfinite(value):
        raise ValueError(
            f"{name} must be a finite {'integer' if integer else 'number'}; got {value!r}"
        )
    if low is not None and (value < low or (low_open and value == low)):
        op = ">" if low_open else ">="
        raise ValueError(f"{name} must be {op} {low}; got {value!r}")
    if high is not None and value > high:
        raise ValueError(f"{name} must be <= {high}; got {value!r}")


def _check_groups(groups, n: int) -> np.ndarray:
    """One client id per row of X, as a 1-D array without NaN/inf."""
    groups = np.asarray(groups)
    if groups.ndim != 1 or groups.shape[0] != n:
        raise ValueError(
            f"groups must be 1-D with one client id per row of X ({n} rows); "
            f"got shape {groups.shape}"
        )
    if groups.dtype.kind == "f" and not np.isfinite(groups).all():
        raise ValueError("groups holds NaN or inf client ids")
    return groups


class BaseFederatedDetector(BaseEstimator):
    """Shared machinery: validation, federated standardisation, scoring, thresholds.

    Subclasses implement ``_fit_clients(blocks, rng)`` returning the global basis
    (n_features, n_components) and the per-client bases (d, n_features, n_components).
    """

    #: Fitted attributes written to model files, besides components and statistics.
    _persist_scalars: tuple[str, ...] = ()

    def _validate_common(self):
        _check_number("n_components", self.n_components, low=1, integer=True)
        _check_number("contamination", self.contamination, low=0.0, high=0.5, low_open=True)
        if self.standardize not in (True, False):
            raise ValueError(f"standardize must be True or False; got {self.standardize!r}")

    def _split_clients(self, X, groups):
        n = X.shape[0]
        if groups is None:
            labels = np.array([0])
            inverse = np.zeros(n, dtype=int)
        else:
            groups = _check_groups(groups, n)
            labels, inverse = np.unique(groups, return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        counts = np.bincount(inverse, minlength=labels.size)
        r = self.n_components
        small = np.flatnonzero(counts < max(r, 2))
        if small.size:
            c = labels[small[0]].tolist()
            raise ValueError(
                f"client {c!r} has {counts[small[0]]} rows; every client needs at least "
                f"max(n_components, 2) = {max(r, 2)} rows"
            )
        ends = np.cumsum(counts)
        blocks = [X[order[e - c : e]] for c, e in zip(counts, ends, strict=True)]
        return labels, blocks, inverse

    def fit(self, X, y=None, groups=None):
        """Fit the detector on records spread over clients.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training records (no NaN or inf).
        y : ignored
            Present for API consistency (unsupervised).
        groups : array-like of shape (n_samples,), optional
            Client (gateway) id of each row; all rows form one client if omitted.

        Returns
        -------
        self
        """
        self._validate_common()
        self._validate_params_extra()
        X = validate_data(self, X, dtype=np.float64, ensure_min_samples=2, reset=True)
        if self.n_components > X.shape[1]:
            raise ValueError(f"n_components={self.n_components} must be <= n_features={X.shape[1]}")
        rng = np.random.default_rng(self.random_state)
        labels, blocks, inverse = self._split_clients(X, groups)
        # Federated standardisation: each client sends (count, mean, m2) per feature.
        pooled = combine_moments(client_moments(b) for b in blocks)
        mean, scale, constant = standardization_from_moments(pooled)
        if not self.standardize:
            scale = np.ones_like(scale)
        self.mean_, self.scale_, self.constant_features_ = mean, scale, constant
        blocks = [(b - mean) / scale for b in blocks]
        self.clients_ = labels
        t0 = time.perf_counter()
        V, Wc = self._fit_clients(blocks, rng)
        self.fit_time_ = time.perf_counter() - t0
        self.components_ = V.T.copy()
        self.client_components_ = np.swapaxes(Wc, 1, 2).copy()
        # Thresholds from training scores only: global, and each client's own.
        Z = (X - mean) / scale
        self.decision_scores_ = residual_energy(Z, self.components_.T)
        q = 1.0 - self.contamination
        self.threshold_ = float(np.quantile(self.decision_scores_, q))
        thr = np.empty(labels.size)
        for i, b in enumerate(blocks):
            thr[i] = np.quantile(residual_energy(b, self.client_components_[i].T), q)
        self.client_thresholds_ = thr
        self.labels_ = (self.decision_scores_ > self.threshold_).astype(int)
        return self

    # ------------------------------------------------------------------ hooks
    def _validate_params_extra(self):
        pass

    def _fit_clients(self, blocks, rng):  # pragma: no cover - abstract
        raise NotImplementedError

    def _init_basis(self, blocks, rng):
        n = blocks[0].shape[1]
        if self.init == "random":
            return random_stiefel(n, self.n_components, rng)
        if self.init == "oneshot":
            return oneshot_merge(
                [client_sketch(b, self.n_components) for b in blocks], self.n_components
            )
        raise ValueError(f"init must be 'random' or 'oneshot'; got {self.init!r}")

    # ------------------------------------------------------------------ scoring
    def _transform_input(self, X):
        check_is_fitted(self, "components_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return (X - self.mean_) / self.scale_

    def _client_index(self, groups, n):
        groups = _check_groups(groups, n)
        pos = np.searchsorted(self.clients_, groups)
        pos = np.clip(pos, 0, self.clients_.size - 1)
        known = self.clients_[pos] == groups
        return np.where(known, pos, -1)

    def _apply(self, X, groups, fn):
        Z = self._transform_input(X)
        out = fn(Z, self.components_.T)
        if groups is None:
            return out
        idx = self._client_index(groups, Z.shape[0])
        for c in np.unique(idx[idx >= 0]):
            rows = idx == c
            out[rows] = fn(Z[rows], self.client_components_[c].T)
        return out

    def decision_function(self, X, groups=None):
        """Anomaly score (residual energy) of each record; higher = more anomalous.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        groups : array-like of shape (n_samples,), optional
            Client id per row: each row is scored by its client's personalised basis
            (rows of unknown clients by the global basis). Omitted: global basis.

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        return self._apply(X, groups, residual_energy)

    def score_samples(self, X, groups=None):
        """Opposite of :meth:`decision_function` (scikit-learn sign: higher = more normal)."""
        return -self.decision_function(X, groups)

    def feature_contributions(self, X, groups=None):
        """Per-feature share of each record's score, shape (n_samples, n_features).

        Rows sum to :meth:`decision_function`; large entries say which features make a
        record anomalous.
        """
        return self._apply(X, groups, feature_contributions)

    def row_thresholds(self, groups, n_samples):
        """The threshold each record is flagged at, shape (n_samples,).

        ``threshold_`` for every row without ``groups``; with ``groups``, a known
        client's own ``client_thresholds_`` entry and ``threshold_`` for unknown ones.
        """
        if groups is None:
            return np.full(n_samples, self.threshold_)
        idx = self._client_index(groups, n_samples)
        return np.where(idx >= 0, self.client_thresholds_[np.maximum(idx, 0)], self.threshold_)

    def predict(self, X, groups=None):
        """0 (normal) / 1 (anomaly) using thresholds learnt from training scores.

        With ``groups``, a row of a known client is compared with that client's own
        threshold (from its training scores under its personalised basis).
        """
        s = self.decision_function(X, groups)
        return (s > self.row_thresholds(groups, s.shape[0])).astype(int)

    def fit_predict(self, X, y=None, groups=None):
        """Fit, then return the 0/1 labels of the training records."""
        return self.fit(X, groups=groups).labels_

    # ------------------------------------------------------------------ io
    def save(self, path):
        """Write the fitted detector to ``path`` (versioned, checksummed, no pickle)."""
        from fedep.persistence import save_model

        save_model(self, path)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.target_tags.required = False
        return tags


class _FederatedMixin:
    def _run(self, cohort, method, V0, rng):
        callback = self.callback if callable(getattr(self, "callback", None)) else None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            res = run_inprocess(
                cohort,
                method,
                V0,
                n_rounds=self.n_rounds,
                tol=self.tol,
                client_fraction=self.client_fraction,
                rng=rng,
                callback=callback,
                warn=False,
            )
        if res.stop_reason != "converged" and self.tol > 0:
            warnings.warn(
                f"{type(self).__name__} stopped at the round cap n_rounds={self.n_rounds} "
                f"before reaching tol={self.tol}; increase n_rounds or tol",
                ConvergenceWarning,
                stacklevel=4,
            )
        self.history_ = res.history
        self.n_iter_ = res.n_rounds
        self.stop_reason_ = res.stop_reason
        self.consensus_ = res.V
        return polar(res.V)

    def _validate_federation(self):
        _check_number("n_rounds", self.n_rounds, low=1, integer=True)
        _check_number("tol", self.tol, low=0.0)
        _check_number("client_fraction", self.client_fraction, low=0.0, high=1.0, low_open=True)


class FedEP(_FederatedMixin, BaseFederatedDetector):
    """Personalised, robust federated PCA detector (FedEP, Xiu et al.).

    Solves ``min sum_i ||(I - W_i W_i^T)(X_i - S_i)||^2 + alpha ||S_i||_1 +
    beta_i ||W_i||_{2,1}`` s.t. ``W_i = V``, ``W_i^T W_i = I`` by ADMM with a manifold
    proximal gradient W-step (see :mod:`fedep.core.fedep`).

    Parameters
    ----------
    n_components : int, default=5
        Rank of the normal-traffic subspace.
    alpha : float, default=1.0
        Weight of ``||S||_1``. On standardised data, training entries whose residual
        exceeds ``alpha / 2`` are absorbed by ``S`` as corruption.
    beta : float, default=1e-3
        Weight of the row-sparsity term ``||W||_{2,1}``; per record when
        ``penalty_scaling="relative"`` (``beta_i = beta * N_i``).
    mu : float, default=3.0
        ADMM penalty of ``X - S - U = 0`` (> 0).
    nu : float, default=1.0
        ADMM penalty of ``W_i = V`` (> 0); with ``penalty_scaling="relative"`` in units
        of each client's largest Gram eigenvalue.
    sparse_corruption : bool, default=True
        Model sparse corruption ``S`` (False: ``S = 0``; ablation Cases I and III).
    penalty_scaling : {"relative", "paper"}, default="relative"
        ``"paper"`` uses ``beta`` and ``nu`` literally for every client.
    consensus_weights : {"auto", "curvature", "samples", "uniform"}, default="auto"
        Per-client consensus penalties ``nu_i`` and so the weights of the server's
        V-step ``V = sum_i (nu_i W_i + Pi_i) / sum_i nu_i`` (its exact minimiser):
        ``"curvature"`` ``nu_i = nu * ||X_i||_2^2``; ``"samples"`` ``nu_i = nu * N_i``
        (sample-weighted; ``nu`` is then per record); ``"uniform"`` ``nu_i = nu``
        (plain mean). ``"auto"``: ``"curvature"`` with ``penalty_scaling="relative"``,
        ``"uniform"`` with ``"paper"``.
    n_rounds : int, default=100
        Communication-round cap.
    tol : float, default=1e-5
        Stop when the relative consensus, data and dual residuals are all below it.
    inner_max_iter : int, default=2
        ManPG iterations per W-step (T_max). The W-step is warm-started from the
        previous round (point and SSN multiplier), so a couple of iterations per
        round suffice: an inexact ADMM whose rounds are cheap (see the benchmark).
    client_fraction : float, default=1.0
        Fraction of clients taking part in each round.
    init : {"random", "oneshot"}, default="random"
        Initial consensus: a random orthonormal basis, or one-shot merged client SVDs.
    standardize : bool, default=True
        Z-score features with global statistics aggregated from per-client moments.
    contamination : float, default=0.05
        Expected share of anomalies in training data; sets ``threshold_``.
    random_state : int, Generator or None, default=None
        Seeds the initial basis and client sampling.
    callback : callable or None, default=None
        ``callback(round, record)`` after each round (progress display).

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
        Global basis (orthonormal rows): polar factor of the consensus ``V``.
    client_components_ : ndarray of shape (n_clients, n_components, n_features)
        Personalised bases ``W_i^T``.
    clients_ : ndarray of shape (n_clients,)
        Client ids in the order of ``client_components_``.
    mean_, scale_ : ndarray of shape (n_features,)
    threshold_ : float
    client_thresholds_ : ndarray of shape (n_clients,)
    decision_scores_ : ndarray of shape (n_samples,)
    history_ : list of dict
        Per-round objective, augmented Lagrangian, residuals, iterations, time.
    n_iter_ : int
        Rounds run.
    stop_reason_ : str
    """

    _persist_scalars = ("n_iter_", "stop_reason_")

    def __init__(
        self,
        n_components=5,
        *,
        alpha=1.0,
        beta=1e-3,
        mu=3.0,
        nu=1.0,
        sparse_corruption=True,
        penalty_scaling="relative",
        consensus_weights="auto",
        n_rounds=100,
        tol=1e-5,
        inner_max_iter=2,
        client_fraction=1.0,
        init="random",
        standardize=True,
        contamination=0.05,
        random_state=None,
        callback=None,
    ):
        self.n_components = n_components
        self.alpha = alpha
        self.beta = beta
        self.mu = mu
        self.nu = nu
        self.sparse_corruption = sparse_corruption
        self.penalty_scaling = penalty_scaling
        self.consensus_weights = consensus_weights
        self.n_rounds = n_rounds
        self.tol = tol
        self.inner_max_iter = inner_max_iter
        self.client_fraction = client_fraction
        self.init = init
        self.standardize = standardize
        self.contamination = contamination
        self.random_state = random_state
        self.callback = callback

    def _validate_params_extra(self):
        self._validate_federation()
        _check_number("alpha", self.alpha, low=0.0, low_open=True)
        _check_number("beta", self.beta, low=0.0)
        _check_number("mu", self.mu, low=0.0, low_open=True)
        _check_number("nu", self.nu, low=0.0, low_open=True)
        _check_number("inner_max_iter", self.inner_max_iter, low=1, integer=True)
        if self.penalty_scaling not in ("relative", "paper"):
            raise ValueError(
                f"penalty_scaling must be 'relative' or 'paper'; got {self.penalty_scaling!r}"
            )
        if self.consensus_weights not in ("auto", "curvature", "samples", "uniform"):
            raise ValueError(
                "consensus_weights must be 'auto', 'curvature', 'samples' or 'uniform'; "
                f"got {self.consensus_weights!r}"
            )
        if self.sparse_corruption not in (True, False):
            raise ValueError(
                f"sparse_corruption must be True or False; got {self.sparse_corruption!r}"
            )

    def settings(self) -> FedEPSettings:
        """The numerical settings this estimator passes to the core."""
        return FedEPSettings(
            alpha=float(self.alpha),
            mu=float(self.mu),
            use_sparse=bool(self.sparse_corruption),
            inner_max_iter=int(self.inner_max_iter),
            penalty_scaling=self.penalty_scaling,
            consensus_weights=self.consensus_weights,
        )

    def _fit_clients(self, blocks, rng):
        V0 = self._init_basis(blocks, rng)
        cohort = FedEPCohort(blocks, V0, self.beta, self.nu, self.settings())
        V = self._run(cohort, "fedep", V0, rng)
        return V, cohort.W.copy()


class FedPG(_FederatedMixin, BaseFederatedDetector):
    """FedPG baseline detector: federated PCA on the Grassmann manifold (Nguyen et al.).

    Parameters
    ----------
    n_components : int, default=5
    lr : float or None, default=None
        Local Riemannian step; None gives each client ``N_i / (2 ||X_i||_2^2 + rho)``.
        The authors' value is 1e-4.
    rho : float, default=0.01
        ADMM penalty (authors' default).
    local_epochs : int, default=30
        Local gradient steps per round (authors' default).
    n_rounds, tol, client_fraction, init, standardize, contamination, random_state, callback
        As in :class:`FedEP` (``tol`` applies to the change of the consensus basis).

    Attributes
    ----------
    Same as :class:`FedEP`.
    """

    _persist_scalars = ("n_iter_", "stop_reason_")

    def __init__(
        self,
        n_components=5,
        *,
        lr=None,
        rho=0.01,
        local_epochs=30,
        n_rounds=100,
        tol=1e-6,
        client_fraction=1.0,
        init="random",
        standardize=True,
        contamination=0.05,
        random_state=None,
        callback=None,
    ):
        self.n_components = n_components
        self.lr = lr
        self.rho = rho
        self.local_epochs = local_epochs
        self.n_rounds = n_rounds
        self.tol = tol
        self.client_fraction = client_fraction
        self.init = init
        self.standardize = standardize
        self.contamination = contamination
        self.random_state = random_state
        self.callback = callback

    def _validate_params_extra(self):
        self._validate_federation()
        if self.lr is not None:
            _check_number("lr", self.lr, low=0.0, low_open=True)
        _check_number("rho", self.rho, low=0.0)
        _check_number("local_epochs", self.local_epochs, low=1, integer=True)

    def _fit_clients(self, blocks, rng):
        V0 = self._init_basis(blocks, rng)
        settings = FedPGSettings(
            lr=None if self.lr is None else float(self.lr),
            rho=float(self.rho),
            local_epochs=int(self.local_epochs),
        )
        cohort = FedPGCohort(blocks, V0, settings)
        V = self._run(cohort, "fedpg", V0, rng)
        return V, cohort.W.copy()


class PooledPCA(BaseFederatedDetector):
    """Centralised PCA on the pooled records: the upper bound a federation is compared with.

    ``groups`` only sets the per-client thresholds; the basis ignores them (this
    baseline moves every record to one place, which a federation must not do).
    """

    def __init__(self, n_components=5, *, standardize=True, contamination=0.05, random_state=None):
        self.n_components = n_components
        self.standardize = standardize
        self.contamination = contamination
        self.random_state = random_state

    def _fit_clients(self, blocks, rng):
        V = pooled_pca(np.vstack(blocks), self.n_components)
        return V, np.broadcast_to(V, (len(blocks), *V.shape)).copy()


class LocalPCA(BaseFederatedDetector):
    """Local-only PCA: every client fits its own subspace, nothing is shared.

    Scoring with ``groups`` uses each client's own basis. Without ``groups`` (a record
    of no known gateway) the score is the mean of the clients' residual energies,
    stored as ``components_``-free scoring; ``components_`` holds the top subspace of
    the average client projector for reference.
    """

    def __init__(self, n_components=5, *, standardize=True, contamination=0.05, random_state=None):
        self.n_components = n_components
        self.standardize = standardize
        self.contamination = contamination
        self.random_state = random_state

    def _fit_clients(self, blocks, rng):
        G = np.stack([b.T @ b for b in blocks])
        Wc = local_pca(G, self.n_components)
        P = np.mean(Wc @ np.swapaxes(Wc, 1, 2), axis=0)
        V = local_pca(P[None], self.n_components)[0]
        return V, Wc

    def _apply(self, X, groups, fn):
        Z = self._transform_input(X)
        out = np.mean([fn(Z, B.T) for B in self.client_components_], axis=0)
        if groups is None:
            return out
        idx = self._client_index(groups, Z.shape[0])
        for c in np.unique(idx[idx >= 0]):
            rows = idx == c
            out[rows] = fn(Z[rows], self.client_components_[c].T)
        return out

    def fit(self, X, y=None, groups=None):
        super().fit(X, y, groups)
        # Global scores are the client average, not the reference components_.
        Z = (validate_data(self, X, dtype=np.float64, reset=False) - self.mean_) / self.scale_
        self.decision_scores_ = np.mean(
            [residual_energy(Z, B.T) for B in self.client_components_], axis=0
        )
        self.threshold_ = float(np.quantile(self.decision_scores_, 1.0 - self.contamination))
        self.labels_ = (self.decision_scores_ > self.threshold_).astype(int)
        return self


class OneShotPCA(BaseFederatedDetector):
    """One-shot federated PCA: clients send ``U_k Sigma_k`` once, the server merges.

    Parameters
    ----------
    n_components : int, default=5
    sketch_rank : int or None, default=None
        Rank ``k`` of each client's sketch (default ``2 * n_components``); ``k`` equal to
        ``n_features`` reproduces pooled PCA exactly.
    standardize, contamination, random_state
        As in :class:`FedEP`.
    """

    def __init__(
        self,
        n_components=5,
        *,
        sketch_rank=None,
        standardize=True,
        contamination=0.05,
        random_state=None,
    ):
        self.n_components = n_components
        self.sketch_rank = sketch_rank
        self.standardize = standardize
        self.contamination = contamination
        self.random_state = random_state

    def _validate_params_extra(self):
        if self.sketch_rank is not None:
            _check_number("sketch_rank", self.sketch_rank, low=self.n_components, integer=True)

    def _fit_clients(self, blocks, rng):
        k = 2 * self.n_components if self.sketch_rank is None else self.sketch_rank
        V = oneshot_merge([client_sketch(b, k) for b in blocks], self.n_components)
        return V, np.broadcast_to(V, (len(blocks), *V.shape)).copy()

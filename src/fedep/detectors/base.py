"""The base detector: validation, federated standardisation, fitted state, scoring.

One definition of a fitted detector (:meth:`BaseFederatedDetector.set_fitted` then
:meth:`BaseFederatedDetector.fit_thresholds`), used by ``fit``, by loading
(:mod:`fedep.modelfile.estimator`) and by a Flower gateway. Subclasses supply the basis
(``_fit_clients``) through hooks.
"""

from __future__ import annotations

import math
import time
import warnings
from numbers import Integral, Real
from typing import Any

import numpy as np
from scipy.special import erf
from sklearn.base import BaseEstimator, clone
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import (
    _check_feature_names_in,
    check_array,
    check_is_fitted,
    validate_data,
)

from fedep.core.scoring import feature_contributions, residual_energy
from fedep.core.trimming import (
    TRIM_STARTS,
    ScoreCounts,
    concentration_steps,
    estimate_contamination,
    log_scores,
)
from fedep.data.readers.frames import release_arrow_memory
from fedep.detectors.blocks import apply_in_blocks, block_rows, client_thresholds, training_scores
from fedep.detectors.blocks import check_groups as _check_groups
from fedep.detectors.driver import WarmStart, check_rank, fit_gateways
from fedep.detectors.lineage import data_window
from fedep.detectors.suppression import set_modes, suppressed_by
from fedep.detectors.trust import describe as describe_trust
from fedep.detectors.trust import share_estimator, trusted_blocks
from fedep.detectors.warm import warm_input, warm_start
from fedep.features import FeaturePipeline
from fedep.federation.gateways import LocalGateways
from fedep.federation.privacy import (
    PrivacyBudget,
    PrivateGateways,
    check_private,
    gateway_seeds,
    is_private,
)
from fedep.params import validate_params

#: The paper's ablation cases as FedEP parameters (Case IV is FedEP itself).
ABLATION_CASES: dict[str, dict[str, Any]] = {
    "I": {"sparse_corruption": False, "beta": 0.0},
    "II": {"sparse_corruption": True, "beta": 0.0},
    "III": {"sparse_corruption": False},
    "IV": {},
}

#: The arrays that make a detector fitted (and that a model file stores), with the
#: scalars ``threshold_`` and ``n_features_in_``: see ``set_fitted``.
FITTED_ARRAYS = (
    "components_",
    "client_components_",
    "clients_",
    "mean_",
    "scale_",
    "constant_features_",
    "client_thresholds_",
)

#: Fitted arrays a model file holds when the fit had them (the rounds' personalised
#: state that a warm start carries; files written before them load without).
STATE_ARRAYS = ("consensus_", "client_duals_", "client_multipliers_")

_POSITIVE_INT = [Interval(Integral, 1, None, closed="left")]
_COMMON_CONSTRAINTS: dict = {
    "n_components": [StrOptions({"auto"}), *_POSITIVE_INT],
    "features": [StrOptions({"auto", "numeric"}), FeaturePipeline],
    "standardize": ["boolean"],
    "contamination": [StrOptions({"auto"}), Interval(Real, 0.0, 0.5, closed="right")],
    "trim_steps": [Interval(Integral, 0, None, closed="left")],
    "trim_share": [Interval(Real, 0.0, 0.5, closed="neither"), None],
    "trim_start": [StrOptions(set(TRIM_STARTS))],
    "reference_fpr": [Interval(Real, 0.0, 0.5, closed="neither")],
    "suppression_rules": ["boolean"],
    "random_state": ["random_state"],
}
_FEDERATION_CONSTRAINTS: dict = {
    "n_rounds": _POSITIVE_INT,
    "tol": [Interval(Real, 0.0, None, closed="left")],
    "client_fraction": [Interval(Real, 0.0, 1.0, closed="right")],
    "init": [StrOptions({"random", "oneshot"})],
    "warm_start": ["boolean"],
    "callback": [callable, None],
}

# One plain sentence per parameter, declared next to its constraint: the command
# line's help (fedep.params). The numpydoc entry of each class is the long form.
_COMMON_SUMMARIES: dict = {
    "n_components": "rank of the normal-traffic subspace; auto: from the spectrum",
    "features": "auto: the feature pipeline; numeric: numeric columns as they are",
    "standardize": "z-score the features (statistics merged from the clients)",
    "contamination": "share of anomalies in training: sets the threshold (auto: estimated)",
    "trim_steps": "refits without the most anomalous records (0: none)",
    "trim_share": "share trimmed at each refit (none: the contamination)",
    "trim_start": "trim from all records, or the half nearest the median",
    "reference_fpr": "share of trusted records flagged",
    "suppression_rules": "alert suppression rules from benign --feedback labels",
    "random_state": "seed of the initial basis and client sampling",
}
_FEDERATION_SUMMARIES: dict = {
    "n_rounds": "most communication rounds",
    "tol": "how close to the optimum the fit stops (relative, of the objective)",
    "client_fraction": "share of the clients in each round",
    "init": "start basis: oneshot = merged client SVDs, or random",
    "warm_start": "refit a fitted model from its own state (the CLI takes the model file)",
    "penalty_scaling": "relative: penalties scaled to each client; paper: literal",
    "consensus_weights": "clients' weights: auto, curvature, samples or uniform",
    "aggregation": "server step: mean; median, trimmed or grassmann resist bad gateways",
}


class BaseFederatedDetector(BaseEstimator):
    """Shared machinery: validation, federated standardisation, scoring, thresholds.

    Subclasses declare ``_parameter_constraints`` (the one parameter table: see
    :mod:`fedep.params`) and implement ``_fit_clients(blocks, rng)`` returning the
    global basis (n_features, n_components) and the per-client bases
    (d, n_features, n_components). A detector is fitted by :meth:`set_fitted` (the
    arrays of :data:`FITTED_ARRAYS`) followed by :meth:`fit_thresholds`
    (the threshold rule), whether by ``fit``, by a Flower gateway or by loading.
    """

    _parameter_constraints: dict = dict(_COMMON_CONSTRAINTS)
    _parameter_summaries: dict = dict(_COMMON_SUMMARIES)

    #: Fitted scalars written to model files besides ``threshold_``/``n_features_in_``.
    persisted_scalars: tuple[str, ...] = (
        "contamination_",
        "contamination_reason_",
        "score_mean_",
        "score_std_",
        "n_components_",
        "rank_reason_",
    )

    #: Whether the fit is rounds of messages (FedEP, FedPG), which any transport
    #: carries; the closed forms need the records in one place (in-process only).
    runs_rounds = False

    #: Whether ``fit`` without ``groups`` warns that all rows form one client (a
    #: federated detector fitted on one client is rarely what was meant).
    warns_one_client = True

    def _validate_params(self):
        validate_params(self)

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
        # With "auto" the rank is bounded by the smallest client (see _choose_rank).
        r = 1 if self.n_components == "auto" else self.n_components
        small = np.flatnonzero(counts < max(r, 2))
        if small.size:
            c = labels[small[0]].tolist()
            raise ValueError(
                f"client {c!r} has {counts[small[0]]} rows; every client needs at least "
                f"max(n_components, 2) = {max(r, 2)} rows"
            )
        ends = np.cumsum(counts)
        blocks = []
        for c, e in zip(counts, ends, strict=True):
            rows = order[e - c : e]
            # a client whose rows are consecutive (one client; one file per gateway) is
            # a view of X, not a copy
            contiguous = rows[-1] - rows[0] == c - 1
            blocks.append(X[rows[0] : rows[-1] + 1] if contiguous else X[rows])
        return labels, blocks, order

    def fit(self, X, y=None, groups=None, *, reference=None, reference_groups=None, feedback=None):
        """Fit the detector on records spread over clients.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training records (no NaN or inf).
        y : ignored
            Present for API consistency (unsupervised).
        groups : array-like of shape (n_samples,), optional
            Client (gateway) id of each row; all rows form one client if omitted (a
            ``UserWarning`` says so, once per fit; ``clients_`` is then ``[0]``).
        reference : array-like, optional
            Traffic each gateway trusts (``docs/reference.md``): a boolean mask of the
            rows of ``X``, or records of their own (M, n_features), or a DataFrame of
            ``X``'s columns, with ``reference_groups``. Used from aggregates only: the
            contamination share (``contamination="auto"``), whether and how much to
            trim, the trimming start, and ``threshold_`` at ``reference_fpr``.
        reference_groups : array-like of shape (M,), optional
            The gateway of each reference record (records of their own only).
        feedback : array-like of shape (n_samples,), optional
            Analyst labels per row: ``"benign"`` (trusted: never trimmed nor excluded),
            ``"attack"``
            (it and the records near it in the model's terms leave the fit:
            :func:`fedep.core.feedback.near_attacks`) or empty. ``feedback_`` says
            how many records each label moved.

        Returns
        -------
        self
        """
        self._validate_params()
        start = self.warm_start_state()
        window = data_window(X)
        if start is None:
            X, pipe, names_in = self._fit_input(X, groups)
        else:
            X, pipe, names_in = self._warm_input(X, groups)
        if groups is None and self.warns_one_client and X.shape[0] > 1:
            warnings.warn(
                f"no groups given: all {X.shape[0]} rows form one client (pass "
                f"groups=<client id of each row> to fit {type(self).__name__} federated)",
                UserWarning,
                stacklevel=2,
            )
        if pipe is not None:
            release_arrow_memory()  # the encoded table (when the caller let it go)
        check_rank(self.n_components, X.shape[1])
        labels, blocks, order = self._split_clients(X, groups)
        del X  # the blocks hold the rows (views of X where they can): one copy, not two
        names = getattr(self, "feature_names_in_", None)
        ref, attack, benign, self.feedback_ = trusted_blocks(
            blocks,
            order,
            labels,
            reference=reference,
            reference_groups=reference_groups,
            feedback=feedback,
            transform=None if pipe is None else pipe.transform,
        )
        gateways = self._local_gateways(labels, blocks, pipe, names, ref, attack, benign)
        t0 = time.perf_counter()
        out = fit_gateways(self, gateways, on_round=getattr(self, "callback", None), start=start)
        self.fit_time_ = time.perf_counter() - t0
        if getattr(self, "dp_epsilon", None) is not None:  # the privacy spent
            private = isinstance(gateways, PrivateGateways)
            self.dp_epsilon_ = gateways.epsilon_spent() if private else math.inf
            self.dp_delta_ = float(self.dp_delta)
            self.dp_noise_multiplier_ = gateways.z if private else 0.0
        self.set_fitted(
            components=out.components,
            client_components=np.swapaxes(out.client_bases, 1, 2),
            clients=labels,
            mean=out.std.mean,
            scale=out.std.scale,
            constant_features=out.std.constant,
            feature_names=names_in,
            features=pipe,
            rank_reason=out.rank_reason,
        )
        self.feedback_["excluded"] = 0 if out.feedback is None else out.feedback["excluded"]
        set_modes(self, out.benign_modes)
        self.set_client_states(out.client_states)
        self.fit_thresholds(None, gateways.standardized(out.std), order, trust=out.trust)
        self.lineage_ = {**out.lineage, "window": window}  # the window of X (its ts)
        self.__dict__.pop("file_sha256_", None)  # this fit is no file's content
        return self

    def warm_start_state(self) -> WarmStart | None:
        """What ``warm_start=True`` refits from (:func:`fedep.detectors.warm.warm_start`):
        this detector's fitted state, else None (a cold fit)."""
        return warm_start(self)

    def _warm_input(self, X, groups):
        """``X`` for a warm start (:func:`fedep.detectors.warm.warm_input`)."""
        if groups is not None:
            _check_groups(groups, np.shape(X)[0])
        return warm_input(self, X)

    def set_client_states(self, states: dict | None) -> None:
        """The rounds' personalised state (``states``: ``W``, ``dual``, ``ssn`` stacked
        over ``clients_``; :func:`fedep.core.cohort.client_states`) as the fitted
        ``client_duals_`` (n_clients, n_components, n_features), like
        ``client_components_``, and ``client_multipliers_`` (n_clients, n_components,
        n_components); None removes them (a closed form, or a Flower server)."""
        for k in ("client_duals_", "client_multipliers_"):
            self.__dict__.pop(k, None)
        if states is None:
            return
        self.client_duals_ = np.swapaxes(np.asarray(states["dual"], dtype=float), 1, 2)
        if "ssn" in states:
            self.client_multipliers_ = np.asarray(states["ssn"], dtype=float)

    def _local_gateways(
        self, labels, blocks, pipe, names, reference=None, attack=None, benign=None
    ) -> LocalGateways:
        """The in-process gateways (with each one's trusted reference and analyst
        feedback: :mod:`fedep.detectors.trust`): with ``dp_epsilon`` (finite), gateways
        that clip and noise every release
        (:class:`~fedep.federation.privacy.PrivateGateways`)."""
        if not is_private(self):
            return LocalGateways(
                labels,
                blocks,
                pipe,
                feature_names=names,
                reference=reference,
                attack=attack,
                benign=benign,
            )
        if any(len(r) for r in reference or []) or attack is not None:
            raise ValueError(
                "dp_epsilon: a trusted reference or analyst feedback is not used under "
                "differential privacy (its queries are not noised); fit without one"
            )
        check_private(self, pipe)
        budget = PrivacyBudget.of(self)
        return PrivateGateways(
            labels,
            blocks,
            epsilon=budget.epsilon,
            delta=budget.delta,
            clip=budget.clip,
            releases=budget.releases,
            method=self.server_step,
            seeds=gateway_seeds(self.random_state, len(blocks)),  # each gateway's own
            feature_names=names,
        )

    def _fit_kept(self, gateways, std, V0, rng, *, on_round=None, warn=True, start=None):
        """The fit on the gateways' kept records, standardised by ``std`` (hook of
        :func:`~fedep.detectors.driver.fit_gateways`).

        Returns the global basis (n_features, r, orthonormal), the personalised bases
        (d, n_features, r; None where they stay on the gateways) and the rounds'
        :class:`~fedep.federation.rounds.FederationResult` (None for a closed form).
        This default is a closed form on the records themselves (``_fit_clients``),
        which only an in-process transport gives.
        """
        V, Wc = self._fit_clients(gateways.kept_blocks(std), rng, V0)
        return V, Wc, None

    def _rank(self) -> int:
        """The rank the hooks use: ``n_components``, or ``n_components_`` chosen by this
        ``fit`` for ``"auto"`` (so hooks called directly with an integer work unfitted)."""
        if self.n_components != "auto":
            return int(self.n_components)
        return self.n_components_

    def _rank_cap(self) -> tuple[int | None, str]:
        """A bound on the automatic rank from this detector's parameters (hook)."""
        return None, ""

    def _uses_pipeline(self, X) -> bool:
        """Whether ``fit`` on ``X`` goes through a :class:`FeaturePipeline`."""
        import pandas as pd

        return isinstance(X, pd.DataFrame) and not (
            isinstance(self.features, str) and self.features == "numeric"
        )

    def _fit_input(self, X, groups):
        """The numeric training matrix, the fitted pipeline (or None) and the raw columns.

        A DataFrame with ``features="auto"`` (or a :class:`FeaturePipeline`) is encoded
        by a pipeline fitted per gateway (``groups``) without pooling rows; anything else
        is today's numeric path (``validate_data``, which also sets the feature names).
        """
        if not self._uses_pipeline(X):
            X = validate_data(self, X, dtype=np.float64, ensure_min_samples=2, reset=True)
            return X, None, None
        if X.shape[0] < 2:
            # before the pipeline, whose summaries of an empty table say less
            raise ValueError(
                f"Found array with {X.shape[0]} sample(s) (shape={X.shape}) while a "
                f"minimum of 2 is required by {type(self).__name__}."
            )
        if groups is not None:
            groups = _check_groups(groups, X.shape[0])
        pipe = FeaturePipeline() if isinstance(self.features, str) else clone(self.features)
        Z = pipe.fit_transform(X, groups=groups)  # every row encoded once
        if Z.shape[1] == 0:
            raise ValueError(
                "the feature pipeline kept no column of X (see features_.decisions_ or "
                "pass features='numeric' / FeaturePipeline(include=...))"
            )
        Z = check_array(Z, dtype=np.float64, ensure_min_samples=2)
        return Z, pipe, [str(c) for c in X.columns]

    def _trimmed_fit(self, records, fit, mean, scale, trust=None):
        """``fit`` on every record, or record trimming by concentration steps
        (``trim_steps``; :func:`fedep.core.trimming.concentration_steps`, the one loop
        of the in-process ``fit`` and of a Flower server).

        Parameters
        ----------
        records : TrimRecords
            The gateways' records (:class:`~fedep.core.trimming.LocalRecords`
            in-process).
        fit : callable
            ``fit(mean, scale, V, same)`` -> ``(V, fitted)`` on the kept records
            (``V`` the previous consensus, ``same`` whether the kept records are the
            previous fit's; :meth:`_warm_start`).
        mean, scale : ndarray of shape (n_features,)
            The standardisation of every record (mean 0 and scale 1 after a
            feature pipeline that scales: the trimming then refits both on the
            pipeline's outputs, as on raw records).

        trust : fedep.detectors.trust.Trust, optional
            The reference's and the feedback's decisions (steps, start, share).

        Returns
        -------
        mean, scale, V, fitted
            The final standardisation and what the last ``fit`` returned; sets
            ``trim_history_`` and ``n_trim_steps_``.
        """
        mean, scale, V, fitted, history = concentration_steps(
            records,
            fit,
            mean,
            scale,
            steps=int(self.trim_steps) if trust is None else trust.steps,
            start=self.trim_start if trust is None else trust.start,
            start_model=None if trust is None else trust.start_model,
            estimate=None if trust is None else share_estimator(records, trust),
            kept=trust is not None and bool(trust.feedback and trust.feedback["excluded"]),
            share=self.trim_share,
            contamination=self.contamination,
            min_rows=max(self._rank(), 2),
            rescale=bool(self.standardize),
        )
        self.trim_history_ = history
        self.n_trim_steps_ = len(history)
        return mean, scale, V, fitted

    # ------------------------------------------------------------------ fitted state
    def set_fitted(
        self,
        *,
        components,
        client_components,
        clients,
        mean,
        scale,
        constant_features,
        feature_names=None,
        features=None,
        rank_reason=None,
        copy: bool = True,
    ) -> None:
        """Make this detector fitted: the one place the fitted arrays are set.

        Parameters
        ----------
        components : ndarray of shape (n_components, n_features)
            Global basis, orthonormal rows.
        client_components : ndarray of shape (n_clients, n_components, n_features)
        clients : ndarray of shape (n_clients,)
        mean, scale : ndarray of shape (n_features,)
        constant_features : ndarray of bool, shape (n_features,)
        feature_names : sequence of str, optional
            Sets ``feature_names_in_`` (``fit`` sets it itself from a DataFrame on the
            numeric path). With ``features``: the raw input columns (default: the
            pipeline's ``feature_names_in_``).
        features : FeaturePipeline, optional
            A fitted pipeline whose output the arrays are in: sets ``features_``,
            ``feature_names_out_`` (its output names) and ``n_features_in_`` = the number
            of raw input columns. Without it, ``n_features_in_`` is ``n_features`` and
            ``feature_names_out_`` is ``feature_names_in_`` when there are names.
        rank_reason : str, optional
            Sets ``rank_reason_``, how the rank was chosen (default: given as
            ``n_components``); ``n_components_`` is the number of components.
        copy : bool, default=True
            Copy the bases (False: take float64 arrays as they are, e.g. freshly read
            from a model file, whose per-client bases can be its largest array).
        """
        self.components_ = np.array(components, dtype=float, copy=copy or None)
        self.client_components_ = np.array(client_components, dtype=float, copy=copy or None)
        self.clients_ = np.asarray(clients)
        self.mean_ = np.asarray(mean, dtype=float)
        self.scale_ = np.asarray(scale, dtype=float)
        self.constant_features_ = np.asarray(constant_features, dtype=bool)
        self.n_features_in_ = int(self.components_.shape[1])
        self.n_components_ = int(self.components_.shape[0])
        r = self.n_components_
        self.rank_reason_ = str(rank_reason) if rank_reason else f"r={r}: n_components={r} given"
        for stale in ("features_", "feature_names_out_"):
            self.__dict__.pop(stale, None)
        if features is not None:
            out = np.asarray(features.get_feature_names_out(), dtype=object)
            if out.shape[0] != self.n_features_in_:
                raise ValueError(
                    f"the feature pipeline has {out.shape[0]} output features, the model "
                    f"{self.n_features_in_}"
                )
            if feature_names is None:
                feature_names = features.feature_names_in_
            self.features_ = features
            self.feature_names_out_ = out
            self.n_features_in_ = len(feature_names)
        if feature_names is not None:
            self.feature_names_in_ = np.asarray([str(c) for c in feature_names], dtype=object)
        names = getattr(self, "feature_names_in_", None)
        if features is None and names is not None and len(names) == self.n_features_in_:
            self.feature_names_out_ = names

    def fit_thresholds(self, Z, blocks, order=None, trust=None) -> None:
        """The threshold rule, from training scores only (PyOD's idea of the same name).

        ``decision_scores_`` are the global scores of the standardised training rows
        ``Z`` (n_samples, n_features); ``contamination_`` the ``contamination``
        parameter or, for ``"auto"``, its estimate from these scores
        (:func:`fedep.core.trimming.estimate_contamination`); ``threshold_`` their
        ``1 - contamination_`` quantile; ``score_mean_``/``score_std_`` their mean and
        standard deviation (for :meth:`predict_proba`); ``client_thresholds_`` the
        same quantile of each client's block in
        ``blocks`` (list of (N_i, n_features), in ``clients_`` order) under its own
        basis; ``labels_`` the training rows' 0/1 flags.

        ``Z`` None: the rows are those of ``blocks``, concatenated, in the training
        order ``order`` (row ``order[i]`` of the training data is the i-th of the
        concatenated blocks), so that no pooled copy of the records is made.

        ``trust`` (:func:`fedep.detectors.trust.finish`; a fit with a reference):
        ``threshold_`` is its threshold (``reference_fpr`` of the trusted records above
        it), ``contamination_`` its estimate for ``"auto"``, and each client's
        threshold the quantile of its own scores at the level ``threshold_`` has among
        its global scores. ``contamination_reason_`` says how the share was obtained.
        """
        # each block's global scores and (plain scoring) under its client's own basis
        glob = mine = None  # reused below: one pass over the records
        plain = type(self)._global_scores is BaseFederatedDetector._global_scores
        if Z is None:
            if plain:
                glob, mine = training_scores(blocks, self.components_, self.client_components_)
            else:
                glob = [self._global_scores(b, residual_energy) for b in blocks]
            scores = np.concatenate(glob)
            self.decision_scores_ = np.empty_like(scores)
            self.decision_scores_[order] = scores
        else:
            self.decision_scores_ = self._global_scores(Z, residual_energy)
        self.trust_ = trust
        self.contamination_reason_ = describe_trust(trust, self.contamination)
        if trust is not None and trust.get("share") is not None:
            self.contamination_ = float(trust["share"])
        elif self.contamination == "auto":
            counts = ScoreCounts([log_scores(self.decision_scores_)])
            self.contamination_ = estimate_contamination(counts)
        else:
            self.contamination_ = float(self.contamination)
        self.score_mean_ = float(np.mean(self.decision_scores_))
        self.score_std_ = float(np.std(self.decision_scores_))
        if trust is not None:
            self.threshold_ = float(trust["threshold"])
        else:
            self.threshold_ = float(np.quantile(self.decision_scores_, 1.0 - self.contamination_))
        levels = [1.0 - self.contamination_] * len(blocks)
        for i, b in enumerate(blocks if trust is not None else ()):
            own = glob[i] if glob else self._global_scores(b, residual_energy)
            levels[i] = float(np.mean(own <= self.threshold_))
        self.client_thresholds_ = client_thresholds(
            blocks, self.client_components_, levels, own_scores=mine
        )
        self.labels_ = (self.decision_scores_ > self.threshold_).astype(int)

    # ------------------------------------------------------------------ hooks
    def _fit_clients(self, blocks, rng, V0=None):  # pragma: no cover - abstract
        """Global basis (n_features, r) and client bases (d, n_features, r) of ``blocks``;
        ``V0`` (n_features, r), when given, is the previous fit's consensus to start
        from (a warm start, used by the iterative federations)."""
        raise NotImplementedError

    def _global_scores(self, Z, fn):
        """``fn(Z, basis)`` for rows of no known client (hook: LocalPCA averages)."""
        return fn(Z, self.components_.T)

    def _warm_start(self, V, same: bool) -> bool:
        """Whether a refit of record trimming starts at the previous consensus ``V``
        (else as the first fit does: the one-shot merge of the records it fits, or a
        random basis). ``same``: the kept records are those of the previous fit.

        Warm only when the refit continues the previous fit's problem (``same``: a
        share of 0 estimated by ``contamination="auto"`` after a fit on every record),
        or with ``init="random"``. A C-step's fit step is the PCA of the kept records;
        the rounds move a basis along a direction of their spectrum at a rate set by its
        eigenvalue against the consensus penalty (``nu_i`` in units of the largest), and
        the stopping rule weighs changes against the records' whole energy: when the
        spectrum is steep (in the median start's units on TON-IoT, ``lam_10 / lam_1`` ~
        4e-4), rounds from the previous consensus stop long before its weak directions
        reach the new kept set's (TON-IoT, 5 % attacks, FedEP without ``S``: projector
        distance 1.41 from pooled PCA of the same kept records, residual energy 4.5
        times its optimum). The one-shot merge of the kept records is their PCA (up to
        the sketches' truncation).
        """
        return V is not None and (same or getattr(self, "init", "oneshot") != "oneshot")

    # ------------------------------------------------------------------ scoring
    def _transform_input(self, X):
        """Model coordinates of ``X``: through ``features_`` if fitted with a pipeline
        (a DataFrame by column name, any order, extra columns ignored; an array must
        hold the ``feature_names_in_`` columns in that order), else validated as numbers
        and z-scored with ``mean_`` / ``scale_``."""
        check_is_fitted(self, "components_")
        pipe = getattr(self, "features_", None)
        if pipe is None:
            X = validate_data(self, X, dtype=np.float64, reset=False)
            Z = np.subtract(X, self.mean_)
            Z /= self.scale_  # in place: one n x d temporary, not two
            return Z
        import pandas as pd

        if not isinstance(X, pd.DataFrame):
            X = np.asarray(X)
            if X.ndim != 2 or X.shape[1] != self.n_features_in_:
                raise ValueError(
                    f"X has shape {X.shape}, but {type(self).__name__} is expecting "
                    f"{self.n_features_in_} features as input (the columns "
                    "feature_names_in_, or a DataFrame)"
                )
            X = pd.DataFrame(X, columns=list(self.feature_names_in_), copy=False)
        Z = pipe.transform(X)
        if not (isinstance(Z, np.ndarray) and Z.dtype == np.float64 and Z.flags.writeable):
            Z = np.array(Z, dtype=np.float64)
        # in place (the same values as (Z - mean) / scale, without two more copies)
        Z -= self.mean_
        Z /= self.scale_
        return Z

    def _client_index(self, groups, n):
        groups = _check_groups(groups, n)
        pos = np.searchsorted(self.clients_, groups)
        pos = np.clip(pos, 0, self.clients_.size - 1)
        known = self.clients_[pos] == groups
        return np.where(known, pos, -1)

    def scoring_block_rows(self) -> int:
        """Rows scored at a time: a block of model coordinates (rows x the model's
        features, float64) holds at most
        :data:`fedep.detectors.blocks.SCORING_BLOCK_BYTES`, so that a model with very
        many features (a wide vocabulary) costs time, not memory, on a large input.
        ``fedep score`` reads its input in chunks of at most this many rows."""
        check_is_fitted(self, "components_")
        return block_rows(max(self.components_.shape[1], getattr(self, "n_features_in_", 1)))

    def _apply(self, X, groups, fn):
        """``fn`` over ``X`` in blocks of :meth:`scoring_block_rows` rows."""
        return apply_in_blocks(
            X, groups, self.scoring_block_rows(), lambda x, g: self._apply_block(x, g, fn)
        )

    def _apply_block(self, X, groups, fn):
        Z = self._transform_input(X)
        if groups is None:
            return self._global_scores(Z, fn)
        idx = self._client_index(groups, Z.shape[0])
        # each row scored once: by its client's basis, or the global one (idx -1)
        order = np.argsort(idx, kind="stable")
        cuts = np.flatnonzero(np.diff(idx[order])) + 1
        out = None
        for rows in np.split(order, cuts):
            c = int(idx[rows[0]])
            if c < 0:
                part = self._global_scores(Z[rows], fn)
            else:
                part = fn(Z[rows], self.client_components_[c].T)
            if out is None:
                out = np.empty((Z.shape[0], *part.shape[1:]), dtype=part.dtype)
            out[rows] = part
        if out is None:  # no rows
            out = self._global_scores(Z, fn)
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
        record anomalous. Column ``j`` is feature ``get_feature_names_out()[j]``.
        """
        return self._apply(X, groups, feature_contributions)

    def get_feature_names_out(self, input_features=None):
        """Names of the model's features: the columns of :meth:`feature_contributions`
        (and of ``components_``).

        Parameters
        ----------
        input_features : array-like of str, optional
            Without a feature pipeline: the input names (checked against
            ``feature_names_in_`` when fitted with names). With one: must be ``None`` or
            ``feature_names_in_`` (the raw columns; the outputs are the pipeline's).

        Returns
        -------
        ndarray of str objects
            ``feature_names_out_`` (the pipeline's output names, or the DataFrame's
            column names), else ``x0`` .. ``x{n-1}``.
        """
        check_is_fitted(self, "components_")
        if getattr(self, "features_", None) is None:
            return _check_feature_names_in(self, input_features)
        if input_features is not None:
            given = [str(c) for c in input_features]
            if given != [str(c) for c in self.feature_names_in_]:
                raise ValueError("input_features is not equal to feature_names_in_")
        return np.asarray(self.feature_names_out_, dtype=object)

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
        threshold (from its training scores under its personalised basis). A record
        within a benign mode learned from feedback (``detectors.suppression``) is 0.
        """
        flags = (s := self.decision_function(X, groups)) > self.row_thresholds(groups, len(s))
        return (flags & ((rule := suppressed_by(self, X, flags)) is None or rule < 0)) * 1

    def predict_proba(self, X, groups=None):
        """Probability of normal / anomaly per record, shape (n_samples, 2).

        PyOD's ``"unify"`` calibration on the training scores: ``P(anomaly) =
        clip(erf((s - score_mean_) / (score_std_ * sqrt(2))), 0, 1)`` for the score ``s``
        of :meth:`decision_function`, ``P(normal) = 1 - P(anomaly)``. Monotone in the
        score; rows sum to 1. (A ranking-consistent score in [0, 1], not a calibrated
        posterior: ``predict`` uses ``threshold_``, not ``P > 1/2``.)
        """
        p = self.anomaly_probability(self.decision_function(X, groups))
        return np.column_stack([1.0 - p, p])

    def anomaly_probability(self, scores) -> np.ndarray:
        """``P(anomaly)`` of :meth:`predict_proba` for scores already computed.

        Parameters
        ----------
        scores : array-like of shape (n_samples,)
            Scores of :meth:`decision_function` (for instance, the sums of
            :meth:`feature_contributions`' rows, as ``fedep score`` has them).

        Returns
        -------
        ndarray of shape (n_samples,)
            In [0, 1], non-decreasing in the score.
        """
        check_is_fitted(self, "score_mean_")
        s = np.asarray(scores, dtype=float)
        std = max(self.score_std_, np.finfo(float).tiny)
        return np.clip(erf((s - self.score_mean_) / (std * np.sqrt(2.0))), 0.0, 1.0)

    def fit_predict(self, X, y=None, groups=None):
        """Fit, then return the 0/1 labels of the training records."""
        return self.fit(X, groups=groups).labels_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.target_tags.required = False
        return tags

"""The iterative federations: FedEP and FedPG, through the one round loop."""

from __future__ import annotations

import math
import warnings
from numbers import Real

from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions

from fedep._json import jsonable
from fedep.core.aggregation import AGGREGATIONS
from fedep.core.baselines import oneshot_merge
from fedep.core.cohort import cohort_spec, make_cohort
from fedep.core.fedep import CONSENSUS_WEIGHTS, PENALTY_SCALINGS, FedEPSettings
from fedep.core.fedpg import MANIFOLDS, FedPGSettings
from fedep.core.stiefel import polar, random_stiefel
from fedep.detectors.base import (
    _COMMON_CONSTRAINTS,
    _COMMON_SUMMARIES,
    _FEDERATION_CONSTRAINTS,
    _FEDERATION_SUMMARIES,
    _POSITIVE_INT,
    BaseFederatedDetector,
)
from fedep.federation.gateways import GatewaySetup
from fedep.federation.rounds import TOL_REASONS, run_rounds, stop_tests


class _FederatedMixin:
    """The iterative federations (FedEP, FedPG): one cohort, the one round loop."""

    #: The server step of :func:`fedep.federation.server.server_round` ("fedep", "fedpg").
    server_step = ""

    #: Fitted by rounds of messages, so over any transport (Flower included).
    runs_rounds = True

    def cohort_spec(self) -> dict:  # pragma: no cover - abstract
        """These parameters as the core's cohort specification (:mod:`fedep.core.cohort`)."""
        raise NotImplementedError

    def _make_cohort(self, blocks, V0):
        """The core's client side for ``blocks`` (list of (N_i, n)), started at ``V0``."""
        return make_cohort(self.cohort_spec(), blocks, V0)

    def _run_rounds(self, clients, V0, rng, on_round=None, warm=False):
        """The one round loop with these parameters, over in-process or remote clients
        (``warm``: the clients hold a previous fit's state, see ``run_rounds``)."""
        return run_rounds(
            clients,
            self.server_step,
            V0,
            n_rounds=self.n_rounds,
            tol=self.tol,
            client_fraction=self.client_fraction,
            rng=rng,
            on_round=on_round,
            aggregation=self.aggregation,
            remerge=self._remerges(),
            warm=warm,
        )

    def _remerges(self) -> bool:
        """Whether the round loop starts with re-merges (FedEP with ``S``)."""
        return False

    def _fit_kept(self, gateways, std, V0, rng, *, on_round=None, warn=True, start=None):
        """Setup and rounds on the gateways' kept records (the driver's fit step).

        Every gateway takes the standardisation ``std`` and these parameters (and
        replies its one-shot sketch unless the fit is warm, ``V0`` given, or
        ``init="random"``); the round loop then runs from ``V0``, the merge of the
        sketches or a random basis. ``start`` (a warm start from a model,
        :class:`~fedep.detectors.driver.WarmStart`) starts each gateway at its own
        carried state, from the model's consensus; its consensus steps (FedEP with
        ``remerge``) start there, and it meets the stopping test on its own rounds, as a
        cold fit.
        """
        r = self._rank()
        sketch_rank = r if V0 is None and self.init == "oneshot" else 0
        params = {k: v for k, v in self.get_params(deep=False).items() if k != "callback"}
        setup = GatewaySetup(
            params=jsonable(params),
            spec=self.cohort_spec(),
            rank=r,
            rank_reason=self.rank_reason_,
            sketch_rank=sketch_rank,
        )
        if start is None:
            sketches = gateways.setup(std, setup)
        else:
            sketches = gateways.setup(std, setup, start.states)
        if V0 is None:
            n = std.mean.shape[0]
            V0 = oneshot_merge(sketches, r) if sketch_rank else random_stiefel(n, r, rng)
        warm = start is not None
        res = self._run_rounds(gateways.round_clients(V0), V0, rng, on_round, warm)
        self.set_federation_result(res, warn=warn)
        return polar(res.V), gateways.client_bases(), res

    def set_federation_result(self, res, *, warn: bool = True) -> None:
        """History, rounds and stop reason of a federation (in-process or Flower)."""
        if warn and res.stop_reason != TOL_REASONS[self.server_step] and self.tol > 0:
            why = (
                f"at the round cap n_rounds={self.n_rounds}"
                if res.stop_reason == "max_rounds"
                else f"({res.stop_reason}) after {res.n_rounds} rounds"
            )
            last = res.history[-1] if res.history else {}
            tests = stop_tests(last, self.tol, self.server_step) if last else {}
            shown = ", ".join(
                f"{k} {v:.2g} (bound {b:.2g})"
                for k, (v, b) in tests.items()
                if isinstance(v, (int, float)) and v > b
            )
            warnings.warn(
                f"{type(self).__name__} stopped {why} before reaching tol={self.tol}"
                + (f" (last round: {shown})" if shown else "")
                + "; increase n_rounds or tol",
                ConvergenceWarning,
                stacklevel=4,
            )
        self.history_ = res.history
        self.n_iter_ = res.n_rounds
        self.stop_reason_ = res.stop_reason
        last = res.history[-1] if res.history else None
        self.stop_tests_ = (
            {k: [v, b] for k, (v, b) in stop_tests(last, self.tol, self.server_step).items()}
            if last and self.tol > 0
            else {}
        )
        self.consensus_ = res.V


class FedEP(_FederatedMixin, BaseFederatedDetector):
    """Personalised, robust federated PCA detector (FedEP, Xiu et al.).

    Solves ``min sum_i ||(I - W_i W_i^T)(X_i - S_i)||^2 + alpha ||S_i||_1 +
    beta_i ||W_i||_{2,1}`` s.t. ``W_i = V``, ``W_i^T W_i = I`` by ADMM with a manifold
    proximal gradient W-step (see :mod:`fedep.core.fedep`).

    Parameters
    ----------
    n_components : int or "auto", default="auto"
        Rank of the normal-traffic subspace. ``"auto"`` chooses it without labels
        from the merged spectrum: each client sends the Gram matrix of its
        standardised records (n_features x n_features, no record), the server keeps
        the eigenvalues above Gavish and Donoho's optimal hard threshold (noise level
        estimated by the median eigenvalue; see :mod:`fedep.core.rank`), bounded by
        the non-degenerate directions minus one and the smallest client's records.
        The rank is ``n_components_``, the rule's one-line account ``rank_reason_``.
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
    aggregation : {"mean", "median", "trimmed", "grassmann"}, default="mean"
        Server step: ``"mean"`` is the exact V-step above; ``"median"`` (geometric
        median of the proposals ``W_i + Pi_i / nu_i``, each client once),
        ``"trimmed"`` (drops the 20% of clients whose spans are farthest from the
        others', then the V-step of the rest, each weight capped at twice the median)
        and ``"grassmann"`` (geometric median of the clients' projectors on the
        Grassmannian) bound what a minority of compromised gateways can do to the
        global basis, whatever ``nu_i`` they report; they stop by the server's own
        measures (see :mod:`fedep.core.aggregation`,
        :func:`fedep.federation.rounds.converged`).
    n_rounds : int, default=200
        Communication-round cap.
    tol : float, default=1e-4
        How close to the optimum the fit stops, as a relative accuracy of the
        objective: stop when, over the last 10 rounds, no round changed the augmented
        Lagrangian by more than ``tol`` times the objective, the relative primal
        residuals (consensus, data) are at most ``10 tol`` and the relative dual
        residual (the consensus's move) at most ``4 tol``: a first-order stationary
        point, the ADMM test of Boyd et al. (see
        :func:`fedep.federation.rounds.stop_tests`; ``stop_tests_`` holds each value
        and bound). Calibrated so that ``1e-4`` ends within 1 % of the objective a
        long run reaches (docs/convergence.md).
    inner_max_iter : int, default=2
        ManPG iterations per W-step (T_max). The W-step is warm-started from the
        previous round (point and SSN multiplier), so a couple of iterations per
        round suffice: an inexact ADMM whose rounds are cheap (see the benchmark).
    client_fraction : float, default=1.0
        Fraction of clients taking part in each round.
    init : {"oneshot", "random"}, default="oneshot"
        Initial consensus: one-shot merged client SVDs (each client sends its top
        ``n_components`` right singular vectors scaled by their singular values, once;
        a federated start already near the answer), or a random orthonormal basis.
    remerge : bool, default=True
        With ``sparse_corruption`` (and every client in every round, ``aggregation=
        "mean"``): start with exact consensus steps, block coordinate descent of the
        objective at ``W_i = V``. In each such round every client holds ``W_i = V``,
        takes a few data steps (``S_i``, ``U_i``) and sends the Gram factor of its
        cleaned records (n x n, no record); the server minimises the objective over
        ``V`` exactly on their sum (:mod:`fedep.core.consensus`), with momentum
        restarted whenever the objective rises, until ``V`` moves by at most
        ``0.1 sqrt(tol)``; the ADMM then restarts there and certifies stationarity.
        The ADMM alone moves directions of small eigenvalue gap by ``gap / ||G_i||``
        per round and stopped on such plateaus (docs/convergence.md). False: the
        paper's ADMM from the start (see :func:`fedep.federation.rounds.run_rounds`).
    warm_start : bool, default=False
        As scikit-learn's: when fitted (by ``fit`` or loaded from a model file), the
        next ``fit`` refits from this model on its new records: the model's feature
        pipeline, standardisation and rank are kept, every gateway of the model starts
        from its own personalised state (``W_i``, its consensus dual and SSN
        multiplier: ``client_components_``, ``client_duals_``,
        ``client_multipliers_``), a new gateway from the consensus, with no one-shot
        sketch; ``S_i`` settles on the new records by local data steps first. The
        refit meets the same stopping test as a cold fit on its own rounds (at least
        11). With ``remerge`` its exact consensus steps on the new cleaned records start
        at the model's consensus (docs/lineage.md). ``lineage_``
        names the model refitted as the parent. Refused (one line) for new records of
        other features or an integer ``n_components`` other than the model's rank.
        ``fedep fit --warm-start MODEL`` is this with the model file.
    features : {"auto", "numeric"} or FeaturePipeline, default="auto"
        How a pandas DataFrame becomes model features. ``"auto"`` fits a
        :class:`~fedep.features.FeaturePipeline` per gateway without pooling rows
        (log1p of heavy-tailed counts, one-hot of small-vocabulary text, identifiers,
        addresses, timestamps and labels dropped, federated scaling), kept as
        ``features_``; ``"numeric"`` takes every column as a number (z-scored when
        ``standardize``); a FeaturePipeline instance is used (cloned) as the pipeline.
        An ndarray is always taken as numbers. With a pipeline, its scaling replaces
        ``standardize`` (``mean_`` = 0, ``scale_`` = 1) unless its ``scale_rule`` is None.
    standardize : bool, default=True
        Z-score features with global statistics aggregated from per-client moments.
    contamination : "auto" or float, default=0.05
        Share of anomalies in the training data; sets ``threshold_`` (its ``1 -
        contamination`` quantile of the training scores) and the share trimmed by
        ``trim_steps``. ``"auto"`` estimates it without labels from the training
        scores (the share whose log-score is over ``median + 3 * 1.4826 * MAD``; see
        :mod:`fedep.core.trimming`) and stores it as ``contamination_``.
    trim_steps : int, default=0
        Concentration steps of record trimming (0: fit on every record). After a fit,
        each client scores its own records, the server finds from counts of scores
        the cut that trims the ``contamination`` share of all records, each client
        drops its records above the cut and the model is refitted on the rest
        (from the one-shot merge of the kept records with ``init="oneshot"``; warm-
        started at the previous consensus with ``"random"``), until the kept
        set stops changing or after ``trim_steps`` refits. Records are ranked by
        their distance under the probabilistic PCA of the kept records (in-subspace
        and residual parts): trimmed PPCA, robust to whole anomalous records such as
        attacks in unlabelled training traffic (see :mod:`fedep.core.trimming`).
        Scores stay the residual energy. The same loop runs over Flower (run-config
        ``trim-steps``), with the same result.
    trim_share : float in (0, 0.5) or None, default=None
        Share of records trimmed at each concentration step (None: the
        ``contamination`` share, estimated for ``"auto"``). Trimming more than the
        expected contamination is the safe side: clustered attacks at a share close to
        the trimmed one survive trimming.
    trim_start : {"all", "median"}, default="all"
        Kept set the concentration steps start from (with ``trim_steps > 0``).
        ``"all"``: every record (the first fit is the untrimmed one). ``"median"``: the
        half of the records closest (L1 distance in standard deviations) to the
        coordinate-wise median, found from counts, and the standardisation taken from
        the moments of that half (attacks inflate the standard deviations; after a
        feature pipeline, of its outputs: its own scaling saw the attacks too).
        Measured with ``trim_steps=5, trim_share=0.25``: ``"median"`` is far better
        with 20% attacks in the training traffic (NSL-KDD, UNSW-NB15), ``"all"``
        better on clean UNSW-NB15 and with 10-20% on TON-IoT (see
        :mod:`fedep.core.trimming`). With a trusted reference (``fit(...,
        reference=...)``) the steps start from a PPCA of the reference instead; with
        ``contamination="auto"`` and ``trim_steps=0``, the fit keeps the training
        records at or below the reference's 90 % quantile under its PPCA and is
        fitted once on them, when contamination is shown or the reference holds at
        least 80 records (``trust_["decision"]`` says which; docs/reference.md).
    reference_fpr : float in (0, 0.5), default=0.01
        With a trusted reference (``fit(..., reference=...)``): ``threshold_`` is set
        so that this share of the reference records scores above it (a stated
        false-positive rate on trusted traffic) instead of the ``contamination``
        quantile of the training scores. Unused without a reference.
    suppression_rules : bool, default=False
        With analyst feedback (``fit(..., feedback=...)``): learn alert suppression
        rules (benign modes, :mod:`fedep.detectors.suppression`) from the confirmed
        false positives, by sums only; a record within one is not flagged and its
        alert names the rule. Off by default: on NSL-KDD and TON-IoT the rules also
        suppress real attacks that sit near confirmed false positives
        (docs/reference.md).
    dp_epsilon : float or None, default=None
        Differential privacy (in-process, and over Flower where each gateway's
        ClientApp adds the noise and the server accounts): every gateway adds
        Gaussian noise to what it releases (its moments, its one-shot sketch and each
        round's proposal, each clipped), calibrated so that the whole fit spends ``dp_epsilon`` at
        ``dp_delta`` for one record (see :mod:`fedep.core.privacy`; docs/privacy.md).
        Needs ``dp_clip``, an integer ``n_components``, ``tol=0``, ``trim_steps=0``,
        ``aggregation="mean"``; the rounds send no metric and every gateway weighs the
        same. ``inf``: no noise, the plain fit (reported as ``dp_epsilon_ = inf``).
        None: off.
    dp_delta : float in (0, 1), default=1e-5
        The ``delta`` of the privacy guarantee.
    dp_clip : float or None, default=None
        With ``dp_epsilon``: each record is scaled down to L2 norm at most ``dp_clip``
        (in the input's units) before anything is computed from it.
    random_state : int, Generator or None, default=None
        Seeds the initial basis, client sampling and (in-process) the privacy noise,
        one stream per gateway (:func:`fedep.federation.privacy.gateway_seeds`; over
        Flower each gateway draws its own).
    callback : callable or None, default=None
        ``callback(round, V, record)`` after each round, with the consensus ``V``
        (n_features, n_components) in standardised units (``mean_`` and ``scale_``
        are set before the first round) and the round's record (progress display,
        per-round evaluation).

    Attributes
    ----------
    dp_epsilon_, dp_delta_, dp_noise_multiplier_ : float
        With ``dp_epsilon``: the privacy loss the fit spent (RDP accountant over its
        releases), its ``delta`` and the noise multiplier of every release.
    n_components_ : int
        The rank used (``n_components``, or the one chosen for ``"auto"``).
    rank_reason_ : str
        How the rank was chosen (one line; printed by ``fedep fit``).
    components_ : ndarray of shape (n_components_, n_features)
        Global basis (orthonormal rows): polar factor of the consensus ``V``.
    client_components_ : ndarray of shape (n_clients, n_components, n_features)
        Personalised bases ``W_i^T``.
    clients_ : ndarray of shape (n_clients,)
        Client ids in the order of ``client_components_``.
    mean_, scale_ : ndarray of shape (n_features,)
    features_ : FeaturePipeline
        The fitted feature pipeline (only when fitted on a DataFrame through one).
    feature_names_in_ : ndarray of str
        Columns of the training DataFrame (raw columns when a pipeline is used).
    feature_names_out_ : ndarray of str
        Names of the model's features (columns of ``components_`` and of
        :meth:`feature_contributions`): the pipeline's output names, else
        ``feature_names_in_``.
    threshold_ : float
    client_thresholds_ : ndarray of shape (n_clients,)
    decision_scores_ : ndarray of shape (n_samples,)
    contamination_ : float
        The share used for ``threshold_`` (``contamination`` or its estimate).
    score_mean_, score_std_ : float
        Mean and standard deviation of ``decision_scores_`` (for ``predict_proba``).
    trim_history_ : list of dict
        One record per concentration step (``share``, ``n_kept``,
        ``objective``: the trimmed PPCA objective); ``n_trim_steps_`` their number.
    history_ : list of dict
        Per-round objective, augmented Lagrangian, residuals, iterations, time.
    n_iter_ : int
        Rounds run.
    consensus_ : ndarray of shape (n_features, n_components)
        The final consensus ``V`` (not orthonormalised).
    client_duals_ : ndarray of shape (n_clients, n_components, n_features)
        Each gateway's consensus dual ``Pi_i^T`` (FedPG: ``Y_i^T``), beside
        ``client_components_``; with ``client_multipliers_`` (n_clients,
        n_components, n_components), FedEP's SSN multipliers: what a warm start carries.
    lineage_ : dict
        ``id``, ``parent`` (the warm start's model), ``parent_sha256``, ``window``
        (rows; first and last time of a ``ts`` column) and ``gateways``
        (:func:`fedep.detectors.lineage.new_lineage`).
    stop_reason_ : str
        What stopped the fit: ``"stationary"`` (``tol`` met),
        ``"max_rounds"`` (the cap; a ``ConvergenceWarning`` names the tests not met)
        or ``"too_few_clients"`` (see :data:`fedep.federation.rounds.STOP_REASONS`).
    stop_tests_ : dict of str -> [value, bound]
        The stopping tests at the last round (:func:`fedep.federation.rounds.stop_tests`):
        each measure's value and the bound it had to meet (value None: not yet known).
    """

    persisted_scalars = (
        *BaseFederatedDetector.persisted_scalars,
        "n_iter_",
        "stop_reason_",
        "dp_epsilon_",
        "dp_delta_",
        "dp_noise_multiplier_",
    )
    server_step = "fedep"
    _parameter_constraints: dict = {
        **_COMMON_CONSTRAINTS,
        **_FEDERATION_CONSTRAINTS,
        "alpha": [Interval(Real, 0.0, None, closed="neither")],
        "beta": [Interval(Real, 0.0, None, closed="left")],
        "mu": [Interval(Real, 0.0, None, closed="neither")],
        "nu": [Interval(Real, 0.0, None, closed="neither")],
        "sparse_corruption": ["boolean"],
        "penalty_scaling": [StrOptions(set(PENALTY_SCALINGS))],
        "consensus_weights": [StrOptions(set(CONSENSUS_WEIGHTS))],
        "aggregation": [StrOptions(set(AGGREGATIONS))],
        "inner_max_iter": _POSITIVE_INT,
        "remerge": ["boolean"],
        "dp_epsilon": [Interval(Real, 0.0, None, closed="right"), None],
        "dp_delta": [Interval(Real, 0.0, 1.0, closed="neither")],
        "dp_clip": [Interval(Real, 0.0, None, closed="neither"), None],
    }
    _parameter_summaries: dict = {
        **_COMMON_SUMMARIES,
        **_FEDERATION_SUMMARIES,
        "alpha": "weight of the sparse corruption S (|residual| > alpha/2 goes to S)",
        "beta": "weight of the row-sparsity penalty on the client bases",
        "mu": "ADMM penalty of the data constraint X - S - U = 0",
        "nu": "ADMM penalty pulling the client bases to the consensus",
        "sparse_corruption": "model sparse corruption S (off: S = 0)",
        "inner_max_iter": "manifold proximal-gradient steps per round (T_max)",
        "remerge": "restart from re-merged cleaned sketches in the first rounds",
        "dp_epsilon": "differential privacy: the fit's privacy loss (none: off)",
        "dp_delta": "the delta of the differential-privacy guarantee",
        "dp_clip": "with dp-epsilon: each record clipped to this L2 norm",
    }

    def __init__(
        self,
        n_components="auto",
        *,
        alpha=1.0,
        beta=1e-3,
        mu=3.0,
        nu=1.0,
        sparse_corruption=True,
        penalty_scaling="relative",
        consensus_weights="auto",
        aggregation="mean",
        n_rounds=200,
        tol=1e-4,
        inner_max_iter=2,
        client_fraction=1.0,
        init="oneshot",
        remerge=True,
        warm_start=False,
        features="auto",
        standardize=True,
        contamination=0.05,
        trim_steps=0,
        trim_share=None,
        trim_start="all",
        reference_fpr=0.01,
        suppression_rules=False,
        dp_epsilon=None,
        dp_delta=1e-5,
        dp_clip=None,
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
        self.aggregation = aggregation
        self.n_rounds = n_rounds
        self.tol = tol
        self.inner_max_iter = inner_max_iter
        self.client_fraction = client_fraction
        self.init = init
        self.remerge = remerge
        self.warm_start = warm_start
        self.features = features
        self.standardize = standardize
        self.contamination = contamination
        self.trim_steps = trim_steps
        self.trim_share = trim_share
        self.trim_start = trim_start
        self.reference_fpr = reference_fpr
        self.suppression_rules = suppression_rules
        self.dp_epsilon = dp_epsilon
        self.dp_delta = dp_delta
        self.dp_clip = dp_clip
        self.random_state = random_state
        self.callback = callback

    def _remerges(self) -> bool:
        # Without S the cleaned records are the raw ones: nothing to re-merge; under
        # differential privacy the rounds send no sketch.
        private = self.dp_epsilon is not None and math.isfinite(self.dp_epsilon)
        return bool(self.remerge and self.sparse_corruption and not private)

    def cohort_spec(self) -> dict:
        settings = FedEPSettings(
            alpha=float(self.alpha),
            mu=float(self.mu),
            use_sparse=bool(self.sparse_corruption),
            inner_max_iter=int(self.inner_max_iter),
            penalty_scaling=self.penalty_scaling,
            consensus_weights=self.consensus_weights,
        )
        return cohort_spec("fedep", settings, beta=float(self.beta), nu=float(self.nu))


class FedPG(_FederatedMixin, BaseFederatedDetector):
    """FedPG baseline detector: federated PCA on the Grassmann manifold (Nguyen et al.).

    Parameters
    ----------
    n_components : int or "auto", default="auto"
        As in :class:`FedEP`.
    lr : float or None, default=None
        Local Riemannian step; None gives each client ``N_i / (2 ||X_i||_2^2 + rho_i)``.
        The authors' value is 1e-4.
    rho : float, default=3.0
        ADMM penalty of ``W_i = Z``; with ``penalty_scaling="relative"`` in units of
        each client's largest Gram eigenvalue ``||X_i||_2^2``. The local data term's
        curvature is down to ``-L_i = -2 ||X_i||_2^2``; the default ``rho_i = 1.5 L_i``
        makes each client's local objective strongly convex in the ambient space
        (modulus ``L_i / 2``, condition number 5: 30 local steps solve it to about
        1e-3). Penalties at or below ``L_i`` let gateways' bases settle in their own
        subspaces and the mean of the bases away from the pooled one; larger ones
        slow the rounds (each moves the consensus about a gradient step of size
        ``1 / sum_i rho_i`` on the pooled objective). Measured on the official non-IID
        splits and on synthetic gateways (``tests/core/test_fedpg.py``). The authors'
        0.01 is literal (``penalty_scaling="paper"``).
    local_epochs : int, default=30
        Local gradient steps per round (authors' default).
    penalty_scaling : {"relative", "paper"}, default="relative"
        ``"paper"`` uses ``rho`` literally for every client (the paper's FedPG).
    consensus_weights : {"auto", "curvature", "samples", "uniform"}, default="auto"
        With ``penalty_scaling="relative"``: per-client penalties ``rho_i`` and so the
        weights of the server's mean of the bases ``Z = sum_i rho_i W_i / sum_i rho_i``
        (the weighting whose fixed points are stationary points of the pooled
        objective): ``"curvature"`` ``rho_i = rho * ||X_i||_2^2``; ``"samples"``
        ``rho_i = rho * N_i`` (``rho`` is then per record); ``"uniform"``
        ``rho_i = rho``. With ``penalty_scaling="paper"`` every penalty is ``rho`` and
        this weights only the server's mean: ``"uniform"`` the plain mean (the paper),
        ``"samples"`` the mean weighted by ``N_i`` (the authors' code; it biases the
        fixed point toward large gateways). ``"auto"``: ``"curvature"`` with
        ``penalty_scaling="relative"``, ``"uniform"`` with ``"paper"``.
    manifold : {"stiefel", "grassmann"}, default="stiefel"
        The local steps' Riemannian gradient: on the Stiefel manifold,
        ``g - W sym(W^T g)``, the gradient of the local objective (not invariant under
        rotations of the basis, as the consensus compares bases); or the authors'
        Grassmann projection ``(I - W W^T) g``, which cannot rotate a basis inside its
        span, so a difference of frames between ``W_i`` and ``Z`` never closes and the
        dual grows every round.
    aggregation : {"mean", "median", "trimmed", "grassmann"}, default="mean"
        Server step: ``"mean"`` averages the clients' bases (the authors' rule);
        ``"median"`` (their geometric median), ``"trimmed"`` (drops the 20% of
        clients whose spans are farthest from the others') and ``"grassmann"``
        (geometric median of their projectors) bound what a minority of compromised
        gateways can do to the global basis.
    tol : float, default=1e-5
        Stop when, over the last 10 rounds, no round changed the objective (the
        pooled reconstruction error of the consensus the clients received) by more
        than ``tol`` times the records' energy ``sum_i ||X_i||_F^2``: the share of the
        energy that the global basis explains has settled (``objective_change``,
        :func:`fedep.federation.rounds.converged`).
    n_rounds, client_fraction, init, warm_start, standardize, contamination, trim_steps,
        trim_share, trim_start, reference_fpr, suppression_rules
        As in :class:`FedEP`.
    random_state, callback
        As in :class:`FedEP`.
    features
        As in :class:`FedEP`.

    Attributes
    ----------
    Same as :class:`FedEP`; ``stop_reason_`` is ``"objective_stationary"`` when the
    fit met ``tol``. Per round, ``history_`` holds (summed over the answering
    clients) ``objective``, the reconstruction error ``sum_i ||X_i - X_i Q Q^T||^2``
    of the consensus the round started from (``Q`` an orthonormal basis of it: the
    previous round's global model, the start's in round 1); ``local_fit``,
    ``sum_i ||X_i - X_i W_i W_i^T||^2`` at the clients' own bases after the round's
    local epochs; and ``augmented_lagrangian``, ``local_fit + sum_i <Y_i, W_i - Z> +
    rho_i/2 ||W_i - Z||^2``, the ADMM function that the local epochs descend. The
    rounds decrease ``objective`` only when the penalty enforces the consensus (the
    default): with the paper's ``rho=0.01`` (``penalty_scaling="paper"``) each
    gateway fits its own records, ``local_fit`` falls every round and ``objective``
    rises (measured: UNSW-NB15 rich, normal rows sorted by ``dst_bytes`` into 20
    gateways, 20000 rows, rank 5: ``objective`` 438428 -> 542780 and ``local_fit``
    87222 -> 68934 over 10 rounds; the default's ``objective`` 438428 -> 438320,
    pooled PCA's 438245).
    """

    persisted_scalars = (*BaseFederatedDetector.persisted_scalars, "n_iter_", "stop_reason_")
    server_step = "fedpg"
    _parameter_constraints: dict = {
        **_COMMON_CONSTRAINTS,
        **_FEDERATION_CONSTRAINTS,
        "lr": [Interval(Real, 0.0, None, closed="neither"), None],
        "rho": [Interval(Real, 0.0, None, closed="left")],
        "local_epochs": _POSITIVE_INT,
        "penalty_scaling": [StrOptions(set(PENALTY_SCALINGS))],
        "consensus_weights": [StrOptions(set(CONSENSUS_WEIGHTS))],
        "manifold": [StrOptions(set(MANIFOLDS))],
        "aggregation": [StrOptions(set(AGGREGATIONS))],
    }
    _parameter_summaries: dict = {
        **_COMMON_SUMMARIES,
        **_FEDERATION_SUMMARIES,
        "lr": "local Riemannian step (none: from each client's data)",
        "rho": "ADMM penalty pulling the client bases to the consensus",
        "local_epochs": "local gradient steps per round",
        "manifold": "local gradient: stiefel, or the authors' grassmann",
    }

    def __init__(
        self,
        n_components="auto",
        *,
        lr=None,
        rho=3.0,
        local_epochs=30,
        penalty_scaling="relative",
        consensus_weights="auto",
        manifold="stiefel",
        aggregation="mean",
        n_rounds=200,
        tol=1e-5,
        client_fraction=1.0,
        init="oneshot",
        warm_start=False,
        features="auto",
        standardize=True,
        contamination=0.05,
        trim_steps=0,
        trim_share=None,
        trim_start="all",
        reference_fpr=0.01,
        suppression_rules=False,
        random_state=None,
        callback=None,
    ):
        self.n_components = n_components
        self.lr = lr
        self.rho = rho
        self.local_epochs = local_epochs
        self.penalty_scaling = penalty_scaling
        self.consensus_weights = consensus_weights
        self.manifold = manifold
        self.aggregation = aggregation
        self.n_rounds = n_rounds
        self.tol = tol
        self.client_fraction = client_fraction
        self.init = init
        self.warm_start = warm_start
        self.features = features
        self.standardize = standardize
        self.contamination = contamination
        self.trim_steps = trim_steps
        self.trim_share = trim_share
        self.trim_start = trim_start
        self.reference_fpr = reference_fpr
        self.suppression_rules = suppression_rules
        self.random_state = random_state
        self.callback = callback

    def cohort_spec(self) -> dict:
        settings = FedPGSettings(
            lr=None if self.lr is None else float(self.lr),
            rho=float(self.rho),
            local_epochs=int(self.local_epochs),
            consensus_weights=self.consensus_weights,
            penalty_scaling=self.penalty_scaling,
            manifold=self.manifold,
        )
        return cohort_spec("fedpg", settings)

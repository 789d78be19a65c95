"""The one round loop of every federation: sample, local round, server step, record, stop.

The in-process runner (a cohort holding every client), the Flower ServerApp (a cohort
whose ``local_round`` asks the gateways over the network), the per-round curves of
the reproduction and the benchmark all call :func:`run_rounds`; what differs is the
cohort behind :class:`Cohort` and the hook ``on_round(round, V, record)`` that sees
the model after every round (as Flower's ``Strategy.start`` with ``evaluate_fn``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from fedep._json import jsonable
from fedep.core.consensus import aligned, consensus_v_step, pooled_gram
from fedep.core.fedep import RoundReport
from fedep.core.stiefel import l21_norm, polar, projector_distance
from fedep.federation.server import server_round

__all__ = [
    "Cohort",
    "RoundClients",
    "FederationResult",
    "TooFewClients",
    "converged",
    "run_rounds",
    "STOP_REASONS",
    "TOL_REASONS",
    "stop_reason_of",
    "stop_tests",
    "STOP_WINDOW",
    "ADMM_ROOM",
    "HOLD_STEPS",
    "consensus_change",
    "lagrangian_change",
    "remerge_change",
]

#: What stopped a federation (one name per concept, as in the result, the estimator's
#: ``stop_reason_``, the model file, the CLI and Flower's result):
#:
#: - ``"stationary"``: FedEP met ``tol`` (every test of :func:`stop_tests`: primal and
#:   dual residuals and the augmented Lagrangian's change);
#: - ``"objective_stationary"``: FedPG met ``tol`` (its objective stationary);
#: - ``"max_rounds"``: the round cap came first (the record's stopping measures,
#:   :func:`stop_tests`, say how far from ``tol``);
#: - ``"too_few_clients"``: too few clients answered to aggregate.
STOP_REASONS = ("stationary", "objective_stationary", "max_rounds", "too_few_clients")

#: The stop reason of a fit that met ``tol``, per method.
TOL_REASONS = {"fedep": "stationary", "fedpg": "objective_stationary"}


def stop_reason_of(reason: str, method: str) -> str:
    """``reason`` in today's names: ``"converged"``, written by earlier versions (model
    files, Flower results) for a fit that met ``tol``, becomes the method's
    :data:`TOL_REASONS` entry; any other name is returned as it is (a FedEP model of
    before 2026-11-29 says ``"lagrangian_stationary"``: it met the looser test of
    then, and says so)."""
    return TOL_REASONS.get(method, reason) if reason == "converged" else reason


@runtime_checkable
class RoundClients(Protocol):
    """The client side of a federation as the round loop sees it.

    ``d`` clients; ``local_round(V, clients)`` runs one round at the clients of
    positions ``clients`` (None: all) and returns what they send. A Flower server's
    view of its gateways is one; so is a :class:`Cohort`.
    """

    d: int

    def local_round(self, V: np.ndarray, clients: np.ndarray | None = None) -> RoundReport: ...


@runtime_checkable
class Cohort(RoundClients, Protocol):
    """Clients held in this process (:class:`fedep.core.fedep.FedEPCohort`,
    :class:`fedep.core.fedpg.FedPGCohort`): they also checkpoint and restore their
    local state, ``state_arrays()`` / ``load_state(state)`` (a Flower gateway keeps
    its cohort of one between messages this way).
    """

    def state_arrays(self) -> dict[str, np.ndarray]: ...

    def load_state(self, state: dict[str, np.ndarray]) -> None: ...


class TooFewClients(RuntimeError):
    """Raised by a cohort's ``local_round`` when too few clients answered to aggregate."""


@dataclass
class FederationResult:
    """Outcome of a federated fit, in-process or over Flower.

    Attributes
    ----------
    V : ndarray of shape (n_features, n_components)
        Final consensus (not orthonormalised).
    history : list of dict
        One record per round: the fields of
        :func:`~fedep.federation.server.server_round`, ``round``, ``time_s`` and
        whatever the cohort adds (over Flower: ``participants``, ``failed``,
        ``bytes_sent`` / ``bytes_received`` per client label).
    stop_reason : str
        One of :data:`STOP_REASONS`.
    n_rounds : int
    components : ndarray of shape (n_components, n_features) or None
        The polar factor of ``V`` (the global scoring basis), once finalised.
    clients : list of str
        Client labels in aggregation order (Flower).
    mean, scale : ndarray of shape (n_features,) or None
        The federated standardisation (Flower).
    setup_bytes : dict
        Bytes of the moments and setup exchanges per client label (Flower).
    finalized : list of str
        Gateways that wrote their personalised model (Flower).
    failed : dict of str -> str
        Every gateway that failed at some phase, and why (Flower).
    features : dict or None
        The federated feature pipeline (``FeaturePipeline.to_dict()``) when the run
        fitted one (Flower, gateways holding raw tables).
    rank_reason : str or None
        How the rank was chosen (``rank_reason_`` of the estimators; Flower).
    privacy : dict or None
        Differential privacy's accounting over Flower (``epsilon`` spent, ``delta``,
        ``noise_multiplier``, ``releases``; :class:`fedep.federation.privacy.PrivacyBudget`).
    trim_history : list of dict
        One record per concentration step of record trimming (``trim_history_`` of
        the estimators; Flower); the other fields are those of the last fit.
    """

    V: np.ndarray
    history: list[dict] = field(default_factory=list)
    stop_reason: str = "max_rounds"
    n_rounds: int = 0
    components: np.ndarray | None = None
    clients: list[str] = field(default_factory=list)
    mean: np.ndarray | None = None
    scale: np.ndarray | None = None
    setup_bytes: dict = field(default_factory=dict)
    finalized: list[str] = field(default_factory=list)
    failed: dict = field(default_factory=dict)
    features: dict | None = None
    rank_reason: str | None = None
    privacy: dict | None = None
    trim_history: list[dict] = field(default_factory=list)

    _ARRAYS = ("V", "components", "mean", "scale")

    def to_json(self) -> dict:
        """A JSON-able dict (arrays as nested lists)."""
        out = {}
        for k in self.__dataclass_fields__:
            v = getattr(self, k)
            out[k] = None if v is None else jsonable(v)
        return out

    @classmethod
    def from_json(cls, d: dict) -> FederationResult:
        """Inverse of :meth:`to_json`."""
        kw = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        for k in cls._ARRAYS:
            if kw.get(k) is not None:
                kw[k] = np.asarray(kw[k], dtype=float)
        return cls(**kw)

    @classmethod
    def load(cls, path) -> FederationResult:
        """Read a result written as JSON (e.g. the ServerApp's ``result-path``)."""
        return cls.from_json(json.loads(Path(path).read_text()))


#: Rounds over which FedEP's stopping test watches the augmented Lagrangian.
STOP_WINDOW = 10

#: Rounds that exact consensus steps leave to the ADMM at the end of the round budget
#: (``remerge``): the stopping window and one round more, so a fit may still certify.
ADMM_ROOM = STOP_WINDOW + 1

#: Data steps each client takes at ``W_i = V`` in a consensus step (``hold``): enough
#: for ``S`` to follow the consensus (1 left the steps oscillating on UNSW-NB15).
HOLD_STEPS = 3


def _steps(records: list[dict], key: str) -> np.ndarray:
    """``|L_k - L_{k-1}|`` between consecutive records of one fit, relative to its data
    energy (FedPG's objective) or to the magnitude of its objective (FedEP's augmented
    Lagrangian), those of its last record."""
    if len(records) < 2:
        return np.zeros(0)
    L = np.array([h[key] for h in records], dtype=float)
    last = records[-1]
    scale = abs(float(last["objective"])) if key == "augmented_lagrangian" else last["data_energy"]
    return np.abs(np.diff(L)) / max(float(scale), 1e-300)


def lagrangian_change(
    history: list[dict], window: int = STOP_WINDOW, key: str = "augmented_lagrangian"
) -> float | None:
    """Largest change of the augmented Lagrangian (or of the record field ``key``) per
    round over the last ``window`` rounds, relative to the magnitude of the objective
    (FedEP's Lagrangian) or to the data energy ``sum_i ||X_i||_F^2`` (FedPG's
    objective), those of the last record; None before ``window + 1`` rounds.

    Relative to the objective, ``tol`` reads as a relative accuracy of the objective,
    whatever share of the data's energy the model explains (the data energy is 6-85x
    the optimum objective on the official datasets: against it the test stopped early).
    FedPG's objective is the pooled reconstruction error of its consensus, near zero
    for a near low-rank federation; its changes are measured against the data energy.
    The window holds this fit's own rounds only, warm starts included.
    """
    recent = history[-(window + 1) :]
    if len(recent) < window + 1:
        return None
    return float(np.max(_steps(recent, key)))


def remerge_change(M: np.ndarray, V: np.ndarray) -> float:
    """Distance ``||P_M - P_V||_F / sqrt(2 r)`` between the spans of two n x r bases
    (the root mean square of the sines of their principal angles, in [0, 1]): how far
    a re-merge moves the consensus subspace.

    Why re-merge: with ``S`` modelled, the consensus starts at the one-shot merge of
    the clients' raw records, but the fit's subspace is that of their cleaned records
    ``U_i = X_i - S_i``, which ``S`` reaches within a few rounds; the ADMM's consensus
    follows it slowly, by damped steps (``nu_i`` of the order of each client's
    largest Gram eigenvalue, a couple of ManPG steps per round). Measured on TON-IoT's
    sorted 20-gateway split (rank 9): the merge of the cleaned sketches was 0.14 from
    the final subspace at round 5 while the consensus was still 0.30 from it, and the
    held-out ROC AUC took 16 rounds to settle (the distances on every 4th record of
    each gateway). Merging the cleaned sketches while
    ``S`` settles (an alternating step of the same objective with every ``W_i = V``:
    the data-side state is kept, the ADMM restarts at the merge) moves the consensus
    there at once; the ADMM, whose convergence test starts afresh over its window,
    then personalises and certifies stationarity as before.
    """
    return float(projector_distance(polar(M), polar(V)) / np.sqrt(M.shape[1]))


def consensus_change(history: list[dict], window: int = STOP_WINDOW) -> float | None:
    """Largest move of the consensus per round, ``||V^k - V^{k-1}||_F / sqrt(r)`` (the
    records' ``v_change``), over the last ``window`` rounds (None before ``window``
    rounds): the robust rules' stationarity measure, computed by the server on what it
    aggregated, so that no client's reported metrics can end (or hold) the run.
    """
    moves = [h["v_change"] for h in history][-window:]
    if len(moves) < window:
        return None
    return float(max(moves))


#: FedEP's residual bounds in units of ``tol`` (:func:`stop_tests`): relative primal
#: residuals (consensus and data) at most ``PRIMAL_BOUND * tol``, relative dual residual
#: at most ``DUAL_BOUND * tol``. Calibrated on an audit of 153 fits continued far past
#: their stop (``docs/convergence.md``): with these bounds and ``tol = 1e-4`` every fit
#: ended within 1 % of the objective its trajectory reached.
PRIMAL_BOUND = 10.0
DUAL_BOUND = 4.0


def stop_tests(record: dict, tol: float, method: str) -> dict[str, tuple[float | None, float]]:
    """The stopping tests of a round's record: ``{measure: (value, bound)}``.

    A test passes when its value is known (not None) and at most its bound; the run
    stops when every test passes (:func:`converged`). The estimators keep the tests of
    the last round as ``stop_tests_`` (what fired, and by how much).

    FedEP (``aggregation="mean"``) stops at a first-order stationary point of its
    augmented Lagrangian, the test of Boyd et al. (2011, sec. 3.3) with the residuals
    relative to their scales:

    - ``consensus_residual_rel`` and ``data_residual_rel``, the primal residuals of
      ``W_i = V`` and ``X_i - S_i - U_i = 0`` (relative to ``||W||`` and ``||X||``), at
      most ``PRIMAL_BOUND * tol``;
    - ``dual_residual_rel``, the dual residual ``||nu (V^k - V^{k-1})||`` relative to
      the local gradients ``||G_i W_i||``, at most ``DUAL_BOUND * tol``: the consensus
      no longer moves, which the primal residuals alone do not say (on a plateau every
      basis follows a slowly moving ``V`` closely);
    - ``lagrangian_change``: over the last :data:`STOP_WINDOW` rounds no round changed
      the augmented Lagrangian by more than ``tol`` times the objective's magnitude
      (:func:`lagrangian_change`; None before the window is full). The change is
      measured on this fit's own rounds, warm starts included.

    ``tol`` is thus a relative accuracy of the objective; the residual bounds are the
    precision of the iterates that stands for (see :data:`PRIMAL_BOUND`). The slow
    directions that made the earlier test (a second-order change of ``L`` against the
    data energy) stop on plateaus are taken by exact consensus steps first
    (:func:`run_rounds`, ``remerge``).

    With a robust server step (``aggregation`` other than ``"mean"``; the record then
    has ``consensus_change``) the tests read only what the server measured itself: the
    consensus moved by at most ``sqrt(tol)`` per round over the last
    :data:`STOP_WINDOW` rounds (:func:`consensus_change`) and the residuals that
    :func:`~fedep.federation.server.server_round` computes robustly are at most
    ``sqrt(tol)``. The Lagrangian is a sum of the clients' own reports: one that
    claims a frozen objective would end the run at will.

    FedPG stops when its objective (the pooled reconstruction error of the consensus
    the clients received, i.e. of the global model) is stationary, ``objective_change
    <= tol`` (relative to the data energy). Not on the change of the basis: between
    directions of nearly equal variance the basis keeps turning for hundreds of rounds
    while the reconstruction error, and so every detection score, no longer moves.
    """
    if "consensus_change" in record:
        bound = float(np.sqrt(tol))
        return {
            "consensus_change": (record["consensus_change"], bound),
            "consensus_residual_rel": (record["consensus_residual_rel"], bound),
            "data_residual_rel": (record["data_residual_rel"], bound),
        }
    if method == "fedpg":
        return {"objective_change": (record.get("objective_change"), tol)}
    return {
        "lagrangian_change": (record.get("lagrangian_change"), tol),
        "consensus_residual_rel": (record["consensus_residual_rel"], PRIMAL_BOUND * tol),
        "data_residual_rel": (record["data_residual_rel"], PRIMAL_BOUND * tol),
        "dual_residual_rel": (record["dual_residual_rel"], DUAL_BOUND * tol),
    }


def converged(record: dict, tol: float, method: str) -> bool:
    """Whether every test of :func:`stop_tests` passes on a round's record."""
    return all(v is not None and v <= b for v, b in stop_tests(record, tol, method).values())


def run_rounds(
    cohort: RoundClients,
    method: str,
    V0: np.ndarray,
    *,
    n_rounds: int,
    tol: float,
    client_fraction: float = 1.0,
    rng: np.random.Generator | None = None,
    on_round: Callable[[int, np.ndarray, dict], None] | None = None,
    aggregation: str = "mean",
    remerge: bool = False,
    warm: bool = False,
) -> FederationResult:
    """Run rounds until convergence, the round cap, or too few clients.

    Parameters
    ----------
    cohort : RoundClients
        The clients (their records stay with them).
    method : {"fedep", "fedpg"}
        Picks the server step (:func:`~fedep.federation.server.server_round`).
    V0 : ndarray of shape (n, r)
        Initial consensus.
    n_rounds : int
        Round cap.
    tol : float
        See :func:`converged`; ``0`` runs all rounds. A round with partial
        participation never ends the run (its residuals cover some clients only).
    client_fraction : float, default=1.0
        Fraction of clients sampled per round (at least one).
    rng : Generator, optional
        Drives client sampling (default: seeded with 0).
    on_round : callable, optional
        ``on_round(round, V, record)`` after each round, with the new consensus
        ``V`` (n, r) and the round's record.
    aggregation : {"mean", "median", "trimmed", "grassmann"}, default="mean"
        The server step (see :func:`~fedep.federation.server.server_round`); the
        robust ones stop by the server's own measures (:func:`converged`).
    remerge : bool, default=False
        FedEP only, with every client in every round and ``aggregation="mean"``: start
        with exact consensus steps (:mod:`fedep.core.consensus`), block coordinate
        descent of the objective at ``W_i = V``. In each such round the clients hold
        ``W_i = V``, take :data:`HOLD_STEPS` data steps there (``local_round(...,
        hold=HOLD_STEPS, sketch_rank=n)``) and send the Gram factor of their cleaned
        records; the server minimises the objective over ``V`` on the pooled Gram
        (:func:`~fedep.core.consensus.consensus_v_step`) and sends the result,
        extrapolated by Nesterov momentum (restarted whenever the round's objective
        ``F(V, S)`` rose: it never rises twice in a row) until the step moves the
        subspace by at most ``0.1 sqrt(tol)`` (:func:`remerge_change`) or only
        :data:`ADMM_ROOM` rounds of ``n_rounds`` are left (a fixed cap of 60 stopped
        them on saddles, where they move slowly but steadily, and the ADMM then stopped
        there: TON-IoT, 1.1 % above the optimum that the steps reach by round 103);
        the ADMM then restarts at the last step
        (``restart=True``: ``W_i = V``, ``Pi_i = 0``, ``S_i`` kept) and runs until
        :func:`converged`. Those rounds' records say ``remerge_change``,
        ``merge_objective``, ``momentum`` and ``remerged``; they never stop the run.
        A warm start takes them too, from the carried consensus: the first step's move
        says how far the new records' optimum is (one or two rounds when they did not
        move it). A test of the carried state's own residuals instead (the drift test
        of earlier versions) passed on slow plateaus and left refits 1 % and more
        above the optimum of their records.
    warm : bool, default=False
        A warm start (the cohort holds a previous fit's state): consensus steps start at
        the carried consensus made orthonormal. Its stopping window is its own rounds, as
        a cold fit's: the previous fit's rounds were on other records.

    Returns
    -------
    FederationResult
    """
    rng = np.random.default_rng(0) if rng is None else rng
    V = np.array(V0, dtype=float)
    result = FederationResult(V=V)
    d = cohort.d
    k = max(1, int(round(client_fraction * d)))
    # Consensus steps need every client's Gram factor and the plain V-step (a robust
    # server step would be bypassed by a plain merge).
    merging = bool(remerge) and method == "fedep" and k >= d and aggregation == "mean"
    if merging and warm:
        V = polar(V)  # each gateway holds W_i = V: the carried consensus, orthonormal
    steps = _ConsensusSteps(V, tol) if merging else None
    restart = False
    for rnd in range(1, n_rounds + 1):
        t0 = time.perf_counter()
        clients = None if k >= d else np.sort(rng.choice(d, size=k, replace=False))
        if steps is not None:
            kw = {"sketch_rank": V.shape[0], "hold": HOLD_STEPS}
        else:
            kw = {"restart": True} if restart else {}
        try:
            rep = cohort.local_round(V, clients, **kw)
        except TooFewClients:
            result.stop_reason = "too_few_clients"
            break
        V_new, rec = server_round(method, rep, V, aggregation)
        rec["round"] = rnd
        rec.update(rep.info)
        result.history.append(rec)
        if k >= d:  # comparable only over the same clients
            if aggregation != "mean":
                rec["consensus_change"] = consensus_change(result.history)
            elif method == "fedpg":
                rec["objective_change"] = lagrangian_change(result.history, key="objective")
            else:
                rec["lagrangian_change"] = lagrangian_change(result.history)
        restart = steps is not None  # the ADMM restarts at the last consensus step
        if steps is not None:
            V_new = steps.step(rep, rec, V)
            if steps.done or rnd >= max(1, n_rounds - ADMM_ROOM):
                steps = None
        rec["time_s"] = time.perf_counter() - t0
        V = V_new
        if on_round is not None:
            on_round(rnd, V, rec)
        if tol > 0 and k >= d and not restart and converged(rec, tol, method):
            result.stop_reason = TOL_REASONS[method]
            break
    result.V = V
    result.n_rounds = len(result.history)
    return result


class _ConsensusSteps:
    """The server's side of FedEP's exact consensus steps (``run_rounds``, ``remerge``).

    Each :meth:`step` reads a round in which every client held ``W_i = V`` and sent
    the Gram factor of its cleaned records, minimises the objective over ``V`` on the
    pooled Gram (:func:`~fedep.core.consensus.consensus_v_step`) and returns the next
    consensus: that minimiser ``M_k``, extrapolated by Nesterov momentum
    ``M_k + (j - 1)/(j + 2) (M_k - M_{k-1})`` after ``j`` rounds in which the objective
    did not rise (a rise restarts the momentum). ``done`` once a step moves the
    subspace by at most ``0.1 sqrt(tol)``; the last step is then returned plain.
    """

    def __init__(self, V: np.ndarray, tol: float):
        self.M = np.array(V, dtype=float)
        self.tol = tol
        self.last_F: float | None = None
        self.streak = 0
        self.done = False

    def step(self, rep: RoundReport, rec: dict, V: np.ndarray) -> np.ndarray:
        """The next consensus after the round ``rep`` at ``V`` (``rec``: its record,
        which gains ``remerge_change``, ``merge_objective``, ``momentum``, ``remerged``)."""
        G = pooled_gram(rep.sketch)
        # every W_i = V this round: the l2,1 terms sum to beta ||V||_{2,1}
        beta = rec["l21"] / max(float(l21_norm(V)), 1e-300)
        M = consensus_v_step(G, polar(V), beta).V
        F = float(rec["objective"])  # F(V, S) at this round's S (every W_i = V)
        change = remerge_change(M, self.M)
        rose = self.last_F is not None and F > self.last_F
        self.streak = 0 if rose else self.streak + 1
        theta = (self.streak - 1) / (self.streak + 2) if self.streak > 1 else 0.0
        prev, self.M, self.last_F = self.M, M, F
        self.done = change <= 0.1 * np.sqrt(self.tol)
        if self.done:
            theta = 0.0
        rec.update(remerge_change=change, merge_objective=F, momentum=theta, remerged=True)
        if theta == 0.0:
            return M
        return polar(M + theta * (M - aligned(prev, M)))

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
from fedep.core.baselines import oneshot_merge
from fedep.core.fedep import RoundReport
from fedep.core.stiefel import polar, projector_distance
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
    "STOP_MEASURES",
    "STOP_WINDOW",
    "consensus_change",
    "lagrangian_change",
    "remerge_change",
    "carried_rounds",
    "stop_measure",
]

#: What stopped a federation (one name per concept, as in the result, the estimator's
#: ``stop_reason_``, the model file, the CLI and Flower's result):
#:
#: - ``"lagrangian_stationary"``: FedEP met ``tol`` (its augmented Lagrangian stationary,
#:   its residuals within ``sqrt(tol)``; :func:`converged`);
#: - ``"objective_stationary"``: FedPG met ``tol`` (its objective stationary);
#: - ``"max_rounds"``: the round cap came first (the record's stopping measures,
#:   :data:`STOP_MEASURES`, say how far from ``tol``);
#: - ``"too_few_clients"``: too few clients answered to aggregate.
STOP_REASONS = ("lagrangian_stationary", "objective_stationary", "max_rounds", "too_few_clients")

#: The stop reason of a fit that met ``tol``, per method.
TOL_REASONS = {"fedep": "lagrangian_stationary", "fedpg": "objective_stationary"}


def stop_reason_of(reason: str, method: str) -> str:
    """``reason`` in today's names: ``"converged"``, written by earlier versions (model
    files, Flower results) for a fit that met ``tol``, becomes the method's
    :data:`TOL_REASONS` entry; any other name is returned as it is."""
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

#: The record fields :func:`converged` compares with ``tol``, per method (what a
#: warning or a report shows when a fit stops at the cap).
STOP_MEASURES = {
    "fedep": ("lagrangian_change", "consensus_residual_rel", "data_residual_rel"),
    "fedpg": ("objective_change",),
}


def _steps(records: list[dict], key: str) -> np.ndarray:
    """``|L_k - L_{k-1}|`` between consecutive records of one fit, relative to its data
    energy (that of its last record)."""
    if len(records) < 2:
        return np.zeros(0)
    L = np.array([h[key] for h in records], dtype=float)
    return np.abs(np.diff(L)) / max(float(records[-1]["data_energy"]), 1e-300)


def lagrangian_change(
    history: list[dict],
    window: int = STOP_WINDOW,
    key: str = "augmented_lagrangian",
    carried: list[dict] = (),
) -> float | None:
    """Largest change of the augmented Lagrangian (or of the record field ``key``) per
    round over the last ``window`` rounds, relative to the clients' data energy
    ``sum_i ||X_i||_F^2`` (the record's ``data_energy``; None before ``window + 1``
    rounds).

    The data energy, not the Lagrangian's own value, is the scale: it is the
    objective of the empty model (``W = 0``, ``S = 0``), fixed over the fit, and the
    square of the scale that the data residual's test divides by (a residual of
    ``sqrt(tol) ||X||`` moves the objective by about ``tol ||X||^2``). Relative to the
    Lagrangian itself, the test would ask for more digits the better the model fits
    (a near low-rank federation leaves a small ``L``, whose every slow step then looks
    large), and ``L``, which holds the dual terms, can be near zero or negative.

    ``carried`` (a warm start): the last rounds of the fit it continues
    (:func:`carried_rounds`). The window is the last ``window`` changes of the chain,
    the carried fit's changes (relative to its data energy) then this fit's; the step
    from the last carried round to the first new one (two data sets) is no change of
    either fit and is not counted. None until this fit has made one change of its own
    and the chain holds ``window`` changes: a cold fit (nothing carried) needs
    ``window + 1`` rounds, a warm start from a stationary fit 2.
    """
    new = _steps(history[-(window + 1) :], key)
    if not new.size:
        return None
    chain = np.concatenate([_steps(list(carried)[-(window + 1) :], key), new])[-window:]
    if chain.size < window:
        return None
    return float(np.max(chain))


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


def consensus_change(
    history: list[dict], window: int = STOP_WINDOW, carried: list[dict] = ()
) -> float | None:
    """Largest move of the consensus per round, ``||V^k - V^{k-1}||_F / sqrt(r)`` (the
    records' ``v_change``), over the last ``window`` rounds (None before ``window``
    rounds): the robust rules' stationarity measure, computed by the server on what it
    aggregated, so that no client's reported metrics can end (or hold) the run.

    ``carried`` (a warm start): the last rounds of the fit it continues; the window is
    the last ``window`` moves of the chain (this fit's first move is from the carried
    consensus, a move of the same ``V``, so it counts), with at least one of this fit.
    """
    moves = [h["v_change"] for h in list(carried) + list(history)][-window:]
    if not history or len(moves) < window:
        return None
    return float(max(moves))


#: The record fields each stopping measure reads, per measure (what a carried round
#: must hold to seed a warm start's window: :func:`carried_rounds`).
_MEASURE_KEYS = {
    "lagrangian_change": ("augmented_lagrangian", "data_energy"),
    "objective_change": ("objective", "data_energy"),
    "consensus_change": ("v_change",),
}


def stop_measure(method: str, aggregation: str = "mean") -> str:
    """The record field that :func:`converged` compares with ``tol`` for stationarity."""
    if aggregation != "mean":
        return "consensus_change"
    return "objective_change" if method == "fedpg" else "lagrangian_change"


def carried_rounds(
    history, method: str, aggregation: str = "mean", window: int = STOP_WINDOW
) -> list[dict]:
    """The rounds of a previous fit that seed a warm start's stopping window.

    Parameters
    ----------
    history : list of dict or None
        The previous model's ``history_`` (one record per round).
    method, aggregation : str
        The refit's (they pick the stopping measure, :func:`stop_measure`).
    window : int

    Returns
    -------
    list of dict
        Its last ``window + 1`` records holding the measure's fields (only those
        fields), taken from the end while every record is one that the stopping test
        read (it holds the measure: every client took part) and the measure's fields
        are finite numbers; empty when there is none (then the window is this fit's own,
        as a cold fit's).
    """
    measure = stop_measure(method, aggregation)
    keys = _MEASURE_KEYS[measure]
    out: list[dict] = []
    for h in reversed(list(history or [])[-(window + 1) :]):
        if not isinstance(h, dict) or measure not in h:
            break
        vals = [h.get(k) for k in keys]
        if not all(_number(v) and np.isfinite(v) for v in vals):
            break
        out.append(dict(zip(keys, map(float, vals), strict=True)))
    return out[::-1]


def converged(record: dict, tol: float, method: str) -> bool:
    """Stopping test on a round's record (``lagrangian_change`` added by the loop).

    FedEP stops when the fit is stationary and feasible, both scale-free:

    - stationarity: ``lagrangian_change <= tol`` (None, not yet known, in the first
      :data:`STOP_WINDOW` rounds): over the last :data:`STOP_WINDOW` rounds, no round
      changed the augmented Lagrangian ``L`` by more than ``tol`` times the data
      energy ``sum_i ||X_i||_F^2`` (see :func:`lagrangian_change`). Theorem 1 of the
      paper (sufficient decrease, ``L^k - L^{k+1} >= c ||change of the iterates||^2``)
      makes a vanishing change of ``L`` the
      certificate that the iterates settle; the window keeps one quiet round of an
      oscillating (not yet monotone) run from ending it. The window holds the rounds
      of the model's fit, and a warm start continues the fit of the model it starts
      from: its window starts with that fit's last rounds (``carried``), and fills
      with its own (the same test; a cold fit carries none);
    - feasibility: the relative consensus and data residuals (primal residuals of
      ``W_i = V`` and ``X_i - S_i - U_i = 0``) at most ``sqrt(tol)``: the precision
      of the iterates that a change ``tol`` of ``L`` stands for.

    ``L`` sums over clients and the consensus residual weights them by their
    penalties, so a quiet gateway cannot hold the test open. ``tol`` is a change of
    the objective per round relative to the data energy: of the share of the data's
    energy that the model leaves unexplained, as the residuals are relative to
    ``||X||``.

    With a robust server step (``aggregation`` other than ``"mean"``; the record then
    has ``consensus_change``) the test reads only what the server measured itself: the
    consensus moved by at most ``sqrt(tol)`` per round over the last
    :data:`STOP_WINDOW` rounds (:func:`consensus_change`) and the residuals that
    :func:`~fedep.federation.server.server_round` computes robustly are at most
    ``sqrt(tol)``. The Lagrangian and the data energy are sums of the clients' own
    reports: one that claims a huge ``||X_i||^2`` or a frozen objective would end the
    run at will.

    FedPG's server has no penalty-weighted Lagrangian; it stops when its objective
    (the pooled reconstruction error of the consensus the clients received, i.e. of
    the global model; not of their local bases, which keep closing on the consensus
    long after it has settled) is stationary in the same sense, ``objective_change <=
    tol``. Not on the change of the basis: between directions of
    nearly equal variance the basis keeps turning for hundreds of rounds (measured on
    the official splits at the automatic rank) while the reconstruction error, and so
    every detection score, no longer moves.
    """
    if "consensus_change" in record:
        # A robust server step: stationarity and feasibility by the server's own
        # measures (see consensus_change and server_round), first-order like the
        # primal residuals, so compared with sqrt(tol).
        change = record["consensus_change"]
        primal = max(record["consensus_residual_rel"], record["data_residual_rel"])
        bound = np.sqrt(tol)
        return bool(change is not None and change <= bound and primal <= bound)
    if method == "fedpg":
        change = record.get("objective_change")
        return bool(change is not None and change <= tol)
    primal = max(record["consensus_residual_rel"], record["data_residual_rel"])
    change = record.get("lagrangian_change")
    return bool(change is not None and change <= tol and primal <= np.sqrt(tol))


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
    carried: list[dict] | None = None,
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
        with re-merges (see :func:`remerge_change`). In each of the first rounds the
        clients also send the one-shot sketch of their cleaned records ``U_i = X_i -
        S_i`` (``local_round(..., sketch_rank=r)``); while the merged sketches move by
        more than ``sqrt(tol)`` from the previous merge (the start ``V0`` for the
        first) and, once they have contracted (a step under half the longest), by
        less than the last time, the merge becomes the consensus and the clients
        restart the ADMM there next round (``restart=True``: ``W_i = V``, ``Pi_i = 0``,
        their ``S_i`` kept); sketches are asked for in the first :data:`STOP_WINDOW`
        rounds at most; then the ADMM goes on as usual. The records of the rounds that
        merged say ``remerge_change`` and whether the merge was taken, ``remerged``.
        A warm start (``carried`` given) asks for sketches from its second round on,
        and that round is its drift test: when its first change and its residuals
        already meet the stopping test's bounds (the carried state is stationary on the
        new records: the data did not move), nothing is merged; otherwise the merges
        run as above, the first compared with ``V0``. A round whose merge is taken
        never stops the run.
    carried : list of dict, optional
        A warm start: the last rounds of the fit it continues (:func:`carried_rounds`;
        may be empty), which seed the stopping test's window (:func:`lagrangian_change`,
        :func:`consensus_change`). None: a cold start.

    Returns
    -------
    FederationResult
    """
    rng = np.random.default_rng(0) if rng is None else rng
    V = np.array(V0, dtype=float)
    result = FederationResult(V=V)
    d = cohort.d
    k = max(1, int(round(client_fraction * d)))
    warm = carried is not None
    seed = list(carried or [])
    # Re-merges need every client's sketch and the plain V-step (a robust server step
    # would be bypassed by a plain merge of sketches).
    remerging = bool(remerge) and method == "fedep" and k >= d and aggregation == "mean"
    # A warm start's first round has no change of its own to judge: its drift test is
    # at its second round (see `remerge`).
    first_merge = 2 if warm else 1
    merged, restart, last, peak, contracted = V, False, 0.0, 0.0, False
    r = V.shape[1]
    for rnd in range(1, n_rounds + 1):
        t0 = time.perf_counter()
        clients = None if k >= d else np.sort(rng.choice(d, size=k, replace=False))
        ask = remerging and first_merge <= rnd <= STOP_WINDOW  # sketches wanted this round
        kw = {"restart": restart, "sketch_rank": r if ask else 0} if ask or restart else {}
        try:
            rep = cohort.local_round(V, clients, **kw)
        except TooFewClients:
            result.stop_reason = "too_few_clients"
            break
        V_new, rec = server_round(method, rep, V, aggregation)
        restart = False
        rec["round"] = rnd
        rec.update(rep.info)
        result.history.append(rec)
        if k >= d:  # comparable only over the same clients
            if aggregation != "mean":
                rec["consensus_change"] = consensus_change(result.history, carried=seed)
            elif method == "fedpg":
                rec["objective_change"] = lagrangian_change(
                    result.history, key="objective", carried=seed
                )
            else:
                rec["lagrangian_change"] = lagrangian_change(result.history, carried=seed)
        if ask:
            M = oneshot_merge(list(rep.sketch), r)
            change = remerge_change(M, merged)
            if warm and rnd == first_merge and _stationary_start(result.history, tol):
                # the drift test: the carried state is stationary on the new records
                # (the data did not move), so nothing restarts
                remerging, restart = False, False
            else:
                # Merges move little at first, more as S forms, then contract towards
                # their fixed point. Once they have contracted (a step under half the
                # longest), a step longer than the last says they are at their accuracy
                # floor (rank-r sketches of unlike clients are not the exact
                # consensus): the ADMM takes over from the last merge. Steady steps (no
                # contraction yet) go on.
                peak = max(peak, change)
                contracted = contracted or change < 0.5 * peak
                restart = bool(change > np.sqrt(tol) and not (contracted and change >= last))
                last = change
            rec["remerge_change"], rec["remerged"] = change, restart
            if restart:
                V_new, merged = M, M  # the clients restart there next round
            else:
                remerging = False  # the ADMM from here on
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


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _stationary_start(history: list[dict], tol: float) -> bool:
    """A warm start's drift test at its second round: its first change of the augmented
    Lagrangian (relative to the data energy) at most ``tol`` and its residuals at most
    ``sqrt(tol)`` (:func:`converged`'s conditions on this fit's own rounds alone)."""
    first = _steps(history[:2], "augmented_lagrangian")
    last = history[-1]
    primal = max(last["consensus_residual_rel"], last["data_residual_rel"])
    return bool(first.size and first[0] <= tol and primal <= np.sqrt(tol))

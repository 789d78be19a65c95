"""The default federation runner: every client in this process, work batched across them.

Records never leave their client's block of the cohort; the loop below only moves
what a real federation would move (bases, duals, scalar metrics) between the client
side (:class:`fedep.core.fedep.FedEPCohort` / :class:`fedep.core.fedpg.FedPGCohort`)
and the server side (:func:`fedep.federation.server.server_round`).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from fedep.federation.server import server_round

__all__ = ["FederationResult", "run_inprocess", "converged"]


@dataclass
class FederationResult:
    """Outcome of a federated fit.

    Attributes
    ----------
    V : ndarray of shape (n_features, n_components)
        Final consensus (not orthonormalised).
    history : list of dict
        One record per round: objective, augmented Lagrangian, residuals, SSN/ManPG
        iterations, participants and wall time (``time_s``).
    stop_reason : str
        ``"converged"`` or ``"max_rounds"``.
    n_rounds : int
    """

    V: np.ndarray
    history: list[dict] = field(default_factory=list)
    stop_reason: str = "max_rounds"
    n_rounds: int = 0


def converged(record: dict, tol: float, method: str) -> bool:
    """Stopping test: primal (consensus, data) and dual residuals all below ``tol``.

    FedPG's server has no penalty-weighted dual residual; it stops on the change of
    the consensus basis.
    """
    if method == "fedpg":
        return record["v_change"] <= tol
    keys = ("consensus_residual_rel", "data_residual_rel", "dual_residual_rel")
    return max(record[k] for k in keys) <= tol


def run_inprocess(
    cohort,
    method: str,
    V0: np.ndarray,
    *,
    n_rounds: int,
    tol: float,
    client_fraction: float = 1.0,
    rng: np.random.Generator | None = None,
    callback: Callable[[int, dict], None] | None = None,
    warn: bool = True,
) -> FederationResult:
    """Run rounds until convergence or ``n_rounds``.

    Parameters
    ----------
    cohort : FedEPCohort or FedPGCohort
        The clients (their records stay inside it).
    method : {"fedep", "fedpg"}
    V0 : ndarray of shape (n, r)
    n_rounds : int
    tol : float
        See :func:`converged`; ``0`` runs all rounds.
    client_fraction : float, default=1.0
        Fraction of clients sampled per round (at least one).
    rng : Generator, optional
        Drives client sampling.
    callback : callable, optional
        ``callback(round, record)`` after each round (progress display).
    warn : bool, default=True
        Emit a ConvergenceWarning when ``n_rounds`` is reached without converging.
    """
    rng = np.random.default_rng(0) if rng is None else rng
    V = np.array(V0, dtype=float)
    result = FederationResult(V=V)
    d = cohort.d
    k = max(1, int(round(client_fraction * d)))
    for rnd in range(n_rounds):
        t0 = time.perf_counter()
        clients = None if k >= d else np.sort(rng.choice(d, size=k, replace=False))
        rep = cohort.local_round(V, clients)
        V_new, rec = server_round(method, rep, V)
        rec["round"] = rnd + 1
        rec["time_s"] = time.perf_counter() - t0
        V = V_new
        result.history.append(rec)
        if callback is not None:
            callback(rnd + 1, rec)
        if tol > 0 and converged(rec, tol, method) and k >= d:
            result.stop_reason = "converged"
            break
    result.V = V
    result.n_rounds = len(result.history)
    if result.stop_reason != "converged" and warn and tol > 0:
        warnings.warn(
            f"{method}: stopped at the round cap n_rounds={n_rounds} before reaching tol={tol}",
            ConvergenceWarning,
            stacklevel=3,
        )
    return result

"""Server side of a federated round: aggregation and the round's record.

Pure functions of what clients send (bases and duals, n x r, plus scalar metrics):
the in-process runner and the Flower ServerApp both call :func:`server_round`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedep.core.fedep import RoundReport, aggregate_consensus, consensus_terms
from fedep.core.fedpg import aggregate_mean

__all__ = ["merge_reports", "server_round", "validate_report"]


def merge_reports(reports: Sequence[RoundReport]) -> RoundReport:
    """Stack the reports of several clients (or cohorts) into one."""
    keys = reports[0].metrics.keys()
    return RoundReport(
        W=np.concatenate([r.W for r in reports]),
        Pi=np.concatenate([r.Pi for r in reports]),
        nu=np.concatenate([r.nu for r in reports]),
        metrics={k: np.concatenate([np.atleast_1d(r.metrics[k]) for r in reports]) for k in keys},
    )


def validate_report(rep: RoundReport, n_features: int, n_components: int) -> None:
    """Reject a malformed or non-finite client payload before it reaches aggregation."""
    for name in ("W", "Pi"):
        a = getattr(rep, name)
        if a.ndim != 3 or a.shape[1:] != (n_features, n_components):
            raise ValueError(
                f"client payload {name} has shape {a.shape}, "
                f"expected (k, {n_features}, {n_components})"
            )
        if not np.isfinite(a).all():
            raise ValueError(f"client payload {name} holds NaN or inf")
    if not (np.isfinite(rep.nu).all() and (rep.nu > 0).all()):
        raise ValueError("client payload nu must be finite and positive")


def server_round(method: str, rep: RoundReport, V_prev: np.ndarray) -> tuple[np.ndarray, dict]:
    """Aggregate one round's replies and summarise the round.

    Parameters
    ----------
    method : {"fedep", "fedpg"}
    rep : RoundReport
        Merged replies of the clients that answered.
    V_prev : ndarray of shape (n, r)
        Consensus before the round.

    Returns
    -------
    V : ndarray of shape (n, r)
        New consensus.
    record : dict
        Round diagnostics (sums over the answering clients).
    """
    if method == "fedpg":
        # nu carries FedPG's server weights (ones, or N_i for the authors' weighting).
        equal = np.all(rep.nu == rep.nu[0])
        V = aggregate_mean(rep.W, None if equal else rep.nu)
        Pi_next = rep.Pi
    else:
        V = aggregate_consensus(rep.W, rep.Pi, rep.nu)
        # The paper's L^{k+1} holds the multipliers after this round's dual ascent,
        # Pi^{k+1} = Pi^k + nu (W^{k+1} - V^{k+1}): what every client computes first
        # thing next round, and what the server can compute now.
        Pi_next = rep.Pi + rep.nu[:, None, None] * (rep.W - V)
    cres, cterm = consensus_terms(rep.W, Pi_next, rep.nu, V)
    m = rep.metrics
    objective = float(np.sum(m["fit"] + m["l1"] + m["l21"]))
    lagr = float(np.sum(m["projection"] + m["l1"] + m["l21"] + m["lam_terms"] + cterm))
    xnorm = float(np.sqrt(np.sum(m["x_norm2"])))
    r = V.shape[1]
    record = {
        "n_clients": int(rep.W.shape[0]),
        "objective": objective,
        "augmented_lagrangian": lagr,
        "consensus_residual": float(np.sqrt(np.sum(cres**2))),
        # Weighted by nu_i, the clients' weights in the V-step: a client whose penalty
        # (and so whose say in V) is small cannot hold the stopping test hostage.
        "consensus_residual_rel": float(np.sqrt(np.sum(rep.nu * cres**2) / np.sum(rep.nu) / r)),
        "data_residual": float(np.sqrt(np.sum(m["data_residual"] ** 2))),
        "data_residual_rel": float(np.sqrt(np.sum(m["data_residual"] ** 2)) / max(xnorm, 1e-300)),
        "v_change": float(np.linalg.norm(V - V_prev) / np.sqrt(r)),
        # ADMM dual residual (Boyd et al. 2011, sec. 3.3) relative to the gradient scale.
        "dual_residual_rel": float(
            np.linalg.norm(V - V_prev)
            * np.sqrt(np.sum(rep.nu**2))
            / max(np.sqrt(np.sum(m["grad_scale"] ** 2)), 1e-300)
        ),
        "manpg_iter": float(np.mean(m["manpg_iter"])),
        "ssn_iter": float(np.sum(m["ssn_iter"])),
    }
    return V, record

"""Server side of a federated round: aggregation and the round's record.

Pure functions of what clients send (bases and duals, n x r, plus scalar metrics):
the in-process runner and the Flower ServerApp both call :func:`server_round`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedep.core.aggregation import robust_step
from fedep.core.fedep import RoundReport, consensus_terms

__all__ = [
    "REQUIRED_METRICS",
    "ROUND_SCALARS",
    "merge_reports",
    "out_of_scale",
    "round_sums",
    "server_round",
    "server_round_from_sums",
    "validate_report",
]

#: The round metrics :func:`server_round` reads (every report must carry them).
REQUIRED_METRICS = (
    "fit l1 l21 projection lam_terms data_residual x_norm2 grad_scale manpg_iter ssn_iter"
).split()
#: A client basis is orthonormal (FedEP's and FedPG's ``W_i`` lie on the Stiefel
#: manifold) within this tolerance on ``W_i^T W_i - I``.
ORTHONORMAL_TOL = 1e-6
#: Most a client's ``nu_i`` (per declared record) or ``||Pi_i||`` may exceed the
#: round's median: honest clients differ by their data, not by orders of magnitude.
SCALE_SPREAD = 1e3


def merge_reports(reports: Sequence[RoundReport]) -> RoundReport:
    """Stack the reports of several clients (or cohorts) into one."""
    keys = [k for k in reports[0].metrics if all(k in r.metrics for r in reports)]
    sketches = [r.sketch for r in reports]
    return RoundReport(
        W=np.concatenate([r.W for r in reports]),
        Pi=np.concatenate([r.Pi for r in reports]),
        nu=np.concatenate([r.nu for r in reports]),
        metrics={k: np.concatenate([np.atleast_1d(r.metrics[k]) for r in reports]) for k in keys},
        sketch=None if any(b is None for b in sketches) else np.concatenate(sketches),
    )


def validate_report(
    rep: RoundReport, n_features: int, n_components: int, *, orthonormal: bool = True
) -> None:
    """Reject a malformed or non-finite client payload before it reaches aggregation.

    ``W`` and ``Pi`` of shape (k, n_features, n_components) and finite, each ``W_i``
    orthonormal (``orthonormal``), ``nu`` (k,) finite and positive, and every metric
    :func:`server_round` reads present and finite.
    """
    for name in ("W", "Pi"):
        a = getattr(rep, name)
        if a.ndim != 3 or a.shape[1:] != (n_features, n_components):
            raise ValueError(
                f"client payload {name} has shape {a.shape}, "
                f"expected (k, {n_features}, {n_components})"
            )
        if not np.isfinite(a).all():
            raise ValueError(f"client payload {name} holds NaN or inf")
    k = rep.W.shape[0]
    if rep.Pi.shape[0] != k:
        raise ValueError(f"client payload Pi of {rep.Pi.shape[0]} clients, W of {k}")
    if not (np.isfinite(rep.nu).all() and (rep.nu > 0).all()):
        raise ValueError("client payload nu must be finite and positive")
    if rep.nu.shape != (k,):
        raise ValueError(f"client payload nu has shape {rep.nu.shape}, expected ({k},)")
    if orthonormal:
        gap = np.abs(np.einsum("kij,kil->kjl", rep.W, rep.W) - np.eye(n_components)).max()
        if gap > ORTHONORMAL_TOL:
            raise ValueError(f"client payload W is not orthonormal (|W^T W - I| = {gap:.3g})")
    metrics = rep.metrics if rep.metrics is not None else {}
    missing = [m for m in REQUIRED_METRICS if m not in metrics]
    if missing:
        raise ValueError(f"client payload lacks the metrics {', '.join(missing)}")
    for name, v in metrics.items():
        v = np.atleast_1d(np.asarray(v, dtype=float))
        if v.shape != (k,) or not np.isfinite(v).all():
            raise ValueError(f"client payload metric {name!r} is not {k} finite values")
    if rep.sketch is not None:
        b = rep.sketch
        if b.ndim != 3 or b.shape[0] != rep.W.shape[0] or b.shape[1] != n_features:
            raise ValueError(
                f"client payload sketch has shape {b.shape}, "
                f"expected ({rep.W.shape[0]}, {n_features}, k)"
            )
        if not np.isfinite(b).all():
            raise ValueError("client payload sketch holds NaN or inf")


def out_of_scale(reports: Sequence[RoundReport], counts: Sequence[int | None]) -> dict[int, str]:
    """The reports (positions) whose ``nu_i`` or ``||Pi_i||`` is out of scale.

    Each client's ``nu_i`` per declared record (``counts``; None: not known) and its
    ``||Pi_i||_F`` against the round's median: beyond :data:`SCALE_SPREAD` times it a
    client would steer the V-step by itself (an honest ``nu_i`` is ``nu``, ``nu N_i``
    or ``nu ||X_i||_2^2``). Needs three reports or more (a median of honest ones).
    """
    if len(reports) < 3:
        return {}
    nu = np.array([float(r.nu.max()) for r in reports])
    n = np.array([max(int(c), 1) if c is not None else 1 for c in counts], dtype=float)
    per = nu / n
    pi = np.array([float(np.linalg.norm(r.Pi)) for r in reports])
    r = reports[0].W.shape[-1]
    nu_med, per_med = float(np.median(nu)), float(np.median(per))
    pi_cap = SCALE_SPREAD * (float(np.median(pi)) + nu_med * np.sqrt(r))
    out = {}
    for i in range(len(reports)):
        if per[i] > SCALE_SPREAD * max(per_med, nu_med / n[i]):
            out[i] = f"nu {nu[i]:.3g} out of scale (the round's median is {nu_med:.3g})"
        elif pi[i] > pi_cap:
            out[i] = f"||Pi|| {pi[i]:.3g} out of scale (at most {pi_cap:.3g} this round)"
    return out


def server_round(
    method: str, rep: RoundReport, V_prev: np.ndarray, aggregation: str = "mean"
) -> tuple[np.ndarray, dict]:
    """Aggregate one round's replies and summarise the round.

    Parameters
    ----------
    method : {"fedep", "fedpg"}
    rep : RoundReport
        Merged replies of the clients that answered.
    V_prev : ndarray of shape (n, r)
        Consensus before the round.
    aggregation : {"mean", "median", "trimmed", "grassmann"}, default="mean"
        The server step (:func:`fedep.core.aggregation.robust_step`): ``"mean"`` is the
        exact V-step (FedEP) or the mean of the bases (FedPG); the others bound the
        influence of a few clients that send arbitrary bases, and their stopping
        residuals are measured by the server (``consensus_residual_rel``: the kept
        clients' bases against ``V``, each once; ``data_residual_rel``: the median of
        the kept clients' relative data residuals), not weighted by reported values.

    Returns
    -------
    V : ndarray of shape (n, r)
        New consensus.
    record : dict
        Round diagnostics. ``objective``, ``augmented_lagrangian``, ``local_fit``,
        ``data_energy`` (``sum_i ||X_i||_F^2``) and the iteration counts sum (average)
        over the answering clients. ``objective``: FedEP's objective at the clients'
        variables (fit + sparse penalties); FedPG's, the reconstruction error
        ``sum_i ||X_i - X_i Q Q^T||^2`` of the consensus the clients received this
        round (``Q`` an orthonormal basis of ``span(V_prev)``: the previous round's
        global model; what FedPG's stopping test watches). ``local_fit``:
        ``sum_i ||(I - W_i W_i^T) X_i||^2`` at the clients' new bases (FedEP: of their
        cleaned records ``U_i``). ``augmented_lagrangian``: FedPG's is the ADMM
        function its local epochs descend, ``local_fit + sum_i <Y_i, W_i - Z> +
        rho_i/2 ||W_i - Z||^2`` with ``Z = V_prev``. With the paper's penalty
        (``rho = 0.01``) FedPG does not enforce the consensus: ``local_fit`` falls every
        round while ``objective`` may rise. The residuals of the
        stopping test (consensus, data, dual) over the clients that the rule kept, so
        that an excluded client, whose ``W_i`` never joins ``V``, cannot hold the
        run open. ``n_downweighted`` / ``downweighted``: how many and which (positions
        in ``rep``) were left out or down-weighted (0 / [] for ``"mean"``).
    """
    if rep.sums is not None:
        if aggregation != "mean":
            raise ValueError(f"aggregation={aggregation!r} needs each client's proposal, not sums")
        return server_round_from_sums(method, rep.sums, V_prev)
    step = robust_step(method, rep.W, rep.Pi, rep.nu, aggregation)
    V, kept = step.V, step.kept
    # The paper's L^{k+1} holds the multipliers after this round's dual ascent,
    # Pi^{k+1} = Pi^k + nu (W^{k+1} - V^{k+1}): what every client computes first thing
    # next round, and what the server can compute now. (FedPG's duals are not in the
    # recorded Lagrangian's sense; its reports carry them as they are.)
    Pi_next = rep.Pi if method == "fedpg" else rep.Pi + rep.nu[:, None, None] * (rep.W - V)
    cres, cterm = consensus_terms(rep.W, Pi_next, rep.nu, V)
    m = rep.metrics
    objective = float(np.sum(m["fit"] + m["l1"] + m["l21"]))
    # FedPG's clients report their Lagrangian's consensus terms themselves (in
    # lam_terms, with their own penalties rho_i, which nu does not carry).
    lagr_terms = m["projection"] + m["l1"] + m["l21"] + m["lam_terms"]
    lagr = float(np.sum(lagr_terms if method == "fedpg" else lagr_terms + cterm))
    every = bool(kept.all())
    # The stopping residuals over the kept clients (all of them for "mean": no copies).
    ck = cres if every else cres[kept]
    dres = m["data_residual"] if every else m["data_residual"][kept]
    x2 = m["x_norm2"] if every else m["x_norm2"][kept]
    gs = m["grad_scale"] if every else m["grad_scale"][kept]
    nuk = rep.nu if every else rep.nu[kept]
    xnorm = float(np.sqrt(np.sum(x2)))
    r = V.shape[1]
    robust = aggregation != "mean"
    if robust:
        # What the clients say about themselves must not move the stopping test: the
        # consensus residual is the server's own (bases against V, every kept client
        # once, not by its reported nu_i) and the data residual the median of the kept
        # clients' relative residuals (a minority cannot move it past the honest ones).
        Wk = rep.W if every else rep.W[kept]
        cons_rel = float(np.sqrt(np.mean(np.sum((Wk - V) ** 2, axis=(1, 2))) / r))
        data_rel = float(np.median(dres / np.sqrt(np.maximum(x2, 1e-300))))
    else:
        cons_rel = float(np.sqrt(np.sum(nuk * ck**2) / np.sum(nuk) / r))
        data_rel = float(np.sqrt(np.sum(dres**2)) / max(xnorm, 1e-300))
    record = {
        "n_clients": int(rep.W.shape[0]),
        "objective": objective,
        "augmented_lagrangian": lagr,
        "local_fit": float(np.sum(m["projection"])),
        # sum_i ||X_i||_F^2 of the answering clients (the sums above cover them): the
        # scale of the stopping test's change of L (federation.rounds.lagrangian_change).
        "data_energy": float(np.sum(m["x_norm2"])),
        "consensus_residual": float(np.sqrt(np.sum(ck**2))),
        # Weighted by nu_i, the clients' weights in the V-step: a client whose penalty
        # (and so whose say in V) is small cannot hold the stopping test hostage.
        # (Robust rules: the server's own measure, see above.)
        "consensus_residual_rel": cons_rel,
        "data_residual": float(np.sqrt(np.sum(dres**2))),
        "data_residual_rel": data_rel,
        "v_change": float(np.linalg.norm(V - V_prev) / np.sqrt(r)),
        # ADMM dual residual (Boyd et al. 2011, sec. 3.3) relative to the gradient scale.
        "dual_residual_rel": float(
            np.linalg.norm(V - V_prev)
            * np.sqrt(np.sum(nuk**2))
            / max(np.sqrt(np.sum(gs**2)), 1e-300)
        ),
        "manpg_iter": float(np.mean(m["manpg_iter"])),
        "ssn_iter": float(np.sum(m["ssn_iter"])),
        "l21": float(np.sum(m["l21"])),
        "n_downweighted": int(kept.size - np.count_nonzero(kept)),
        "downweighted": np.flatnonzero(~kept).tolist(),
        **step.info,
    }
    return V, record


#: The scalars of :func:`round_sums` (``s``), in order: sums over the clients.
ROUND_SCALARS = (
    "n_clients nu nu2 nu_w2 w2 pi_w objective lagrangian data_residual2 x_norm2 grad_scale2 "
    "manpg_iter ssn_iter l21 local_fit"
).split()


def round_sums(rep: RoundReport) -> dict[str, np.ndarray]:
    """What the server step needs from a round, as sums over the clients of ``rep``.

    Every quantity of :func:`server_round` with ``aggregation="mean"`` is a function
    of these sums and the new ``V`` (the residuals expand:
    ``sum_i nu_i ||W_i - V||^2 = sum_i nu_i ||W_i||^2 - 2 <sum_i nu_i W_i, V> +
    sum_i nu_i ||V||^2``), so a client can send its own sums before ``V`` is known,
    and a secure sum of the clients' sums gives the server the round and nothing of
    a single client (:func:`server_round_from_sums`).

    Returns
    -------
    dict
        ``nuW``, ``Pi``, ``W``: ``sum_i nu_i W_i``, ``sum_i Pi_i``, ``sum_i W_i``,
        each (n, r); ``s``: the :data:`ROUND_SCALARS` (15,).
    """
    nu = np.asarray(rep.nu, dtype=float)
    m = rep.metrics
    w2 = np.einsum("kij,kij->k", rep.W, rep.W)
    s = [
        float(nu.size),
        nu.sum(),
        (nu**2).sum(),
        (nu * w2).sum(),
        w2.sum(),
        np.einsum("kij,kij->", rep.Pi, rep.W),
        np.sum(m["fit"] + m["l1"] + m["l21"]),
        np.sum(m["projection"] + m["l1"] + m["l21"] + m["lam_terms"]),
        np.sum(np.square(m["data_residual"])),
        np.sum(m["x_norm2"]),
        np.sum(np.square(m["grad_scale"])),
        np.sum(m["manpg_iter"]),
        np.sum(m["ssn_iter"]),
        np.sum(m["l21"]),
        np.sum(m["projection"]),
    ]
    return {
        "nuW": np.tensordot(nu, rep.W, axes=1),
        "Pi": rep.Pi.sum(axis=0),
        "W": rep.W.sum(axis=0),
        "s": np.array(s, dtype=float),
    }


def server_round_from_sums(
    method: str, sums: dict[str, np.ndarray], V_prev: np.ndarray
) -> tuple[np.ndarray, dict]:
    """:func:`server_round` with ``aggregation="mean"`` from the clients' summed
    :func:`round_sums` alone: the same ``V`` and record, up to round-off (tested) and,
    under secure aggregation, up to the quantisation of the sums.

    FedEP's V-step is ``(sum nu_i W_i + sum Pi_i) / sum nu_i``; FedPG's the
    ``nu``-weighted mean of the bases (the plain mean when the weights are equal).
    ``downweighted`` is empty: no client is told apart.
    """
    s = dict(zip(ROUND_SCALARS, np.asarray(sums["s"], dtype=float).tolist(), strict=True))
    nuW, Pi, W = sums["nuW"], sums["Pi"], sums["W"]
    k, nu_sum = s["n_clients"], s["nu"]
    V = nuW / nu_sum if method == "fedpg" else (nuW + Pi) / nu_sum
    r = V.shape[1]
    v2 = float(np.sum(V * V))
    # sum_i nu_i ||W_i - V||^2 and sum_i ||W_i - V||^2 (clipped at 0: round-off)
    nu_sq = max(s["nu_w2"] - 2.0 * float(np.sum(nuW * V)) + nu_sum * v2, 0.0)
    sq = max(s["w2"] - 2.0 * float(np.sum(W * V)) + k * v2, 0.0)
    pi_diff = s["pi_w"] - float(np.sum(Pi * V))  # sum_i <Pi_i, W_i - V>
    # FedEP's recorded Lagrangian holds Pi^{k+1} = Pi + nu (W - V) (see server_round);
    # FedPG's clients report their consensus terms in lam_terms (in "lagrangian").
    cterm = 0.0 if method == "fedpg" else pi_diff + 1.5 * nu_sq
    xnorm = float(np.sqrt(max(s["x_norm2"], 0.0)))
    dres = float(np.sqrt(max(s["data_residual2"], 0.0)))
    record = {
        "n_clients": int(round(k)),
        "objective": s["objective"],
        "augmented_lagrangian": s["lagrangian"] + cterm,
        "local_fit": s["local_fit"],
        "data_energy": s["x_norm2"],
        "consensus_residual": float(np.sqrt(sq)),
        "consensus_residual_rel": float(np.sqrt(nu_sq / nu_sum / r)),
        "data_residual": dres,
        "data_residual_rel": dres / max(xnorm, 1e-300),
        "v_change": float(np.linalg.norm(V - V_prev) / np.sqrt(r)),
        "dual_residual_rel": float(
            np.linalg.norm(V - V_prev)
            * np.sqrt(max(s["nu2"], 0.0))
            / max(np.sqrt(max(s["grad_scale2"], 0.0)), 1e-300)
        ),
        "manpg_iter": s["manpg_iter"] / max(k, 1.0),
        "ssn_iter": s["ssn_iter"],
        "n_downweighted": 0,
        "downweighted": [],
        "l21": s["l21"],
    }
    return V, record

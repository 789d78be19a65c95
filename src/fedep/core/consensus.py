"""The exact consensus block step of FedEP: ``V`` minimised with the cleaned records fixed.

At any point of FedEP's feasible set every ``W_i`` equals ``V``, and the objective
(Xiu et al., eq. "proposed_method") reads, with ``U_i = X_i - S_i`` the cleaned records,
``G = sum_i U_i^T U_i`` and ``beta = sum_i beta_i``::

    F(V, S) = tr(G) - tr(V^T G V) + alpha ||S||_1 + beta ||V||_{2,1},   V in St(n, r).

For fixed ``S`` the minimiser over ``V`` depends on the records only through ``G``,
which the server obtains as the merge of the clients' full-rank sketches
``B_i B_i^T = U_i^T U_i`` (:func:`fedep.core.fedep.gram_sketch`, no record). This module
minimises that block by majorisation-minimisation (MM): at the current ``V``, with
``c_j = ||v_j||`` the row norms, ``||v_j|| <= ||v_j||^2 / (2 c_j) + c_j / 2`` (equality
at ``v_j``), so ``-tr(V^T (G - beta/2 diag(1/c)) V)`` majorises ``F`` up to a constant
and its minimiser over St(n, r), the top-r eigenvectors of ``G - beta/2 diag(1/c)``, never
increases ``F``. Each step is an exact eigendecomposition, so it moves every direction
at once, however small its eigenvalue gap next to ``||G||_2``: the ADMM's W-steps move
such directions by ``gap / ||G_i||_2`` per round (a gradient step of length ``1/L``).

Used by :func:`fedep.federation.rounds.run_rounds` (``remerge``): block coordinate
descent between this step (server) and the clients' data steps (``S``, ``U``, their
duals), until the consensus stops moving; the ADMM then certifies stationarity.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedep.core.stiefel import l21_norm

__all__ = ["ConsensusStep", "aligned", "consensus_objective", "consensus_v_step", "pooled_gram"]

#: Row norms below this are treated as this (the MM weights ``1/c_j`` stay finite).
ROW_FLOOR = 1e-8


@dataclass(frozen=True)
class ConsensusStep:
    """Result of :func:`consensus_v_step`.

    Attributes
    ----------
    V : ndarray of shape (n, r)
        The minimiser found (orthonormal columns).
    value : float
        ``-tr(V^T G V) + beta ||V||_{2,1}`` at ``V`` (``F`` less its constant terms).
    n_iter : int
        MM steps taken.
    """

    V: np.ndarray
    value: float
    n_iter: int


def pooled_gram(sketches: np.ndarray) -> np.ndarray:
    """``sum_i B_i B_i^T`` of the clients' sketches, shape (d, n, k) -> (n, n)."""
    B = np.asarray(sketches, dtype=float)
    G = np.einsum("dik,djk->ij", B, B)
    return 0.5 * (G + G.T)


def consensus_objective(G: np.ndarray, V: np.ndarray, beta: float) -> float:
    """``-tr(V^T G V) + beta ||V||_{2,1}`` (the V-block of ``F`` less its constants)."""
    return float(-np.einsum("ij,ik,kj->", V, G, V) + beta * l21_norm(V))


def consensus_v_step(
    G: np.ndarray, V: np.ndarray, beta: float, *, max_iter: int = 100, tol: float = 1e-12
) -> ConsensusStep:
    """Minimise ``-tr(V^T G V) + beta ||V||_{2,1}`` over St(n, r) by MM from ``V``.

    Parameters
    ----------
    G : ndarray of shape (n, n)
        Pooled Gram matrix of the cleaned records (symmetric positive semi-definite).
    V : ndarray of shape (n, r)
        Start (orthonormal columns); the result's objective is never above its own.
    beta : float
        Total l2,1 weight ``sum_i beta_i`` (>= 0; 0: the top-r eigenvectors of ``G``).
    max_iter : int
        Most MM steps.
    tol : float
        Stop when a step lowers the objective by at most ``tol`` times ``tr(G)``.

    Returns
    -------
    ConsensusStep
    """
    G = np.asarray(G, dtype=float)
    r = V.shape[1]
    scale = max(float(np.trace(G)), 1e-300)
    best = consensus_objective(G, V, beta)
    V_best, n_iter = V, 0
    for n_iter in range(1, max_iter + 1):  # noqa: B007 (the count is returned)
        c = np.maximum(np.linalg.norm(V_best, axis=1), ROW_FLOOR)
        _, Q = np.linalg.eigh(G - np.diag(0.5 * beta / c))
        cand = Q[:, ::-1][:, :r]
        value = consensus_objective(G, cand, beta)
        if value > best:  # round-off at the fixed point: keep the better point
            break
        gain = best - value
        V_best, best = cand, value
        if gain <= tol * scale or beta == 0.0:
            break
    return ConsensusStep(V=aligned(V_best, V), value=best, n_iter=n_iter)


def aligned(V: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """``V`` (n, r) rotated within its span to be closest to ``ref`` (n, r): the same
    subspace and objective (both terms are invariant under ``V -> V Q``, Q orthogonal),
    so that bases of nearby subspaces can be compared and extrapolated entry by entry."""
    u, _, vt = np.linalg.svd(V.T @ ref)
    return V @ (u @ vt)

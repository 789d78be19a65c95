"""Outlier-robust server steps: aggregating the clients' proposals when some may lie.

Every client ``i`` of a round sends its basis ``W_i`` (n, r), its consensus dual
``Pi_i`` (n, r) and its penalty ``nu_i``. The server's step is a function of the
clients' *proposals*::

    FedEP:  Z_i = W_i + Pi_i / nu_i,    weights w_i = nu_i
    FedPG:  Z_i = W_i,                  weights w_i = 1

The exact V-step of FedEP's ADMM, ``V = sum_i (nu_i W_i + Pi_i) / sum_i nu_i``, is the
``w``-weighted mean of the ``Z_i`` (FedPG's step is the plain mean): a single client
that sends an arbitrary ``Z_i`` moves it arbitrarily far. This module gives two
bounded-influence replacements:

**Geometric median** (:func:`geometric_median`)::

    V = argmin_Y  sum_i w_i ||Z_i - Y||_F

computed by Weiszfeld's fixed point ``Y <- sum_i (w_i / d_i) Z_i / sum_i (w_i / d_i)``,
``d_i = ||Z_i - Y||_F``, with the Vardi-Zhang safeguard when ``Y`` lands on a proposal
(there the plain iteration is undefined; the step below stays a descent step and
stops at the optimum when the point itself is the median, i.e. when
``||sum_{i: Z_i != Y} w_i (Z_i - Y) / d_i|| <= sum_{i: Z_i = Y} w_i``). Its breakdown
point is one half of the weight: clients holding less than half of ``sum_i w_i`` can
move ``V`` only by an amount bounded by the spread of the others.

The Frobenius norm compares bases coordinate by coordinate, which is meaningful only
when the clients express their subspaces in the same coordinates. FedEP's ADMM
ensures it: every W-step minimises ``... + nu_i/2 ||W - (V - Pi_i / nu_i)||_F^2`` over
the Stiefel manifold, a Frobenius pull towards the shared ``V`` that pins the
rotation of ``W_i`` inside its span to ``V``'s (an honest ``W_i`` equal to ``V Q`` for a
rotation ``Q != I`` would pay ``nu_i ||V Q - V||^2``). FedPG's dual term pulls the same
way. So the honest ``Z_i`` form a tight cluster in R^{n x r} around ``V``, and a
proposal outside it is an outlier in that norm.

**Trimmed mean on the Grassmannian** (:func:`trimmed_consensus`): with the polar
factors ``Q_i = polar(Z_i)`` and the projectors ``P_i = Q_i Q_i^T``::

    D_ij = ||P_i - P_j||_F = sqrt(2 r - 2 ||Q_i^T Q_j||_F^2)      (no n x n matrix)
    s_i  = median_{j != i} D_ij

the ``floor(trim * k)`` clients with the largest ``s_i`` are dropped (at most
``(k - 1) // 2``, so a majority always stays) and ``V`` is the ``w``-weighted mean of the
others' ``Z_i`` (for FedEP the exact V-step of the kept clients). ``D_ij`` depends on
the spans only: ``Z_i -> Z_i R`` for any orthogonal ``R`` (r x r) leaves it, and so the
exclusions, unchanged. The rule does not rely on shared coordinates to find the
outliers, only to average the rest.

**What the ADMM does then.** With a robust rule the V-step is no longer the minimiser
of the augmented Lagrangian in ``V``, so the usual ADMM convergence theory no longer
applies as such. Every client, excluded or down-weighted included, still runs its
dual ascent ``Pi_i <- Pi_i + nu_i (W_i - V)`` against the robust ``V``. For the trimmed
rule, if the kept set settles, the iteration is FedEP's ADMM on the kept clients
(``sum_{kept} Pi_i = 0`` at a fixed point, as for the mean). For the median, a fixed
point with ``W_i = V`` for the honest clients satisfies
``sum_i nu_i Pi_i / ||Pi_i|| = 0``: each client's consensus force counts by its
direction, not its size, so a client far from the others (large ``||Pi_i||/nu_i``)
has a bounded pull. A poisoned or simply far client keeps a large consensus residual
``||W_i - V||`` for ever; the stopping test must not wait for it, so the server
computes the stopping residuals over the clients that the rule kept
(:func:`robust_step`'s ``kept``): for the median, the clients whose distance to the
median is at most ``outlier_ratio`` times the median distance.

**Geometric median of projectors** (:func:`grassmann_median`, ``"grassmann"``): the
median of the spans themselves, rotation-free. With ``Q_i = polar(Z_i)`` and
``P_i = Q_i Q_i^T`` (n x n, never formed)::

    P* = argmin_Y  sum_i ||P_i - Y||_F,      V = U polar(U^T Zbar)

Weiszfeld runs on the coefficients ``a`` of ``Y = sum_i a_i P_i`` (the iterates stay in
that cone): ``||P_i - Y||_F^2 = r - 2 (K a)_i + a^T K a`` with
``K_ij = ||Q_i^T Q_j||_F^2``, so an iteration costs O(k^2) after one O(n k^2 r^2) Gram
matrix. ``U`` holds the top ``r`` eigenvectors of ``P*`` (the leading left singular
vectors of ``S A^(1/2)``, ``S = [Q_1 .. Q_k]``, ``A = diag(a) (x) I_r``) and the rotation
inside the span
is the one closest (orthogonal Procrustes) to ``Zbar``, the bounded-weight mean of the
proposals within ``outlier_ratio`` times the median distance of ``P*``: the span is
the median's, only its coordinates follow the kept clients. Breakdown point one half
of the clients (a minority moves ``P*`` by at most a multiple of the honest spread;
Minsker 2015, Lemma 2.1), like ``"median"``, but unlike it blind to how a client
expresses its span (``Z_i R`` for an orthogonal ``R`` is the same point).

**Weights.** The clients' ``nu_i`` are their own report. No robust rule takes them as
they are: ``"median"`` and ``"grassmann"`` weigh every client once (so their breakdown
point is one half of the *clients*, which a client cannot change by inflating
``nu_i``), and the means of the kept clients (``"trimmed"``, the rotation of
``"grassmann"``) cap each weight at :data:`WEIGHT_CAP` times the median weight of the
round (:func:`bounded_weights`): an honest client within that factor of the median
keeps its exact weight, a liar gets at most that factor.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedep.core._linalg import thin_svd
from fedep.core.fedep import aggregate_consensus
from fedep.core.fedpg import aggregate_mean
from fedep.core.stiefel import polar

__all__ = [
    "AGGREGATIONS",
    "GeometricMedian",
    "RobustStep",
    "TrimmedConsensus",
    "WEIGHT_CAP",
    "bounded_weights",
    "geometric_median",
    "grassmann_distances",
    "grassmann_median",
    "proposals",
    "robust_step",
    "trimmed_consensus",
]

#: Server steps :func:`robust_step` knows: the estimators' ``aggregation`` options.
AGGREGATIONS = ("mean", "median", "trimmed", "grassmann")
#: Robust rules: a client's weight in a mean is at most this many times the round's
#: median weight (its ``nu_i`` is its own report).
WEIGHT_CAP = 2.0


def bounded_weights(w: np.ndarray, cap: float = WEIGHT_CAP) -> np.ndarray:
    """The weights ``w`` (k,) with each capped at ``cap`` times their median.

    Honest clients within that factor of the median keep their weight; a client that
    inflates its report gets ``cap`` times a typical client's say, whatever it claims
    (as long as fewer than half the clients inflate).
    """
    w = np.asarray(w, dtype=float)
    return np.minimum(w, cap * float(np.median(w)))


@dataclass
class GeometricMedian:
    """Result of :func:`geometric_median`.

    Attributes
    ----------
    median : ndarray of shape (n, r)
    n_iter : int
        Weiszfeld iterations run.
    reason : str
        ``"converged"`` (step below ``tol``), ``"at_data_point"`` (the optimum is one
        of the proposals: the safeguard's optimality test holds there),
        ``"identical"`` (all proposals equal, or one proposal) or ``"max_iter"``.
    distances : ndarray of shape (k,)
        ``||Z_i - median||_F``.
    """

    median: np.ndarray
    n_iter: int
    reason: str
    distances: np.ndarray


@dataclass
class TrimmedConsensus:
    """Result of :func:`trimmed_consensus`.

    Attributes
    ----------
    mean : ndarray of shape (n, r)
        Weighted mean of the kept proposals.
    kept : ndarray of bool, shape (k,)
    scores : ndarray of shape (k,)
        Each client's median projector distance to the others.
    distances : ndarray of shape (k, k)
        ``||P_i - P_j||_F``.
    """

    mean: np.ndarray
    kept: np.ndarray
    scores: np.ndarray
    distances: np.ndarray


@dataclass
class RobustStep:
    """Result of :func:`robust_step`.

    Attributes
    ----------
    V : ndarray of shape (n, r)
        New consensus.
    kept : ndarray of bool, shape (k,)
        Clients that count for the stopping test (all of them for ``"mean"``).
    info : dict
        Diagnostics for the round record (``median_iter``, ``median_reason``).
    """

    V: np.ndarray
    kept: np.ndarray
    info: dict


def proposals(method: str, W: np.ndarray, Pi: np.ndarray, nu: np.ndarray):
    """The clients' proposals ``Z`` (k, n, r) and weights ``w`` (k,) of a server step.

    FedEP: ``Z_i = W_i + Pi_i / nu_i``, ``w_i = nu_i`` (so that the w-weighted mean of
    the ``Z_i`` is the exact V-step). FedPG: ``Z_i = W_i``, ``w_i = nu_i``, its server
    weights (proportional to its penalties ``rho_i``; ones for a literal ``rho``).
    """
    nu = np.asarray(nu, dtype=float)
    if method == "fedpg":
        return W, nu
    return W + Pi / nu[:, None, None], nu


def geometric_median(
    Z: np.ndarray,
    weights: np.ndarray | None = None,
    *,
    tol: float = 1e-10,
    max_iter: int = 1000,
    init: np.ndarray | None = None,
) -> GeometricMedian:
    """Weighted geometric median of matrices in the Frobenius norm (Weiszfeld).

    Minimises ``sum_i w_i ||Z_i - Y||_F`` over ``Y`` (n, r) by Weiszfeld's iteration
    with the Vardi-Zhang (2000) modification at a proposal, which makes every step a
    descent step and detects when a proposal is itself the median.

    Parameters
    ----------
    Z : ndarray of shape (k, n, r)
        The proposals.
    weights : ndarray of shape (k,), optional
        Non-negative weights (default: equal).
    tol : float, default=1e-10
        Stop when a step moves ``Y`` by at most ``tol * (1 + max_i ||Z_i||_F)``.
    max_iter : int, default=1000
    init : ndarray of shape (n, r), optional
        Starting point (default: the weighted mean).

    Returns
    -------
    GeometricMedian
    """
    Z = np.asarray(Z, dtype=float)
    k = Z.shape[0]
    w = np.ones(k) if weights is None else np.asarray(weights, dtype=float)
    if w.shape != (k,) or not (np.isfinite(w).all() and (w >= 0).all() and w.sum() > 0):
        raise ValueError("weights must be k finite non-negative numbers with a positive sum")
    flat = Z.reshape(k, -1)
    scale = 1.0 + float(np.max(np.linalg.norm(flat, axis=1)))
    step_tol = tol * scale
    # Points closer than this count as the same point (the safeguard's case).
    same = 1e-14 * scale
    if k == 1 or np.all(np.abs(flat - flat[0]).max(axis=1) <= same):
        y = flat[0].copy()
        return GeometricMedian(y.reshape(Z.shape[1:]), 0, "identical", np.zeros(k))
    y = (w @ flat) / w.sum() if init is None else np.asarray(init, dtype=float).ravel().copy()
    reason = "max_iter"
    it = 0
    while it < max_iter:
        it += 1
        diff = flat - y
        d = np.linalg.norm(diff, axis=1)
        at = d <= same
        inv = np.where(at, 0.0, w / np.where(at, 1.0, d))
        T = (inv @ flat) / inv.sum() if inv.sum() > 0 else y
        eta = float(w[at].sum())
        if eta > 0.0:
            # Vardi-Zhang: y coincides with proposals of total weight eta.
            R = inv @ diff  # sum over the other points of w_i (Z_i - y) / d_i
            rn = float(np.linalg.norm(R))
            if rn <= eta:
                reason = "at_data_point"
                break
            gamma = eta / rn
            y_new = (1.0 - gamma) * T + gamma * y
        else:
            y_new = T
        moved = float(np.linalg.norm(y_new - y))
        y = y_new
        # Weiszfeld approaches a median that is a proposal only linearly: test the
        # proposal nearest to the iterate for optimality and stop there if it holds.
        j = int(np.argmin(np.linalg.norm(flat - y, axis=1)))
        if _is_median_point(flat, w, j, same):
            y, reason = flat[j].copy(), "at_data_point"
            break
        if moved <= step_tol:
            reason = "converged"
            break
    dist = np.linalg.norm(flat - y, axis=1)
    return GeometricMedian(y.reshape(Z.shape[1:]), it, reason, dist)


def _is_median_point(flat: np.ndarray, w: np.ndarray, j: int, same: float) -> bool:
    """Whether proposal ``j`` minimises ``sum_i w_i ||Z_i - Y||`` (subgradient test)."""
    diff = flat - flat[j]
    d = np.linalg.norm(diff, axis=1)
    at = d <= same
    R = np.where(at, 0.0, w / np.where(at, 1.0, d)) @ diff
    return float(np.linalg.norm(R)) <= float(w[at].sum())


def grassmann_distances(Z: np.ndarray) -> np.ndarray:
    """Projector distances ``||P_i - P_j||_F`` between the spans of the proposals.

    ``P_i = Q_i Q_i^T`` with ``Q_i = polar(Z_i)``; computed as
    ``sqrt(2 r - 2 ||Q_i^T Q_j||_F^2)`` from the (k r) x (k r) Gram matrix of the
    stacked ``Q_i``: O(n k^2 r^2) work, no n x n matrix.

    Parameters
    ----------
    Z : ndarray of shape (k, n, r)

    Returns
    -------
    ndarray of shape (k, k)
        Symmetric, zero diagonal, entries in ``[0, sqrt(2 r)]``.
    """
    Q = polar(np.asarray(Z, dtype=float))
    k, n, r = Q.shape
    S = np.swapaxes(Q, 0, 1).reshape(n, k * r)
    C = (S.T @ S).reshape(k, r, k, r)
    overlap = np.einsum("iajb,iajb->ij", C, C)
    D = np.sqrt(np.clip(2.0 * r - 2.0 * overlap, 0.0, None))
    D = 0.5 * (D + D.T)
    np.fill_diagonal(D, 0.0)
    return D


def trimmed_consensus(
    Z: np.ndarray, weights: np.ndarray | None = None, *, trim: float = 0.2
) -> TrimmedConsensus:
    """Weighted mean of the proposals after dropping the most outlying spans.

    Each client's score is its median projector distance to the other clients
    (:func:`grassmann_distances`); the ``floor(trim * k)`` largest scores are dropped,
    at most ``(k - 1) // 2`` of them (ties: the later client goes first).

    Parameters
    ----------
    Z : ndarray of shape (k, n, r)
    weights : ndarray of shape (k,), optional
        Weights of the mean of the kept proposals (default: equal).
    trim : float, default=0.2
        Fraction of clients dropped, in ``[0, 0.5)``.

    Returns
    -------
    TrimmedConsensus
    """
    if not 0.0 <= trim < 0.5:
        raise ValueError(f"trim must be in [0, 0.5); got {trim!r}")
    Z = np.asarray(Z, dtype=float)
    k = Z.shape[0]
    w = np.ones(k) if weights is None else np.asarray(weights, dtype=float)
    D = grassmann_distances(Z) if k > 1 else np.zeros((1, 1))
    scores = _median_off_diagonal(D)
    m = min(int(np.floor(trim * k + 1e-9)), (k - 1) // 2)
    kept = np.ones(k, dtype=bool)
    if m > 0:
        # Largest scores first; among equal scores the later client first.
        order = k - 1 - np.argsort(-scores[::-1], kind="stable")
        kept[order[:m]] = False
    ww = w[kept]
    mean = np.tensordot(ww / ww.sum(), Z[kept], axes=1)
    return TrimmedConsensus(mean, kept, scores, D)


def _median_off_diagonal(D: np.ndarray) -> np.ndarray:
    k = D.shape[0]
    if k == 1:
        return np.zeros(1)
    off = D[~np.eye(k, dtype=bool)].reshape(k, k - 1)
    return np.median(off, axis=1)


def robust_step(
    method: str,
    W: np.ndarray,
    Pi: np.ndarray,
    nu: np.ndarray,
    aggregation: str = "mean",
    *,
    trim: float = 0.2,
    outlier_ratio: float = 3.0,
) -> RobustStep:
    """One server step over the clients' replies with the given rule.

    Parameters
    ----------
    method : {"fedep", "fedpg"}
    W, Pi : ndarray of shape (k, n, r)
    nu : ndarray of shape (k,)
    aggregation : {"mean", "median", "trimmed", "grassmann"}, default="mean"
        ``"mean"``: the exact step (FedEP's V-minimiser
        :func:`~fedep.core.fedep.aggregate_consensus`, FedPG's mean), bit for bit;
        ``"median"``: :func:`geometric_median` of the proposals, each client once;
        ``"trimmed"``: :func:`trimmed_consensus` (for FedEP the exact V-step of the
        kept clients while no weight exceeds :data:`WEIGHT_CAP` times the median);
        ``"grassmann"``: :func:`grassmann_median` of the spans.
    trim : float, default=0.2
        Fraction dropped by ``"trimmed"``.
    outlier_ratio : float, default=3.0
        ``"median"``, ``"grassmann"``: a client farther from the median than this many times the
        median distance is counted as down-weighted (left out of the stopping test).

    Returns
    -------
    RobustStep
    """
    k = W.shape[0]
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}; got {aggregation!r}")
    all_kept = np.ones(k, dtype=bool)
    if aggregation == "mean":
        if method == "fedpg":
            # FedPG's reports carry its server weights as nu (proportional to rho_i).
            V = aggregate_mean(W, None if np.all(nu == nu[0]) else nu)
        else:
            V = aggregate_consensus(W, Pi, nu)
        return RobustStep(V, all_kept, {})
    Z, w = proposals(method, W, Pi, nu)
    wb = bounded_weights(w)
    if aggregation == "trimmed":
        # The exclusions depend on the spans only; the kept clients' mean is their
        # V-step with bounded weights (the exact V-step while no weight is capped).
        tc = trimmed_consensus(Z, wb, trim=trim)
        kept = tc.kept
        if method == "fedpg":
            nk = wb[kept]
            V = aggregate_mean(W[kept], None if np.all(nk == nk[0]) else nk)
        elif np.array_equal(wb, w):
            V = aggregate_consensus(W[kept], Pi[kept], nu[kept])
        else:
            V = tc.mean
        return RobustStep(V, kept, {})
    if aggregation == "grassmann":
        gr = grassmann_median(Z, wb, outlier_ratio=outlier_ratio)
        info = {"median_iter": gr.n_iter, "median_reason": gr.reason}
        return RobustStep(gr.V, gr.kept, info)
    # Every client once: a majority of clients, not of claimed weight, holds the median.
    gm = geometric_median(Z)
    d = gm.distances
    med = float(np.median(d))
    kept = d <= outlier_ratio * med + 1e-12 * (1.0 + float(np.max(d)))
    return RobustStep(gm.median, kept, {"median_iter": gm.n_iter, "median_reason": gm.reason})


@dataclass
class GrassmannMedian:
    """Result of :func:`grassmann_median`.

    Attributes
    ----------
    V : ndarray of shape (n, r)
        Orthonormal basis of the median span, rotated towards the kept proposals.
    coef : ndarray of shape (k,)
        ``P* = sum_i coef_i P_i`` (non-negative, summing to one).
    distances : ndarray of shape (k,)
        ``||P_i - P*||_F``.
    kept : ndarray of bool, shape (k,)
        Proposals within ``outlier_ratio`` times the median distance.
    n_iter : int
    reason : str
        ``"converged"``, ``"at_data_point"``, ``"identical"`` or ``"max_iter"``.
    """

    V: np.ndarray
    coef: np.ndarray
    distances: np.ndarray
    kept: np.ndarray
    n_iter: int
    reason: str


def grassmann_median(
    Z: np.ndarray,
    weights: np.ndarray | None = None,
    *,
    outlier_ratio: float = 3.0,
    tol: float = 1e-10,
    max_iter: int = 1000,
) -> GrassmannMedian:
    """Geometric median of the projectors onto the proposals' spans (Weiszfeld).

    Every proposal counts once in the median (``weights`` only weigh the mean that sets
    the rotation inside the median span). See the module's docstring.

    Parameters
    ----------
    Z : ndarray of shape (k, n, r)
    weights : ndarray of shape (k,), optional
        Non-negative weights of the kept proposals' mean (default: equal).
    outlier_ratio : float, default=3.0
    tol : float, default=1e-10
        Stop when the coefficients move by at most ``tol`` (in the l1 norm).
    max_iter : int, default=1000

    Returns
    -------
    GrassmannMedian
    """
    Z = np.asarray(Z, dtype=float)
    k, n, r = Z.shape
    w = np.ones(k) if weights is None else np.asarray(weights, dtype=float)
    Q = polar(Z)
    S = np.swapaxes(Q, 0, 1).reshape(n, k * r)
    G = S.T @ S  # (k r, k r): Q_i^T Q_j blocks
    C = G.reshape(k, r, k, r)
    K = np.einsum("iajb,iajb->ij", C, C)  # <P_i, P_j>

    def dist(a: np.ndarray) -> np.ndarray:
        return np.sqrt(np.clip(np.diag(K) - 2.0 * (K @ a) + a @ K @ a, 0.0, None))

    same = 1e-12 * np.sqrt(r)
    a = np.full(k, 1.0 / k)
    reason, it = "max_iter", 0
    if k == 1 or np.all(np.sqrt(np.clip(2 * r - 2 * K[0], 0, None)) <= same):
        a, reason = np.eye(k)[0], "identical"
    else:
        while it < max_iter:
            it += 1
            d = dist(a)
            at = d <= same
            inv = np.where(at, 0.0, 1.0 / np.where(at, 1.0, d))
            T = inv / inv.sum()
            if at.any():
                # Vardi-Zhang, in coefficients: ||R|| of sum (P_i - Y) / d_i over the
                # others, against the multiplicity of the point Y coincides with.
                eta = float(at.sum())
                c = inv - inv.sum() * a  # R = sum_i c_i P_i
                rn = float(np.sqrt(max(c @ K @ c, 0.0)))
                if rn <= eta:
                    reason = "at_data_point"
                    break
                g = eta / rn
                a_new = (1.0 - g) * T + g * a
            else:
                a_new = T
            moved = float(np.abs(a_new - a).sum())
            a = a_new
            if moved <= tol:
                reason = "converged"
                break
    d = dist(a)
    # Top-r eigenvectors of P* = B B^T, B = S diag(sqrt(a) (x) 1_r): B's leading left
    # singular vectors (thin SVD of an n x (k r) matrix).
    sa = np.sqrt(np.repeat(np.clip(a, 0.0, None), r))
    U = thin_svd(S * sa[None, :])[0][:, :r]
    med = float(np.median(d))
    kept = d <= outlier_ratio * med + 1e-12
    wk = w[kept]
    Zbar = np.tensordot(wk / wk.sum(), Z[kept], axes=1)
    V = U @ polar(U.T @ Zbar)
    return GrassmannMedian(V, a, d, kept, it, reason)

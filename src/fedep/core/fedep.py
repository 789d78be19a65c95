"""FedEP: personalised, robust federated PCA by ADMM with manifold optimisation.

Model (Xiu et al., eq. "proposed_method"), for clients ``i = 1..d``::

    min  sum_i ||(I - W_i W_i^T)(X_i - S_i)||_F^2 + alpha ||S_i||_1 + beta_i ||W_i||_{2,1}
    s.t. W_i = V,  W_i^T W_i = I_r

solved by the ADMM of the paper's Algorithm 1 on the split ``U_i = X_i - S_i``. One
round at client ``i``, given the server's ``V``:

1. ``Pi_i <- Pi_i + nu_i (W_i - V)`` (dual ascent; the paper's printed minus sign is an
   erratum, see NOTES.md: the sign must match ``+<Pi, W - V>`` in the Lagrangian);
2. W-step: ManPG + SSN on ``||U_i - U_i W W^T||^2 + nu_i/2 ||W - Z_i||^2 + beta_i ||W||_{2,1}``
   over St(n, r), ``Z_i = V - Pi_i/nu_i`` (:mod:`fedep.core.manpg`);
3. S-step: ``S_i = soft(X_i - U_i + Lam_i/mu, alpha/mu)``;
4. U-step: ``U_i = (mu Y_i + 2 Y_i W_i W_i^T) / (mu + 2)``, ``Y_i = X_i - S_i + Lam_i/mu``;
5. ``Lam_i <- Lam_i + mu (X_i - S_i - U_i)``;

and the client sends ``(W_i, Pi_i)`` only. The server sets
``V = sum_i (nu_i W_i + Pi_i) / sum_i nu_i`` (the exact V-minimiser; the paper's
plain mean is the case of equal ``nu_i``, where ``sum_i Pi_i = 0``).

Records are **rows** here (the paper's ``X_i`` is features x samples): our ``X_i`` is
``(N_i, n)``, ``U_i W W^T`` is the projection and ``G_i = U_i^T U_i`` is n x n. We store
the scaled dual ``A_i = Lam_i / mu``.

Notation table (paper -> code):

=========  =====================  ============================================
paper      code                   shape / meaning
=========  =====================  ============================================
X_i        ``X``                  (N_i, n) client records (padded groups)
S_i        ``S``                  (N_i, n) sparse corruption
U_i        ``U``                  (N_i, n) auxiliary ``X_i - S_i``
Lambda_i   ``mu * A``             (N_i, n) multiplier of ``X - S - U = 0``
W_i        ``W``                  (d, n, r) personalised bases
V          ``V``                  (n, r) consensus (not orthonormal in general)
Pi_i       ``Pi``                 (d, n, r) multiplier of ``W_i - V = 0``
alpha      ``alpha``              l1 weight on S
beta       ``beta``               (d,) l2,1 weight on W (per client)
mu, nu     ``mu``, ``nu``         penalties (``nu`` per client)
=========  =====================  ============================================
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fedep.core.layout import ClientGroup, make_groups
from fedep.core.manpg import manpg_w_step
from fedep.core.stiefel import l21_norm

__all__ = ["FedEPSettings", "FedEPCohort", "aggregate_consensus", "consensus_terms"]


@dataclass(frozen=True)
class FedEPSettings:
    """Numerical settings of FedEP (validated by the estimator, not here).

    ``use_sparse=False`` drops ``S`` (then ``U = X`` and ``G`` is formed once),
    ``beta = 0`` drops the l2,1 term: the paper's ablation cases.

    ``penalty_scaling`` says how the cohort turns the scalar ``beta`` and ``nu`` it is
    given into per-client weights:

    - ``"paper"``: literally, ``beta_i = beta`` and ``nu_i = nu``;
    - ``"relative"``: ``beta_i = beta * N_i`` (a weight per record, so that a client's
      size does not decide its sparsity) and ``nu_i = nu * ||X_i||_2^2`` (the consensus
      penalty in units of the client's largest Gram eigenvalue, the curvature of its
      data term; ADMM on the Stiefel manifold needs ``nu_i`` of that order).
    """

    alpha: float = 1.0
    mu: float = 1.0
    use_sparse: bool = True
    inner_max_iter: int = 10
    inner_tol: float = 1e-8
    ssn_tol: float = 1e-10
    ssn_max_iter: int = 30
    retraction: str = "polar"
    max_group_rows: int = 16384
    penalty_scaling: str = "relative"


@dataclass
class RoundReport:
    """What a cohort of clients reports after a local round (model-side only)."""

    W: np.ndarray  # (d, n, r)
    Pi: np.ndarray  # (d, n, r)
    nu: np.ndarray  # (d,)
    metrics: dict[str, np.ndarray] = field(default_factory=dict)  # each (d,)


def aggregate_consensus(W: np.ndarray, Pi: np.ndarray, nu: np.ndarray) -> np.ndarray:
    """Server V-step: ``argmin_V sum_i <Pi_i, W_i - V> + nu_i/2 ||W_i - V||^2``.

    Parameters
    ----------
    W, Pi : ndarray of shape (d, n, r)
    nu : ndarray of shape (d,)

    Returns
    -------
    V : ndarray of shape (n, r)
    """
    nu = np.asarray(nu, dtype=float)
    return (np.tensordot(nu, W, axes=1) + Pi.sum(axis=0)) / nu.sum()


def consensus_terms(W, Pi, nu, V) -> tuple[np.ndarray, np.ndarray]:
    """Per client ``||W_i - V||_F`` and ``<Pi_i, W_i - V> + nu_i/2 ||W_i - V||^2``."""
    diff = W - V
    sq = np.einsum("dij,dij->d", diff, diff)
    return np.sqrt(sq), np.einsum("dij,dij->d", Pi, diff) + 0.5 * nu * sq


class FedEPCohort:
    """The client side of FedEP for a set of clients held in one process.

    The in-process runner holds every client in one cohort (work batched across
    them); a Flower gateway holds a cohort of one. Both run exactly this code.

    Parameters
    ----------
    blocks : list of ndarray, each (N_i, n)
        The clients' (already centred/standardised) records. Never sent anywhere.
    V0 : ndarray of shape (n, r)
        Initial consensus; every ``W_i`` starts there.
    beta, nu : float
        l2,1 weight and consensus penalty, turned into per-client weights as
        ``settings.penalty_scaling`` says.
    settings : FedEPSettings
    """

    def __init__(self, blocks, V0, beta, nu, settings: FedEPSettings):
        self.settings = settings
        self.d = len(blocks)
        self.n, self.r = V0.shape
        self.sizes = np.array([b.shape[0] for b in blocks])
        self.W = np.broadcast_to(V0, (self.d, self.n, self.r)).copy()
        self.Pi = np.zeros_like(self.W)
        self.Lam_ssn = np.zeros((self.d, self.r, self.r))
        self.groups: list[ClientGroup] = make_groups(blocks, max_rows=settings.max_group_rows)
        self.G = np.empty((self.d, self.n, self.n))
        for g in self.groups:
            self.G[g.clients] = np.swapaxes(g.X, 1, 2) @ g.X
        self.trX = np.einsum("dii->d", self.G).copy()
        if settings.penalty_scaling == "relative":
            self.beta = float(beta) * self.sizes
            self.nu = float(nu) * np.maximum(np.linalg.eigvalsh(self.G)[:, -1], 1e-12)
        else:
            self.beta = np.full(self.d, float(beta))
            self.nu = np.full(self.d, float(nu))
        if settings.use_sparse:
            for g in self.groups:
                g.S = np.zeros_like(g.X)
                g.U = g.X.copy()
                g.A = np.zeros_like(g.X)
        else:
            # Without S, U = X for good: only the Gram matrices are ever needed.
            for g in self.groups:
                g.X = None

    # ------------------------------------------------------------------ state
    def state_arrays(self) -> dict[str, np.ndarray]:
        """Model-side state per client (for personalised scoring and checkpoints)."""
        return {"W": self.W.copy(), "Pi": self.Pi.copy()}

    def corruption(self) -> list[np.ndarray]:
        """The fitted ``S_i`` of every client, unpadded, in client order (local only)."""
        out = [None] * self.d
        for g in self.groups:
            for j, c in enumerate(g.clients):
                out[c] = (
                    g.S[j, : g.lengths[j]].copy()
                    if self.settings.use_sparse
                    else np.zeros((g.lengths[j], self.n))
                )
        return out

    # ------------------------------------------------------------------ round
    def local_round(self, V: np.ndarray, clients: np.ndarray | None = None) -> RoundReport:
        """One FedEP round for the given clients (default all): duals, W, S, U, Lam.

        Parameters
        ----------
        V : ndarray of shape (n, r)
            The server's current consensus.
        clients : ndarray of int, optional
            Positions of the participating clients.

        Returns
        -------
        RoundReport
            ``W`` and ``Pi`` of the participating clients and per-client metrics.
        """
        s = self.settings
        idx = np.arange(self.d) if clients is None else np.asarray(clients)
        self.Pi[idx] += self.nu[idx, None, None] * (self.W[idx] - V)
        Z = V - self.Pi[idx] / self.nu[idx, None, None]
        res = manpg_w_step(
            self.G[idx],
            self.W[idx],
            Z,
            self.beta[idx],
            self.nu[idx],
            self.Lam_ssn[idx],
            max_iter=s.inner_max_iter,
            tol=s.inner_tol,
            ssn_tol=s.ssn_tol,
            ssn_max_iter=s.ssn_max_iter,
            retraction=s.retraction,
        )
        self.W[idx] = res.W
        self.Lam_ssn[idx] = res.Lam
        metrics = {
            "manpg_iter": res.n_iter.astype(float),
            "ssn_iter": res.ssn_iter.astype(float),
            "l21": self.beta[idx] * l21_norm(res.W),
        }
        if s.use_sparse:
            dm = self._data_step(idx)
            metrics.update({k: v[idx] for k, v in dm.items()})
        else:
            GW = self.G[idx] @ res.W
            fit = self.trX[idx] - np.einsum("dij,dij->d", res.W, GW)
            metrics.update(
                fit=fit,
                l1=np.zeros(idx.size),
                lam_terms=np.zeros(idx.size),
                data_residual=np.zeros(idx.size),
                projection=fit,
            )
        metrics["x_norm2"] = self.trX[idx]
        # Scale of the local gradient, for the relative dual residual of the server.
        metrics["grad_scale"] = np.linalg.norm(self.G[idx] @ res.W, axis=(-2, -1))
        return RoundReport(W=res.W.copy(), Pi=self.Pi[idx].copy(), nu=self.nu[idx], metrics=metrics)

    def _data_step(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        want = np.zeros(self.d, dtype=bool)
        want[idx] = True
        keys = ("fit", "l1", "lam_terms", "data_residual", "projection")
        out = {k: np.zeros(self.d) for k in keys}
        for g in self.groups:
            sel = want[g.clients]
            if not sel.any():
                continue
            full = bool(sel.all())
            j = slice(None) if full else np.flatnonzero(sel)
            cl = g.clients[j]
            W = self.W[cl]
            k, m = W.shape[0], g.X.shape[1]
            G = np.zeros((k, self.n, self.n))
            acc = np.zeros((4, k))
            # Row chunks bound the temporaries of a very large client.
            step = max(1, self.settings.max_group_rows // k)
            for r0 in range(0, m, step):
                rows = slice(r0, min(m, r0 + step))
                if full:
                    blk = (g.X[:, rows], g.S[:, rows], g.U[:, rows], g.A[:, rows])
                else:
                    blk = tuple(a[j, rows] for a in (g.X, g.S, g.U, g.A))
                acc += self._block(*blk, W, G)
                if not full:
                    g.S[j, rows], g.U[j, rows], g.A[j, rows] = blk[1], blk[2], blk[3]
            self.G[cl] = G
            out["fit"][cl], out["l1"][cl], out["lam_terms"][cl], r2 = acc
            out["data_residual"][cl] = np.sqrt(r2)
            out["projection"][cl] = np.einsum("kii->k", G) - np.einsum("kij,kij->k", W, G @ W)
        return out

    def _block(self, X, S, U, A, W, G) -> np.ndarray:
        """S-, U- and Lam-steps on a (k, rows, n) block, in place; adds U^T U to G."""
        s = self.settings
        mu, thr = s.mu, s.alpha / s.mu
        Wt = np.swapaxes(W, 1, 2)
        # S-step: soft threshold of M = X - U + A at alpha/mu.
        np.subtract(X, U, out=S)
        S += A
        tmp = np.clip(S, -thr, thr)
        S -= tmp
        np.subtract(X, S, out=tmp)  # X - S
        TW = tmp @ W
        fit = np.einsum("kij,kij->k", tmp, tmp) - np.einsum("kij,kij->k", TW, TW)
        tmp += A  # Y = X - S + A
        # U-step: U = (mu Y + 2 Y W W^T)/(mu + 2) = Y - A_new, A_new = 2/(mu+2) (I - P) Y.
        Q = tmp - (tmp @ W) @ Wt
        Q *= 2.0 / (mu + 2.0)
        R = np.subtract(Q, A)  # X - S - U_new: the dual step A <- A + R
        r2 = np.einsum("kij,kij->k", R, R)
        lam = mu * np.einsum("kij,kij->k", Q, R) + 0.5 * mu * r2
        A[...] = Q
        np.subtract(tmp, Q, out=U)
        G += np.swapaxes(U, 1, 2) @ U
        l1 = s.alpha * np.abs(S).sum(axis=(1, 2))
        return np.stack([fit, l1, lam, r2])

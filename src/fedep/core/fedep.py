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
the scaled dual ``A_i = Lam_i / mu``. ``S_i`` is not state: each S-step reads only
``X_i``, ``U_i`` and ``A_i``, so it is formed on the fly (and by
:meth:`FedEPCohort.corruption` on request). For a client of many rows ``A_i`` is not
stored either: after a data step ``A_i = 2/mu U_i (I - W_i W_i^T)``, so it is recomputed
from ``U_i`` (:mod:`fedep.core.large_clients`). Steps 3-5 run as one fused pass per record
(:mod:`fedep.core._kernels`, compiled) or as NumPy expressions (the reference).

Notation table (paper -> code):

=========  =====================  ============================================
paper      code                   shape / meaning
=========  =====================  ============================================
X_i        ``X``                  (N_i, n) client records (padded groups)
S_i        ``S``                  (N_i, n) sparse corruption (not stored: see below)
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

from fedep.core import _kernels
from fedep.core._threads import single_threaded_blas as _single_threaded_blas
from fedep.core.large_clients import data_step_rows, recompute_duals, step_threads
from fedep.core.layout import ClientGroup, make_groups
from fedep.core.manpg import manpg_w_step
from fedep.core.stiefel import l21_norm, prox_l1

__all__ = [
    "CONSENSUS_WEIGHTS",
    "PENALTY_SCALINGS",
    "FedEPSettings",
    "FedEPCohort",
    "MAX_HOLD",
    "aggregate_consensus",
    "consensus_terms",
    "gram_sketch",
]


#: Most data steps a consensus-step round may ask of a client (``local_round(hold=)``).
MAX_HOLD = 20

#: Floor of the curvature weight per record (``nu_i >= nu * CURVATURE_FLOOR * N_i``).
CURVATURE_FLOOR = 1e-2

#: ``penalty_scaling`` of FedEP and FedPG: ``"relative"`` scales the penalties per
#: client (by its records or curvature), ``"paper"`` takes them literally.
PENALTY_SCALINGS = ("relative", "paper")

#: ``consensus_weights`` of FedEP and FedPG: each client's weight in the server's step
#: (``"auto"``: ``"curvature"`` under relative scaling, else ``"uniform"``).
CONSENSUS_WEIGHTS = ("auto", "curvature", "samples", "uniform")


@dataclass(frozen=True)
class FedEPSettings:
    """Numerical settings of FedEP (validated by the estimator, not here).

    The model's hyper-parameters (``alpha`` .. ``consensus_weights``) have no
    defaults here: :class:`fedep.FedEP` owns them and builds these settings
    (``FedEP._make_cohort``). The solver tolerances and the memory layout below are
    implementation details with defaults of their own.

    ``use_sparse=False`` drops ``S`` (then ``U = X`` and ``G`` is formed once),
    ``beta = 0`` drops the l2,1 term: the paper's ablation cases.

    ``penalty_scaling`` says how the cohort turns the scalar ``beta`` and ``nu`` it is
    given into per-client weights:

    - ``"paper"``: literally, ``beta_i = beta`` and ``nu_i = nu``;
    - ``"relative"``: ``beta_i = beta * N_i`` (a weight per record, so that a client's
      size does not decide its sparsity) and ``nu_i = nu * ||X_i||_2^2`` (the consensus
      penalty in units of the client's largest Gram eigenvalue, the curvature of its
      data term; ADMM on the Stiefel manifold needs ``nu_i`` of that order).

    ``consensus_weights`` sets the per-client consensus penalties ``nu_i``, and with
    them the weights of the V-step ``V = sum_i (nu_i W_i + Pi_i) / sum_i nu_i``:
    ``"curvature"`` (``nu_i = nu * ||X_i||_2^2``), ``"samples"`` (``nu_i = nu * N_i``: a
    sample-weighted V-step; ``nu`` is then per record), ``"uniform"`` (``nu_i = nu``:
    the plain mean), or ``"auto"``: ``"curvature"`` under ``"relative"`` scaling and
    ``"uniform"`` under ``"paper"``.

    ``kernel`` picks the implementation of the per-record S-, U- and dual steps:
    ``"numba"`` (the fused kernel of :mod:`fedep.core._kernels`), ``"numpy"`` (the
    reference), or ``"auto"`` (numba when its compiled code costs no compilation, else
    NumPy while a background process compiles it; ``FEDEP_KERNELS`` overrides, see
    :mod:`fedep.core._kernels._dispatch`). Both give the same iterates up to rounding.

    ``dual_rows``: a group of clients padded to at least this many rows keeps no dual
    array ``A``; each data step recomputes it from ``U`` (``A = 2/mu (I - W W^T) U`` at
    the previous step's ``W``, :mod:`fedep.core.large_clients`): one array the size of
    those records less, the same iterates to rounding.
    """

    alpha: float
    mu: float
    use_sparse: bool
    inner_max_iter: int
    penalty_scaling: str
    consensus_weights: str
    inner_tol: float = 1e-8
    ssn_tol: float = 1e-10
    ssn_max_iter: int = 30
    retraction: str = "polar"
    max_group_rows: int = 1 << 20
    chunk_rows: int = 16384
    kernel: str = "auto"
    dual_rows: int = 4096


@dataclass
class RoundReport:
    """What a cohort of clients reports after a local round (model-side only)."""

    W: np.ndarray  # (d, n, r)
    Pi: np.ndarray  # (d, n, r)
    nu: np.ndarray  # (d,)
    metrics: dict[str, np.ndarray] = field(default_factory=dict)  # each (d,)
    #: What the transport adds to the round's record (e.g. Flower's participants).
    info: dict = field(default_factory=dict)
    #: (d, n, k) sketches of the clients' cleaned records ``U_i`` when the round asked
    #: for them (``local_round(..., sketch_rank=k)``), else None.
    sketch: np.ndarray | None = None
    #: The clients' round sums (:func:`fedep.federation.server.round_sums`) when a
    #: transport sums securely and the server sees no single client's ``W``, ``Pi``,
    #: ``nu`` (then ``W``, ``Pi``, ``nu`` and ``metrics`` are empty).
    sums: dict[str, np.ndarray] | None = None


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


def gram_sketch(G: np.ndarray, k: int) -> np.ndarray:
    """One-shot sketches ``U_k Sigma_k`` from Gram matrices ``G_i = U_i^T U_i``.

    The same sketch as :func:`fedep.core.baselines.client_sketch` of ``U_i`` (its
    Gram is the best rank-k approximation of ``G_i``), from the n x n Gram matrix that
    the cohort keeps anyway.

    Parameters
    ----------
    G : ndarray of shape (d, n, n)
    k : int

    Returns
    -------
    ndarray of shape (d, n, min(k, n))
    """
    lam, vec = np.linalg.eigh(G)
    k = min(int(k), G.shape[-1])
    top = vec[..., ::-1][..., :k]
    return top * np.sqrt(np.clip(lam[..., ::-1][..., None, :k], 0.0, None))


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

    @_single_threaded_blas
    def __init__(self, blocks, V0, beta, nu, settings: FedEPSettings):
        self.settings = settings
        self.d = len(blocks)
        self.n, self.r = V0.shape
        self.sizes = np.array([b.shape[0] for b in blocks])
        self.W = np.broadcast_to(V0, (self.d, self.n, self.r)).copy()
        self.Pi = np.zeros_like(self.W)
        self.Lam_ssn = np.zeros((self.d, self.r, self.r))
        self.groups: list[ClientGroup] = make_groups(blocks, max_rows=settings.max_group_rows)
        self._buffers: dict[int, np.ndarray] = {}
        self.G = np.empty((self.d, self.n, self.n))
        for g in self.groups:
            self.G[g.clients] = np.swapaxes(g.X, 1, 2) @ g.X
        self.trX = np.einsum("dii->d", self.G).copy()
        evals, evecs = np.linalg.eigh(self.G)
        # Largest Gram eigenvalue and its vector, refreshed by power steps as G moves.
        self.lmax = np.maximum(evals[:, -1], 1e-12)
        self._top = evecs[:, :, -1].copy()
        relative = settings.penalty_scaling == "relative"
        self.beta = float(beta) * (self.sizes if relative else np.ones(self.d))
        weights = settings.consensus_weights
        if weights == "auto":
            weights = "curvature" if relative else "uniform"
        if weights not in ("curvature", "samples", "uniform"):
            raise ValueError(
                "consensus_weights must be 'auto', 'curvature', 'samples' or 'uniform'; "
                f"got {weights!r}"
            )
        self._nu_weights, self._nu_scalar = weights, float(nu)
        self.nu = self._penalties(slice(None))
        _kernels.requested_mode(settings.kernel)  # an unknown kernel fails here
        if settings.use_sparse:
            # S is not state: each round's S-step reads only X, U and A, so S is
            # never stored (one array less to stream per round).
            for g in self.groups:
                g.U = g.X.copy()
                if g.X.shape[1] >= settings.dual_rows:
                    # A = 0 until the first data step, then recomputed from U
                    k = g.X.shape[0]
                    g.dual_basis = np.zeros((k, self.n, self.r))
                    g.dual_scale = np.zeros(k)
                else:
                    g.A = np.zeros_like(g.X)
        else:
            # Without S, U = X for good: only the Gram matrices are ever needed.
            for g in self.groups:
                g.X = None  # U = X, and only G is needed

    def _penalties(self, sel) -> np.ndarray:
        """The consensus penalties ``nu_i`` of the clients ``sel`` at their current
        curvature ``lmax`` (``consensus_weights``, see :class:`FedEPSettings`).

        The curvature has a floor of CURVATURE_FLOOR per record: on globally
        standardised data an average record carries energy n_features, so a client
        below the floor is near-constant (quiet) traffic. Without it, such a client's
        ``nu_i ~ 0``: its basis never moves toward V and ADMM never settles.
        """
        sizes = self.sizes[sel].astype(float)
        if self._nu_weights == "curvature":
            scale = np.maximum(self.lmax[sel], CURVATURE_FLOOR * sizes)
        elif self._nu_weights == "samples":
            scale = sizes
        else:
            scale = np.ones_like(sizes)
        return self._nu_scalar * scale

    # ------------------------------------------------------------------ state
    def state_arrays(self) -> dict[str, np.ndarray]:
        """Every array that changes over rounds: enough to resume (a gateway's checkpoint).

        ``W``, ``Pi`` (d, n, r), the penalties ``nu`` (d,), the SSN multipliers
        ``Lam_ssn`` (d, r, r), the Gram
        matrices ``G`` (d, n, n), ``lmax`` (d,), its eigenvector ``top`` (d, n) and,
        per padded group ``j``, ``U.j`` and ``A.j`` (k, m, n) when ``S`` is modelled
        (``A.j`` replaced by ``dual_basis.j`` (k, n, r) and ``dual_scale.j`` (k,) where
        the duals are recomputed from ``U``). Local only: ``U`` and ``A`` have one row
        per record.
        """
        out = {
            "W": self.W.copy(),
            "Pi": self.Pi.copy(),
            "nu": self.nu.copy(),
            "Lam_ssn": self.Lam_ssn.copy(),
            "G": self.G.copy(),
            "lmax": self.lmax.copy(),
            "top": self._top.copy(),
        }
        for j, g in enumerate(self.groups):
            for key, a in _group_state(g).items():
                out[f"{key}.{j}"] = a.copy()
        return out

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        """Restore what :meth:`state_arrays` returned (same blocks and settings).

        Raises
        ------
        ValueError
            If a key is missing or unknown or an array's shape differs.
        """
        targets = {
            "W": self.W, "Pi": self.Pi, "nu": self.nu, "Lam_ssn": self.Lam_ssn, "G": self.G,
            "lmax": self.lmax, "top": self._top,
        }  # fmt: skip
        for j, g in enumerate(self.groups):
            for key, a in _group_state(g).items():
                targets[f"{key}.{j}"] = a
        _copy_state(targets, state)

    @_single_threaded_blas
    def settle_data(self, steps: int) -> None:
        """``steps`` data steps (S, U and their dual; steps 3-5 of a round) of every
        client at its current ``W_i``, with no message: a warm start's local start.

        A warm start carries ``W_i`` and the duals of the consensus, not ``S_i``, whose
        records are gone; on new records the data side starts at ``S = 0``, ``U = X``,
        so its first rounds would move the augmented Lagrangian (and hold the stopping
        test open) while ``S`` forms. These steps take it near its fixed point for the
        carried bases first (the ``G_i``, and so their top eigenvalue, follow).
        """
        if not self.settings.use_sparse or steps <= 0:
            return
        idx = np.arange(self.d)
        for _ in range(int(steps)):
            self._data_step(idx)
        evals, evecs = np.linalg.eigh(self.G)
        self.lmax = np.maximum(evals[:, -1], 1e-12)
        self._top = evecs[:, :, -1].copy()

    def corruption(self) -> list[np.ndarray]:
        """The sparse corruption ``S_i`` of every client, unpadded, in client order.

        It is the S-step at the current iterate, ``soft(X_i - U_i + Lam_i/mu,
        alpha/mu)``: the S that the next round would compute (at convergence, the
        fitted S). Local only: it never leaves the client.
        """
        s = self.settings
        out = [None] * self.d
        for g in self.groups:
            for j, c in enumerate(g.clients):
                n_j = g.lengths[j]
                if s.use_sparse:
                    A = _client_duals(g, j)
                    out[c] = prox_l1(g.X[j, :n_j] - g.U[j, :n_j] + A, s.alpha / s.mu)
                else:
                    out[c] = np.zeros((n_j, self.n))
        return out

    def duals(self) -> list[np.ndarray]:
        """The scaled duals ``A_i = Lam_i / mu`` of every client, unpadded, in client
        order (stored, or recomputed from ``U_i`` for clients of many rows). Local only.

        Returns
        -------
        list of ndarray, each (N_i, n); zeros when ``S`` is not modelled
        """
        out = [None] * self.d
        for g in self.groups:
            for j, c in enumerate(g.clients):
                if self.settings.use_sparse:
                    out[c] = _client_duals(g, j)
                else:
                    out[c] = np.zeros((g.lengths[j], self.n))
        return out

    # ------------------------------------------------------------------ round
    @_single_threaded_blas
    def local_round(
        self,
        V: np.ndarray,
        clients: np.ndarray | None = None,
        *,
        restart: bool = False,
        sketch_rank: int = 0,
        hold: int = 0,
    ) -> RoundReport:
        """One FedEP round for the given clients (default all): duals, W, S, U, Lam.

        Parameters
        ----------
        V : ndarray of shape (n, r)
            The server's current consensus.
        clients : ndarray of int, optional
            Positions of the participating clients.
        restart : bool, default=False
            Restart the consensus ADMM at ``V`` first: ``W_i = V``, ``Pi_i = 0`` (and
            the SSN multipliers 0), the penalties ``nu_i`` at the current curvature of
            the cleaned records; the data-side state (``U``, ``Lam``, so ``S``) is
            kept. The server asks for it after its consensus steps
            (:func:`fedep.federation.rounds.run_rounds`, ``remerge``).
        sketch_rank : int, default=0
            With ``k > 0``, also return each client's sketch of its cleaned records
            ``U_i`` (after this round's data step): the top ``k`` eigenvectors of
            ``G_i = U_i^T U_i`` scaled by the square roots of their eigenvalues, the
            :func:`fedep.core.baselines.client_sketch` of ``U_i``. An n x k summary, no
            record.

        hold : int, default=0
            A consensus step (:mod:`fedep.core.consensus`): with ``h > 0`` the clients
            take ``W_i = V`` (``Pi_i = 0``, as ``restart``) and ``h`` data steps at it,
            no W-step; the report's terms are then those of ``F(V, S)`` and, with
            ``sketch_rank``, the sketch is the Gram factor the server's exact V-step
            reads (``sketch_rank = n``).

        Returns
        -------
        RoundReport
            ``W`` and ``Pi`` of the participating clients and per-client metrics
            (and ``sketch``, (k_clients, n, k), when asked).
        """
        s = self.settings
        idx = np.arange(self.d) if clients is None else np.asarray(clients)
        # With every client taking part, index by a slice: views, not copies.
        sel = slice(None) if clients is None else idx
        if not 0 <= hold <= MAX_HOLD or sketch_rank < 0:
            raise ValueError(f"round options out of range: hold {hold}, sketch_rank {sketch_rank}")
        if restart or hold:
            self.W[sel] = V
            self.Pi[sel] = 0.0
            self.Lam_ssn[sel] = 0.0
        if restart:
            # A fresh ADMM (Pi = 0): its penalties at the curvature of the records as
            # cleaned now (S may hold much of the raw records' energy: penalties of the
            # raw curvature freeze the bases and inflate the dual residual).
            self.nu[sel] = self._penalties(idx)
        if hold:
            for _ in range(int(hold) - 1):
                self._data_step(idx)
            res = _Held(self.W[sel].copy(), np.zeros(idx.size), np.zeros(idx.size))
        else:
            res = self._w_step(V, sel, idx, clients)
        metrics = {
            "manpg_iter": res.n_iter.astype(float),
            "ssn_iter": res.ssn_iter.astype(float),
        }
        if s.use_sparse:
            dm = self._data_step(idx)
            metrics.update({k: v[sel] for k, v in dm.items()})
            projection, grad_scale, l21 = self._gram_terms(sel, refresh_lmax=True)
        else:
            projection, grad_scale, l21 = self._gram_terms(sel, refresh_lmax=False)
            zeros = np.zeros(idx.size)
            metrics.update(fit=projection, l1=zeros, lam_terms=zeros, data_residual=zeros.copy())
        metrics.update(projection=projection, grad_scale=grad_scale, l21=self.beta[sel] * l21)
        metrics["x_norm2"] = self.trX[sel].copy()
        return RoundReport(
            W=res.W,  # a fresh array (the state holds its own copy above)
            Pi=self.Pi[sel].copy(),
            nu=self.nu[sel].copy(),
            metrics=metrics,
            sketch=gram_sketch(self.G[sel], sketch_rank) if sketch_rank > 0 else None,
        )

    def _w_step(self, V, sel, idx, clients):
        """Steps 1-2 of a round: the dual ascent of ``W_i = V`` and the ManPG W-step."""
        s = self.settings
        dual = _kernels.pick(s.kernel, "dual_step")
        if dual is not None:
            Pi = self.Pi[sel]  # a view when every client takes part
            Z = np.empty_like(Pi)
            dual(self.W[sel], np.ascontiguousarray(V, dtype=float), Pi, self.nu[sel], Z)
            if clients is not None:
                self.Pi[idx] = Pi
        else:
            self.Pi[sel] += self.nu[sel, None, None] * (self.W[sel] - V)
            Z = V - self.Pi[sel] / self.nu[sel, None, None]
        res = manpg_w_step(
            self.G[sel],
            self.W[sel],
            Z,
            self.beta[sel],
            self.nu[sel],
            self.Lam_ssn[sel],
            t=1.0 / (2.0 * self.lmax[sel] + self.nu[sel]),
            max_iter=s.inner_max_iter,
            tol=s.inner_tol,
            ssn_tol=s.ssn_tol,
            ssn_max_iter=s.ssn_max_iter,
            retraction=s.retraction,
            kernel=s.kernel,
        )
        self.W[sel] = res.W
        self.Lam_ssn[sel] = res.Lam
        return res

    def _gram_terms(self, sel, refresh_lmax: bool, steps: int = 2):
        """``tr(G) - tr(W^T G W)``, ``||G W||`` and ``||W||_{2,1}`` per client.

        ``||G W||`` is the scale of the local gradient that the server's relative dual
        residual divides by. With ``refresh_lmax`` it also takes ``steps`` power steps
        from the previous top eigenvector of ``G`` (which changes little per round) to
        update ``lmax``: the Rayleigh quotient is a lower bound of ``||G||_2``, so the
        ManPG step may be a little long; its Armijo backtracking keeps every W-step a
        descent step.
        """
        G, W = self.G[sel], self.W[sel]
        steps = steps if refresh_lmax else 0
        fn = _kernels.pick(self.settings.kernel, "gram_terms")
        if fn is not None:
            d = W.shape[0]
            out = np.empty((4, d))
            top = np.ascontiguousarray(self._top[sel])
            fn(np.ascontiguousarray(G), np.ascontiguousarray(W), top, steps, out)
            projection, grad_scale, l21, lmax = out
        else:
            GW = G @ W
            projection = np.einsum("kii->k", G) - np.einsum("kij,kij->k", W, GW)
            grad_scale = np.linalg.norm(GW, axis=(-2, -1))
            l21 = l21_norm(W)
            top = self._top[sel]
            for _ in range(steps):
                top = (G @ top[..., None])[..., 0]
                top /= np.maximum(np.linalg.norm(top, axis=1, keepdims=True), 1e-300)
            lmax = np.einsum("di,di->d", top, (G @ top[..., None])[..., 0])
        if refresh_lmax:
            self._top[sel] = top
            self.lmax[sel] = np.maximum(lmax, 1e-12)
        return projection, grad_scale, l21

    def _data_step(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        """S-, U- and dual steps of the clients ``idx``; refreshes their ``G = U^T U``.

        Returns per-client metrics (length ``d``; zero for absent clients).
        """
        want = np.zeros(self.d, dtype=bool)
        want[idx] = True
        keys = ("fit", "l1", "lam_terms", "data_residual")
        out = {k: np.zeros(self.d) for k in keys}
        chunk = max(1, self.settings.chunk_rows)
        s = self.settings
        # Chosen each round: a kernel compiled behind the first fit serves its later rounds.
        fused = _kernels.pick(s.kernel, "fused_data_step")
        for g in self.groups:
            sel = want[g.clients]
            if not sel.any():
                continue
            if g.A is None:
                self._data_step_recomputed(g, sel, out)
                continue
            k, m = g.X.shape[0], g.X.shape[1]
            c0 = int(g.clients[0])
            if np.array_equal(g.clients, np.arange(c0, c0 + k)):
                G = self.G[c0 : c0 + k]  # accumulate in place: no copy back
            else:
                G = np.empty((k, self.n, self.n))
            acc = np.zeros((4, k))
            WT = np.ascontiguousarray(np.swapaxes(self.W[g.clients], 1, 2))
            # Runs of consecutive participating clients, cut into cache-sized chunks
            # of about `chunk_rows` rows: every slice is a view, updated in place.
            runs = np.flatnonzero(np.diff(np.concatenate([[0], sel.astype(np.int8), [0]])))
            kb = max(1, chunk // m)
            rb = m if kb > 1 else min(m, chunk)
            for a, b in zip(runs[::2], runs[1::2], strict=True):
                for k0 in range(a, b, kb):
                    ks = slice(k0, min(b, k0 + kb))
                    for r0 in range(0, m, rb):
                        rows = slice(r0, min(m, r0 + rb))
                        if fused is not None:
                            fused(
                                g.X, g.U, g.A, WT, k0, ks.stop, r0, rows.stop, g.lengths,
                                s.alpha, s.mu, acc,
                            )  # fmt: skip
                        else:
                            X, U, A = g.X[ks, rows], g.U[ks, rows], g.A[ks, rows]
                            acc[:, ks] += self._block(X, U, A, np.swapaxes(WT[ks], 1, 2))
                        U = g.U[ks, rows]
                        if r0 == 0:  # every client's first rows: overwrite, not add
                            np.matmul(np.swapaxes(U, 1, 2), U, out=G[ks])
                        else:
                            G[ks] += np.swapaxes(U, 1, 2) @ U
            cl = g.clients[sel]
            if not sel.all():
                G, acc = G[sel], acc[:, sel]
            if not np.shares_memory(G, self.G):
                self.G[cl] = G
            out["fit"][cl], out["l1"][cl], out["lam_terms"][cl], r2 = acc
            out["data_residual"][cl] = np.sqrt(r2)
        return out

    def _data_step_recomputed(self, g: ClientGroup, sel: np.ndarray, out: dict) -> None:
        """The data step of a group that keeps no ``A`` (recomputed from ``U``), one
        participating client at a time; fills ``out`` and ``self.G`` of those clients."""
        s = self.settings
        s_step = _kernels.pick(s.kernel, "s_step_rows")
        u_step = _kernels.pick(s.kernel, "u_step_rows") if s_step is not None else None
        for j in np.flatnonzero(sel):
            c, n_j = int(g.clients[j]), int(g.lengths[j])
            X, U, W = g.X[j, :n_j], g.U[j, :n_j], self.W[c]
            B, scale = g.dual_basis[j], float(g.dual_scale[j])
            if u_step is not None:
                threads = step_threads(n_j, self.n, W.shape[1])
                acc = data_step_rows(
                    X, U, B, scale, W, s.alpha, s.mu, self.G[c], s_step, u_step, threads=threads
                )
            else:  # the NumPy reference: A recomputed, then the stored-A steps
                acc = np.zeros(4)
                step = max(1, s.chunk_rows)
                for r0 in range(0, n_j, step):
                    rows = slice(r0, min(n_j, r0 + step))
                    A = recompute_duals(U[rows], B, scale)[None]
                    acc += self._block(X[None, rows], U[None, rows], A, W[None])[:, 0]
                self.G[c] = U.T @ U
            g.dual_basis[j] = W
            g.dual_scale[j] = 2.0 / s.mu
            out["fit"][c], out["l1"][c], out["lam_terms"][c] = acc[:3]
            out["data_residual"][c] = np.sqrt(acc[3])

    def _scratch(self, shape: tuple[int, ...], i: int) -> np.ndarray:
        """Reusable work buffers, so the hot loop never allocates large arrays."""
        size = int(np.prod(shape))
        buf = self._buffers.get(i)
        if buf is None or buf.size < size:
            buf = self._buffers[i] = np.empty(max(size, 1))
        return buf[:size].reshape(shape)

    def _block(self, X, U, A, W) -> np.ndarray:
        """S-, U- and Lam-steps on a (k, rows, n) block, in place (the NumPy reference).

        Returns the per-client sums (fit, l1, Lagrangian terms, ||R||^2), shape (4, k).
        """
        s = self.settings
        mu, thr = s.mu, s.alpha / s.mu
        Wt = np.swapaxes(W, 1, 2)
        T1 = self._scratch(X.shape, 0)
        T2 = self._scratch(X.shape, 1)
        S = self._scratch(X.shape, 2)
        # S-step: soft threshold of M = X - U + A at alpha/mu.
        np.subtract(X, U, out=T1)
        T1 += A
        np.clip(T1, -thr, thr, out=S)
        np.subtract(T1, S, out=S)
        np.subtract(X, S, out=T1)  # X - S
        TW = T1 @ W
        fit = _rowdot(T1, T1) - _rowdot(TW, TW)
        T1 += A  # Y = X - S + A
        # U-step: U = (mu Y + 2 Y W W^T)/(mu + 2) = Y - A_new, A_new = 2/(mu+2) (I - P) Y.
        np.matmul(T1 @ W, Wt, out=T2)
        np.subtract(T1, T2, out=T2)
        T2 *= 2.0 / (mu + 2.0)  # A_new
        np.subtract(A, T2, out=A)  # -R, R = X - S - U_new (the dual step A <- A + R)
        r2 = _rowdot(A, A)
        lam = -mu * _rowdot(T2, A) + 0.5 * mu * r2
        np.subtract(T1, T2, out=U)
        A[...] = T2
        np.abs(S, out=T1)
        l1 = s.alpha * T1.sum(axis=(1, 2))
        return np.stack([fit, l1, lam, r2])


@dataclass
class _Held:
    """A W-step not taken (``hold``): the bases stay at ``V``."""

    W: np.ndarray
    n_iter: np.ndarray
    ssn_iter: np.ndarray


def _copy_state(targets: dict[str, np.ndarray], state: dict[str, np.ndarray]) -> None:
    """Copy ``state`` into the arrays of ``targets`` in place, checking keys and shapes."""
    missing = sorted(set(targets) - set(state))
    unknown = sorted(set(state) - set(targets))
    if missing or unknown:
        raise ValueError(f"cohort state: missing {missing}, unknown {unknown}")
    for k, a in targets.items():
        v = np.asarray(state[k])
        if v.shape != a.shape:
            raise ValueError(f"cohort state {k!r} has shape {v.shape}, expected {a.shape}")
        a[...] = v


def _group_state(g: ClientGroup) -> dict[str, np.ndarray]:
    """A group's data-side state by name (``U`` and ``A``, or ``U`` and the basis and
    scale its duals are recomputed from); empty when ``S`` is not modelled."""
    if g.U is None:
        return {}
    if g.A is not None:
        return {"U": g.U, "A": g.A}
    return {"U": g.U, "dual_basis": g.dual_basis, "dual_scale": g.dual_scale}


def _client_duals(g: ClientGroup, j: int) -> np.ndarray:
    """Client ``j``'s scaled duals ``A`` (its real rows) in group ``g``."""
    n_j = g.lengths[j]
    if g.A is not None:
        return g.A[j, :n_j]
    return recompute_duals(g.U[j, :n_j], g.dual_basis[j], float(g.dual_scale[j]))


def _rowdot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``sum(a * b)`` per leading index, without a temporary of the full size.

    einsum, not BLAS ``dot``: a threaded BLAS reduction stalls badly when the cores
    are shared (measured 80x slower on a loaded 2-core machine).
    """
    return np.einsum("kij,kij->k", a, b)

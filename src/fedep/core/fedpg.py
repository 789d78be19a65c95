"""FedPG baseline: federated PCA on the Grassmann manifold by consensus ADMM.

Nguyen et al. (IEEE/ACM ToN 2024). Model::

    min sum_i ||X_i - X_i W_i W_i^T||_F^2   s.t.  W_i = Z,  W_i^T W_i = I

(records as rows). Each round every participating client takes ``local_epochs``
Riemannian gradient steps on
``(1/N_i) (||X_i - X_i W W^T||^2 + <Y_i, W - Z> + rho_i/2 ||W - Z||^2)``
(QR retraction), starting from its own previous ``W_i``; on receiving the new ``Z`` it
first updates its dual ``Y_i <- Y_i + rho_i (W_i - Z)`` (the order of the authors'
code); the server averages the ``W_i`` with weights proportional to the penalties
``rho_i``. The data enter only through ``C_i = X_i^T X_i``, formed once, so a local
step costs O(n^2 r) whatever ``N_i`` is; the compiled epochs
(:mod:`fedep.core._kernels.fedpg`) run in the eigenbasis of ``C_i`` (decomposed once),
where it is diagonal: a round costs four n x n by n x r products per client (the
rotations in and out) and O(n r^2) per epoch, the NumPy reference O(n^2 r) per epoch.

Two choices decide whether the rounds reach the pooled subspace (measured on the
official splits, see the estimator :class:`fedep.FedPG`):

- the penalty's scale. The local data term ``-tr(W^T C_i W)`` has curvature down to
  ``-L_i = -2 ||C_i||_2``; above ``rho_i = L_i`` the local objective is strongly
  convex in the ambient space (the default ``rho_i = 1.5 L_i``, ``rho=3`` in relative
  units) and the rounds settle at the pooled subspace. The authors' ``rho = 0.01``
  on unnormalised data energy (of order ``N_i ||C_i / N_i||_2``, thousands) leaves
  the consensus unenforced: each gateway moves toward its own subspace and the mean
  of the bases drifts away from the pooled one (on UNSW-NB15's non-IID split, rank
  40, from projector distance 0.03 after one round to 0.27 after 30).
- the tangent projection. The consensus ``W_i = Z`` compares bases, not subspaces, so
  the local objective is not invariant under rotations ``W -> W Q``: its Riemannian
  gradient on the Stiefel manifold is ``g - W sym(W^T g)``. The authors' Grassmann
  projection ``(I - W W^T) g`` cannot rotate a basis inside its span, so a
  difference of frames between ``W_i`` and ``Z`` never closes and the dual grows
  without bound (``manifold="grassmann"``, kept for the reproduction).

With weights proportional to ``rho_i``, ``sum_i rho_i (W_i - Z) = 0`` every round, so
``sum_i Y_i`` stays 0 and a fixed point (``W_i = Z``, local gradients zero) is a
stationary point of the pooled objective ``sum_i ||X_i - X_i Z Z^T||^2``.

What a round reports (:meth:`FedPGCohort.local_round`, summed by the server into the
round's record): ``fit``, the error ``||X_i - X_i Q Q^T||^2`` of the consensus received
(``Q`` an orthonormal basis of ``span(Z)``), the record's ``objective`` and the stopping
test's measure; ``projection``, the client's own fit ``||X_i - X_i W_i W_i^T||^2`` at
its new basis (the record's ``local_fit``); ``lam_terms``, ``<Y_i, W_i - Z> + rho_i/2
||W_i - Z||^2`` (with ``projection``, the record's ``augmented_lagrangian``: the ADMM
function the local epochs descend). The rounds decrease the consensus's error only when
the penalty enforces the consensus: with the paper's ``rho = 0.01`` the local fits fall
and the consensus's error rises (the first point above).

Notation (paper -> code): W_i -> ``W`` (d, n, r); Z -> ``Z`` (n, r); Y_i -> ``Y``;
rho_i -> ``rho`` (d,); learning rate -> ``lr``; X_i^T X_i -> ``C`` (d, n, n).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedep.core import _kernels
from fedep.core.fedep import CURVATURE_FLOOR, RoundReport, _copy_state, _single_threaded_blas
from fedep.core.layout import make_groups
from fedep.core.stiefel import retract_qr

__all__ = ["MANIFOLDS", "FedPGSettings", "FedPGCohort", "aggregate_mean", "penalty_scale"]

#: ``manifold`` of FedPG: the Riemannian gradient's geometry (Stiefel, or the
#: authors' Grassmann projection).
MANIFOLDS = ("stiefel", "grassmann")


@dataclass(frozen=True)
class FedPGSettings:
    """FedPG parameters (the authors' are lr=1e-4, rho=0.01 literally, 30 epochs,
    the Grassmann projection).

    No defaults for the model's parameters: :class:`fedep.FedPG` owns them.

    ``penalty_scaling`` and ``consensus_weights`` turn the scalar ``rho`` into the
    per-client penalties ``rho_i = rho * s_i`` as FedEP does with its ``nu``:
    ``"curvature"`` ``s_i = ||X_i||_2^2`` (the largest eigenvalue of ``C_i``, floored
    at ``CURVATURE_FLOOR * N_i``), ``"samples"`` ``s_i = N_i``, ``"uniform"``
    ``s_i = 1``; ``"auto"`` is ``"curvature"`` under ``penalty_scaling="relative"``
    and ``"uniform"`` under ``"paper"``. The server averages the ``W_i`` with weights
    ``s_i``, reported as ``nu``. Under ``penalty_scaling="paper"`` every client's
    penalty is ``rho`` literally and ``s_i`` weights only the server's mean:
    ``"uniform"`` is the paper's plain mean, ``"samples"`` the authors' code (mean
    weighted by ``N_i``); the duals then need not sum to zero.

    ``manifold``: ``"stiefel"`` steps along the Riemannian gradient of the local
    objective on the Stiefel manifold, ``g - W sym(W^T g)``; ``"grassmann"`` along
    ``(I - W W^T) g``, the authors' step.

    ``lr=None`` gives each client the step ``N_i / (2 ||X_i||_2^2 + rho_i)``, the
    inverse Lipschitz constant of its normalised local gradient: the largest step that
    is safe without tuning (the authors' fixed 1e-4 barely moves on standardised data).

    ``kernel`` as in :class:`fedep.core.fedep.FedEPSettings`: the local epochs run
    compiled (``"numba"``) or batched in NumPy (``"numpy"``, the reference), so that
    the baseline is as fast as its algorithm allows, like FedEP.
    """

    lr: float | None
    rho: float
    local_epochs: int
    consensus_weights: str
    penalty_scaling: str
    manifold: str
    kernel: str = "auto"


def penalty_scale(
    C: np.ndarray, sizes: np.ndarray, settings: FedPGSettings, lmax: np.ndarray | None = None
) -> np.ndarray:
    """Per-client scale ``s_i`` of the penalty ``rho_i = rho * s_i``, shape (d,).

    ``C`` (d, n, n) are the clients' Gram matrices, ``sizes`` (d,) their records;
    ``lmax`` (d,), their largest eigenvalues when known (else computed from ``C``).
    """
    weights = settings.consensus_weights
    if weights == "auto":
        weights = "curvature" if settings.penalty_scaling == "relative" else "uniform"
    if weights == "curvature":
        # Floored as FedEP's: a near-constant client would otherwise get rho_i ~ 0
        # (no pull toward Z) and a zero weight in the server's mean.
        if lmax is None:
            lmax = np.linalg.eigvalsh(C)[:, -1]
        return np.maximum(lmax, CURVATURE_FLOOR * sizes)
    if weights == "samples":
        return np.asarray(sizes, dtype=float).copy()
    if weights == "uniform":
        return np.ones(len(sizes))
    raise ValueError(
        f"consensus_weights must be 'auto', 'curvature', 'samples' or 'uniform'; got {weights!r}"
    )


def aggregate_mean(W: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Server step of FedPG: (weighted) mean of the clients' bases, shape (n, r)."""
    if weights is None:
        return W.mean(axis=0)
    w = np.asarray(weights, dtype=float)
    return np.tensordot(w / w.sum(), W, axes=1)


class FedPGCohort:
    """Client side of FedPG for a set of clients (all of them in-process, one on a gateway).

    Parameters
    ----------
    blocks : list of ndarray, each (N_i, n)
    V0 : ndarray of shape (n, r)
        Initial consensus.
    settings : FedPGSettings

    Attributes
    ----------
    C : ndarray of shape (d, n, n) or None
        The clients' Gram matrices ``X_i^T X_i`` (NumPy path); None on the compiled
        path, which keeps their eigendecompositions instead:
    lam, E : ndarray of shape (d, n) and (d, n, n)
        ``C_i = E_i diag(lam_i) E_i^T`` (compiled path only).
    """

    @_single_threaded_blas
    def __init__(self, blocks, V0, settings: FedPGSettings):
        self.settings = settings
        self.d = len(blocks)
        self.n, self.r = V0.shape
        self.sizes = np.array([b.shape[0] for b in blocks], dtype=float)
        self.C = np.empty((self.d, self.n, self.n))
        for g in make_groups(blocks):
            self.C[g.clients] = np.swapaxes(g.X, 1, 2) @ g.X
        self.trX = np.einsum("dii->d", self.C).copy()
        self.W = np.broadcast_to(V0, (self.d, self.n, self.r)).copy()
        self.Y = np.zeros_like(self.W)
        if settings.manifold not in MANIFOLDS:
            raise ValueError(
                f"manifold must be 'stiefel' or 'grassmann'; got {settings.manifold!r}"
            )
        self.lam = self.E = None
        if _kernels.pick(settings.kernel, "fedpg_clients") is not None:
            # The compiled epochs run in each client's eigenbasis (C_i = E_i diag(lam_i)
            # E_i^T, see fedep.core._kernels.fedpg): C itself is no longer needed.
            self.lam, self.E = np.linalg.eigh(self.C)
            lmax = self.lam[:, -1]
            self.C = None
        else:
            lmax = np.linalg.eigvalsh(self.C)[:, -1]
        #: Server weights s_i (reported as nu) and penalties rho_i = rho * s_i, (d,).
        self.weights = penalty_scale(self.C, self.sizes, settings, lmax)
        if settings.penalty_scaling == "paper":
            # rho literally, one penalty for all (the paper); the server's weights
            # alone follow consensus_weights ("samples": the authors' code, N_i)
            self.rho = np.full(self.d, float(settings.rho))
        else:
            self.rho = float(settings.rho) * self.weights
        if settings.lr is None:
            self.lr = self.sizes / (2.0 * lmax + self.rho)
        else:
            self.lr = np.full(self.d, float(settings.lr))

    def _gram(self, sel) -> np.ndarray:
        """``C_i`` of the clients ``sel`` from their eigendecompositions (the NumPy path
        of a cohort set up for the compiled one)."""
        E = self.E[sel]
        return (E * self.lam[sel][:, None, :]) @ np.swapaxes(E, 1, 2)

    def state_arrays(self) -> dict[str, np.ndarray]:
        """Every array that changes over rounds: ``W`` and ``Y`` (d, n, r)."""
        return {"W": self.W.copy(), "Y": self.Y.copy()}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        """Restore what :meth:`state_arrays` returned."""
        _copy_state({"W": self.W, "Y": self.Y}, state)

    @_single_threaded_blas
    def local_round(self, Z: np.ndarray, clients: np.ndarray | None = None) -> RoundReport:
        """Local epochs and dual update of the participating clients."""
        s = self.settings
        idx = np.arange(self.d) if clients is None else np.asarray(clients)
        # With every client taking part, index by a slice: views, not copies.
        sel = slice(None) if clients is None else idx
        W = self.W[sel]
        rho = self.rho[sel]
        stiefel = s.manifold == "stiefel"
        # The objective of the consensus received (the global model, an orthonormal
        # basis of span(Z)), not of the local bases: the stopping test watches the
        # objective of the model that scores. With the relative penalty the local W_i
        # keep closing on Z for long after the consensus has settled (measured:
        # NSL-KDD rich, rank 9, the consensus objective still within 1e-5 of the
        # energy per round from round ~45, the local fits' sum not by 200).
        Q = np.linalg.qr(np.asarray(Z, dtype=float))[0]
        compiled = _kernels.pick(s.kernel, "fedpg_clients")
        if compiled is not None and self.E is not None:
            # The dual update and the epochs in one pass over the clients, into
            # fresh arrays (no NumPy temporaries of the whole cohort's size).
            W_in, Y_in = np.ascontiguousarray(W), np.ascontiguousarray(self.Y[sel])
            W, Y = np.empty_like(W_in), np.empty_like(Y_in)
            terms = np.empty((3, idx.size))
            compiled(
                self.E[sel], self.lam[sel], W_in, Y_in, np.ascontiguousarray(Z, dtype=float),
                np.ascontiguousarray(Q), 1.0 / self.sizes[sel], self.lr[sel],
                np.ascontiguousarray(rho), int(s.local_epochs), stiefel, self.trX[sel],
                W, Y, terms,
            )  # fmt: skip
            fit, grad_scale, own_fit = terms
        else:
            Y = self.Y[sel] + rho[:, None, None] * (W - Z)
            C = self.C[sel] if self.C is not None else self._gram(sel)
            inv_n = (1.0 / self.sizes[sel])[:, None, None]
            lr = self.lr[sel, None, None]
            rho3 = rho[:, None, None]
            for _ in range(s.local_epochs):
                g = inv_n * (-2.0 * (C @ W) + Y + rho3 * (W - Z))
                WtG = np.swapaxes(W, 1, 2) @ g
                if stiefel:  # Riemannian gradient on the Stiefel manifold
                    WtG = 0.5 * (WtG + np.swapaxes(WtG, 1, 2))
                rg = g - W @ WtG
                W = retract_qr(W, -lr * rg)
            fit = self.trX[sel] - np.einsum("ij,dij->d", Q, C @ Q)
            CW = C @ W
            grad_scale = np.linalg.norm(CW, axis=(-2, -1))
            own_fit = self.trX[sel] - np.einsum("dij,dij->d", W, CW)
        # The local objective's consensus terms at the new W_i, with the dual and the
        # consensus the epochs used: <Y_i, W_i - Z> + rho_i/2 ||W_i - Z||^2.
        diff = W - Z
        cons = np.einsum("dij,dij->d", Y, diff) + 0.5 * rho * np.einsum("dij,dij->d", diff, diff)
        self.W[sel], self.Y[sel] = W, Y
        # "fit" (the server's objective, the stopping test's measure): the error of the
        # consensus received. "projection" + "lam_terms" (the server's augmented
        # Lagrangian): sum_i ||X_i - X_i W_i W_i^T||^2 + <Y_i, W_i - Z> + rho_i/2
        # ||W_i - Z||^2 at the clients' new bases, the ADMM function that the local epochs
        # descend (times 1/N_i); "projection" alone is the record's local_fit. With the
        # paper's rho the consensus is not enforced: the clients' own fits fall every
        # round while the consensus's error may rise (see FedPG's docstring).
        metrics = {
            "fit": fit,
            "projection": own_fit,
            "l1": np.zeros(idx.size),
            "l21": np.zeros(idx.size),
            "lam_terms": cons,
            "data_residual": np.zeros(idx.size),
            "manpg_iter": np.full(idx.size, float(s.local_epochs)),
            "ssn_iter": np.zeros(idx.size),
            "x_norm2": self.trX[sel].copy(),
            "grad_scale": grad_scale,
        }
        # W and Y are fresh arrays (the state holds its own copies above): no copy,
        # unless no epoch ran on the NumPy path and W is still a view of the state.
        W = W.copy() if np.may_share_memory(W, self.W) else W
        return RoundReport(W=W, Pi=Y, nu=self.weights[sel].copy(), metrics=metrics)

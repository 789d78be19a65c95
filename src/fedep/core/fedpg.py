"""FedPG baseline: federated PCA on the Grassmann manifold by consensus ADMM.

Nguyen et al. (IEEE/ACM ToN 2024). Model::

    min sum_i ||X_i - X_i W_i W_i^T||_F^2   s.t.  W_i = Z,  W_i^T W_i = I

(records as rows). Each round every participating client takes ``local_epochs``
Riemannian gradient steps on
``(1/N_i) (||X_i - X_i W W^T||^2 + <Y_i, W - Z> + rho/2 ||W - Z||^2)``
(tangent projection ``(I - W W^T) g``, QR retraction), starting from its own previous
``W_i``; on receiving the new ``Z`` it first updates its dual ``Y_i <- Y_i + rho (W_i - Z)``
(the order of the authors' code); the server averages the ``W_i``. The data enter only
through ``C_i = X_i^T X_i``, formed once, so a local step costs O(n^2 r) whatever ``N_i`` is.

Notation (paper -> code): W_i -> ``W`` (d, n, r); Z -> ``Z`` (n, r); Y_i -> ``Y``;
rho -> ``rho``; learning rate -> ``lr``; X_i^T X_i -> ``C`` (d, n, n).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedep.core import _kernels
from fedep.core.fedep import RoundReport, _copy_state, _single_threaded_blas
from fedep.core.layout import make_groups
from fedep.core.stiefel import retract_qr

__all__ = ["FedPGSettings", "FedPGCohort", "aggregate_mean"]


@dataclass(frozen=True)
class FedPGSettings:
    """FedPG parameters (the authors' defaults are lr=1e-4, rho=0.01, 30 epochs).

    No defaults for the model's parameters: :class:`fedep.FedPG` owns them.

    ``consensus_weights`` is the server's average: ``"uniform"`` (the plain mean of
    the ``W_i``, as the paper describes) or ``"samples"`` (weighted by ``N_i``, as
    the authors' code does). The cohort reports the weights as ``nu``.

    ``lr=None`` gives each client the step ``N_i / (2 ||X_i||_2^2 + rho)``, the inverse
    Lipschitz constant of its normalised local gradient: the largest step that is
    safe without tuning (the authors' fixed 1e-4 barely moves on standardised data).

    ``kernel`` as in :class:`fedep.core.fedep.FedEPSettings`: the local epochs run
    compiled (``"numba"``) or batched in NumPy (``"numpy"``, the reference), so that
    the baseline is as fast as its algorithm allows, like FedEP.
    """

    lr: float | None
    rho: float
    local_epochs: int
    consensus_weights: str
    kernel: str = "auto"


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
        if settings.lr is None:
            lmax = np.linalg.eigvalsh(self.C)[:, -1]
            self.lr = self.sizes / (2.0 * lmax + settings.rho)
        else:
            self.lr = np.full(self.d, float(settings.lr))

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
        C, W = self.C[idx], self.W[idx]
        Y = self.Y[idx] + s.rho * (W - Z)
        compiled = _kernels.pick(s.kernel, "fedpg_clients")
        if compiled is not None:
            W = np.ascontiguousarray(W, dtype=float)
            compiled(
                C, W, np.ascontiguousarray(Y), np.ascontiguousarray(Z, dtype=float),
                1.0 / self.sizes[idx], self.lr[idx], float(s.rho), int(s.local_epochs),
            )  # fmt: skip
        else:
            inv_n = (1.0 / self.sizes[idx])[:, None, None]
            lr = self.lr[idx, None, None]
            for _ in range(s.local_epochs):
                g = inv_n * (-2.0 * (C @ W) + Y + s.rho * (W - Z))
                rg = g - W @ (np.swapaxes(W, 1, 2) @ g)
                W = retract_qr(W, -lr * rg)
        self.W[idx], self.Y[idx] = W, Y
        fit = self.trX[idx] - np.einsum("dij,dij->d", W, C @ W)
        metrics = {
            "fit": fit,
            "projection": fit,
            "l1": np.zeros(idx.size),
            "l21": np.zeros(idx.size),
            "lam_terms": np.zeros(idx.size),
            "data_residual": np.zeros(idx.size),
            "manpg_iter": np.full(idx.size, float(s.local_epochs)),
            "ssn_iter": np.zeros(idx.size),
            "x_norm2": self.trX[idx],
            "grad_scale": np.linalg.norm(C @ W, axis=(-2, -1)),
        }
        weights = self.sizes[idx] if s.consensus_weights == "samples" else np.ones(idx.size)
        return RoundReport(W=W.copy(), Pi=Y.copy(), nu=weights, metrics=metrics)

"""Synthetic federated data with known ground truth.

Each client's normal records lie near a client-specific rank-``r`` subspace that is a
small rotation of one shared subspace; the latent coefficients have client-specific
scales and means (non-IID); a fraction of training *entries* is grossly corrupted
(sparse element-wise outliers, what the ``S`` term of FedEP absorbs); planted
anomalies in the test set leave the subspace.

Shapes follow the library convention: records are rows, ``(n_samples, n_features)``;
bases are ``(n_features, n_components)`` with orthonormal columns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["SyntheticFederation", "make_federated_data"]


@dataclass
class SyntheticFederation:
    """A generated federation.

    Attributes
    ----------
    X_train : ndarray of shape (n_train, n_features)
        Training records (with sparse corruption), rows grouped by client.
    groups_train : ndarray of shape (n_train,)
        Client id of every training row (``0 .. n_clients-1``).
    X_test : ndarray of shape (n_test, n_features)
        Clean normal records and planted anomalies.
    y_test : ndarray of shape (n_test,)
        1 for planted anomalies, 0 for normal records.
    groups_test : ndarray of shape (n_test,)
        Client the test record was generated at.
    basis : ndarray of shape (n_features, n_components)
        The shared planted subspace (orthonormal columns).
    client_bases : ndarray of shape (n_clients, n_features, n_components)
        Each client's planted subspace.
    corruption_mask : ndarray of bool, shape (n_train, n_features)
        Entries of ``X_train`` that were grossly corrupted.
    X_train_clean : ndarray of shape (n_train, n_features)
        Training records before corruption.
    outlier_mask : ndarray of bool, shape (n_train,)
        Training records replaced by outlier records (``outlier_rate``).
    """

    X_train: np.ndarray
    groups_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    groups_test: np.ndarray
    basis: np.ndarray
    client_bases: np.ndarray
    corruption_mask: np.ndarray
    X_train_clean: np.ndarray
    outlier_mask: np.ndarray | None = None


def _orthonormal(A: np.ndarray) -> np.ndarray:
    u, _, vt = np.linalg.svd(A, full_matrices=False)
    return u @ vt


def make_federated_data(
    n_clients: int = 20,
    n_features: int = 30,
    n_components: int = 5,
    n_samples: int | tuple[int, int] = 200,
    *,
    client_variation: float = 0.1,
    non_iid: float = 1.0,
    noise: float = 0.05,
    corruption_rate: float = 0.05,
    corruption_scale: float = 10.0,
    n_test_per_client: int = 50,
    anomaly_rate: float = 0.2,
    anomaly_scale: float = 1.5,
    outlier_rate: float = 0.0,
    outlier_scale: float = 1.5,
    random_state: int | np.random.Generator | None = 0,
) -> SyntheticFederation:
    """Generate a federation with a planted shared subspace.

    Parameters
    ----------
    n_clients : int, default=20
    n_features : int, default=30
    n_components : int, default=5
        Rank of the planted subspace.
    n_samples : int or (low, high), default=200
        Training records per client, or a range to draw client sizes from
        (unequal clients are part of being non-IID).
    client_variation : float, default=0.1
        Size of the random rotation that turns the shared subspace into a client's.
    non_iid : float, default=1.0
        Spread of the client-specific latent scales and means (0 gives identically
        distributed clients up to ``client_variation``).
    noise : float, default=0.05
        Standard deviation of the isotropic noise added to every record.
    corruption_rate : float, default=0.05
        Fraction of training entries replaced by gross errors.
    corruption_scale : float, default=10.0
        Magnitude of a gross error (random sign, uniform in [0.5, 1] times this).
    n_test_per_client : int, default=50
    anomaly_rate : float, default=0.2
        Fraction of test records that are planted anomalies.
    anomaly_scale : float, default=1.5
        Norm of the off-subspace offset of an anomaly, relative to the typical norm
        of a normal record.
    outlier_rate : float, default=0.0
        Fraction of training *records* replaced by outlier records (unlabelled
        contamination, like attacks in training traffic): two tight clusters, each
        offset from a random normal record along one fixed direction orthogonal to
        the shared subspace, by ``outlier_scale`` times the typical record norm.
        Drawn after everything else, so ``0`` leaves the other arrays unchanged.
    outlier_scale : float, default=1.5
    random_state : int, Generator or None, default=0

    Returns
    -------
    SyntheticFederation
    """
    rng = np.random.default_rng(random_state)
    n, r = int(n_features), int(n_components)
    if not 0 < r < n:
        raise ValueError(f"n_components must be in (0, n_features={n}); got {r}")
    V = _orthonormal(rng.standard_normal((n, r)))
    sizes = (
        rng.integers(n_samples[0], n_samples[1] + 1, size=n_clients)
        if isinstance(n_samples, tuple)
        else np.full(n_clients, int(n_samples))
    )
    # Latent variances decay so that the subspace is well defined (clear eigengap).
    base_sd = np.linspace(3.0, 1.5, r)
    Xs, Xcs, Ms, gs, Xt, yt, gt, Wc = [], [], [], [], [], [], [], []
    for i in range(n_clients):
        Wi = _orthonormal(V + client_variation * rng.standard_normal((n, r)) / np.sqrt(n))
        Wc.append(Wi)
        sd = base_sd * np.exp(non_iid * 0.3 * rng.standard_normal(r))
        loc = non_iid * 0.5 * rng.standard_normal(r)

        def draw(m, Wi=Wi, sd=sd, loc=loc):
            Z = loc + sd * rng.standard_normal((m, r))
            return Z @ Wi.T + noise * rng.standard_normal((m, n))

        Xi = draw(int(sizes[i]))
        mask = rng.random(Xi.shape) < corruption_rate
        gross = (
            corruption_scale * rng.uniform(0.5, 1.0, Xi.shape) * rng.choice([-1.0, 1.0], Xi.shape)
        )
        Xcs.append(Xi)
        Xs.append(np.where(mask, Xi + gross, Xi))
        Ms.append(mask)
        gs.append(np.full(Xi.shape[0], i))

        T = draw(n_test_per_client)
        y = (rng.random(n_test_per_client) < anomaly_rate).astype(int)
        typical = np.sqrt((sd**2 + loc**2).sum())
        off = rng.standard_normal((n_test_per_client, n))
        off -= off @ Wi @ Wi.T
        off /= np.linalg.norm(off, axis=1, keepdims=True)
        T = T + (y[:, None] * anomaly_scale * typical) * off
        Xt.append(T)
        yt.append(y)
        gt.append(np.full(n_test_per_client, i))
    X_train = np.vstack(Xs)
    outliers = np.zeros(X_train.shape[0], dtype=bool)
    if outlier_rate > 0:
        outliers = rng.random(X_train.shape[0]) < outlier_rate
        dirs = rng.standard_normal((n, 2))
        dirs -= V @ (V.T @ dirs)
        dirs /= np.linalg.norm(dirs, axis=0)
        typical = np.sqrt((base_sd**2).sum())
        which = rng.integers(0, 2, outliers.sum())
        X_train[outliers] = X_train[outliers] + outlier_scale * typical * dirs[:, which].T
    return SyntheticFederation(
        X_train=X_train,
        groups_train=np.concatenate(gs),
        X_test=np.vstack(Xt),
        y_test=np.concatenate(yt),
        groups_test=np.concatenate(gt),
        basis=V,
        client_bases=np.stack(Wc),
        corruption_mask=np.vstack(Ms),
        X_train_clean=np.vstack(Xcs),
        outlier_mask=outliers,
    )

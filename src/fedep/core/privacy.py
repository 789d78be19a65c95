"""Differential privacy: clipping, the Gaussian mechanism and its accounting.

A differentially private fit (``dp_epsilon`` of the federated detectors,
:class:`fedep.federation.privacy.PrivateGateways`) adds Gaussian noise to everything a
gateway releases, each release clipped so that its sensitivity is bounded. The unit
of privacy is one record: two fits are neighbours when one gateway holds one record
more or less. The releases, each a Gaussian mechanism of noise multiplier ``z``
(noise standard deviation ``z`` times the release's L2 sensitivity):

1. the moments: ``(sum_j x_j / C, sum_j x_j**2 / C**2)`` over the gateway's records
   clipped to L2 norm ``C`` (``dp_clip``; :func:`clip_rows`): sensitivity ``sqrt(2)``;
2. the one-shot start: the Gram matrix ``sum_j z_j z_j^T`` of its standardised records
   clipped to norm ``STD_ROW_CLIP * sqrt(n)``: sensitivity ``(STD_ROW_CLIP**2) n``
   (Analyze Gauss at the gateway: symmetric noise);
3. each round: its proposal's step ``Z_i - V`` (``Z_i = W_i + Pi_i / nu_i``) clipped to
   Frobenius norm ``UPDATE_CLIP * sqrt(r)`` (DP-FedAvg's update clipping): the step of
   any data set lies in that ball, so one record moves it by at most twice the radius.

Nothing else leaves a gateway: the round's metrics are not sent (so the fit runs its
``n_rounds``; the stopping test would read them) and every gateway weighs the same in
the V-step. The ``T = n_rounds + 2`` releases compose; :func:`epsilon_spent` reads the
total ``epsilon`` at ``delta`` from Google's ``dp-accounting`` RDP accountant
(Mironov 2017), and :func:`noise_multiplier_for` finds the ``z`` that spends a target
``epsilon`` over ``T`` releases. :func:`analyze_gauss` is the centralised reference
(Dwork, Talwar, Thakurta and Zhang 2014): symmetric Gaussian noise on the Gram matrix
of rows clipped to norm ``C``, then its top eigenvectors, calibrated by the same
accountant (one release).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "STD_ROW_CLIP",
    "UPDATE_CLIP",
    "analyze_gauss",
    "clip_norm",
    "clip_rows",
    "dp_pca_reference",
    "epsilon_spent",
    "noise_multiplier_for",
    "symmetric_noise",
]

#: Standardised records are clipped to L2 norm ``STD_ROW_CLIP * sqrt(n_features)``
#: before the one-shot sketch's Gram matrix (a standardised record's squared norm is
#: ``n_features`` on average).
STD_ROW_CLIP = 2.0
#: A round's step ``Z_i - V`` is clipped to Frobenius norm ``UPDATE_CLIP * sqrt(r)``.
UPDATE_CLIP = 0.02


def clip_rows(X: np.ndarray, clip: float) -> np.ndarray:
    """Each row of ``X`` (N, n) scaled down to L2 norm at most ``clip`` (a copy)."""
    X = np.asarray(X, dtype=float)
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    return X * np.minimum(1.0, clip / np.maximum(norms, 1e-300))


def clip_norm(A: np.ndarray, clip: float) -> np.ndarray:
    """``A`` scaled down to Frobenius norm at most ``clip``."""
    norm = float(np.linalg.norm(A))
    return A if norm <= clip else A * (clip / norm)


def symmetric_noise(rng: np.random.Generator, n: int, std: float) -> np.ndarray:
    """A symmetric n x n matrix whose upper triangle (diagonal included) is i.i.d.
    ``N(0, std**2)`` (Analyze Gauss's noise)."""
    E = np.triu(rng.normal(0.0, std, size=(n, n)))
    return E + np.triu(E, 1).T


def epsilon_spent(noise_multiplier: float, releases: int, delta: float) -> float:
    """Total ``epsilon`` at ``delta`` of ``releases`` Gaussian mechanisms of noise
    multiplier ``noise_multiplier`` (RDP accountant; ``inf`` without noise, 0 without
    release)."""
    if releases <= 0:
        return 0.0
    if noise_multiplier <= 0 or not math.isfinite(noise_multiplier):
        return math.inf if noise_multiplier <= 0 else 0.0
    acc = _accountant()
    acc.compose(_gaussian_event(float(noise_multiplier)), int(releases))
    return float(acc.get_epsilon(float(delta)))


def _accountant():
    """A fresh RDP accountant of ``dp-accounting`` (the ``privacy`` extra)."""
    # start-up time: dp_accounting takes about a second to import (scipy.stats,
    # mpmath) and only a differentially private fit needs it, so not every command
    try:
        from dp_accounting import rdp
    except ImportError:
        raise ImportError(
            "differential privacy needs dp-accounting: pip install 'fedep[privacy]'"
        ) from None
    return rdp.RdpAccountant()


def _gaussian_event(noise_multiplier: float):
    # start-up time: see _accountant
    from dp_accounting import dp_event

    return dp_event.GaussianDpEvent(noise_multiplier)


def noise_multiplier_for(epsilon: float, releases: int, delta: float) -> float:
    """The smallest noise multiplier (to 0.1 %) whose ``releases`` Gaussian mechanisms
    spend at most ``epsilon`` at ``delta`` (0 for ``epsilon = inf``)."""
    if not math.isfinite(epsilon):
        return 0.0
    if epsilon <= 0:
        raise ValueError(f"dp_epsilon must be > 0; got {epsilon!r}")
    lo, hi = 1e-3, 1.0
    while epsilon_spent(hi, releases, delta) > epsilon:
        lo, hi = hi, hi * 2.0
        if hi > 1e7:  # pragma: no cover - epsilon far below any useful fit
            raise ValueError(f"dp_epsilon={epsilon!r} needs a noise multiplier above 1e7")
    while hi - lo > 1e-3 * hi:
        mid = 0.5 * (lo + hi)
        if epsilon_spent(mid, releases, delta) > epsilon:
            lo = mid
        else:
            hi = mid
    return hi


def analyze_gauss(
    X: np.ndarray,
    r: int,
    epsilon: float,
    delta: float,
    clip: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """Centralised DP-PCA, "Analyze Gauss" (Dwork et al. 2014): the top ``r``
    eigenvectors (n, r) of ``C^T C + E``, ``C`` the rows of ``X`` (N, n) clipped to norm
    ``clip`` and ``E`` symmetric Gaussian noise of standard deviation ``z clip**2``
    (the Gram matrix's sensitivity to one record is ``||x x^T||_F <= clip**2``), ``z``
    by :func:`noise_multiplier_for` for one release."""
    Xc = clip_rows(X, clip)
    G = Xc.T @ Xc
    z = noise_multiplier_for(epsilon, 1, delta)
    if z > 0:
        G = G + symmetric_noise(rng, G.shape[0], z * clip**2)
    w, U = np.linalg.eigh(G)
    return U[:, np.argsort(w)[::-1][:r]]


def dp_pca_reference(
    X: np.ndarray,
    r: int,
    epsilon: float,
    delta: float,
    clip: float,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Centralised DP-PCA with the federated fit's clipping rules: the moments of the
    rows of ``X`` (N, n) clipped to norm ``clip`` (sensitivity ``sqrt(2)``, as each
    gateway's), then Analyze Gauss on the standardised rows clipped to
    ``STD_ROW_CLIP * sqrt(n)``: two releases of one noise multiplier spending
    ``epsilon``.

    Returns
    -------
    mean, scale : ndarray of shape (n,)
    V : ndarray of shape (n, r)
    """
    Xc = clip_rows(X, clip)
    N, n = Xc.shape
    z = noise_multiplier_for(epsilon, 2, delta)
    s1 = Xc.sum(axis=0) + rng.normal(0.0, z * math.sqrt(2.0) * clip, n)
    s2 = np.square(Xc).sum(axis=0) + rng.normal(0.0, z * math.sqrt(2.0) * clip**2, n)
    mean = s1 / N
    var = np.maximum(s2 / N - mean**2, 0.0)
    scale = np.where(var > 1e-12, np.sqrt(var), 1.0)
    row_clip = STD_ROW_CLIP * math.sqrt(n)
    Z = clip_rows((Xc - mean) / scale, row_clip)
    G = Z.T @ Z
    if z > 0:
        G = G + symmetric_noise(rng, n, z * row_clip**2)
    w, U = np.linalg.eigh(G)
    return mean, scale, U[:, np.argsort(w)[::-1][:r]]

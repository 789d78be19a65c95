"""Analyst feedback in the model's own terms: the records near a confirmed attack.

An analyst who triages alerts confirms some as attacks (and some as false positives,
which join the trusted reference: :mod:`fedep.core.reference`). A confirmed attack is
rarely alone: a flood is thousands of near-identical records. :func:`near_attacks`
drops from the next fit the confirmed attacks and every record of the same gateway
within :data:`FEEDBACK_RADIUS` of one in the model's PPCA distance, on the gateway
itself (no record or label leaves it; the server learns two counts).
"""

from __future__ import annotations

import numpy as np

__all__ = ["FEEDBACK_RADIUS", "pair_distance", "near_attacks", "exclusion_masks"]

#: Records within ``FEEDBACK_RADIUS * n_features`` of a confirmed attack in squared
#: PPCA distance (:func:`pair_distance`) count as the same attack. Two independent
#: records of the model are ``2 * n_features`` apart on average: the radius is 1/20 of
#: that, the scale of a near-identical flood record, not of a neighbour in normal traffic.
FEEDBACK_RADIUS = 0.1


def pair_distance(Z: np.ndarray, a: np.ndarray, V: np.ndarray, lam, sigma2) -> np.ndarray:
    """Squared PPCA distance of each row of ``Z`` (N, n) to the record ``a`` (n,):
    ``sum_k t_k^2 / lam_k + ||(I - V V^T) d||^2 / sigma2`` of ``d = z - a``, (N,)."""
    D = Z - a
    T = D @ V
    R = D - T @ V.T
    return (T**2 / lam).sum(axis=1) + np.einsum("ij,ij->i", R, R) / float(sigma2)


def near_attacks(
    Z: np.ndarray, attack: np.ndarray, V, lam, sigma2, radius: float = FEEDBACK_RADIUS
) -> np.ndarray:
    """One gateway's records excluded by its confirmed attacks: the attacks and every
    record within ``radius * n_features`` of one in squared PPCA distance
    (:func:`pair_distance`); boolean, shape (N,).

    Parameters
    ----------
    Z : ndarray of shape (N, n)
        The gateway's standardised records.
    attack : ndarray of bool, shape (N,)
        The records an analyst confirmed as attacks.
    """
    out = np.asarray(attack, dtype=bool).copy()
    cut = float(radius) * Z.shape[1]
    for j in np.flatnonzero(attack):
        out |= pair_distance(Z, Z[j], V, lam, sigma2) <= cut
    return out


def exclusion_masks(Z, attack, benign, params: dict) -> list[np.ndarray]:
    """Per gateway, :func:`near_attacks` of its standardised records ``Z[i]`` and
    confirmed attacks ``attack[i]``, less its confirmed false positives ``benign[i]``
    (or None); ``params``: ``V``, ``lam``, ``sigma2``, ``radius`` (scalars may come as
    arrays of one value, off the wire)."""
    radius = float(np.reshape(params["radius"], -1)[0])
    sigma2 = float(np.reshape(params["sigma2"], -1)[0])
    benign = benign or [np.zeros(z.shape[0], dtype=bool) for z in Z]
    return [
        near_attacks(z, a, params["V"], params["lam"], sigma2, radius) & ~b
        for z, a, b in zip(Z, attack, benign, strict=True)
    ]

"""Differentially private gateways (in-process): noise on everything a gateway releases.

:class:`PrivateGateways` is :class:`~fedep.federation.gateways.LocalGateways` whose
gateways clip their records and add Gaussian noise to each release before the one fit
driver sees it (the mechanism, its clipping rules and its accounting are
:mod:`fedep.core.privacy`'s):

- ``moments``: each gateway's ``sum x`` and ``sum x**2`` of its clipped records, noised
  (its record count is public, as in every fit);
- ``setup``: with the one-shot start, each gateway's Gram matrix of its clipped
  standardised records with symmetric noise (Analyze Gauss at the gateway); the
  server merges the noisy sum;
- each round: each gateway's proposal step ``Z_i - V`` clipped and noised, sent as
  ``W_i = V + step`` with ``Pi_i = 0``, ``nu_i = 1`` (so the server's V-step is their
  mean) and no metric.

:func:`check_private` refuses what would release more (one line).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from fedep.core.aggregation import proposals
from fedep.core.fedep import RoundReport
from fedep.core.privacy import (
    STD_ROW_CLIP,
    UPDATE_CLIP,
    clip_norm,
    clip_rows,
    epsilon_spent,
    noise_multiplier_for,
    symmetric_noise,
)
from fedep.core.stats import Moments
from fedep.federation.gateways import GatewaySetup, LocalGateways, Standardization
from fedep.federation.server import REQUIRED_METRICS

__all__ = ["DP_PARAMS", "PrivateGateways", "check_private", "is_private"]

#: The estimator parameters of differential privacy (in-process fits only for now).
DP_PARAMS = ("dp_epsilon", "dp_delta", "dp_clip")


def is_private(est) -> bool:
    """Whether ``est`` fits with noise (``dp_epsilon`` set and finite)."""
    eps = getattr(est, "dp_epsilon", None)
    return eps is not None and math.isfinite(float(eps))


def check_private(est, pipeline=None) -> None:
    """Refuse (one line) a differentially private fit that would release more than
    :mod:`fedep.core.privacy` accounts for."""
    if not is_private(est):
        return
    why = None
    if est.dp_clip is None:
        why = "needs dp_clip (the L2 norm each record is clipped to)"
    elif est.n_components == "auto":
        why = "needs an integer n_components (the rank from the spectrum is not released)"
    elif est.tol > 0:
        why = "needs tol=0: the stopping test reads the gateways' objective, not released"
    elif est.trim_steps > 0:
        why = "cannot run record trimming (its counts and ranges are not noised)"
    elif est.aggregation != "mean":
        why = f"cannot use aggregation={est.aggregation!r} (noised proposals are averaged)"
    elif pipeline is not None:
        why = "cannot fit a feature pipeline (its column summaries are not noised)"
    if why is not None:
        raise ValueError(f"dp_epsilon={est.dp_epsilon!r}: differential privacy {why}")


class _PrivateRounds:
    """A cohort whose every round reply is a clipped, noised proposal (module doc)."""

    def __init__(self, cohort, gateways: PrivateGateways, method: str):
        self.cohort, self.gateways, self.method = cohort, gateways, method
        self.d = cohort.d

    def local_round(self, V: np.ndarray, clients=None, **kw) -> RoundReport:
        rep = self.cohort.local_round(V, clients, **kw)
        Z, _ = proposals(self.method, rep.W, rep.Pi, rep.nu)
        k, r = Z.shape[0], V.shape[1]
        clip = UPDATE_CLIP * math.sqrt(r)
        std = self.gateways.z * 2.0 * clip  # one record moves a step by <= 2 clip
        rng = self.gateways.rng
        W = np.stack(
            [V + clip_norm(Z[i] - V, clip) + rng.normal(0.0, std, V.shape) for i in range(k)]
        )
        self.gateways.released += 1
        zeros = {m: np.zeros(k) for m in REQUIRED_METRICS}
        return RoundReport(W=W, Pi=np.zeros_like(W), nu=np.ones(k), metrics=zeros)


class PrivateGateways(LocalGateways):
    """:class:`~fedep.federation.gateways.LocalGateways` releasing only clipped,
    noised values (module doc).

    Parameters
    ----------
    labels, blocks, pipeline, feature_names
        As :class:`~fedep.federation.gateways.LocalGateways`; each record of ``blocks``
        is clipped to L2 norm ``clip`` first.
    epsilon, delta : float
        The fit's privacy budget.
    clip : float
        ``dp_clip``.
    releases : int
        The releases the budget covers (``n_rounds`` + the moments + the sketch).
    method : str
        ``"fedep"`` or ``"fedpg"`` (the proposals' form).
    rng : numpy.random.Generator
        The noise.

    Attributes
    ----------
    z : float
        Noise multiplier of every release (:func:`fedep.core.privacy.noise_multiplier_for`).
    released : int
        Releases made so far.
    """

    def __init__(
        self,
        labels,
        blocks,
        *,
        epsilon: float,
        delta: float,
        clip: float,
        releases: int,
        method: str,
        rng: np.random.Generator,
        pipeline=None,
        feature_names=None,
    ):
        super().__init__(labels, [clip_rows(b, clip) for b in blocks], pipeline, feature_names)
        self.delta, self.clip, self.method, self.rng = float(delta), float(clip), method, rng
        self.z = noise_multiplier_for(float(epsilon), int(releases), self.delta)
        self.released = 0

    def epsilon_spent(self) -> float:
        """The privacy loss of the releases made (RDP accountant)."""
        return epsilon_spent(self.z, self.released, self.delta)

    def moments(self) -> list[Moments]:
        C, s2 = self.clip, math.sqrt(2.0)
        out = []
        for b in self.blocks:
            n = b.shape[1]
            s1 = b.sum(axis=0) + self.rng.normal(0.0, self.z * s2 * C, n)
            sq = np.square(b).sum(axis=0) + self.rng.normal(0.0, self.z * s2 * C**2, n)
            out.append(Moments.from_sums(b.shape[0], s1, np.maximum(sq, 0.0)))
        self.released += 1
        return out

    def gram(self, std: Standardization):
        raise ValueError("differential privacy: the Gram matrices are not released")

    def setup(
        self, std: Standardization, setup: GatewaySetup, start: dict | None = None
    ) -> list[np.ndarray] | None:
        # a warm start's carried states stay at their gateways (each starts its local
        # rounds there); only the noised proposals leave them
        super().setup(std, replace(setup, sketch_rank=0), start)
        if not setup.sketch_rank:
            return None
        n = std.mean.shape[0]
        row_clip = STD_ROW_CLIP * math.sqrt(n)
        total = np.zeros((n, n))
        for Z in self.kept_blocks(std):
            Zc = clip_rows(Z, row_clip)
            total += Zc.T @ Zc + symmetric_noise(self.rng, n, self.z * row_clip**2)
        self.released += 1
        w, U = np.linalg.eigh(total)
        return [U * np.sqrt(np.maximum(w, 0.0))]

    def round_clients(self, V0: np.ndarray):
        return _PrivateRounds(super().round_clients(V0), self, self.method)

"""Differentially private gateways: noise on everything a gateway releases.

One gateway's side of differential privacy is :class:`GatewayNoise`: it clips and
noises each release of that gateway (the mechanism, its clipping rules and its
accounting are :mod:`fedep.core.privacy`'s) and counts them. The same code runs in
both transports:

- in-process, :class:`PrivateGateways` (:class:`~fedep.federation.gateways.LocalGateways`
  with one :class:`GatewayNoise` per gateway) before the one fit driver sees a value;
- over Flower, in each gateway's ClientApp (:mod:`fedep.flower.gateway_privacy`),
  before anything leaves the gateway; the server only accounts (:class:`PrivacyBudget`).

The releases:

- ``moments``: each gateway's ``sum x`` and ``sum x**2`` of its clipped records, noised
  (its record count is public, as in every fit);
- ``setup``: with the one-shot start, each gateway's Gram matrix of its clipped
  standardised records with symmetric noise (Analyze Gauss at the gateway); the
  server merges the noisy sum;
- each round: each gateway's proposal step ``Z_i - V`` clipped and noised, sent as
  ``W_i = V + step`` with ``Pi_i = 0``, ``nu_i = 1`` (so the server's V-step is their
  mean) and no metric.

Each gateway draws its noise from its own generator (:func:`gateway_seeds` in-process;
over Flower the gateway's own entropy, or its node config's ``dp-seed``), so that a
Flower fit and an in-process fit of the same seeds add the same noise.
:func:`check_private` refuses what would release more (one line).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field, replace

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

__all__ = [
    "DP_PARAMS",
    "GatewayNoise",
    "PrivacyBudget",
    "PrivateGateways",
    "check_private",
    "gateway_seeds",
    "is_private",
    "proposal_bound",
]

#: The estimator parameters of differential privacy.
DP_PARAMS = ("dp_epsilon", "dp_delta", "dp_clip")
#: Most releases a gateway accepts to account for (a run config asking more is refused).
MAX_RELEASES = 100_000


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


def gateway_seeds(random_state, d: int) -> list[int]:
    """The noise seed of each of ``d`` gateways of an in-process fit (a stream apart
    from the fit's own): from ``random_state`` (an int: reproducible; None: fresh
    entropy). A Flower gateway given the same seed as its node config's ``dp-seed``
    draws the same noise."""
    seed = random_state
    if isinstance(seed, numbers.Integral):
        seed = [int(seed), 0xD9]
    root = np.random.default_rng(seed)
    return [int(s) for s in root.integers(0, 2**63 - 1, size=d)]


def proposal_bound(z: float, n: int, r: int, sds: float = 8.0) -> float:
    """Largest ``||W_i - V||_F`` an honest private proposal (n, r) reaches but with
    probability ``exp(-sds**2 / 2)``: the clip radius plus the noise's norm (a chi
    variable of ``n r`` degrees, below ``sigma (sqrt(n r) + sds)``)."""
    clip = UPDATE_CLIP * math.sqrt(r)
    return clip + 2.0 * z * clip * (math.sqrt(n * r) + sds)


@dataclass
class GatewayNoise:
    """One gateway's side of differential privacy: it clips and noises each of its
    releases and counts them.

    Attributes
    ----------
    z : float
        Noise multiplier of every release (noise standard deviation ``z`` times the
        release's sensitivity).
    clip : float
        ``dp_clip``: every record is scaled down to this L2 norm (:meth:`records`).
    rng : numpy.random.Generator
        This gateway's noise.
    budget : int or None
        The releases the fit's budget covers; one more is refused (None: not checked,
        the in-process driver asks exactly those).
    released : int
        Releases made so far.
    """

    z: float
    clip: float
    rng: np.random.Generator
    budget: int | None = None
    released: int = field(default=0)

    def _spend(self, what: str) -> None:
        if self.budget is not None and self.released >= self.budget:
            raise ValueError(
                f"differential privacy: the {what} would be release {self.released + 1}; "
                f"the run's budget accounts for {self.budget}"
            )
        self.released += 1

    def records(self, X: np.ndarray) -> np.ndarray:
        """The gateway's records (N, n), each clipped to L2 norm ``clip``: every
        later phase works on these."""
        return clip_rows(X, self.clip)

    def moment_sums(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(sum x, sum x**2)`` (n,) of the clipped records ``X`` (N, n), noised: one
        release of sensitivity ``sqrt(2)`` in units of ``(C, C**2)``."""
        self._spend("moments")
        n, C, s2 = X.shape[1], self.clip, math.sqrt(2.0)
        s1 = X.sum(axis=0) + self.rng.normal(0.0, self.z * s2 * C, n)
        sq = np.square(X).sum(axis=0) + self.rng.normal(0.0, self.z * s2 * C**2, n)
        return s1, sq

    def moments(self, X: np.ndarray) -> Moments:
        """:class:`~fedep.core.stats.Moments` of :meth:`moment_sums`."""
        s1, sq = self.moment_sums(X)
        return Moments.from_sums(X.shape[0], s1, np.maximum(sq, 0.0))

    def gram(self, Z: np.ndarray) -> np.ndarray:
        """The Gram matrix (n, n) of the standardised records ``Z`` (N, n), each
        clipped to ``STD_ROW_CLIP sqrt(n)``, with symmetric noise (Analyze Gauss at the
        gateway; sensitivity ``STD_ROW_CLIP**2 n``)."""
        self._spend("one-shot Gram matrix")
        n = Z.shape[1]
        row_clip = STD_ROW_CLIP * math.sqrt(n)
        Zc = clip_rows(Z, row_clip)
        return Zc.T @ Zc + symmetric_noise(self.rng, n, self.z * row_clip**2)

    def proposal(self, V: np.ndarray, Z: np.ndarray) -> np.ndarray:
        """The released basis ``V + clip(Z - V) + noise`` (n, r) of the proposal ``Z``
        (``W_i + Pi_i / nu_i``): the step clipped to ``UPDATE_CLIP sqrt(r)``, the noise
        ``z`` times twice that (one record moves a step by at most its diameter)."""
        self._spend("round proposal")
        clip = UPDATE_CLIP * math.sqrt(V.shape[1])
        return V + clip_norm(Z - V, clip) + self.rng.normal(0.0, self.z * 2.0 * clip, V.shape)

    def round(self, rep: RoundReport, V: np.ndarray, method: str) -> RoundReport:
        """This gateway's round report (a cohort of one) as released: its noised
        proposal as ``W`` (1, n, r), ``Pi = 0``, ``nu = 1``, zero metrics, no sketch."""
        Z, _ = proposals(method, rep.W, rep.Pi, rep.nu)
        W = self.proposal(V, Z[0])[None]
        zeros = {m: np.zeros(1) for m in REQUIRED_METRICS}
        return RoundReport(W=W, Pi=np.zeros_like(W), nu=np.ones(1), metrics=zeros)

    def epsilon_spent(self, delta: float) -> float:
        """The privacy loss of this gateway's releases (RDP accountant)."""
        return epsilon_spent(self.z, self.released, delta)


@dataclass
class PrivacyBudget:
    """A fit's privacy budget as the server (or the in-process driver) accounts it.

    Attributes
    ----------
    epsilon, delta : float
        The target.
    clip : float
        ``dp_clip``.
    releases : int
        The releases the budget covers: the moments, the one-shot Gram matrix (with
        ``init="oneshot"``) and one per round.
    z : float
        Their noise multiplier (:func:`fedep.core.privacy.noise_multiplier_for`).
    released : int
        Releases asked so far.
    """

    epsilon: float
    delta: float
    clip: float
    releases: int
    z: float = 0.0
    released: int = 0

    def __post_init__(self):
        if not self.z:
            self.z = noise_multiplier_for(self.epsilon, self.releases, self.delta)

    @classmethod
    def of(cls, est) -> PrivacyBudget | None:
        """The budget of ``est``'s fit (checked by :func:`check_private`), or None
        without differential privacy."""
        if not is_private(est):
            return None
        check_private(est)
        oneshot = getattr(est, "init", "random") == "oneshot"
        releases = int(est.n_rounds) + 1 + int(oneshot)
        return cls(float(est.dp_epsilon), float(est.dp_delta), float(est.dp_clip), releases)

    def query(self) -> dict:
        """What every gateway is told (it calibrates its own noise from it)."""
        return {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "clip": self.clip,
            "releases": self.releases,
        }

    @staticmethod
    def read_query(q: dict) -> tuple[float, float, float, int]:
        """``(epsilon, delta, clip, releases)`` of a server's :meth:`query`, checked
        (a gateway calibrates its noise from them)."""
        try:
            eps, delta = float(q["epsilon"]), float(q["delta"])
            clip, releases = float(q["clip"]), int(q["releases"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"differential privacy query from the server: {exc!r}") from None
        if not (math.isfinite(eps) and eps > 0):
            raise ValueError(f"differential privacy: epsilon {eps!r} from the server")
        if not 0.0 < delta < 1.0:
            raise ValueError(f"differential privacy: delta {delta!r} from the server")
        if not (math.isfinite(clip) and clip > 0):
            raise ValueError(f"differential privacy: clip {clip!r} from the server")
        if not 1 <= releases <= MAX_RELEASES:
            raise ValueError(f"differential privacy: {releases} releases from the server")
        return eps, delta, clip, releases

    def spend(self) -> None:
        """Count one release asked of the gateways."""
        self.released += 1

    def spent(self) -> float:
        """The privacy loss of the releases asked (RDP accountant)."""
        return epsilon_spent(self.z, self.released, self.delta)

    def report(self) -> dict:
        """The accounting, as a model or a report states it."""
        return {
            "epsilon": self.spent(),
            "delta": self.delta,
            "noise_multiplier": self.z,
            "releases": self.released,
            "target_epsilon": self.epsilon,
            "clip": self.clip,
        }


class _PrivateRounds:
    """A cohort whose every round reply is a clipped, noised proposal (module doc)."""

    def __init__(self, cohort, gateways: PrivateGateways, method: str):
        self.cohort, self.gateways, self.method = cohort, gateways, method
        self.d = cohort.d

    def local_round(self, V: np.ndarray, clients=None, **kw) -> RoundReport:
        rep = self.cohort.local_round(V, clients, **kw)
        Z, _ = proposals(self.method, rep.W, rep.Pi, rep.nu)
        which = range(Z.shape[0]) if clients is None else list(clients)
        noise = self.gateways.noise
        W = np.stack([noise[j].proposal(V, Z[i]) for i, j in enumerate(which)])
        self.gateways.budget.spend()
        k = W.shape[0]
        zeros = {m: np.zeros(k) for m in REQUIRED_METRICS}
        return RoundReport(W=W, Pi=np.zeros_like(W), nu=np.ones(k), metrics=zeros)


class PrivateGateways(LocalGateways):
    """:class:`~fedep.federation.gateways.LocalGateways` releasing only clipped,
    noised values, each gateway through its own :class:`GatewayNoise` (module doc).

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
    rng : numpy.random.Generator, optional
        The root of the gateways' noise (each gateway gets a child stream).
    seeds : list of int, optional
        Each gateway's noise seed instead (:func:`gateway_seeds`).

    Attributes
    ----------
    z : float
        Noise multiplier of every release (:func:`fedep.core.privacy.noise_multiplier_for`).
    noise : list of GatewayNoise
        Each gateway's side.
    budget : PrivacyBudget
        The accounting.
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
        rng: np.random.Generator | None = None,
        seeds: list[int] | None = None,
        pipeline=None,
        feature_names=None,
    ):
        self.budget = PrivacyBudget(float(epsilon), float(delta), float(clip), int(releases))
        self.z, self.delta, self.method = self.budget.z, float(delta), method
        if seeds is not None:
            rngs = [np.random.default_rng(s) for s in seeds]
        else:
            rngs = list((rng or np.random.default_rng()).spawn(len(blocks)))
        self.noise = [GatewayNoise(self.z, float(clip), g) for g in rngs]
        clipped = [nz.records(b) for nz, b in zip(self.noise, blocks, strict=True)]
        super().__init__(labels, clipped, pipeline, feature_names)
        self.clip = float(clip)

    @property
    def released(self) -> int:
        """Releases made so far."""
        return self.budget.released

    def epsilon_spent(self) -> float:
        """The privacy loss of the releases made (RDP accountant)."""
        return self.budget.spent()

    def moments(self) -> list[Moments]:
        out = [nz.moments(b) for nz, b in zip(self.noise, self.blocks, strict=True)]
        self.budget.spend()
        return out

    def gram(self, std: Standardization):
        raise ValueError("differential privacy: the Gram matrices are not released")

    def setup(
        self, std: Standardization, setup: GatewaySetup, start: dict | None = None
    ) -> list[np.ndarray] | None:
        # a warm start's carried states stay at their gateways (each starts its local
        # rounds there); only the noised Gram matrices and proposals leave them
        super().setup(std, replace(setup, sketch_rank=0), start)
        if not setup.sketch_rank:
            return None
        total = sum(nz.gram(Z) for nz, Z in zip(self.noise, self.kept_blocks(std), strict=True))
        self.budget.spend()
        w, U = np.linalg.eigh(total)
        return [U * np.sqrt(np.maximum(w, 0.0))]

    def round_clients(self, V0: np.ndarray):
        return _PrivateRounds(super().round_clients(V0), self, self.method)

"""Differential privacy at a Flower gateway: the ClientApp's noise and its state.

Over Flower the noise is added in the gateway's ClientApp, before anything leaves it,
by the code the in-process fit runs (:class:`fedep.federation.privacy.GatewayNoise`);
the server only accounts (:class:`fedep.federation.privacy.PrivacyBudget`). The
server's first message (``query.moments``) carries the run's budget (``epsilon``,
``delta``, ``clip``, ``releases``); the gateway calibrates its own noise multiplier
from it, clips its records, and from then on:

- each release (its moments, its one-shot Gram matrix, each round's proposal) is
  noised and counted; one more than the budget's ``releases`` is refused;
- every query whose answer is not noised (Gram matrices for the rank, record trimming,
  the feature pipeline's summaries, a trusted reference, the thresholds at the end) is
  refused or left out.

The gateway's noise generator, its count and its multiplier live in its
``context.state`` (:data:`NOISE`: kept by the SuperNode between messages, never sent),
so a ClientApp process per message draws the stream one process would. The generator
is seeded from the operating system's entropy, unknown to the server; the node config
``dp-seed`` fixes it (reproducible tests; a seed the server knows would let it remove
the noise). The node config ``dp-max-epsilon`` makes the gateway refuse every run that
is not differentially private within that ``epsilon``.
"""

from __future__ import annotations

import json
import math

import numpy as np
from flwr.app import ConfigRecord, Context

from fedep.core.privacy import noise_multiplier_for
from fedep.federation.privacy import GatewayNoise, PrivacyBudget

__all__ = [
    "NOISE",
    "load_noise",
    "private_model_fields",
    "refuse_plain",
    "require_noise",
    "save_noise",
    "start",
]

#: This gateway's noise state in its ``context.state`` (never sent).
NOISE = "fedep.dp"


def _max_epsilon(context: Context) -> float | None:
    """The node config's ``dp-max-epsilon`` (None: the gateway takes any run)."""
    value = context.node_config.get("dp-max-epsilon")
    if value in (None, ""):
        return None
    eps = float(value)
    if not (math.isfinite(eps) and eps > 0):
        raise ValueError(f"gateway config: dp-max-epsilon must be > 0; got {value!r}")
    return eps


def start(context: Context, query: dict | None) -> GatewayNoise | None:
    """Begin a run's privacy at the first contact: ``query`` is the server's budget
    (:meth:`~fedep.federation.privacy.PrivacyBudget.query`; None: not private). A run
    has one budget: a later first contact of the same run (its ``context.state``)
    continues counting against it, and one asking another budget is refused.

    Raises
    ------
    ValueError
        A malformed budget, or (``dp-max-epsilon``) a run that is not private or whose
        ``epsilon`` exceeds the gateway's (one line).
    """
    limit = _max_epsilon(context)
    known = _data(context)
    if known is not None:  # one budget per run: a second first contact spends from it
        asked = None if query is None else PrivacyBudget.read_query(query)
        if asked != tuple(known["query"]):
            raise ValueError(
                "differential privacy: this run's budget was set at its first contact; "
                "another (or none) is refused"
            )
        return load_noise(context)
    if query is None:
        if limit is not None:
            raise ValueError(
                f"differential privacy: this gateway takes private runs only (dp-max-epsilon "
                f"{limit:g}); the server asked for its plain statistics"
            )
        return None
    eps, delta, clip, releases = PrivacyBudget.read_query(query)
    if limit is not None and eps > limit:
        raise ValueError(
            f"differential privacy: the run's epsilon {eps:g} exceeds this gateway's "
            f"dp-max-epsilon {limit:g}"
        )
    seed = context.node_config.get("dp-seed")
    rng = np.random.default_rng(None if seed in (None, "") else int(seed))
    z = noise_multiplier_for(eps, releases, delta)  # the gateway's own calibration
    noise = GatewayNoise(z, clip, rng, budget=releases)
    save_noise(context, noise, delta=delta, epsilon=eps, query=[eps, delta, clip, releases])
    return noise


def save_noise(context: Context, noise: GatewayNoise, **extra) -> None:
    """Keep ``noise`` (its generator's state, count, multiplier) in ``context.state``."""
    rec = context.state.config_records.get(NOISE)
    data = {} if rec is None else json.loads(str(rec["json"]))
    data.update(extra)
    data.update(
        z=noise.z,
        clip=noise.clip,
        budget=noise.budget,
        released=noise.released,
        rng=noise.rng.bit_generator.state,
    )
    context.state[NOISE] = ConfigRecord({"json": json.dumps(data)})


def _data(context: Context) -> dict | None:
    rec = context.state.config_records.get(NOISE)
    return None if rec is None else json.loads(str(rec["json"]))


def load_noise(context: Context) -> GatewayNoise | None:
    """The run's :class:`GatewayNoise` of this gateway (None: not private)."""
    data = _data(context)
    if data is None:
        return None
    bits = getattr(np.random, data["rng"]["bit_generator"])()
    bits.state = data["rng"]
    return GatewayNoise(
        float(data["z"]),
        float(data["clip"]),
        np.random.Generator(bits),
        budget=int(data["budget"]),
        released=int(data["released"]),
    )


def refuse_plain(context: Context, what: str) -> None:
    """Refuse (one line) a query whose answer is not noised, in a private run or at a
    gateway that takes private runs only."""
    if _data(context) is not None or _max_epsilon(context) is not None:
        raise ValueError(f"differential privacy: {what} would leave this gateway without noise")


def require_noise(context: Context, what: str) -> GatewayNoise | None:
    """The run's noise; refuses (one line) a release at a gateway that takes private
    runs only when this run has none."""
    noise = load_noise(context)
    if noise is None and _max_epsilon(context) is not None:
        raise ValueError(
            f"differential privacy: this gateway takes private runs only; the {what} "
            "of a run without a privacy budget is refused"
        )
    return noise


def private_model_fields(context: Context) -> dict | None:
    """The privacy this gateway spent, as its model file states it (``dp_epsilon_``,
    ``dp_delta_``, ``dp_noise_multiplier_``; None: not private)."""
    data = _data(context)
    if data is None:
        return None
    noise = load_noise(context)
    return {
        "dp_epsilon_": noise.epsilon_spent(float(data["delta"])),
        "dp_delta_": float(data["delta"]),
        "dp_noise_multiplier_": noise.z,
    }

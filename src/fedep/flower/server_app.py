"""The aggregation side: a Flower ServerApp that runs the one fit driver over its gateways.

:func:`run_federation` builds the estimator from the run config (validated by its own
rules before any message is sent) and calls :func:`fedep.detectors.driver.fit_gateways`
-- the sequence the in-process ``fit`` runs -- over
:class:`~fedep.flower.gateways.FlowerGateways`, which turns each phase into one message
per gateway (:mod:`fedep.flower.transport`: timeouts, failures and byte counts in one
place). The result (history, basis, standardisation, participants, failures, bytes)
is a :class:`~fedep.federation.rounds.FederationResult`, written to ``result-path``.

A round sends the consensus ``V`` to the participating gateways, waits (at most
``round-timeout-s``) for their ``(W_i, Pi_i, nu_i, metrics)``, drops replies that are
errors or fail :func:`~fedep.federation.server.validate_report`, and aggregates the
rest in client-label order -- the order of the in-process cohort -- so that both
runners give the same basis. A round with fewer than ``min-clients`` valid replies ends
the run (``stop_reason = "too_few_clients"``); a gateway that misses ``max-misses``
rounds in a row is left out of later ones.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from logging import INFO
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import Context
from flwr.common.logger import log
from flwr.serverapp import Grid, ServerApp

from fedep._atomic import atomic_write
from fedep.detectors import detector_param_table, make_estimator
from fedep.detectors.driver import WarmStart, fit_gateways
from fedep.federation.privacy import PrivacyBudget
from fedep.federation.rounds import FederationResult
from fedep.flower.gateways import FlowerGateways
from fedep.flower.secagg import check_secure_aggregation
from fedep.flower.transport import SigningGrid, bound_reply_pulls, wait_for_nodes
from fedep.modelfile.estimator import load_model
from fedep.modelfile.signing import parse_key
from fedep.params import (
    make_pipeline,
    params_from_run_config,
    pipeline_params_from_run_config,
    pipeline_table,
    run_config_defaults,
)

__all__ = ["app", "run_federation", "DEFAULT_RUN_CONFIG", "RUN_KEYS"]

app = ServerApp()

#: Keys that configure the run itself (not the estimator), with their defaults.
RUN_KEYS: dict[str, Any] = {
    "method": "fedep",
    "min-clients": 1,  # fewest replies a round may aggregate
    "min-nodes": 1,  # SuperNodes to wait for before the first message
    "node-wait-s": 60.0,
    "round-timeout-s": 120.0,  # longest wait for the replies of one message round
    "max-misses": 1,  # a gateway that misses this many rounds in a row is left out
    "result-path": "",  # JSON written by the ServerApp (history, basis, participants)
    "sign-key": "",  # sign every message (Ed25519 PEM or hmac:SECRET); gateways verify
    "warm-start": "",  # a model file to refit from (fedep fit / federate --warm-start)
    "warm-start-verify-key": "",  # refuse an unsigned or altered warm-start model
    # SecAgg+: the server sees only sums of the gateways' moments, Gram matrices,
    # sketches and rounds (fedep.flower.secagg; docs/privacy.md)
    "secure-aggregation": False,
}

#: Run configuration of the ServerApp (``[tool.flwr.app.config]``, ``--run-config``):
#: the run's own keys and one key per estimator parameter (:mod:`fedep.params`; left
#: at ``""`` a parameter takes the chosen method's default).
DEFAULT_RUN_CONFIG: dict[str, Any] = {
    **RUN_KEYS,
    **run_config_defaults(detector_param_table(), pipeline_table()),
}


def pipeline_params(run_config: dict, est) -> dict:
    """The feature-pipeline parameters of a run config, validated by the pipeline's own
    rules (before any message is sent); they need the estimator's ``features="auto"``.
    """
    params = pipeline_params_from_run_config(run_config)
    make_pipeline(params, est.features)
    return params


def warm_start_from(path: str, est, verify_key: str = "") -> WarmStart:
    """The warm start of run-config ``warm-start``: the model file ``path`` (its
    signature checked with ``verify_key`` when given) as the run's
    :class:`~fedep.detectors.driver.WarmStart`, its gateways' states keyed by their
    labels as text (each goes to the gateway of that label only).

    Raises
    ------
    ValueError
        A model of another method, or of another rank than ``n-components``.
    """
    key = parse_key(verify_key or None)
    model = load_model(path, verify_key=key, require_signature=key is not None)
    if type(model) is not type(est):
        raise ValueError(
            f"warm-start {path}: a {type(model).__name__} model, the run fits {type(est).__name__}"
        )
    model.set_params(warm_start=True, n_components=est.n_components)
    start = model.warm_start_state()
    states = {str(label): st for label, st in start.states.items()}
    return replace(start, states=states)


def _flag(value) -> bool:
    """A run-config boolean (TOML gives bool, text surfaces "true"/"false")."""
    if isinstance(value, str):
        if value.strip().lower() not in ("true", "false", "1", "0", ""):
            raise ValueError(f"secure-aggregation must be true or false; got {value!r}")
        return value.strip().lower() in ("true", "1")
    return bool(value)


def run_federation(
    grid: Grid,
    run_config: dict | None = None,
    *,
    callback: Callable[[int, np.ndarray, dict], None] | None = None,
) -> FederationResult:
    """Drive a whole FedEP/FedPG fit over a Flower grid.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
        The ServerApp's grid (deployment or :class:`~fedep.flower.LocalGrid`).
    run_config : dict, optional
        Keys of :data:`DEFAULT_RUN_CONFIG`.
    callback : callable, optional
        ``callback(round, V, record)`` after each round.

    Returns
    -------
    FederationResult
    """
    cfg = {**DEFAULT_RUN_CONFIG, **(run_config or {})}
    key = parse_key(str(cfg.get("sign-key") or ""))
    if key is not None:
        grid = SigningGrid(grid, key)
    method = str(cfg["method"])
    est = make_estimator(method, params_from_run_config(cfg, detector_param_table()))
    pipe_params = pipeline_params(cfg, est)
    if not est.runs_rounds:
        raise ValueError(
            f"method {method} has no rounds to federate; Flower runs fedep, fedpg and the "
            "FedEP ablation cases"
        )
    if not isinstance(est.features, str):  # pragma: no cover - run configs give text
        raise ValueError("over Flower, features must be 'auto' or 'numeric'")
    # differential privacy: each gateway noises its releases; the server accounts
    privacy = PrivacyBudget.of(est)
    secure = _flag(cfg["secure-aggregation"])
    if secure:
        check_secure_aggregation(est)
    timeout = float(cfg["round-timeout-s"])
    bound_reply_pulls(timeout)  # a gateway killed mid-upload fails its round, no more
    nodes = wait_for_nodes(grid, int(cfg["min-nodes"]), float(cfg["node-wait-s"]))
    log(INFO, "fedep: %d gateways connected", len(nodes))
    gateways = FlowerGateways.connect(
        grid,
        nodes,
        features=est.features,
        timeout=timeout,
        min_clients=max(1, int(cfg["min-clients"])),
        method=method,
        max_misses=int(cfg["max-misses"]),
        pipeline_params=pipe_params,
        secure=secure,
        privacy=privacy,
    )

    def on_round(rnd, V, rec):
        log(
            INFO,
            "fedep: round %d objective %.6g from %d gateways (%.3f s)",
            rnd,
            rec["objective"],
            len(rec["participants"]),
            rec["time_s"],
        )
        if callback is not None:
            callback(rnd, V, rec)

    start = None
    if str(cfg.get("warm-start") or ""):
        start = warm_start_from(
            str(cfg["warm-start"]), est, str(cfg.get("warm-start-verify-key") or "")
        )
        log(INFO, "fedep: warm start from %s (%d gateway states)", cfg["warm-start"],
            len(start.states))  # fmt: skip
    out = fit_gateways(est, gateways, on_round=on_round, warn=False, start=start)
    log(INFO, "fedep: rank %s", out.rank_reason)
    res = out.federation
    res.trim_history = out.trim_history
    res.components = out.components
    res.clients, res.mean, res.scale = list(out.labels), out.std.mean, out.std.scale
    res.setup_bytes = gateways.roster.setup_bytes
    res.finalized = out.finalized
    res.failed = gateways.roster.failed
    # The pipeline's decisions and scaling (``FeaturePipeline.to_dict()``; None without).
    res.features = None if out.features is None else out.features.to_dict()
    res.rank_reason = out.rank_reason
    res.benign_modes = out.benign_modes  # the suppression rules every gateway's model holds
    res.privacy = None if privacy is None else privacy.report()
    if privacy is not None:
        log(INFO, "fedep: differential privacy: epsilon %.4g at delta %.3g (%d releases)",
            res.privacy["epsilon"], privacy.delta, privacy.released)  # fmt: skip
    path = str(cfg.get("result-path") or "")
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(path, "w") as f:  # a reader sees the whole file or none
            f.write(json.dumps(res.to_json()))
    return res


@app.main()
def main(grid: Grid, context: Context) -> None:
    """ServerApp entry point: the run config comes from ``[tool.flwr.app.config]``."""
    run_federation(grid, dict(context.run_config))

"""The gateway side: a Flower ClientApp holding a FedEP/FedPG cohort of one client.

Flower 1.42 runs each message in a fresh ``flwr-clientapp`` process (subprocess
isolation), so the gateway's personalised state (records, ``W_i``, ``S_i``, ``U_i``,
duals, Gram matrix) lives in ``context.state``, which the SuperNode keeps on the
gateway between messages of a run and never sends to the SuperLink.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from fedep.core.baselines import client_sketch
from fedep.core.scoring import residual_energy
from fedep.core.stats import client_moments
from fedep.federation.flower.protocol import (
    arrays_of,
    bool_cfg,
    cohort_state,
    load_gateway_data,
    restore_cohort,
    to_array_record,
)

__all__ = ["app", "build_cohort", "gateway_model"]

app = ClientApp()

_DATA = "fedep.data"  # raw records (local only)
_STD = "fedep.std"  # mean, scale, constant
_COHORT = "fedep.cohort"  # cohort arrays
_META = "fedep.meta"  # label, settings, feature names


def _meta(context: Context) -> dict:
    return json.loads(str(context.state[_META]["json"]))


def _set_meta(context: Context, meta: dict) -> None:
    context.state[_META] = ConfigRecord({"json": json.dumps(meta)})


def _ensure_data(context: Context) -> tuple[np.ndarray, dict]:
    if _DATA not in context.state.array_records:
        X, label, names = load_gateway_data(context.node_config)
        context.state[_DATA] = to_array_record(X=X)
        _set_meta(context, {"label": label, "feature_names": names})
    return arrays_of(context.state[_DATA])["X"], _meta(context)


def _block(context: Context) -> np.ndarray:
    X = arrays_of(context.state[_DATA])["X"]
    std = arrays_of(context.state[_STD])
    return (X - std["mean"]) / std["scale"]


def build_cohort(block: np.ndarray, V0: np.ndarray, settings: dict):
    """The core cohort of one client, from the settings the server sends."""
    if settings["method"] == "fedpg":
        from fedep.core.fedpg import FedPGCohort, FedPGSettings

        lr = float(settings["lr"])
        return FedPGCohort(
            [block],
            V0,
            FedPGSettings(
                lr=None if lr <= 0 else lr,
                rho=float(settings["rho"]),
                local_epochs=int(settings["local-epochs"]),
            ),
        )
    from fedep.core.fedep import FedEPCohort, FedEPSettings

    return FedEPCohort(
        [block],
        V0,
        float(settings["beta"]),
        float(settings["nu"]),
        FedEPSettings(
            alpha=float(settings["alpha"]),
            mu=float(settings["mu"]),
            use_sparse=bool_cfg(settings["sparse-corruption"]),
            inner_max_iter=int(settings["inner-max-iter"]),
            penalty_scaling=str(settings["penalty-scaling"]),
            consensus_weights=str(settings["consensus-weights"]),
        ),
    )


def _load_cohort(context: Context, V0: np.ndarray):
    meta = _meta(context)
    cohort = build_cohort(_block(context), V0, meta["settings"])
    if _COHORT not in context.state.array_records:
        return cohort
    restore_cohort(cohort, arrays_of(context.state[_COHORT]))
    return cohort


@app.query("moments")
def moments(msg: Message, context: Context) -> Message:
    """Per-feature count, mean and sum of squared deviations of the local records."""
    X, meta = _ensure_data(context)
    m = client_moments(X)
    content = RecordDict(
        {
            "moments": to_array_record(mean=m.mean, m2=m.m2),
            "count": MetricRecord({"count": int(m.count), "n-features": int(X.shape[1])}),
            "client": ConfigRecord({"label": meta["label"]}),
        }
    )
    return Message(content, reply_to=msg)


@app.train("setup")
def setup(msg: Message, context: Context) -> Message:
    """Receive the global standardisation and the settings; reply a sketch if asked."""
    _ensure_data(context)
    arr = arrays_of(msg.content["std"])
    context.state[_STD] = to_array_record(**arr)
    meta = _meta(context)
    meta["settings"] = json.loads(str(msg.content["settings"]["json"]))
    _set_meta(context, meta)
    if _COHORT in context.state.array_records:
        del context.state[_COHORT]  # a new fit starts from scratch
    content = RecordDict({"ack": MetricRecord({"ok": 1})})
    k = int(msg.content["settings"].get("sketch-rank", 0))
    if k > 0:
        content["sketch"] = to_array_record(B=client_sketch(_block(context), k))
    return Message(content, reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """One local round: the core's ``local_round`` on this gateway's cohort of one."""
    V = arrays_of(msg.content["global"])["V"]
    init = msg.content.array_records.get("init")
    cohort = _load_cohort(context, V if init is None else arrays_of(init)["V0"])
    rep = cohort.local_round(V)
    context.state[_COHORT] = to_array_record(**cohort_state(cohort))
    metrics = {k: float(np.asarray(v).reshape(-1)[0]) for k, v in rep.metrics.items()}
    content = RecordDict(
        {
            "local": to_array_record(W=rep.W, Pi=rep.Pi, nu=np.asarray(rep.nu, dtype=float)),
            "metrics": MetricRecord(metrics),
        }
    )
    return Message(content, reply_to=msg)


def gateway_model(context: Context, components: np.ndarray, final: dict):
    """The gateway's fitted detector: global basis + its personalised basis.

    ``threshold_`` (global basis) and ``client_thresholds_`` (personal basis) are the
    ``1 - contamination`` quantiles of this gateway's own training scores: the pooled
    quantile an in-process fit uses would need every gateway's scores.
    """
    from fedep.detectors import FedEP, FedPG

    meta = _meta(context)
    s = meta["settings"]
    std = arrays_of(context.state[_STD])
    block = _block(context)
    cohort = _load_cohort(context, final["V"])
    W = cohort.W[0]
    if s["method"] == "fedpg":
        lr = float(s["lr"])
        det = FedPG(
            n_components=int(s["n-components"]),
            lr=None if lr <= 0 else lr,
            rho=float(s["rho"]),
            local_epochs=int(s["local-epochs"]),
        )
    else:
        det = FedEP(
            n_components=int(s["n-components"]),
            alpha=float(s["alpha"]),
            beta=float(s["beta"]),
            mu=float(s["mu"]),
            nu=float(s["nu"]),
            sparse_corruption=bool_cfg(s["sparse-corruption"]),
            penalty_scaling=str(s["penalty-scaling"]),
            consensus_weights=str(s["consensus-weights"]),
            inner_max_iter=int(s["inner-max-iter"]),
        )
    det.set_params(
        n_rounds=int(s["n-rounds"]),
        tol=float(s["tol"]),
        client_fraction=float(s["client-fraction"]),
        init=str(s["init"]),
        standardize=bool_cfg(s["standardize"]),
        contamination=float(s["contamination"]),
        random_state=int(s["random-state"]),
    )
    q = 1.0 - float(s["contamination"])
    label = meta["label"]
    det.mean_, det.scale_ = std["mean"], std["scale"]
    det.constant_features_ = std["constant"].astype(bool)
    det.components_ = np.asarray(components, dtype=float)
    det.client_components_ = W.T[None].copy()
    det.clients_ = np.array([int(label)]) if label.lstrip("-").isdigit() else np.array([label])
    det.n_features_in_ = int(block.shape[1])
    if meta.get("feature_names"):
        det.feature_names_in_ = np.asarray(meta["feature_names"], dtype=object)
    det.decision_scores_ = residual_energy(block, det.components_.T)
    det.threshold_ = float(np.quantile(det.decision_scores_, q))
    det.client_thresholds_ = np.array([np.quantile(residual_energy(block, W), q)])
    det.labels_ = (det.decision_scores_ > det.threshold_).astype(int)
    det.history_ = final["history"]
    det.n_iter_ = int(final["n_rounds"])
    det.stop_reason_ = str(final["stop_reason"])
    det.consensus_ = final["V"]
    return det


@app.evaluate("finalize")
def finalize(msg: Message, context: Context) -> Message:
    """Write the personalised model file (``model-path`` of the node config)."""
    arr = arrays_of(msg.content["global"])
    info = json.loads(str(msg.content["final"]["json"]))
    info["V"] = arr["V"]
    det = gateway_model(context, arr["components"], info)
    path = context.node_config.get("model-path")
    if path:
        Path(str(path)).parent.mkdir(parents=True, exist_ok=True)
        det.save(str(path))
    content = RecordDict(
        {
            "metrics": MetricRecord(
                {
                    "threshold": float(det.threshold_),
                    "client-threshold": float(det.client_thresholds_[0]),
                    "saved": int(bool(path)),
                }
            )
        }
    )
    return Message(content, reply_to=msg)

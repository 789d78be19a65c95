"""The gateway side: a Flower ClientApp holding a FedEP/FedPG cohort of one client.

Flower 1.42 runs each message in a fresh ``flwr-clientapp`` process (subprocess
isolation), or, under ``fedep federate``, in one long-running executor per gateway
(:mod:`fedep.flower.executor`); either way the gateway's personalised state (records,
``W_i``, ``S_i``, ``U_i``, duals, Gram matrix) lives in ``context.state``, which the
SuperNode keeps on the gateway between messages of a run and never sends to the
SuperLink.

Imports are at module level. An import inside a function body is there only where
start-up time needs it, with a comment saying so, never to hide an import circle. Here:
Flower starts a ClientApp process per message, so this module imports only what
``moments`` and ``train`` need (flwr, numpy, numba kernels of the cohort, and the light
modules of the other phases): scikit-learn (the estimator, its validation, the feature
pipeline) is imported at ``setup``, ``finalize`` and the feature phases of a gateway
holding a raw table only, pandas when the gateway reads its table.

In a differentially private run (the first contact carries the budget) the gateway
clips its records and noises each of its releases here, before they leave it
(:mod:`fedep.flower.gateway_privacy`); a query whose answer would not be noised is
refused.

A gateway holding a raw table (``data-path``) in a run with ``features = "auto"``
never stores it in ``context.state``: it reads its own file at each feature phase
(``query.summaries``, ``query.feature_moments``, the second ``query.moments``) and
keeps the transformed matrix, with the fitted pipeline, for the phases that follow.
"""

from __future__ import annotations

import functools
import json
import math
from logging import ERROR, WARNING
from pathlib import Path

import numpy as np
from flwr.app import ConfigRecord, Context, Error, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.logger import log
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS

from fedep.core.baselines import start_sketch
from fedep.core.benign import MODE_SUMS, BenignModes, attack_counts, mode_sums
from fedep.core.cohort import check_start, client_states, make_cohort
from fedep.core.feedback import exclusion_masks
from fedep.core.rank import client_gram
from fedep.core.stats import client_moments, subset_rows, subset_sums
from fedep.core.trimming import (
    ScoreCounts,
    counted_values,
    keep_mask,
    ppca_sums,
    record_values,
)
from fedep.federation.rounds import FederationResult
from fedep.federation.server import round_sums
from fedep.flower import gateway_privacy as privacy
from fedep.flower.gateway_data import (
    GatewayDataError,
    holds_table,
    load_gateway_data,
    load_gateway_table,
)
from fedep.flower.messages import arrays_of, to_array_record, verify_message
from fedep.flower.secagg import SECSUM, gateway_secure_reply
from fedep.modelfile.signing import parse_key

__all__ = ["app", "gateway_model"]

app = ClientApp()

#: ``Error.code`` of a reply whose gateway cannot load its records (Flower's own codes
#: are small integers; this one is the application's).
DATA_ERROR_CODE = 100

_DATA = "fedep.data"  # raw records (local only)
_STD = "fedep.std"  # mean, scale, constant
_COHORT = "fedep.cohort"  # the cohort's state_arrays()
_SEQ = "fedep.seq"  # the last signed exchange accepted (verify-key)
_META = "fedep.meta"  # label, feature names, pipeline, method, parameters, cohort spec
_KEEP = "fedep.keep"  # the records kept by record trimming (local only; absent: all)
_REF = "fedep.reference"  # the trusted reference records, model features (local only)
_FEEDBACK = "fedep.feedback"  # confirmed attacks / false positives, excluded (local only)
_START = "fedep.start"  # this gateway's warm-start state (W, dual, ssn), from the setup


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


def _keep(context: Context) -> np.ndarray | None:
    """The records record trimming keeps (None: every record)."""
    rec = context.state.array_records.get(_KEEP)
    return None if rec is None else arrays_of(rec)["keep"].astype(bool)


def _kept_block(context: Context) -> np.ndarray:
    """The standardised records the model is fitted on: the kept ones."""
    Z, keep = _block(context), _keep(context)
    return Z if keep is None else Z[keep]


def _reference(context: Context, n_features: int) -> np.ndarray:
    """The gateway's trusted records (node config ``reference-path``: a file of the
    training file's columns, normal traffic only), as model features; (0, n) without."""
    if _REF in context.state.array_records:
        return arrays_of(context.state[_REF])["R"]
    cfg = dict(context.node_config)
    path = cfg.get("reference-path")
    if not path:
        R = np.empty((0, n_features))
    else:
        ref_cfg = {**cfg, "data-path": str(path)}
        ref_cfg.pop("label-column", None)
        meta = _meta(context)
        if meta.get("features"):
            pipe = _pipeline(meta["features"])
            df, _ = load_gateway_table(ref_cfg)
            R = pipe.transform(df)
        else:
            R = load_gateway_data(ref_cfg)[0]
        if R.ndim != 2 or R.shape[1] != n_features:
            raise GatewayDataError(
                f"gateway data: reference {path}: {R.shape[1]} features, the training "
                f"records have {n_features}"
            )
    context.state[_REF] = to_array_record(R=np.asarray(R, dtype=float))
    return arrays_of(context.state[_REF])["R"]


def _feedback(context: Context, n_records: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The gateway's confirmed attacks and false positives (node config
    ``feedback-path``: :func:`fedep.data.feedback.read_feedback`, row numbers of its
    training table or ``feedback-key`` values), or None without a file."""
    path = context.node_config.get("feedback-path")
    if not path:
        return None
    from fedep.data.feedback import read_feedback  # start-up time: see the module docstring

    keys = None
    key = context.node_config.get("feedback-key")
    if key:
        df, _ = load_gateway_table(context.node_config)
        if key not in df.columns:
            raise GatewayDataError(f"gateway data: feedback-key {key!r}: no such column")
        keys = df[key].to_numpy()
    fb = read_feedback(path, n_records, keys)
    if fb.unknown:
        log(WARNING, "fedep: %s", fb.describe(path))
    return fb.labels == "attack", fb.labels == "benign"


def _estimator(meta: dict):
    """The estimator the server configured, validated by its own rules."""
    from fedep.detectors import make_estimator  # start-up time: see the module docstring

    return make_estimator(meta["method"], meta["params"])


def _load_cohort(context: Context, V0: np.ndarray):
    """The gateway's cohort of one, rebuilt from its spec and its checkpointed state."""
    resume = _COHORT in context.state.array_records
    start = None
    if not resume and _START in context.state.array_records:
        start = [arrays_of(context.state[_START])]  # checked by make_cohort
    elif not resume and _meta(context).get("warm"):
        start = [None]  # a gateway new to a warm start: at V0, its data side settled
    cohort = make_cohort(_meta(context)["spec"], [_kept_block(context)], V0, start)
    if resume:
        cohort.load_state(arrays_of(context.state[_COHORT]))
    return cohort


def _data_error(msg: Message, exc: ValueError, context: Context | None = None) -> Message:
    """An error reply whose reason is one line naming the gateway's file and the problem
    (a :class:`GatewayDataError`, or a value the feature pipeline cannot encode)."""
    if not isinstance(exc, GatewayDataError):
        where = context.node_config.get("data-path", "") if context is not None else ""
        text = " ".join(str(exc).split()) or type(exc).__name__
        exc = GatewayDataError(f"gateway data: {where}: {text}")
    log(ERROR, "fedep: %s", exc)
    return Message(Error(code=DATA_ERROR_CODE, reason=str(exc)), reply_to=msg)


def _json_of(msg: Message, key: str) -> dict:
    rec = msg.content.config_records.get(key)
    return {} if rec is None else json.loads(str(rec["json"]))


def _table(context: Context, columns=None):
    """The gateway's raw table (read from its own file), with the columns ``columns``
    (the pipeline's input columns) that it lacks added as missing values."""
    import pandas as pd  # start-up time: see the module docstring

    df, label = load_gateway_table(context.node_config)
    if columns is not None:
        extra = [c for c in columns if c not in df.columns]
        if extra:
            nan = pd.DataFrame(np.nan, index=df.index, columns=extra)
            df = pd.concat([df, nan], axis=1)
    return df, label


def _pipeline(data: dict):
    """The server's feature pipeline, checked against the model file's schema first: a
    malformed or hostile message fails this gateway's reply with one line naming the
    field, not somewhere inside the encoding."""
    # start-up time: see the module docstring
    from fedep.features import FeaturePipeline
    from fedep.modelfile.content import _check_pipeline_dict

    try:
        _check_pipeline_dict(data)
    except ValueError as exc:
        raise ValueError(f"feature pipeline from the server: {exc}") from None
    return FeaturePipeline.from_dict(data)


def _count_reply(msg: Message, X: np.ndarray, label: str) -> Message:
    """The gateway's record count and number of features, without moments."""
    count = MetricRecord({"count": int(X.shape[0]), "n-features": int(X.shape[1])})
    return Message(
        RecordDict({"count": count, "client": ConfigRecord({"label": label})}), reply_to=msg
    )


def _moments_reply(msg: Message, X: np.ndarray, label: str, m=None) -> Message:
    m = client_moments(X) if m is None else m
    content = RecordDict(
        {
            "moments": to_array_record(mean=m.mean, m2=m.m2),
            "count": MetricRecord({"count": int(m.count), "n-features": int(X.shape[1])}),
            "client": ConfigRecord({"label": label}),
        }
    )
    return Message(content, reply_to=msg)


def _verified(handler):
    """Refuse a server message that is unsigned, altered, signed for another run or
    another node, or replayed from an exchange this gateway has passed, when
    ``verify-key`` is set (the run and node are the context's; the last accepted
    exchange's number is kept in its state, which starts empty with each run)."""

    @functools.wraps(handler)
    def wrapper(msg: Message, context: Context) -> Message:
        key = parse_key(str(context.node_config.get("verify-key") or ""))
        if key is not None:
            rec = context.state.config_records.get(_SEQ)
            last = None if rec is None else int(rec["seq"])
            seq = verify_message(
                msg, key, run_id=context.run_id, node_id=context.node_id, last_seq=last
            )
            context.state[_SEQ] = ConfigRecord({"seq": seq})
        return handler(msg, context)

    return wrapper


def _knows(reply: Message, context: Context) -> Message:
    """The first contact also says whether this gateway holds a trusted reference or
    analyst feedback (node config ``reference-path`` / ``feedback-path``): without
    either anywhere, the server asks no reference or feedback query."""
    cfg = context.node_config
    reply.content["knows"] = MetricRecord(
        {
            "reference": int(bool(cfg.get("reference-path"))),
            "feedback": int(bool(cfg.get("feedback-path"))),
        }
    )
    return reply


@app.query("moments")
@_verified
def moments(msg: Message, context: Context) -> Message:
    """Per-feature count, mean and sum of squared deviations of the local records.

    With ``features`` ``{"mode": "auto"}`` a gateway holding a raw table checks it and
    replies ``source`` = ``table`` (its features need the pipeline first); with
    ``{"mode": "pipeline", "pipeline": ...}`` it transforms its table by that fitted
    pipeline, keeps the result and replies its moments (with ``"moments": false``, its
    record count only: the server has them from ``feature_moments``).

    A gateway whose records cannot be loaded replies an error whose reason is one
    line naming the file and the problem (the server records it in ``failed``).
    """
    feats = _json_of(msg, "features")
    mode = feats.get("mode", "numeric")
    try:  # differential privacy: the run's budget comes with the first contact
        noise = None if mode == "pipeline" else privacy.start(context, feats.get("dp"))
        if mode == "pipeline":
            privacy.refuse_plain(context, "the moments of a feature pipeline's outputs")
    except ValueError as exc:
        return _data_error(msg, exc, context)
    if mode == "count":  # secure aggregation: the enrolment only, the moments come summed
        if feats.get("auto") and holds_table(context.node_config):
            mode = "auto"
        else:
            try:
                X, meta = _ensure_data(context)
                if noise is not None:
                    _clip_records(context, noise, X)
            except ValueError as exc:
                return _data_error(msg, exc, context)
            return _count_reply(msg, X, meta["label"])
    for key in (_KEEP, _FEEDBACK, _REF):  # a new fit: every record until trimming says
        if key in context.state.array_records:
            del context.state[key]
    try:
        if mode == "pipeline":
            pipe = _pipeline(feats["pipeline"])
            df, label = _table(context, pipe.feature_names_in_.tolist())
            X = pipe.transform(df)
            context.state[_DATA] = to_array_record(X=X)
            meta = {"label": label, "feature_names": None, "features": feats["pipeline"]}
            _set_meta(context, meta)
            if not feats.get("moments", True):  # the server has them (feature_moments)
                return _knows(_count_reply(msg, X, label), context)
            return _knows(_moments_reply(msg, X, label), context)
        if mode == "auto" and holds_table(context.node_config):
            df, label = load_gateway_table(context.node_config)
            _set_meta(context, {"label": label, "feature_names": None})
            content = RecordDict(
                {
                    "client": ConfigRecord({"label": label}),
                    "source": ConfigRecord({"kind": "table", "n-columns": int(df.shape[1])}),
                    # the enrolment: the records it holds (its summaries must agree)
                    "count": MetricRecord({"count": int(df.shape[0])}),
                }
            )
            return _knows(Message(content, reply_to=msg), context)
        X, meta = _ensure_data(context)
    except ValueError as exc:  # GatewayDataError, or a value the pipeline cannot encode
        return _data_error(msg, exc, context)
    if noise is None:
        return _knows(_moments_reply(msg, X, meta["label"]), context)
    X = _clip_records(context, noise, X)
    m = noise.moments(X)  # one release, noised here
    privacy.save_noise(context, noise)
    return _knows(_moments_reply(msg, X, meta["label"], m), context)


def _clip_records(context: Context, noise, X: np.ndarray) -> np.ndarray:
    """A private run's records: each clipped to ``dp_clip`` (kept for every later
    phase, as the in-process :class:`~fedep.federation.privacy.PrivateGateways`)."""
    X = noise.records(X)
    context.state[_DATA] = to_array_record(X=X)
    return X


def _refused(msg: Message, context: Context, what: str) -> Message | None:
    """An error reply when ``what`` is not noised and the run is private (else None)."""
    try:
        privacy.refuse_plain(context, what)
    except ValueError as exc:
        return _data_error(msg, exc, context)
    return None


@app.query("summaries")
@_verified
def summaries(msg: Message, context: Context) -> Message:
    """Round 1 of the feature pipeline: the column summaries of the raw table (JSON)."""
    from fedep.features import FeaturePipeline  # start-up time: see the module docstring

    refused = _refused(msg, context, "the column summaries")
    if refused is not None:
        return refused
    params = _json_of(msg, "pipeline").get("params", {})
    try:
        df, label = _table(context)
        summary = FeaturePipeline(**params).summarize(df)
    except ValueError as exc:
        return _data_error(msg, exc, context)
    content = RecordDict(
        {
            "summary": ConfigRecord({"json": json.dumps(summary.to_dict())}),
            "client": ConfigRecord({"label": label}),
        }
    )
    return Message(content, reply_to=msg)


@app.query("feature_moments")
@_verified
def feature_moments(msg: Message, context: Context) -> Message:
    """Round 2 of the feature pipeline: moments of the table's encoded features."""
    refused = _refused(msg, context, "the encoded features' moments")
    if refused is not None:
        return refused
    pipe = _pipeline(_json_of(msg, "pipeline"))
    try:
        df, label = _table(context, pipe.feature_names_in_.tolist())
        m = pipe.gateway_moments(df)
    except ValueError as exc:
        return _data_error(msg, exc, context)
    content = RecordDict(
        {
            "moments": to_array_record(mean=m.mean, m2=m.m2),
            "count": MetricRecord({"count": int(m.count)}),
            "client": ConfigRecord({"label": label}),
        }
    )
    return Message(content, reply_to=msg)


@app.query("gram")
@_verified
def gram(msg: Message, context: Context) -> Message:
    """The rank phase (``n_components="auto"``): ``Z^T Z`` of the standardised records.

    The message carries the global standardisation (``mean``, ``scale``); the reply is
    the Gram matrix (n_features x n_features) and the record count -- no record.
    """
    refused = _refused(msg, context, "the Gram matrix")
    if refused is not None:
        return refused
    try:
        X, meta = _ensure_data(context)
    except ValueError as exc:
        return _data_error(msg, exc, context)
    std = arrays_of(msg.content["std"])
    content = RecordDict(
        {
            "gram": to_array_record(G=client_gram(X, std["mean"], std["scale"])),
            "count": MetricRecord({"count": int(X.shape[0])}),
            "client": ConfigRecord({"label": meta["label"]}),
        }
    )
    return Message(content, reply_to=msg)


@app.query("trim")
@_verified
def trim(msg: Message, context: Context) -> Message:
    """Record trimming's questions (:mod:`fedep.core.trimming`): counts and sums only.

    ``trim`` (JSON) names the ``op`` and the ``kind`` of per-record values
    (:func:`~fedep.core.trimming.record_values`), computed from the records
    standardised by ``std`` (``mean``, ``scale``) with ``params`` (``V``, ``lam``,
    ``sigma2``, ``median``). Replies, never a record or a per-record value:

    - ``range``: the count ``n`` and the smallest and largest value (per feature for
      ``coords``);
    - ``le`` / ``abs_le``: how many values are ``<=`` each cut of ``query`` ``T``
      (``|v - center| <=`` for ``abs_le``);
    - ``cut``: keeps the records whose value is at or below ``cut`` (at least
      ``min-rows``), stores that set here and replies ``n-kept``, the sum of the kept
      values, whether the set changed and the moments of the kept records (as
      ``moments`` does);
    - ``moments``: the moments of the kept records (unstandardised);
    - ``ppca-sums``: the kept count, ``sum t_k^2`` (r,) and the kept residual energy
      in ``V``.
    """
    refused = _refused(msg, context, "record trimming's counts and sums")
    if refused is not None:
        return refused
    q = _json_of(msg, "trim")
    op, kind, subset = q["op"], q.get("kind", ""), q.get("subset", "train")
    X = arrays_of(context.state[_DATA])["X"]
    keep = _keep(context)
    if op == "moments":
        return _moments_reply(msg, X if keep is None else X[keep], _meta(context)["label"])
    std = arrays_of(msg.content["std"])
    rec = msg.content.array_records.get("params")
    params = {} if rec is None else arrays_of(rec)
    if subset != "train":
        try:
            R = subset_rows(_reference(context, X.shape[1]), subset)
        except ValueError as exc:
            return _data_error(msg, exc, context)
        X = R  # the reference's values below; never a record or a value leaves
    Z = (X - std["mean"]) / std["scale"]
    if op == "sums":
        count, total, gram = subset_sums(Z)
        content = RecordDict(
            {
                "sums": to_array_record(total=total, gram=gram),
                "count": MetricRecord({"count": count}),
            }
        )
        return Message(content, reply_to=msg)
    if op == "exclude":
        try:
            fb = _feedback(context, X.shape[0])
        except ValueError as exc:
            return _data_error(msg, exc, context)
        n_labels = n_excluded = 0
        if fb is not None and fb[0].any():
            excluded = exclusion_masks([Z], [fb[0]], [fb[1]], params)[0]
            context.state[_FEEDBACK] = to_array_record(excluded=excluded, benign=fb[1])
            context.state[_KEEP] = to_array_record(keep=~excluded)
            n_labels, n_excluded = int(fb[0].sum()), int(excluded.sum())
        elif fb is not None:
            context.state[_FEEDBACK] = to_array_record(excluded=np.zeros_like(fb[1]), benign=fb[1])
        counts = {"attack-labels": n_labels, "excluded": n_excluded, "count": int(X.shape[0])}
        return Message(RecordDict({"count": MetricRecord(counts)}), reply_to=msg)
    if op == "benign-sums":  # benign modes: sums of confirmed false positives
        fb = context.state.array_records.get(_FEEDBACK)
        none = np.zeros(Z.shape[0], dtype=bool)
        benign = none if fb is None else arrays_of(fb)["benign"].astype(bool)
        sums = mode_sums(Z[benign], params["centres"])
        content = RecordDict({"sums": to_array_record(**dict(zip(MODE_SUMS, sums, strict=True)))})
        return Message(content, reply_to=msg)
    if op == "attack-counts":  # confirmed attacks within each benign mode: counts
        fb = _feedback(context, X.shape[0])
        A = Z[fb[0]] if fb is not None else Z[:0]
        modes = BenignModes(params["centres"], params["radius2"], np.zeros(0))
        content = RecordDict({"counts": to_array_record(c=attack_counts(A, modes)),
                              "count": MetricRecord({"count": int(X.shape[0])})})  # fmt: skip
        return Message(content, reply_to=msg)
    if op == "ppca-sums":
        count, sum_t2, sum_res = ppca_sums(Z, params["V"], keep)
        content = RecordDict(
            {
                "sums": to_array_record(sum_t2=sum_t2),
                "count": MetricRecord({"count": count, "sum-res": sum_res}),
            }
        )
        return Message(content, reply_to=msg)
    values = record_values(kind, Z, params)
    counted = counted_values(kind, values)
    if op == "cut":
        fb = context.state.array_records.get(_FEEDBACK)
        if fb is not None:  # confirmed attacks never kept, confirmed false positives always
            fb = arrays_of(fb)
            counted = np.where(fb["excluded"].astype(bool), np.inf, counted)
            counted = np.where(fb["benign"].astype(bool), -np.inf, counted)
        new = keep_mask(counted, float(q["cut"]), int(q["min-rows"]))
        changed = keep is None or not np.array_equal(new, keep)
        context.state[_KEEP] = to_array_record(keep=new)
        stats = {"n-kept": int(new.sum()), "kept-sum": float(values[new].sum())}
        stats["changed"] = int(changed)
        # the kept records' moments ride along: the server needs them next (the kept
        # mean), and each exchange costs a ClientApp start under a deployment
        reply = _moments_reply(msg, X[new], _meta(context)["label"])
        reply.content["kept"] = MetricRecord(stats)
        return reply
    counts = ScoreCounts([counted])
    if op == "range":
        content = RecordDict(
            {
                "range": to_array_record(lo=np.atleast_1d(counts.lo), hi=np.atleast_1d(counts.hi)),
                "count": MetricRecord({"count": counts.n}),
            }
        )
        return Message(content, reply_to=msg)
    T = arrays_of(msg.content["query"])["T"]
    if op == "le":
        c = counts.le(T)
    elif op == "abs_le":
        c = counts.abs_le(T, float(q["center"]))
    else:
        raise ValueError(f"unknown trim op {op!r}")
    return Message(
        RecordDict({"counts": to_array_record(c=np.asarray(c, dtype=np.int64))}), reply_to=msg
    )


@app.train("setup")
@_verified
def setup(msg: Message, context: Context) -> Message:
    """Receive the global standardisation and the settings; reply a sketch if asked."""
    _ensure_data(context)
    arr = arrays_of(msg.content["std"])
    context.state[_STD] = to_array_record(**arr)
    meta = _meta(context)
    meta.update(json.loads(str(msg.content["settings"]["json"])))
    meta["warm"] = bool(int(msg.content["settings"].get("warm-start", 0)))
    # Validated once here, with the estimator's own rules; rounds reuse the spec.
    est = _estimator(meta)
    meta["spec"], meta["server_step"] = est.cohort_spec(), est.server_step
    _set_meta(context, meta)
    if _COHORT in context.state.array_records:
        del context.state[_COHORT]  # a new fit starts from scratch
    if _START in context.state.array_records:
        del context.state[_START]
    if "start" in msg.content.array_records:
        # a warm start: this gateway's own state, checked against the run's dimensions
        n, r = int(np.asarray(arr["mean"]).size), int(meta["rank"])
        try:
            st = check_start(arrays_of(msg.content["start"]), n, r, f"gateway {meta['label']}")
        except ValueError as exc:
            return _data_error(msg, exc, context)
        context.state[_START] = to_array_record(**st)
    content = RecordDict({"ack": MetricRecord({"ok": 1})})
    k = int(msg.content["settings"].get("sketch-rank", 0))
    try:
        noise = privacy.require_noise(context, "one-shot sketch") if k > 0 else None
    except ValueError as exc:
        return _data_error(msg, exc, context)
    if noise is not None:  # the noised Gram matrix of its records (Analyze Gauss)
        try:
            content["gram"] = to_array_record(G=noise.gram(_kept_block(context)))
        except ValueError as exc:
            return _data_error(msg, exc, context)
        privacy.save_noise(context, noise)
    elif k > 0:
        content["sketch"] = to_array_record(B=start_sketch(_kept_block(context), k, meta["spec"]))
    return Message(content, reply_to=msg)


def _secure_values(msg: Message, context: Context) -> dict[str, np.ndarray]:
    """What this gateway adds to a secure sum (:mod:`fedep.flower.secagg`), by the
    query's ``what``: ``moments`` (the sum of its records, then ``m2``, the sum of
    squared deviations from the federated mean), ``gram`` (``Z^T Z``), ``sketch``
    (``B B^T`` of its one-shot sketch ``B``) or ``round`` (one local round's
    :func:`~fedep.federation.server.round_sums`, with ``B B^T`` of its cleaned
    sketch when the round asks for it)."""
    q = _json_of(msg, SECSUM)
    what = q.get("what")
    noise = privacy.require_noise(context, f"secure {what} sum")
    if what == "round":
        rep = _released_round(msg, context)
        out = round_sums(rep)
        if rep.sketch is not None:
            out["BB"] = rep.sketch[0] @ rep.sketch[0].T
        return out
    X, _ = _ensure_data(context)
    if noise is not None:  # each gateway noises its values before they are masked
        if what == "moments":
            s1, sq = noise.moment_sums(X)
            out = {"n": np.array([float(X.shape[0])]), "sum": s1, "sq": sq}
        elif what == "sketch":
            out = {"BB": noise.gram(_kept_block(context))}
        else:
            raise ValueError(f"differential privacy: the secure {what} sum is not noised")
        privacy.save_noise(context, noise)
        return out
    if what == "moments":
        return {"n": np.array([float(X.shape[0])]), "sum": X.sum(axis=0)}
    if what == "m2":
        mean = arrays_of(msg.content["std"])["mean"]
        return {"m2": np.square(X - mean).sum(axis=0)}
    if what == "gram":
        std = arrays_of(msg.content["std"])
        return {"G": client_gram(X, std["mean"], std["scale"])}
    if what == "sketch":
        B = start_sketch(_kept_block(context), int(q["rank"]), _meta(context)["spec"])
        return {"BB": B @ B.T}
    raise ValueError(f"unknown secure sum {what!r}")


def _local_round(msg: Message, context: Context):
    """The core's ``local_round`` on this gateway's cohort of one (state kept)."""
    V = arrays_of(msg.content["global"])["V"]
    init = msg.content.array_records.get("init")
    cohort = _load_cohort(context, V if init is None else arrays_of(init)["V0"])
    cfg = msg.content.config_records.get("round")
    restart = bool(int(cfg.get("restart", 0))) if cfg is not None else False
    k = int(cfg.get("sketch-rank", 0)) if cfg is not None else 0
    hold = int(cfg.get("hold", 0)) if cfg is not None else 0  # range checked by the cohort
    # Only consensus-step rounds carry options (FedPG's cohort takes none).
    kw = {"restart": restart, "sketch_rank": k, "hold": hold} if (restart or k or hold) else {}
    rep = cohort.local_round(V, **kw)
    context.state[_COHORT] = to_array_record(**cohort.state_arrays())
    return rep


def _released_round(msg: Message, context: Context):
    """The local round as it leaves the gateway: in a private run, its noised proposal
    (:meth:`~fedep.federation.privacy.GatewayNoise.round`)."""
    noise = privacy.require_noise(context, "round")
    rep = _local_round(msg, context)
    if noise is None:
        return rep
    V = arrays_of(msg.content["global"])["V"]
    rep = noise.round(rep, V, _meta(context)["server_step"])
    privacy.save_noise(context, noise)
    return rep


@app.train()
@_verified
def train(msg: Message, context: Context) -> Message:
    """One local round (or one stage of a secure sum, :func:`_secure_values`)."""
    if RECORD_KEY_CONFIGS in msg.content.config_records:
        try:
            return gateway_secure_reply(msg, context, _secure_values)
        except ValueError as exc:  # its data, or beyond the privacy budget
            return _data_error(msg, exc, context)
    try:
        rep = _released_round(msg, context)
    except ValueError as exc:  # beyond the privacy budget, or not private at all
        return _data_error(msg, exc, context)
    metrics = {k: float(np.asarray(v).reshape(-1)[0]) for k, v in rep.metrics.items()}
    local = {"W": rep.W, "Pi": rep.Pi, "nu": np.asarray(rep.nu, dtype=float)}
    if rep.sketch is not None:
        local["sketch"] = rep.sketch
    content = RecordDict({"local": to_array_record(**local), "metrics": MetricRecord(metrics)})
    return Message(content, reply_to=msg)


def _trust_of(trust) -> dict | None:
    """The server's reference threshold and share (``FitOutcome.trust``), checked: a
    finite positive threshold and a share in [0, 0.5] or None."""
    if trust is None:
        return None
    th, share = float(trust["threshold"]), trust.get("share")
    if not (math.isfinite(th) and th >= 0):
        raise ValueError(f"reference threshold {th!r} from the server")
    if share is not None and not 0.0 <= float(share) <= 0.5:
        raise ValueError(f"contamination share {share!r} from the server")
    return {"threshold": th, "share": share, "share_reason": str(trust.get("share_reason"))}


def gateway_model(context: Context, components: np.ndarray, final: dict):
    """The gateway's fitted detector: global basis + its personalised basis (and the
    run's feature pipeline, ``features_``, when the gateway's table went through one).

    Fitted by the estimator's own ``set_fitted`` and ``fit_thresholds``:
    ``threshold_`` (global basis) and ``client_thresholds_`` (personal basis) come
    from this gateway's own training scores (the pooled quantile an in-process fit
    uses would need every gateway's scores).
    """
    meta = _meta(context)
    det = _estimator(meta)
    std = arrays_of(context.state[_STD])
    block = _block(context)
    states = client_states(_load_cohort(context, final["V"]))
    W = states["W"][0]
    label = meta["label"]
    pipe = _pipeline(meta["features"]) if meta.get("features") else None
    det.set_fitted(
        components=components,
        client_components=W.T[None],
        clients=np.array([int(label)]) if label.lstrip("-").isdigit() else np.array([label]),
        mean=std["mean"],
        scale=std["scale"],
        constant_features=std["constant"].astype(bool),
        feature_names=meta.get("feature_names") or None,
        features=pipe,
        rank_reason=meta.get("rank_reason") or None,
    )
    det.set_client_states(states)  # what a later warm start from this file carries
    det.fit_thresholds(block, [block], trust=_trust_of(final.get("trust")))
    res = FederationResult(
        V=final["V"],
        history=final["history"],
        stop_reason=str(final["stop_reason"]),
        n_rounds=int(final["n_rounds"]),
    )
    det.set_federation_result(res, warn=False)
    det.trim_history_ = list(final.get("trim_history") or [])
    if isinstance(final.get("lineage"), dict):  # checked by the model file's schema
        det.lineage_ = final["lineage"]
    det.n_trim_steps_ = len(det.trim_history_)
    for name, value in (privacy.private_model_fields(context) or {}).items():
        setattr(det, name, value)  # the privacy this gateway spent
    return det


@app.evaluate("finalize")
@_verified
def finalize(msg: Message, context: Context) -> Message:
    """Write the personalised model file (``model-path`` of the node config)."""
    arr = arrays_of(msg.content["global"])
    info = json.loads(str(msg.content["final"]["json"]))
    info["V"] = arr["V"]
    det = gateway_model(context, arr["components"], info)
    if "benign" in msg.content.array_records:  # the run's benign modes, checked as on load
        # start-up time (see the module docstring): the detectors load only when needed
        from fedep.detectors.suppression import MODE_ARRAYS, check_mode_arrays, set_modes

        modes = arrays_of(msg.content["benign"])
        modes["benign_counts_"] = np.asarray(modes["benign_counts_"], dtype=np.int64)
        check_mode_arrays(modes, det.components_.shape[1])
        set_modes(det, BenignModes(*(modes[k] for k in MODE_ARRAYS)))
    path = context.node_config.get("model-path")
    if path:
        from fedep.modelfile.estimator import save_model  # start-up time: see the docstring

        Path(str(path)).parent.mkdir(parents=True, exist_ok=True)
        save_model(det, str(path))  # atomic: the file is whole or absent
    metrics = {"saved": int(bool(path))}
    private = privacy.load_noise(context) is not None  # thresholds are not noised
    if not (info.get("secure_aggregation") or private):  # then they stay here
        metrics["threshold"] = float(det.threshold_)
        metrics["client-threshold"] = float(det.client_thresholds_[0])
    return Message(RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg)

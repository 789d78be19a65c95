"""The aggregation side: a Flower ServerApp around :func:`fedep.federation.server.server_round`.

A round sends the consensus ``V`` to the participating gateways, waits (at most
``round-timeout-s``) for their ``(W_i, Pi_i, nu_i, metrics)``, drops replies that are
errors or fail :func:`~fedep.federation.server.validate_report`, and aggregates the
rest in client-label order -- the order of the in-process cohort -- so that both
runners give the same basis. A round with fewer than ``min-clients`` valid replies ends
the run (``stop_reason = "too_few_clients"``); a gateway that misses ``max-misses``
rounds in a row is left out of later ones.

With ``features = "auto"`` (the estimators' default) and gateways holding raw tables
(``data-path``), a :class:`~fedep.features.FeaturePipeline` is fitted first, as the
in-process ``fit`` on a DataFrame does: column summaries (``query.summaries``) ->
decisions, moments of the encoded features (``query.feature_moments``) -> scaling;
the moments phase then runs on the transformed tables with the estimator's own
standardisation off (``mean = 0``, ``scale = 1``). With ``n-components`` unset (the
estimators' default ``"auto"``), a ``query.gram`` phase follows: each gateway sends
the Gram matrix of its standardised records and the server chooses the rank from
their sum by the rule of the in-process ``fit`` (:func:`fedep.core.rank.choose_rank`).
Gateways with numeric sources (dataset partitions, synthetic) skip the feature phases;
a run mixing both is refused.

With ``trim-steps`` > 0 (record trimming) the server runs the in-process ``fit``'s
loop, :func:`fedep.core.trimming.concentration_steps`, over :class:`RemoteRecords`:
the robust start (coordinate-wise median and the start set, from counts), the global
cut of each selection step (from counts of the gateways' PPCA distances), the
contamination estimate (``"auto"``, from counts of log residual energies) and the kept
moments are ``query.trim`` exchanges; each concentration step then runs the setup and
the rounds again on the gateways' kept records, from the merge of their sketches
(warm-started only when the kept records are unchanged, as in-process: ``_warm_start``).
No record, score or kept set leaves a gateway, and the result equals the in-process fit
(tested).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from logging import INFO, WARNING
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid, ServerApp

from fedep._json import jsonable
from fedep.core.baselines import oneshot_merge
from fedep.core.fedep import RoundReport
from fedep.core.rank import choose_rank
from fedep.core.stats import Moments, combine_moments, standardization_from_moments
from fedep.core.stiefel import polar, random_stiefel
from fedep.core.trimming import add_ppca_sums
from fedep.federation.rounds import FederationResult, TooFewClients
from fedep.federation.server import merge_reports, validate_report
from fedep.flower.gateway_data import sort_labels
from fedep.flower.messages import arrays_of, message_nbytes, sign_message, to_array_record
from fedep.modelfile.signing import parse_key
from fedep.params import (
    make_estimator,
    make_pipeline,
    params_from_run_config,
    pipeline_params_from_run_config,
    run_config_defaults,
)

__all__ = ["app", "run_federation", "exchange", "DEFAULT_RUN_CONFIG", "RUN_KEYS"]

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
}

#: Run configuration of the ServerApp (``[tool.flwr.app.config]``, ``--run-config``):
#: the run's own keys and one key per estimator parameter (:mod:`fedep.params`; left
#: at ``""`` a parameter takes the chosen method's default).
DEFAULT_RUN_CONFIG: dict[str, Any] = {**RUN_KEYS, **run_config_defaults()}


def exchange(
    grid: Grid,
    contents: dict[int, RecordDict],
    message_type: str,
    group_id: str,
    timeout: float,
) -> tuple[dict[int, Message], dict[int, str], dict[int, int], dict[int, int]]:
    """Send one message per node and collect the replies that arrive in time.

    Returns
    -------
    replies : dict node_id -> Message
        Replies without error.
    failed : dict node_id -> str
        Why a node gave no usable reply (error reply or timeout).
    sent, received : dict node_id -> int
        Serialised bytes of each message and reply.
    """
    msgs, sent = [], {}
    for nid, content in contents.items():
        m = Message(
            content,
            dst_node_id=nid,
            message_type=message_type,
            group_id=group_id,
            ttl=max(float(timeout), 1.0) + 30.0,
        )
        sent[nid] = message_nbytes(m)
        msgs.append(m)
    ids = list(grid.push_messages(msgs))
    id_to_node = {i: m.metadata.dst_node_id for i, m in zip(ids, msgs, strict=True)}
    pending = set(ids)
    replies: dict[int, Message] = {}
    failed: dict[int, str] = {}
    received: dict[int, int] = {}
    deadline = time.monotonic() + float(timeout)
    poll = 0.01
    while pending:
        for rep in grid.pull_messages(list(pending)):
            mid = rep.metadata.reply_to_message_id
            if mid not in pending:
                continue
            pending.discard(mid)
            nid = id_to_node[mid]
            received[nid] = message_nbytes(rep)
            if rep.has_error():
                failed[nid] = f"error {rep.error.code}: {rep.error.reason}"
            else:
                replies[nid] = rep
        if not pending or time.monotonic() >= deadline:
            break
        # Back off from 10 ms to 250 ms: every pull is a request to the SuperLink.
        time.sleep(poll)
        poll = min(0.25, poll * 1.5)
    for mid in pending:
        failed[id_to_node[mid]] = f"no reply within {timeout:g} s"
    return replies, failed, sent, received


class SigningGrid:
    """A grid that signs every message it pushes (gateways with ``verify-key`` check).

    Signatures cover the message type, group and every record (see
    :func:`~fedep.flower.protocol.content_digest`), so a gateway configured
    with the server's key refuses a global model, a setup or a query that is unsigned
    or altered on the way.
    """

    def __init__(self, grid: Grid, key):
        self._grid, self._key = grid, key

    def push_messages(self, messages):
        messages = list(messages)
        for m in messages:
            sign_message(m, self._key)
        return self._grid.push_messages(messages)

    def __getattr__(self, name):
        return getattr(self._grid, name)


def _wait_for_nodes(grid: Grid, n: int, wait_s: float) -> list[int]:
    deadline = time.monotonic() + wait_s
    while True:
        nodes = sorted(grid.get_node_ids())
        if len(nodes) >= n or time.monotonic() >= deadline:
            return nodes
        time.sleep(0.2)


def _report_from(rep: Message) -> RoundReport:
    a = arrays_of(rep.content["local"])
    m = dict(rep.content["metrics"])
    return RoundReport(
        W=np.asarray(a["W"], dtype=float),
        Pi=np.asarray(a["Pi"], dtype=float),
        nu=np.asarray(a["nu"], dtype=float).reshape(-1),
        metrics={k: np.array([float(v)]) for k, v in m.items()},
        sketch=np.asarray(a["sketch"], dtype=float) if "sketch" in a else None,
    )


@dataclass
class Gateways:
    """The gateways of a run, in aggregation order (client-label order)."""

    order: list[str]
    node_of: dict[str, int]
    label_of: dict[int, str]
    setup_bytes: dict[str, dict] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


def _fail(gw: Gateways, failed: dict[int, str], phase: str) -> None:
    for nid, why in failed.items():
        lab = gw.label_of.get(nid, f"node {nid}")
        gw.failed[lab] = f"{phase}: {why}"
        log(WARNING, "fedep: gateway %s failed at %s: %s", lab, phase, why)


def _why(gw: Gateways) -> str:
    """The recorded failures, for an error message (one line)."""
    if not gw.failed:
        return ""
    return "; failed: " + "; ".join(f"gateway {lab}: {why}" for lab, why in gw.failed.items())


def _add_bytes(gw: Gateways, phase: str, sent: dict[int, int], received: dict[int, int]):
    for nid, b in sent.items():
        lab = gw.label_of.get(nid)
        if lab is None:
            continue
        rec = gw.setup_bytes.setdefault(lab, {})
        rec[f"{phase}_sent"] = rec.get(f"{phase}_sent", 0) + b
        rec[f"{phase}_received"] = rec.get(f"{phase}_received", 0) + received.get(nid, 0)


def _keep_answered(gw: Gateways, replies: dict, min_clients: int, phase: str) -> None:
    gw.order = [lab for lab in gw.order if gw.node_of[lab] in replies]
    if len(gw.order) < min_clients:
        raise RuntimeError(
            f"only {len(gw.order)} gateways answered {phase}; min-clients={min_clients}{_why(gw)}"
        )


def _moments_of(rep: Message) -> Moments:
    a = arrays_of(rep.content["moments"])
    return Moments(int(rep.content["count"]["count"]), a["mean"], a["m2"])


def _features_record(data: dict) -> RecordDict:
    return RecordDict({"features": ConfigRecord({"json": json.dumps(jsonable(data))})})


def collect_moments(
    grid: Grid, nodes: list[int], timeout: float, min_clients: int, features: str = "numeric"
):
    """Phase 1: every gateway's per-feature moments -> the global standardisation.

    Parameters
    ----------
    features : {"numeric", "auto"}
        The estimator's ``features``. With ``"auto"`` a gateway holding a raw table
        replies ``source = table`` instead of moments (:func:`fit_features` comes first).

    Returns
    -------
    gateways : Gateways
    pooled : Moments or None
        The merged moments (count, mean, m2 per feature); None when the gateways hold
        raw tables.
    """
    content = RecordDict() if features != "auto" else _features_record({"mode": "auto"})
    replies, failed, s_b, r_b = exchange(
        grid, {n: content for n in nodes}, "query.moments", "moments", timeout
    )
    label_of = {nid: str(rep.content["client"]["label"]) for nid, rep in replies.items()}
    if len(set(label_of.values())) != len(label_of):
        raise RuntimeError(f"two gateways share a client label: {sorted(label_of.values())}")
    order = sort_labels(list(label_of.values()))
    gw = Gateways(order=order, node_of={lab: n for n, lab in label_of.items()}, label_of=label_of)
    _fail(gw, failed, "moments")
    _add_bytes(gw, "moments", s_b, r_b)
    if len(order) < min_clients:
        raise RuntimeError(
            f"only {len(order)} gateways answered; min-clients={min_clients}{_why(gw)}"
        )
    tables = [lab for lab in order if "source" in replies[gw.node_of[lab]].content]
    if tables:
        numeric = [lab for lab in order if lab not in tables]
        if numeric:
            raise RuntimeError(
                "features='auto': gateways "
                + ", ".join(tables)
                + " hold raw tables (data-path) but gateways "
                + ", ".join(numeric)
                + " hold numeric records (dataset partition or synthetic); give every "
                "gateway the same kind of source, or run with features='numeric'"
            )
        return gw, None
    return gw, combine_moments(_moments_of(replies[gw.node_of[lab]]) for lab in order)


def _fill_absent(summaries: list) -> list:
    """The gateways' summaries over the union of their columns (first seen, in order).

    A column that a gateway's table lacks is summarised there as all missing -- what
    the in-process ``fit`` sees when the gateways' tables are concatenated into one
    DataFrame (``pandas.concat`` fills them with missing values) -- so that both make the
    same decisions.
    """
    from dataclasses import replace

    from fedep.features import ColumnSummary, LogHistogram

    names: list[str] = []
    for p in summaries:
        names += [n for n in p.columns if n not in names]
    out = []
    for p in summaries:
        cols = {
            n: p.columns.get(n)
            or ColumnSummary(
                name=n, n_rows=p.n_rows, n_null=p.n_rows, sketch=LogHistogram(p.sketch_size)
            )
            for n in names
        }
        out.append(replace(p, columns=cols))
    return out


def fit_features(
    grid: Grid, gw: Gateways, timeout: float, min_clients: int, params: dict | None = None
):
    """The feature pipeline of gateways holding raw tables, fitted in two phases.

    ``query.summaries``: each gateway's column summaries -> merged -> column decisions
    (:meth:`~fedep.features.FeaturePipeline.fit_from_summaries`);
    ``query.feature_moments``: the moments of each gateway's encoded features -> the
    pipeline's federated scaling (:meth:`~fedep.features.FeaturePipeline.fit_scaling`).
    Gateways are taken in client-label order, as the in-process ``fit`` takes them.
    ``params``: the pipeline's parameters (run-config ``include``, ``scale-rule``, ...).

    Returns
    -------
    FeaturePipeline
        Fitted (decisions and scaling).
    """
    from fedep.features import ColumnSummaries, FeaturePipeline

    pipe = FeaturePipeline(**(params or {}))
    sent = {"params": jsonable(pipe.get_params())}
    content = RecordDict({"pipeline": ConfigRecord({"json": json.dumps(sent)})})
    nodes = {gw.node_of[lab]: content for lab in gw.order}
    replies, failed, s_b, r_b = exchange(grid, nodes, "query.summaries", "summaries", timeout)
    _fail(gw, failed, "summaries")
    _add_bytes(gw, "summaries", s_b, r_b)
    _keep_answered(gw, replies, min_clients, "the column summaries")
    summaries = []
    for lab in gw.order:
        try:
            text = str(replies[gw.node_of[lab]].content["summary"]["json"])
            summaries.append(ColumnSummaries.from_dict(json.loads(text)))
        except (ValueError, KeyError, TypeError) as exc:  # FeatureError is a ValueError
            # e.g. a gateway of another fedep version (its summaries' version differs)
            raise RuntimeError(f"gateway {lab}: unreadable column summaries: {exc}") from None
    pipe.fit_from_summaries(_fill_absent(summaries))
    if not any(d.used for d in pipe.decisions_):
        raise RuntimeError(
            "the feature pipeline kept no column of the gateways' tables (every column "
            "was excluded: identifiers, addresses, timestamps, constants, free text ...)"
        )
    if pipe.scale_rule is None:  # pragma: no cover - the default pipeline scales
        return pipe
    content = RecordDict({"pipeline": ConfigRecord({"json": json.dumps(pipe.to_dict())})})
    nodes = {gw.node_of[lab]: content for lab in gw.order}
    replies, failed, s_b, r_b = exchange(
        grid, nodes, "query.feature_moments", "feature-moments", timeout
    )
    _fail(gw, failed, "feature-moments")
    _add_bytes(gw, "feature_moments", s_b, r_b)
    _keep_answered(gw, replies, min_clients, "the feature moments")
    pipe.fit_scaling([_moments_of(replies[gw.node_of[lab]]) for lab in gw.order])
    return pipe


def collect_table_moments(grid: Grid, gw: Gateways, pipe, timeout: float, min_clients: int):
    """Phase 1 again for raw tables: the fitted pipeline goes to every gateway, which
    transforms its table, keeps it and replies the moments of the result.

    Returns
    -------
    pooled : Moments
    """
    content = _features_record({"mode": "pipeline", "pipeline": pipe.to_dict()})
    nodes = {gw.node_of[lab]: content for lab in gw.order}
    replies, failed, s_b, r_b = exchange(grid, nodes, "query.moments", "moments", timeout)
    _fail(gw, failed, "moments")
    _add_bytes(gw, "moments", s_b, r_b)
    _keep_answered(gw, replies, min_clients, "the moments")
    return combine_moments(_moments_of(replies[gw.node_of[lab]]) for lab in gw.order)


def choose_gateway_rank(grid, gw: Gateways, est, std: dict, timeout, min_clients):
    """The rank: ``n_components``, or for ``"auto"`` chosen from the gateways' Gram matrices.

    ``query.gram`` sends the standardisation; each gateway replies ``Z_i^T Z_i``
    (n_features x n_features) of its standardised records and its count, and the
    server applies :func:`fedep.core.rank.choose_rank` to their sum, in client-label
    order -- what the in-process ``fit`` does with the same blocks.

    Returns
    -------
    rank : int
    reason : str
        One line, as the estimators' ``rank_reason_``.
    """
    if est.n_components != "auto":
        r = int(est.n_components)
        return r, f"r={r}: n_components={r} given"
    nodes = {gw.node_of[lab]: RecordDict({"std": to_array_record(**std)}) for lab in gw.order}
    replies, failed, s_b, r_b = exchange(grid, nodes, "query.gram", "gram", timeout)
    _fail(gw, failed, "gram")
    _add_bytes(gw, "gram", s_b, r_b)
    _keep_answered(gw, replies, min_clients, "the Gram matrices")
    grams, counts = [], []
    n = std["mean"].shape[0]
    for lab in gw.order:
        rep = replies[gw.node_of[lab]]
        G = np.asarray(arrays_of(rep.content["gram"])["G"], dtype=float)
        if G.shape != (n, n) or not np.isfinite(G).all():
            raise RuntimeError(f"gateway {lab} sent a malformed Gram matrix {G.shape}")
        grams.append(G)
        counts.append(int(rep.content["count"]["count"]))
    cap, why = est._rank_cap()
    choice = choose_rank(sum(grams), counts, max_rank=cap, max_rank_reason=why)
    return choice.rank, choice.reason


def setup_gateways(
    grid,
    gw: Gateways,
    est,
    method: str,
    std: dict,
    timeout,
    min_clients,
    rank=None,
    reason="",
    sketch: bool = True,
):
    """Phase 2: standardisation and the estimator's parameters to every gateway.

    Each gateway builds the same estimator from ``est.get_params()`` (and validates
    it) and receives the ``rank`` (:func:`choose_gateway_rank`) and its ``reason``;
    with ``init="oneshot"`` (and ``sketch``) it replies its sketch of its kept
    records, merged here into ``V0``. A gateway's model state starts afresh.

    Returns
    -------
    V0 : ndarray of shape (n_features, n_components) or None
        The merged sketches (None unless ``init="oneshot"``).
    """
    r = int(est.n_components if rank is None else rank)
    sk = r if est.init == "oneshot" and sketch else 0
    params = jsonable({k: v for k, v in est.get_params(deep=False).items() if k != "callback"})
    settings = {"method": method, "params": params, "rank": r, "rank_reason": reason}
    config = ConfigRecord({"json": json.dumps(settings)})
    content = {
        gw.node_of[lab]: RecordDict(
            {
                "std": to_array_record(**std),
                "settings": ConfigRecord({"json": config["json"], "sketch-rank": sk}),
            }
        )
        for lab in gw.order
    }
    replies, failed, s_b, r_b = exchange(grid, content, "train.setup", "setup", timeout)
    _fail(gw, failed, "setup")
    _add_bytes(gw, "setup", s_b, r_b)
    gw.order = [lab for lab in gw.order if gw.node_of[lab] in replies]
    if len(gw.order) < min_clients:
        raise RuntimeError(
            f"only {len(gw.order)} gateways set up; min-clients={min_clients}{_why(gw)}"
        )
    if not sk:
        return None
    return oneshot_merge(
        [arrays_of(replies[gw.node_of[lab]].content["sketch"])["B"] for lab in gw.order], r
    )


class RemoteClients:
    """The gateways as the round loop sees them (:class:`~fedep.federation.rounds.RoundClients`).

    ``local_round`` sends ``V`` to the chosen gateways still active, waits for their
    replies, drops errors and replies that fail
    :func:`~fedep.federation.server.validate_report`, and merges the rest in
    client-label order. A gateway that misses ``max_misses`` rounds in a row is left
    out of later ones; fewer than ``min_clients`` valid replies end the run.
    """

    def __init__(self, grid, gw: Gateways, V0, n_features, r, *, timeout, min_clients, max_misses):
        self.grid, self.gw, self.V0 = grid, gw, V0
        self.n_features, self.r = n_features, r
        self.timeout, self.min_clients, self.max_misses = timeout, min_clients, max_misses
        self.d = len(gw.order)
        self.active = list(gw.order)
        self.misses = dict.fromkeys(gw.order, 0)
        self.initialised: set[str] = set()
        self.rnd = 0

    def local_round(self, V, clients=None, *, restart=False, sketch_rank=0) -> RoundReport:
        gw = self.gw
        self.rnd += 1
        chosen = gw.order if clients is None else [gw.order[i] for i in clients]
        targets = [lab for lab in chosen if lab in self.active]
        contents = {}
        cfg = {"round": self.rnd}
        if restart or sketch_rank:  # re-merges (FedEP.remerge): as the in-process cohort
            cfg.update({"restart": int(bool(restart)), "sketch-rank": int(sketch_rank)})
        for lab in targets:
            rd = {"global": to_array_record(V=V), "round": ConfigRecord(cfg)}
            if lab not in self.initialised:
                rd["init"] = to_array_record(V0=self.V0)
            contents[gw.node_of[lab]] = RecordDict(rd)
        replies, failed, s_b, r_b = exchange(
            self.grid, contents, "train", str(self.rnd), self.timeout
        )
        reports, answered = [], []
        for lab in targets:
            nid = gw.node_of[lab]
            if nid not in replies:
                continue
            try:
                rep = _report_from(replies[nid])
                validate_report(rep, self.n_features, self.r)
            except (KeyError, ValueError, TypeError) as exc:
                failed[nid] = f"invalid reply: {exc}"
                continue
            reports.append(rep)
            answered.append(lab)
        self.initialised.update(targets)
        for lab in targets:
            if lab in answered:
                self.misses[lab] = 0
                continue
            self.misses[lab] += 1
            why = failed.get(gw.node_of[lab])
            gw.failed[lab] = f"round {self.rnd}: {why}"
            log(WARNING, "fedep: gateway %s failed round %d: %s", lab, self.rnd, why)
            if self.misses[lab] >= self.max_misses:
                self.active.remove(lab)
        if len(reports) < self.min_clients:
            log(
                WARNING,
                "fedep: round %d has %d replies < min-clients=%d; stopping",
                self.rnd,
                len(reports),
                self.min_clients,
            )
            raise TooFewClients(f"round {self.rnd}: {len(reports)} valid replies")
        rep = merge_reports(reports)
        rep.info = {
            "participants": answered,
            "failed": {gw.label_of[n]: why for n, why in failed.items()},
            "bytes_sent": {gw.label_of[n]: b for n, b in s_b.items()},
            "bytes_received": {gw.label_of[n]: b for n, b in r_b.items()},
        }
        return rep


class RemoteCounts:
    """:class:`~fedep.core.trimming.ScoreCounts` over the gateways: each query is one
    ``query.trim`` exchange, each gateway answering with the counts of its own values.
    """

    def __init__(self, records: RemoteRecords, kind: str, std: dict, params: dict):
        self.records, self.kind, self.std, self.params = records, kind, std, params
        self.columns = kind == "coords"

        def range_of(rep):
            a = arrays_of(rep.content["range"])
            lo, hi = np.asarray(a["lo"], dtype=float), np.asarray(a["hi"], dtype=float)
            if lo.shape != hi.shape or not (np.isfinite(lo).all() and np.isfinite(hi).all()):
                raise ValueError(f"range of shapes {lo.shape}, {hi.shape} or not finite")
            n = int(rep.content["count"]["count"])
            if n < 0:
                raise ValueError("count < 0")
            return lo, hi, n

        replies = records.ask("range", kind, std, params)
        ranges = records.parse(replies, range_of)
        lo = np.min([r[0] for r in ranges], axis=0)
        hi = np.max([r[1] for r in ranges], axis=0)
        # each gateway's count bounds its answers: a count search adds up what the
        # gateways say, so one that claims more values than it declared, or counts that
        # fall as the cut grows, would move the cut for every gateway
        self.n_of = {lab: r[2] for (lab, _), r in zip(replies, ranges, strict=True)}
        self.n = int(sum(self.n_of.values()))
        self.lo, self.hi = (lo, hi) if self.columns else (float(lo[0]), float(hi[0]))
        self.n_queries = 0

    def _counts(self, op: str, t, **cfg) -> np.ndarray:
        self.n_queries += 1
        t = np.asarray(t, dtype=float)
        t = t if self.columns else np.atleast_1d(t)

        def counts_of(label, rep):
            c = np.asarray(arrays_of(rep.content["counts"])["c"])
            if c.shape != t.shape or c.dtype.kind not in "iu" or (c < 0).any():
                raise ValueError(f"counts of shape {c.shape} and type {c.dtype}, not {t.shape}")
            if (c > self.n_of[label]).any():
                raise ValueError(f"counts above the {self.n_of[label]} values it declared")
            # a count of values at or below t cannot fall as t grows
            order = np.argsort(t, axis=-1, kind="stable")
            if (np.diff(np.take_along_axis(c, order, axis=-1), axis=-1) < 0).any():
                raise ValueError("counts that fall as the cut grows")
            return c

        reps = self.records.ask(op, self.kind, self.std, self.params, T=t, **cfg)
        return sum(self.records.parse(reps, counts_of, labelled=True))

    def le(self, t) -> np.ndarray:
        return self._counts("le", t)

    def abs_le(self, t, center: float) -> np.ndarray:
        return self._counts("abs_le", t, center=float(center))


class RemoteRecords:
    """:class:`~fedep.core.trimming.TrimRecords` over the gateways (``query.trim``).

    The records and the kept sets stay on the gateways; the server sends the
    standardisation, the model's parameters and candidate cuts and gets counts and
    sums back. Every gateway still in the run must answer: a count search cannot lose
    a gateway half way (the run ends with one line naming the gateway that failed).
    """

    def __init__(self, grid, gw: Gateways, timeout: float, min_clients: int):
        self.grid, self.gw, self.timeout, self.min_clients = grid, gw, timeout, min_clients
        self.labels = list(gw.order)
        # the kept records' moments of the last cut, with the gateways that sent them:
        # the next kept_moments() needs no exchange while those gateways are the run's
        self._kept: tuple[list[str], list[Moments]] | None = None

    def ask(self, op: str, kind: str, std: dict | None, params: dict | None, T=None, **cfg):
        """One ``query.trim`` exchange; ``(label, reply)`` in gateway order."""
        gw = self.gw
        if len(self.labels) < self.min_clients:
            raise RuntimeError(
                f"only {len(self.labels)} gateways left for record trimming; "
                f"min-clients={self.min_clients}{_why(gw)}"
            )
        rd = {"trim": ConfigRecord({"json": json.dumps({"op": op, "kind": kind, **cfg})})}
        if std is not None:
            rd["std"] = to_array_record(mean=std["mean"], scale=std["scale"])
        if params:
            rd["params"] = to_array_record(
                **{k: np.atleast_1d(np.asarray(v, dtype=float)) for k, v in params.items()}
            )
        if T is not None:
            rd["query"] = to_array_record(T=T)
        content = RecordDict(rd)
        nodes = {gw.node_of[lab]: content for lab in self.labels}
        replies, failed, s_b, r_b = exchange(
            self.grid, nodes, "query.trim", f"trim-{op}", self.timeout
        )
        _fail(gw, failed, f"trim {op}")
        _add_bytes(gw, "trim", s_b, r_b)
        if failed:
            raise RuntimeError(f"record trimming needs every gateway's answer{_why(gw)}")
        return [(lab, replies[gw.node_of[lab]]) for lab in self.labels]

    def parse(self, replies, read, *, labelled: bool = False) -> list:
        """``read(reply)`` (``read(label, reply)`` if ``labelled``) of each ``(label,
        reply)``; a malformed reply ends the run with one line naming its gateway."""
        out = []
        for lab, rep in replies:
            try:
                out.append(read(lab, rep) if labelled else read(rep))
            except (KeyError, ValueError, TypeError) as exc:
                raise RuntimeError(
                    f"gateway {lab} sent a malformed record-trimming reply: {exc}"
                ) from None
        return out

    def counts(self, kind, mean, scale, params):
        return RemoteCounts(self, kind, {"mean": mean, "scale": scale}, params)

    def cut(self, kind, mean, scale, params, cut, min_rows):
        std = {"mean": mean, "scale": scale}
        reps = self.ask("cut", kind, std, params, cut=float(cut), **{"min-rows": int(min_rows)})

        def kept_of(rep):
            k = rep.content["kept"]
            return int(k["n-kept"]), float(k["kept-sum"]), bool(k["changed"])

        kept = self.parse(reps, kept_of)
        moments = self.parse(reps, _moments_of)
        for (lab, _), (n, *_), m in zip(reps, kept, moments, strict=True):
            if m.count != n:
                raise RuntimeError(
                    f"gateway {lab} sent a malformed record-trimming reply: moments of "
                    f"{m.count} records for {n} kept"
                )
        self._kept = ([lab for lab, _ in reps], moments)
        n_kept = int(sum(k[0] for k in kept))
        return n_kept, float(sum(k[1] for k in kept)), any(k[2] for k in kept)

    def kept_moments(self):
        if self._kept is not None and self._kept[0] == self.labels:
            return self._kept[1]
        return self.parse(self.ask("moments", "", None, None), _moments_of)

    def ppca_sums(self, mean, scale, V):
        r = V.shape[1]

        def sums_of(rep):
            sum_t2 = np.asarray(arrays_of(rep.content["sums"])["sum_t2"], dtype=float)
            if sum_t2.shape != (r,):
                raise ValueError(f"sum_t2 of shape {sum_t2.shape}, not ({r},)")
            return (
                int(rep.content["count"]["count"]),
                sum_t2,
                float(rep.content["count"]["sum-res"]),
            )

        reps = self.ask("ppca-sums", "", {"mean": mean, "scale": scale}, {"V": V})
        return add_ppca_sums(self.parse(reps, sums_of))


def finalize_gateways(grid, gw: Gateways, clients: RemoteClients, res, timeout) -> list[str]:
    """Phase 4: every gateway still active writes its personalised model.

    Returns the labels of the gateways that confirmed.
    """
    final = {
        "history": res.history,
        "n_rounds": res.n_rounds,
        "stop_reason": res.stop_reason,
        "trim_history": res.trim_history,
    }
    content = {
        gw.node_of[lab]: RecordDict(
            {
                "global": to_array_record(V=res.V, components=res.components),
                "final": ConfigRecord({"json": json.dumps(jsonable(final))}),
            }
        )
        for lab in clients.active
        if lab in clients.initialised
    }
    replies, failed, _, _ = exchange(grid, content, "evaluate.finalize", "finalize", timeout)
    _fail(gw, failed, "finalize")
    return sorted(gw.label_of[n] for n in replies)


def pipeline_params(run_config: dict, est) -> dict:
    """The feature-pipeline parameters of a run config, validated by the pipeline's own
    rules (before any message is sent); they need the estimator's ``features="auto"``.
    """
    params = pipeline_params_from_run_config(run_config)
    make_pipeline(params, est.features)
    return params


def run_federation(
    grid: Grid,
    run_config: dict | None = None,
    *,
    callback: Callable[[int, np.ndarray, dict], None] | None = None,
) -> FederationResult:
    """Drive a whole FedEP/FedPG fit over a Flower grid.

    The estimator is built from the run config by :func:`fedep.params.make_estimator`
    (validated with the estimator's own rules before any message is sent), its
    parameters shipped to the gateways, and the rounds run by the one round loop
    :func:`~fedep.federation.rounds.run_rounds`.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
        The ServerApp's grid (deployment or :class:`~fedep.flower.LocalGrid`).
    run_config : dict, optional
        Keys of :data:`~fedep.flower.protocol.DEFAULT_RUN_CONFIG`.
    callback : callable, optional
        ``callback(round, V, record)`` after each round.
    """
    cfg = {**DEFAULT_RUN_CONFIG, **(run_config or {})}
    key = parse_key(str(cfg.get("sign-key") or ""))
    if key is not None:
        grid = SigningGrid(grid, key)
    method = str(cfg["method"])
    est = make_estimator(method, params_from_run_config(cfg, method))
    pipe_params = pipeline_params(cfg, est)
    if not hasattr(est, "_make_cohort"):
        raise ValueError(
            f"method {method} has no rounds to federate; Flower runs fedep, fedpg and the "
            "FedEP ablation cases"
        )
    timeout = float(cfg["round-timeout-s"])
    min_clients = max(1, int(cfg["min-clients"]))
    nodes = _wait_for_nodes(grid, int(cfg["min-nodes"]), float(cfg["node-wait-s"]))
    log(INFO, "fedep: %d gateways connected", len(nodes))

    if not isinstance(est.features, str):  # pragma: no cover - run configs give text
        raise ValueError("over Flower, features must be 'auto' or 'numeric'")
    gw, pooled = collect_moments(grid, nodes, timeout, min_clients, est.features)
    pipe = None
    if pooled is None:  # raw tables: the feature pipeline first
        pipe = fit_features(grid, gw, timeout, min_clients, pipe_params)
        log(INFO, "fedep: feature pipeline fitted: %d features", len(pipe.get_feature_names_out()))
        pooled = collect_table_moments(grid, gw, pipe, timeout, min_clients)
    mean, scale, constant = standardization_from_moments(pooled)
    if pipe is not None and pipe.scale_rule is not None:
        # The pipeline's own federated scaling replaces the estimator's (as in ``fit``).
        mean, scale = np.zeros_like(mean), np.ones_like(scale)
    elif not est.standardize:
        scale = np.ones_like(scale)
    n_features = mean.shape[0]
    if est.n_components != "auto" and est.n_components > n_features:
        raise ValueError(f"n_components={est.n_components} must be <= n_features={n_features}")
    std = {"mean": mean, "scale": scale, "constant": constant}
    r, reason = choose_gateway_rank(grid, gw, est, std, timeout, min_clients)
    log(INFO, "fedep: rank %s", reason)
    rng = np.random.default_rng(est.random_state)
    est.n_components_ = r

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

    records = RemoteRecords(grid, gw, timeout, min_clients)

    def fit_kept(mean, scale, V, same):
        """One federation on the gateways' kept records: from the merge of their
        sketches, or warm-started at ``V`` (``est._warm_start``)."""
        if V is not None:  # a later concentration step: the gateways still in the run
            gw.order = list(records.labels)
        std = {"mean": mean, "scale": scale, "constant": constant}
        warm = est._warm_start(V, same)
        V0 = setup_gateways(
            grid, gw, est, method, std, timeout, min_clients, r, reason, sketch=not warm
        )
        if warm:
            V0 = V
        elif V0 is None:
            V0 = random_stiefel(n_features, r, rng)
        clients = RemoteClients(
            grid, gw, V0, n_features, r,
            timeout=timeout, min_clients=min_clients, max_misses=int(cfg["max-misses"]),
        )  # fmt: skip
        res = est._run_rounds(clients, V0, rng, on_round)
        records.labels = [lab for lab in gw.order if lab in clients.active]
        return polar(res.V), (res, clients)

    # Record trimming (trim_steps > 0) drives fit_kept through the loop of the
    # in-process fit; with trim_steps = 0 it is the one fit on every record.
    mean, scale, _, (res, clients) = est._trimmed_fit(records, fit_kept, mean, scale)
    res.trim_history = est.trim_history_
    res.components = polar(res.V).T.copy()
    res.clients, res.mean, res.scale = gw.order, mean, scale
    res.setup_bytes = gw.setup_bytes
    res.finalized = finalize_gateways(grid, gw, clients, res, timeout)
    res.failed = gw.failed
    # The pipeline's decisions and scaling (``FeaturePipeline.to_dict()``; None without).
    res.features = None if pipe is None else pipe.to_dict()
    res.rank_reason = reason
    path = str(cfg.get("result-path") or "")
    if path:
        # Written beside its name and renamed: a reader sees the whole file or none.
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(f"{path}.tmp")
        tmp.write_text(json.dumps(res.to_json()))
        os.replace(tmp, path)
    return res


@app.main()
def main(grid: Grid, context: Context) -> None:
    """ServerApp entry point: the run config comes from ``[tool.flwr.app.config]``."""
    run_federation(grid, dict(context.run_config))

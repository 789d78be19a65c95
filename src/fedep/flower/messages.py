"""What crosses the network: the message types, their records, signatures and sizes.

Message types (ServerApp -> ClientApp), in order:

``query.moments``
    reply: ``ArrayRecord`` ``mean``, ``m2`` (n,), ``MetricRecord`` ``count``,
    ``ConfigRecord`` ``label`` (the gateway's client id) -- per-feature statistics only.
    With ``features = "auto"`` the message carries ``features`` (``{"mode": "auto"}``); a
    gateway holding a raw table (``data-path``) then checks its table and replies
    ``source`` (``kind = "table"``) and its label instead of moments: its features come
    from a :class:`~fedep.features.FeaturePipeline` fitted in the two phases below,
    after which the server sends ``query.moments`` again with ``{"mode": "pipeline",
    "pipeline": <FeaturePipeline.to_dict()>, "moments": ...}``: the gateway transforms
    its table (and keeps it, with the pipeline, for the later phases) and replies its
    ``count`` (records, ``n-features``) and, only with ``"moments": true`` (no
    ``query.feature_moments`` before it: no scaling, or a warm start's pipeline), the
    moments of its transformed table; else the server has them from the encoded
    features' moments (:meth:`~fedep.features.FeaturePipeline.output_moments`).
``query.summaries`` (tables only)
    reply: ``ConfigRecord`` ``summary``: ``FeaturePipeline.summarize(frame).to_dict()``
    as JSON -- column summaries (counts, moments, sketches, top categories), no record.
``query.feature_moments`` (tables only)
    content: the pipeline with its column decisions (``to_dict()`` JSON); reply:
    ``mean``, ``m2`` (n_out,) and ``count`` of the gateway's encoded features.
``query.gram`` (``n-components`` "auto" only)
    content: ``mean``, ``scale`` (n,); reply: ``ArrayRecord`` ``G`` (n, n) = ``Z^T Z`` of
    the gateway's standardised records and ``count`` -- second moments, no record; the
    server chooses the rank from their sum (:func:`fedep.core.rank.choose_rank`).
``query.trim`` (``trim-steps`` > 0 only; record trimming, :mod:`fedep.core.trimming`)
    content: ``trim`` (JSON: ``op``, the ``kind`` of per-record values, ``cut``,
    ``min-rows``, ``center``), the standardisation ``mean``, ``scale`` (n,), the model
    ``params`` (``V`` (n, r), ``lam`` (r,), ``sigma2``, or the coordinate-wise
    ``median`` (n,)) and candidate cuts ``T`` ((c,), or (n, c) per feature); reply:
    counts of the gateway's values at or below each cut (same shape as ``T``), its
    count and smallest / largest value (``range``), its kept count and sums
    (``ppca-sums``: ``sum t_k^2`` (r,), residual energy; ``cut``: kept count, sum of
    kept values, whether its kept set changed, and the moments of its kept records,
    which spares the next ``moments`` exchange) or the moments of its kept records.
    The kept set stays on the gateway.
``train.setup``
    content: ``mean``, ``scale`` (n,), the estimator settings with the rank and its
    reason; reply: the client's sketch ``(n, k)`` (of its kept records) when ``init =
    "oneshot"``, else an acknowledgement. With record trimming the setup and the
    ``train`` rounds run once per concentration step, on the kept records, from the
    merge of their sketches, as in-process (warm-started at the previous step's
    consensus only when the kept records are unchanged or ``init="random"``:
    ``_warm_start``).
``train`` (one per round)
    content: ``V`` (n, r) and the round number; reply: ``W``, ``Pi`` (1, n, r), ``nu``
    (1,) and the scalar metrics of :meth:`FedEPCohort.local_round`. In FedEP's first
    rounds (``remerge``, :func:`fedep.federation.rounds.run_rounds`) the round config
    also holds ``restart`` (restart the ADMM at ``V``), ``hold`` (consensus steps:
    ``W_i = V`` and that many data steps, no W-step) and ``sketch-rank`` ``k``; the
    reply then adds ``sketch`` (1, n, k), the sketch of the gateway's cleaned records
    ``X_i - S_i`` (a factor of its n x n Gram matrix; no record).
``evaluate.finalize``
    content: the final consensus and the run's history; the gateway writes its
    personalised model file (with its feature pipeline) and replies with two thresholds.

No message carries a record or any array with one entry per record.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

from fedep._json import jsonable
from fedep.core.cohort import check_start
from fedep.core.fedep import RoundReport
from fedep.modelfile.signing import sign_digest, verify_digest

__all__ = [
    "json_record",
    "round_report_from",
    "setup_contents",
    "arrays_of",
    "content_digest",
    "content_nbytes",
    "message_nbytes",
    "sign_message",
    "to_array_record",
    "verify_message",
]


def to_array_record(**arrays: np.ndarray) -> ArrayRecord:
    """An ``ArrayRecord`` of float64/bool numpy arrays, keyed by name."""
    return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in arrays.items()})


def content_digest(
    content: RecordDict,
    message_type: str,
    group_id: str,
    run_id: int | None = None,
    dst_node_id: int | None = None,
    seq: int | None = None,
) -> str:
    """SHA-256 over a message's type, group, run, recipient, sequence number and every
    record except ``signature``.

    Arrays count by name, dtype, shape and bytes; config and metric records by their
    canonical JSON. What a gateway verifies before it acts on a server message: the run
    id and the recipient node id bind a signed message to its run and its gateway (one
    captured from another run, or sent to another gateway, does not verify there); the
    sequence number (the server's count of the exchanges it started in this run) orders
    it within the run, so that one replayed from an earlier round or phase is refused.
    """
    h = hashlib.sha256(
        f"{message_type}\0{group_id}\0run={run_id}\0node={dst_node_id}\0seq={seq}\0".encode()
    )
    for key in sorted(content.keys()):
        if key == "signature":
            continue
        rec = content[key]
        h.update(f"[{key}]".encode())
        if isinstance(rec, ArrayRecord):
            for name, a in sorted(arrays_of(rec).items()):
                a = np.ascontiguousarray(a)
                h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
                h.update(a.tobytes())
        else:
            h.update(json.dumps(dict(rec), sort_keys=True, default=str).encode())
    return h.hexdigest()


def sign_message(msg: Message, key, seq: int = 0) -> None:
    """Attach a ``signature`` record (Ed25519 or HMAC, :mod:`fedep.modelfile`) to ``msg``.

    The signature covers the message's run (``metadata.run_id``), recipient
    (``metadata.dst_node_id``) and sequence number ``seq`` (increasing over the run's
    exchanges), which the record also names (``run-id``, ``node-id``, ``seq``) so that
    a gateway can say which run, node and step a refused message was signed for.
    """
    md = msg.metadata
    run, node, seq = int(md.run_id), int(md.dst_node_id), int(seq)
    digest = content_digest(msg.content, md.message_type, md.group_id, run, node, seq)
    msg.content["signature"] = ConfigRecord(
        {
            "json": json.dumps(sign_digest(digest, key)),
            "run-id": run,
            "node-id": node,
            "seq": seq,
        }
    )


def verify_message(
    msg: Message,
    key,
    *,
    run_id: int | None = None,
    node_id: int | None = None,
    last_seq: int | None = None,
) -> int:
    """Refuse a server message that is unsigned, altered, signed for another run or
    another node, or not newer than the last one accepted (ValueError, one line).

    ``run_id`` and ``node_id`` are the gateway's own (its ``Context``); the run and
    node the signature covers must be them. ``last_seq`` is the sequence number of the
    last message this gateway accepted in this run (None: none yet): a message signed
    with a number at or below it was sent for a round or phase already passed (a
    replay). Returns the message's sequence number (to remember as the new
    ``last_seq``).
    """
    what = f"refused {msg.metadata.message_type} message"
    if "signature" not in msg.content.config_records:
        raise ValueError(f"{what}: not signed (verify-key is set)")
    rec = msg.content["signature"]
    try:
        block = json.loads(str(rec["json"]))
        run, node, seq = rec["run-id"], rec["node-id"], rec["seq"]
    except KeyError as exc:
        raise ValueError(f"{what}: signature record lacks {exc}") from None
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (run, node, seq)):
        raise ValueError(f"{what}: signature record's run-id / node-id / seq are not integers")
    md = msg.metadata
    digest = content_digest(msg.content, md.message_type, md.group_id, run, node, seq)
    try:
        verify_digest(block, digest, key)
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None
    # The run and node are now the signer's own: compare them with this gateway's.
    if run_id is not None and run != int(run_id):
        raise ValueError(f"{what}: signed for run {run}, this is run {int(run_id)}")
    if node_id is not None and node != int(node_id):
        raise ValueError(f"{what}: signed for node {node}, this node is {int(node_id)}")
    if last_seq is not None and seq <= int(last_seq):
        raise ValueError(
            f"{what}: replayed (signed as exchange {seq} of run {run}; this gateway "
            f"is at exchange {int(last_seq)})"
        )
    return seq


def arrays_of(rec: ArrayRecord) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in rec.items()}


def message_nbytes(msg: Message) -> int:
    """Serialised size of a message as Flower ships it (sum of its object contents).

    Counts the payload Flower transfers between SuperLink and SuperNode (content,
    metadata, array chunks); transport framing (gRPC, HTTP/2, TLS) is not included.
    """
    return int(sum(len(o.deflate()) for o in get_all_nested_objects(msg).values()))


def content_nbytes(content: RecordDict) -> int:
    return int(sum(len(o.deflate()) for o in get_all_nested_objects(content).values()))


def round_report_from(rep: Message) -> RoundReport:
    """The :class:`~fedep.core.fedep.RoundReport` of a gateway's ``train`` reply (its
    ``local`` arrays and ``metrics``; checked by the caller)."""
    a = arrays_of(rep.content["local"])
    m = dict(rep.content["metrics"])
    return RoundReport(
        W=np.asarray(a["W"], dtype=float),
        Pi=np.asarray(a["Pi"], dtype=float),
        nu=np.asarray(a["nu"], dtype=float).reshape(-1),
        metrics={k: np.array([float(v)]) for k, v in m.items()},
        sketch=np.asarray(a["sketch"], dtype=float) if "sketch" in a else None,
    )


def setup_contents(content: RecordDict, start: dict, labels, n: int, rank: int) -> dict:
    """A warm start's ``train.setup`` messages: ``content`` for every gateway of
    ``labels``, with a ``start`` record holding that gateway's own carried state
    (``start[label]``, checked against ``n`` features and ``rank``) when it has one."""
    per = {}
    for lab in labels:
        rd = RecordDict({k: content[k] for k in content})
        if start.get(lab) is not None:
            rd["start"] = to_array_record(**check_start(start[lab], n, rank, f"gateway {lab}"))
        per[lab] = rd
    return per


def json_record(key: str, data: dict) -> RecordDict:
    """A message content of one JSON config record ``key`` (NumPy values made JSON)."""
    return RecordDict({key: ConfigRecord({"json": json.dumps(jsonable(data))})})

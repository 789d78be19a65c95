"""Drive the real ServerApp/ClientApp in this process, messages through an in-memory grid.

Flower's own simulation engine needs Ray (``pip install "flwr[simulation]"``); this grid
needs nothing: every virtual gateway has its own :class:`flwr.app.Context` (node
config, persistent ``state``) and runs the very :data:`client_app.app` a SuperNode
runs. Replies are round-tripped through Flower's serialisation, so the server sees
what the network would carry. Faults can be injected per gateway and round.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from uuid import uuid4

import numpy as np
from flwr.app import Context, Error, Message, RecordDict
from flwr.serverapp import Grid
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects
from flwr.supercore.inflatable.inflatable_utils import inflate_object_from_contents
from flwr.supercore.task_identity import TaskIdentity

from fedep.federation.rounds import FederationResult
from fedep.flower.client_app import app as client_app
from fedep.flower.messages import arrays_of, to_array_record
from fedep.flower.server_app import run_federation

__all__ = ["FaultPlan", "LocalGrid", "run_local"]


@dataclass
class FaultPlan:
    """Faults to inject: ``{gateway index: round}``.

    ``error``: the gateway's ClientApp raises in that round (an error reply, like a
    crashing ClientApp under a SuperNode); ``vanish``: from that round on the gateway
    is gone (no reply, not listed among the nodes), like a killed SuperNode.
    """

    error: dict[int, int] = field(default_factory=dict)
    vanish: dict[int, int] = field(default_factory=dict)
    #: ``{gateway index: (round, kind)}``: the gateway's reply in that round is
    #: tampered with; ``kind`` "nan" (NaN in ``W``), "shape" (``W`` of the wrong
    #: shape) or "missing" (no ``metrics``): a malformed or hostile payload.
    corrupt: dict[int, tuple[int, str]] = field(default_factory=dict)
    #: ``{gateway index: message type}``: the gateway's ClientApp raises on every
    #: message of that type (e.g. ``"query.trim"``).
    error_type: dict[int, str] = field(default_factory=dict)
    #: ``{gateway index: function}``: a hostile gateway. ``function(message, reply)``
    #: sees every reply of that gateway that is not an error and may change its
    #: content (before serialisation) or return another ``Message`` to send instead.
    tamper: dict[int, Callable[[Message, Message], Message | None]] = field(default_factory=dict)


class _Run:
    def __init__(self, run_id: int):
        self.run_id = run_id


class LocalGrid(Grid):
    """A :class:`flwr.serverapp.Grid` whose nodes are ClientApps in this process.

    Attributes
    ----------
    contexts : dict node_id -> Context
    sent : list of (node_id, Message)
        Every message a gateway sent (replies), for inspection.
    """

    def __init__(self, client_app, node_configs: list[dict], *, run_id: int = 1, faults=None):
        self.client_app = client_app
        self.faults = faults or FaultPlan()
        self._run = _Run(run_id)
        self.node_ids = [1001 + i for i in range(len(node_configs))]
        self.contexts = {
            nid: Context(
                run_id=run_id, node_id=nid, node_config=dict(cfg), state=RecordDict(), run_config={}
            )
            for nid, cfg in zip(self.node_ids, node_configs, strict=True)
        }
        self.gone: set[int] = set()
        self.sent: list[tuple[int, Message]] = []
        self._replies: dict[str, Message] = {}

    # Grid API ---------------------------------------------------------------
    def set_run(self, run) -> None:  # pragma: no cover - not used
        self._run = run

    @property
    def run(self):
        return self._run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        return [n for n in self.node_ids if n not in self.gone]

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for msg in messages:
            mid = str(uuid4())
            msg.metadata.__dict__["_message_id"] = mid
            ids.append(mid)
            self._deliver(msg)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self._replies.pop(m) for m in list(message_ids) if m in self._replies]

    def send_and_receive(self, messages, *, timeout=None):
        return self.pull_messages(self.push_messages(messages))

    # ------------------------------------------------------------------------
    def _round_of(self, msg: Message) -> int | None:
        gid = msg.metadata.group_id
        if msg.metadata.message_type != "train" or not gid.isdigit():
            return None  # a secure sum of a setup phase is a "train" message too
        return int(gid)

    def _deliver(self, msg: Message) -> None:
        nid = msg.metadata.dst_node_id
        idx = self.node_ids.index(nid)
        rnd = self._round_of(msg)
        if rnd is not None and self.faults.vanish.get(idx) == rnd:
            self.gone.add(nid)
        if nid in self.gone:
            return
        try:
            if rnd is not None and self.faults.error.get(idx) == rnd:
                raise RuntimeError(f"injected failure of gateway {idx} in round {rnd}")
            if self.faults.error_type.get(idx) == msg.metadata.message_type:
                raise RuntimeError(f"injected failure of gateway {idx}")
            # What the SuperNode delivers: a deserialised copy.
            reply = self.client_app(wire_copy(msg), self.contexts[nid])
        except Exception as exc:  # noqa: BLE001 - a crashing ClientApp gives an error reply
            reply = Message(Error(code=1, reason=repr(exc)), reply_to=msg)
        if not reply.has_error():
            if rnd is not None and self.faults.corrupt.get(idx, (None,))[0] == rnd:
                _tamper(reply, self.faults.corrupt[idx][1])
            hostile = self.faults.tamper.get(idx)
            if hostile is not None:
                reply = hostile(msg, reply) or reply
            reply = wire_copy(reply)
        self.sent.append((nid, reply))
        self._replies[msg.metadata.message_id] = reply


def _tamper(reply: Message, kind: str) -> None:
    a = arrays_of(reply.content["local"])
    if kind == "nan":
        a["W"] = np.where(np.arange(a["W"].size).reshape(a["W"].shape) == 0, np.nan, a["W"])
    elif kind == "shape":
        a["W"] = a["W"][:, :-1]
    elif kind == "missing":
        del reply.content["metrics"]
        return
    else:
        raise ValueError(f"unknown corruption {kind!r}")
    reply.content["local"] = to_array_record(**a)


def wire_copy(msg: Message) -> Message:
    """A message rebuilt from its serialised objects, as the other side receives it."""
    objs = get_all_nested_objects(msg)
    contents = {oid: o.deflate() for oid, o in objs.items()}
    copy = inflate_object_from_contents(msg.object_id, contents)
    copy.metadata.__dict__.update(msg.metadata.__dict__)
    return copy


def run_local(
    node_configs: list[dict],
    run_config: dict | None = None,
    *,
    faults: FaultPlan | None = None,
    callback=None,
    run_id: int = 1,
) -> tuple[FederationResult, LocalGrid]:
    """Run the Flower apps of this package in-process, one virtual gateway per config.

    Parameters
    ----------
    node_configs : list of dict
        Each gateway's node config (as ``--node-config`` would give it).
    run_config : dict, optional
        ServerApp run config (see :data:`~fedep.flower.DEFAULT_RUN_CONFIG`);
        ``min-nodes`` defaults to the number of gateways.
    faults : FaultPlan, optional
    run_id : int, default=1
        The run's id (every gateway's ``Context.run_id`` and the messages' run).

    Returns
    -------
    result : FederationResult
    grid : LocalGrid
        For inspection (``grid.sent``, ``grid.contexts``).
    """
    grid = LocalGrid(client_app, node_configs, run_id=run_id, faults=faults)
    cfg = {"min-nodes": len(node_configs), "node-wait-s": 0.0, **(run_config or {})}
    saved = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, grid.run.run_id, 0
    try:
        result = run_federation(grid, cfg, callback=callback)
    finally:
        TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved
    return result, grid

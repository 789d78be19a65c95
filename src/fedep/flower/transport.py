"""Moving a phase's messages between the ServerApp and the gateways: the one place.

:func:`exchange` sends one message per node and collects the replies that arrive in
time; :class:`Roster` is the run's view of its gateways (their order, node ids,
failures and bytes); :func:`ask` is one phase's exchange with the gateways still in the
run: send, record each failure and the bytes, keep the gateways that answered (at least
``min_clients``). :class:`SigningGrid` signs every message a run pushes.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from logging import INFO, WARNING

from flwr.app import Message, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid

try:  # the grid a deployed ServerApp talks through (Flower 1.42)
    from flwr.superlink.grid import http_grid as _http_grid
except ImportError:  # pragma: no cover - another Flower layout: its own default applies
    _http_grid = None

from fedep.flower.messages import message_nbytes, sign_message

__all__ = ["Roster", "SigningGrid", "ask", "exchange", "received_arrays", "wait_for_nodes"]


def bound_reply_pulls(seconds: float) -> bool:
    """Bound how long this process waits for the objects of one reply to ``seconds``.

    A gateway killed while it uploads its reply leaves the message registered and its
    objects missing; Flower's grid then retries pulling them for up to two hours
    (``PULL_MAX_TIME``), and the exchange that asked, with it the whole federation,
    waits that long. With the bound the pull gives up after ``seconds`` and the reply
    comes back as an error (Flower's ``MESSAGE_UNAVAILABLE``): that gateway fails the
    round like one that did not answer. Returns whether the bound is in place.
    """
    pull = getattr(_http_grid, "pull_objects", None)
    if pull is None:  # pragma: no cover - another Flower layout
        return False
    original = getattr(pull, "func", pull)
    _http_grid.pull_objects = functools.partial(original, max_time=float(seconds))
    return True


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
    t0 = time.monotonic()
    ids = list(grid.push_messages(msgs))
    id_to_node = {i: m.metadata.dst_node_id for i, m in zip(ids, msgs, strict=True)}
    pending = set(ids)
    replies: dict[int, Message] = {}
    failed: dict[int, str] = {}
    received: dict[int, int] = {}
    deadline = time.monotonic() + float(timeout)
    poll = 0.01
    swept = False
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
        if not pending:
            break
        if time.monotonic() >= deadline:
            # A pull that waited on one reply's missing objects (a gateway killed while
            # it uploads; bounded by bound_reply_pulls) kept the others' replies unread
            # meanwhile: read them once more before counting them as not answered.
            if swept:
                break
            swept = True
            continue
        # Back off from 10 ms to 250 ms: every pull is a request to the SuperLink.
        time.sleep(poll)
        poll = min(0.25, poll * 1.5)
    for mid in pending:
        failed[id_to_node[mid]] = f"no reply within {timeout:g} s"
    # one line per exchange: where a deployed round's seconds go
    # (benchmarks/bench_deployed_round.py reads it from the run's log)
    log(
        INFO,
        "fedep: exchange %s %s: %d replies in %.3f s",
        message_type,
        group_id,
        len(replies),
        time.monotonic() - t0,
    )
    # what the server received, by name (an audit of a secure run: masked vectors and
    # exponents only, never a basis, moments, a Gram matrix or a sketch)
    log(INFO, "fedep: replies to %s %s held arrays [%s]", message_type, group_id,
        ", ".join(received_arrays(replies.values())))  # fmt: skip
    return replies, failed, sent, received


def received_arrays(replies) -> list[str]:
    """The names of the non-empty array records in ``replies`` (sorted; SecAgg+'s mod
    leaves empty ones of its own)."""
    return sorted(
        {name for rep in replies for name, rec in rep.content.array_records.items() if len(rec)}
    )


class SigningGrid:
    """A grid that signs every message it pushes (gateways with ``verify-key`` check).

    Signatures cover the message type, group, run id, recipient node id, a sequence
    number and every record (see :func:`~fedep.flower.messages.content_digest`), so a
    gateway configured with the server's key refuses a global model, a setup or a query
    that is unsigned, altered on the way, captured from another run, addressed to
    another gateway, or replayed from an earlier round or phase of this run. The
    sequence number counts the exchanges (one per push) from 1 at the run's start; a
    grid serves one run.
    """

    def __init__(self, grid: Grid, key):
        self._grid, self._key = grid, key
        self._seq = 0

    def push_messages(self, messages):
        messages = list(messages)
        self._seq += 1
        for m in messages:
            # Each message its own top-level content (records stay shared): a phase
            # sends one RecordDict to every gateway, and each signature names its node.
            m.content = RecordDict(dict(m.content.items()))
            sign_message(m, self._key, self._seq)
        return self._grid.push_messages(messages)

    def __getattr__(self, name):
        return getattr(self._grid, name)


def wait_for_nodes(grid: Grid, n: int, wait_s: float) -> list[int]:
    """The connected nodes, once ``n`` have connected or ``wait_s`` has passed."""
    deadline = time.monotonic() + wait_s
    while True:
        nodes = sorted(grid.get_node_ids())
        if len(nodes) >= n or time.monotonic() >= deadline:
            return nodes
        time.sleep(0.2)


@dataclass
class Roster:
    """The gateways of a run, in aggregation order (client-label order).

    Attributes
    ----------
    order : list of str
        The gateways still in the run.
    node_of, label_of : dict
        Label -> node id and back.
    setup_bytes : dict
        Per label, the bytes sent and received at each phase other than the rounds.
    failed : dict
        Per label, the last failure and its phase.
    """

    order: list[str]
    node_of: dict[str, int]
    label_of: dict[int, str]
    setup_bytes: dict[str, dict] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    def fail(self, failed: dict[int, str], phase: str) -> None:
        """Record (and log) the nodes that failed ``phase``."""
        for nid, why in failed.items():
            lab = self.label_of.get(nid, f"node {nid}")
            self.failed[lab] = f"{phase}: {why}"
            log(WARNING, "fedep: gateway %s failed at %s: %s", lab, phase, why)

    def why(self) -> str:
        """The recorded failures, for an error message (one line; empty without)."""
        if not self.failed:
            return ""
        return "; failed: " + "; ".join(f"gateway {lab}: {why}" for lab, why in self.failed.items())

    def add_bytes(self, phase: str, sent: dict[int, int], received: dict[int, int]) -> None:
        """Count the bytes of one exchange under ``phase``."""
        for nid, b in sent.items():
            lab = self.label_of.get(nid)
            if lab is None:
                continue
            rec = self.setup_bytes.setdefault(lab, {})
            rec[f"{phase}_sent"] = rec.get(f"{phase}_sent", 0) + b
            rec[f"{phase}_received"] = rec.get(f"{phase}_received", 0) + received.get(nid, 0)

    def drop(self, label: str, phase: str, why: str, min_clients: int, what: str) -> None:
        """Refuse ``label``'s reply to ``phase`` (one line naming it) and leave it out of
        the run; fewer than ``min_clients`` left end the run."""
        self.fail({self.node_of[label]: why}, phase)
        self.order = [lab for lab in self.order if lab != label]
        if len(self.order) < min_clients:
            raise RuntimeError(
                f"only {len(self.order)} gateways left after {what}; "
                f"min-clients={min_clients}{self.why()}"
            )

    def parse(self, replies, phase: str, read, *, min_clients: int, what: str) -> list:
        """``(label, read(label, reply))`` of each ``(label, reply)`` that ``read``
        accepts; a reply it refuses (``KeyError``, ``ValueError``, ``TypeError``,
        ``ArithmeticError``) drops its gateway with one line naming it and the phase."""
        out = []
        for lab, rep in replies:
            try:
                out.append((lab, read(lab, rep)))
            except (KeyError, ValueError, TypeError, ArithmeticError) as exc:
                line = " ".join(str(exc).split())[:300] or type(exc).__name__
                self.drop(lab, phase, f"malformed {phase} reply: {line}", min_clients, what)
        return out

    def keep_answered(self, replies: dict, min_clients: int, what: str) -> None:
        """Keep the gateways that answered; fewer than ``min_clients`` end the run."""
        self.order = [lab for lab in self.order if self.node_of[lab] in replies]
        if len(self.order) < min_clients:
            raise RuntimeError(
                f"only {len(self.order)} gateways answered {what}; "
                f"min-clients={min_clients}{self.why()}"
            )


def ask(
    grid: Grid,
    roster: Roster,
    content: RecordDict | dict[str, RecordDict],
    message_type: str,
    *,
    phase: str,
    what: str,
    timeout: float,
    min_clients: int,
    labels: list[str] | None = None,
    require_all: bool = False,
) -> list[tuple[str, Message]]:
    """One phase's exchange with the gateways ``labels`` (default: ``roster.order``).

    Parameters
    ----------
    content : RecordDict or dict of label -> RecordDict
        The same message for every gateway, or one per gateway.
    message_type : str
        Flower's message type (``query.moments``, ``train.setup``, ...).
    phase : str
        The phase's name in failures, byte counts and the message group.
    what : str
        What the phase asks for, in an error message ("the Gram matrices").
    require_all : bool, default=False
        Every gateway must answer (a count search cannot lose one half way); else the
        gateways that failed leave the run, and fewer than ``min_clients`` end it.

    Returns
    -------
    list of (label, Message)
        The replies, in gateway order.
    """
    labels = list(roster.order if labels is None else labels)
    per = content if isinstance(content, dict) else dict.fromkeys(labels, content)
    nodes = {roster.node_of[lab]: per[lab] for lab in labels}
    replies, failed, sent, received = exchange(
        grid, nodes, message_type, phase.replace("_", "-").replace(" ", "-"), timeout
    )
    roster.fail(failed, phase.replace("_", "-"))
    roster.add_bytes(phase.split(" ")[0], sent, received)
    if require_all:
        if failed:
            raise RuntimeError(f"{what} needs every gateway's answer{roster.why()}")
    else:
        roster.keep_answered(replies, min_clients, what)
        labels = [lab for lab in labels if lab in roster.order]
    return [(lab, replies[roster.node_of[lab]]) for lab in labels]

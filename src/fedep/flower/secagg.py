"""Secure aggregation: the server learns the sum of the gateways' values and nothing else.

The protocol is Flower's SecAgg+ (Bell et al., CCS 2020): each gateway masks its
quantised values with pairwise masks (agreed by Diffie-Hellman with its neighbours)
and a private mask, and secret-shares (Shamir) its private-mask seed and its mask key
among its neighbours; the masks cancel in the sum, and a gateway that drops out after
sending its keys has its pairwise masks removed from the shares of the others, so the
sum survives as long as every gateway keeps ``threshold`` live neighbours.

- The gateway side is Flower's own ``secaggplus_mod``
  (:func:`gateway_secure_reply` only hands it the values and caches them between
  stages).
- The server side (:func:`secure_sum`) runs the four stages of Flower's
  ``SecAggPlusWorkflow`` (setup, share keys, collect masked vectors, unmask) with
  Flower's primitives (``flwr.common.secure_aggregation``: Shamir ``combine_shares``,
  ``pseudo_rand_gen``, ``dequantize``, the key agreement) over this package's one
  exchange (:func:`fedep.flower.transport.exchange`: timeouts, signing, byte counts),
  not over the workflow itself, which is bound to the legacy strategy API. Unlike
  the workflow, a gateway that fails before sending its key shares simply leaves the
  sum (it holds no mask of the others), and the masks between two gateways that both
  drop out later are not "removed" (they never entered the sum).

**Quantisation.** SecAgg+ sums integers modulo ``2**32``; Flower quantises each value
``x`` in ``[-c, c]`` stochastically to ``Q`` levels (``c = 1`` here). A value of any
magnitude is first scaled by a power of two ``2**E``: each gateway replies, with its
public keys, the binary exponent of each entry of its 1-D arrays (moments,
scalars) and of the largest entry of each other array (bases, Gram matrices); the
server takes the largest per entry and sends it back with the key shares (what this
reveals: the order of magnitude, a power of two, of each gateway's values).
``Q`` is the largest power of two with ``k Q <= 2**31`` for ``k`` gateways, so
the sum of ``k`` quantised values never wraps. The error of each summed entry is at
most ``k * (2 c / Q) * 2**E`` (one quantisation step per gateway; stochastic rounding,
so unbiased): :func:`quantisation_bound`, about ``2**-25 k`` of the largest
gateway's entry for ``k = 20`` (``k**2 2**-30`` in general).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.app.message_type import MessageType
from flwr.client.mod import secaggplus_mod
from flwr.common import Code, FitRes, Status, bytes_to_ndarray, ndarrays_to_parameters
from flwr.common.secure_aggregation.crypto.shamir import combine_shares
from flwr.common.secure_aggregation.crypto.symmetric_encryption import generate_shared_key
from flwr.common.secure_aggregation.ndarrays_arithmetic import (
    factor_extract,
    parameters_addition,
    parameters_mod,
    parameters_subtraction,
)
from flwr.common.secure_aggregation.quantization import dequantize
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key, Stage
from flwr.common.secure_aggregation.secaggplus_utils import pseudo_rand_gen
from flwr.compat.common.recorddict_compat import fitres_to_recorddict
from flwr.supercore.primitives.asymmetric import bytes_to_private_key, bytes_to_public_key

from fedep.flower.messages import arrays_of, to_array_record
from fedep.flower.secure_rules import MIN_GATEWAYS, check_secure_aggregation
from fedep.flower.transport import Roster, exchange

__all__ = [
    "CLIPPING_RANGE",
    "check_secure_aggregation",
    "MIN_GATEWAYS",
    "MOD_RANGE",
    "SecureSum",
    "gateway_secure_reply",
    "quantisation_bound",
    "quantization_range",
    "reconstruction_threshold",
    "secure_sum",
]

#: SecAgg+'s modulus: the masked sums are taken modulo ``2**32`` (Flower's largest).
MOD_RANGE = 2**32
#: Flower's clipping range ``c``: every value is scaled into ``[-1, 1]`` first.
CLIPPING_RANGE = 1.0
#: The query of a secure sum (a ConfigRecord ``json``) and, at a gateway, the cached
#: values between the stages (its ``context.state``, never sent).
SECSUM = "fedep.secsum"
#: The exponents: replied by each gateway at setup, the agreed ones sent at collection.
EXPONENTS = "fedep.exponents"


def quantization_range(k: int) -> int:
    """Flower's ``quantization_range`` ``Q`` for ``k`` gateways: the largest power of two
    with ``k Q <= 2**31`` (the sum of ``k`` values in ``[0, Q]`` fits the modulus, and
    each in int32, as Flower's quantiser needs), at most ``2**30``."""
    return min(2**30, 2 ** int(math.floor(math.log2(2**31 / max(int(k), 1)))))


def reconstruction_threshold(k: int) -> int:
    """Shares needed to rebuild a gateway's secrets: a majority of the ``k`` gateways
    (at least 2), so ``k - threshold`` of them may drop out after sharing their keys
    and the server plus fewer than ``threshold`` colluding gateways learn nothing."""
    return max(2, k // 2 + 1)


def quantisation_bound(k: int, scale, q: int | None = None) -> np.ndarray:
    """Largest error of a secure sum of ``k`` gateways' values per entry of scale
    ``scale`` (``2**E``): one quantisation step ``2 c / Q`` per gateway (``Q``:
    ``q``, default :func:`quantization_range` of ``k``)."""
    q = quantization_range(k) if q is None else q
    return k * (2.0 * CLIPPING_RANGE / q) * np.asarray(scale, dtype=float)


def _exponents(values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Binary exponent ``e`` with ``|x| < 2**e``: per entry of a 1-D array, of the
    largest entry of any other (``-1022`` for zeros)."""
    out = {}
    for name, v in values.items():
        a = np.abs(np.asarray(v, dtype=float))
        a = a if a.ndim == 1 else np.array([a.max() if a.size else 0.0])
        e = np.frexp(a)[1].astype(np.int64)
        out[name] = np.where(a > 0, e, -1022)
    return out


def _exponent_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    return shape if len(shape) == 1 else (1,)


# ---------------------------------------------------------------------------- gateway


def gateway_secure_reply(
    msg: Message, context: Context, values: Callable[[Message, Context], dict[str, np.ndarray]]
) -> Message:
    """A gateway's reply to one stage of a secure sum, by Flower's ``secaggplus_mod``.

    At ``setup`` the gateway computes ``values(msg, context)`` (a dict of finite
    arrays), keeps them in its ``context.state`` and replies its public keys with their
    exponents; at ``collect_masked_vectors`` the mod quantises them, scaled by the
    agreed exponents, masks and sends them; the other stages are the mod's alone.
    """
    stage = msg.content.config_records[RECORD_KEY_CONFIGS].get(Key.STAGE)
    if stage == Stage.SETUP:
        vals = {k: np.asarray(v, dtype=float) for k, v in values(msg, context).items()}
        bad = [k for k, v in vals.items() if not np.isfinite(v).all()]
        if bad:
            raise ValueError(f"secure sum: the gateway's {bad[0]} is not finite")
        context.state[SECSUM] = to_array_record(**vals)
        reply = secaggplus_mod(msg, context, _no_app)
        reply.content[EXPONENTS] = to_array_record(**_exponents(vals))
        return reply
    if stage == Stage.COLLECT_MASKED_VECTORS:
        vals = arrays_of(context.state[SECSUM])
        agreed = arrays_of(msg.content[EXPONENTS])

        def scaled(m: Message, _ctx: Context) -> Message:
            params = []
            for name in sorted(vals):
                e = np.asarray(agreed[name], dtype=float)
                if e.shape != _exponent_shape(vals[name].shape):
                    raise ValueError(f"secure sum: exponents of {name} of shape {e.shape}")
                scale = np.exp2(e) if vals[name].ndim == 1 else float(np.exp2(e[0]))
                params.append(vals[name] / scale)
            fitres = FitRes(Status(Code.OK, ""), ndarrays_to_parameters(params), 1, {})
            return Message(fitres_to_recorddict(fitres, False), reply_to=m)

        reply = secaggplus_mod(msg, context, scaled)
        del context.state[SECSUM]
        return reply
    return secaggplus_mod(msg, context, _no_app)


def _no_app(msg: Message, context: Context) -> Message:  # pragma: no cover - never called
    raise RuntimeError("secure sum: the mod called the app outside collection")


# ----------------------------------------------------------------------------- server


@dataclass
class SecureSum:
    """A secure sum's outcome.

    Attributes
    ----------
    sums : dict of str -> ndarray
        The sum of the contributing gateways' values, name by name.
    labels : list of str
        The gateways whose values are in the sums (gateway order).
    failed : dict of str -> str
        The gateways that left the sum, and at which stage.
    bound : dict of str -> ndarray
        The largest quantisation error of each entry (:func:`quantisation_bound`).
    bytes_sent, bytes_received : dict of str -> int
        Per gateway, the serialised bytes of the four stages' messages and replies.
    """

    sums: dict[str, np.ndarray]
    labels: list[str]
    failed: dict[str, str] = field(default_factory=dict)
    bound: dict[str, np.ndarray] = field(default_factory=dict)
    bytes_sent: dict[str, int] = field(default_factory=dict)
    bytes_received: dict[str, int] = field(default_factory=dict)


class _Protocol:
    """One run of the four stages (state between them)."""

    def __init__(self, grid, roster: Roster, labels, phase, group_id, timeout, shapes):
        self.grid, self.roster, self.phase = grid, roster, phase
        self.group_id, self.timeout, self.shapes = group_id, timeout, shapes
        self.names = sorted(shapes)
        nodes = [roster.node_of[lab] for lab in labels]
        self.k = len(nodes)
        self.q = quantization_range(self.k)
        self.t = reconstruction_threshold(self.k)
        # every gateway is every other's neighbour (SecAgg+ with all shares: SecAgg)
        self.sampled: set[int] = set(nodes)
        self.active: set[int] = set(nodes)
        self.failed: dict[int, str] = {}
        self.pks: dict[int, tuple[bytes, bytes]] = {}
        self.order = list(nodes)
        random.shuffle(self.order)
        self.sent: dict[int, int] = dict.fromkeys(nodes, 0)
        self.received: dict[int, int] = dict.fromkeys(nodes, 0)

    def send(self, contents: dict[int, RecordDict], stage: str) -> dict[int, Message]:
        replies, failed, sent, received = exchange(
            self.grid, contents, MessageType.TRAIN, self.group_id, self.timeout
        )
        self.roster.add_bytes(self.phase, sent, received)
        for nid, b in sent.items():
            self.sent[nid] += b
            self.received[nid] += received.get(nid, 0)
        for nid, why in failed.items():
            self.failed[nid] = f"secure sum, {stage}: {why}"
        self.active &= set(replies)
        return replies

    def drop(self, nid: int, stage: str, why: str) -> None:
        self.failed[nid] = f"secure sum, {stage}: {why}"
        self.active.discard(nid)

    def check(self, stage: str) -> None:
        """Every gateway still counted needs ``t`` live neighbours (itself included)."""
        if len(self.active) < self.t:
            whys = "; ".join(
                f"gateway {self.roster.label_of.get(n, n)}: {w}" for n, w in self.failed.items()
            )
            raise RuntimeError(
                f"secure aggregation ({self.phase}): {len(self.active)} of {self.k} gateways "
                f"left after {stage}, fewer than the {self.t} that SecAgg+ needs to unmask"
                + (f"; {whys}" if whys else "")
            )

    def setup(self, content: dict[int, RecordDict]) -> dict[int, dict[str, np.ndarray]]:
        cfg = {
            Key.STAGE: Stage.SETUP,
            Key.SAMPLE_NUMBER: self.k,
            Key.SHARE_NUMBER: self.k,
            Key.THRESHOLD: self.t,
            Key.CLIPPING_RANGE: float(CLIPPING_RANGE),
            Key.TARGET_RANGE: self.q,
            Key.MOD_RANGE: MOD_RANGE,
            Key.MAX_WEIGHT: 1.0,
        }
        contents = {}
        for nid in self.order:
            rd = RecordDict(dict(content[nid].items()))
            rd[RECORD_KEY_CONFIGS] = ConfigRecord(cfg)
            contents[nid] = rd
        replies = self.send(contents, "setup")
        exps = {}
        for nid, rep in replies.items():
            try:
                keys = rep.content.config_records[RECORD_KEY_CONFIGS]
                pk1, pk2 = keys[Key.PUBLIC_KEY_1], keys[Key.PUBLIC_KEY_2]
                if not (isinstance(pk1, bytes) and isinstance(pk2, bytes)):
                    raise TypeError("public keys that are not bytes")
                e = arrays_of(rep.content[EXPONENTS])
                for name in self.names:
                    want = _exponent_shape(self.shapes[name])
                    a = np.asarray(e[name])
                    if a.shape != want or a.dtype.kind not in "iu":
                        raise ValueError(f"exponents of {name} of shape {a.shape}, not {want}")
                    if (a < -1022).any() or (a > 1024).any():
                        raise ValueError(f"exponents of {name} outside float64's range")
                self.pks[nid] = (pk1, pk2)
                exps[nid] = {name: np.asarray(e[name], dtype=np.int64) for name in self.names}
            except (KeyError, ValueError, TypeError) as exc:
                self.drop(nid, "setup", f"malformed reply: {exc}")
        self.check("setup")
        return exps

    def share_keys(self) -> dict[int, tuple[list[int], list[bytes]]]:
        contents = {}
        for nid in self.order:
            if nid not in self.active:
                continue
            cfg = ConfigRecord({str(n): list(self.pks[n]) for n in self.active})
            cfg[Key.STAGE] = Stage.SHARE_KEYS
            contents[nid] = RecordDict({RECORD_KEY_CONFIGS: cfg})
        replies = self.send(contents, "share keys")
        forward: dict[int, tuple[list[int], list[bytes]]] = {n: ([], []) for n in self.active}
        for nid, rep in replies.items():
            try:
                res = rep.content.config_records[RECORD_KEY_CONFIGS]
                dsts, ctxts = list(res[Key.DESTINATION_LIST]), list(res[Key.CIPHERTEXT_LIST])
                if len(dsts) != len(ctxts):
                    raise ValueError("destinations and ciphertexts differ in number")
            except (KeyError, ValueError, TypeError) as exc:
                self.drop(nid, "share keys", f"malformed reply: {exc}")
                continue
            for dst, c in zip(dsts, ctxts, strict=True):
                if dst in forward and isinstance(c, bytes):
                    forward[dst][0].append(nid)
                    forward[dst][1].append(c)
        # the gateways holding each other's masks and shares from now on
        self.sampled = set(self.active)
        for nid in forward:
            srcs, ctxts = forward[nid]
            keep = [i for i, s in enumerate(srcs) if s in self.sampled]
            forward[nid] = ([srcs[i] for i in keep], [ctxts[i] for i in keep])
        self.check("share keys")
        return forward

    def collect(self, forward, agreed: dict[str, np.ndarray]) -> list[np.ndarray] | None:
        exps = to_array_record(**agreed)
        contents = {}
        for nid in self.order:
            if nid not in self.active:
                continue
            srcs, ctxts = forward[nid]
            cfg = {
                Key.STAGE: Stage.COLLECT_MASKED_VECTORS,
                Key.CIPHERTEXT_LIST: ctxts,
                Key.SOURCE_LIST: srcs,
            }
            contents[nid] = RecordDict(
                {RECORD_KEY_CONFIGS: ConfigRecord(cfg), EXPONENTS: exps}  # type: ignore[arg-type]
            )
        replies = self.send(contents, "collect masked vectors")
        shapes = [(1,)] + [tuple(self.shapes[n]) for n in self.names]
        masked = None
        for nid, rep in replies.items():
            try:
                blobs = rep.content.config_records[RECORD_KEY_CONFIGS][Key.MASKED_PARAMETERS]
                vec = [bytes_to_ndarray(b) for b in blobs]
                if [v.shape for v in vec] != shapes or any(v.dtype.kind not in "iu" for v in vec):
                    raise ValueError(f"masked vectors of shapes {[v.shape for v in vec]}")
                vec = [v.astype(np.int64) for v in vec]
                if any(((v < 0) | (v >= MOD_RANGE)).any() for v in vec):
                    raise ValueError("masked values outside the modulus")
            except (KeyError, ValueError, TypeError) as exc:
                self.drop(nid, "collect masked vectors", f"malformed reply: {exc}")
                continue
            masked = vec if masked is None else parameters_addition(masked, vec)
        self.check("collect masked vectors")
        return parameters_mod(masked, MOD_RANGE)

    def unmask(self, masked: list[np.ndarray]) -> list[np.ndarray]:
        dead = self.sampled - self.active
        contents = {}
        for nid in self.order:
            if nid not in self.active:
                continue
            cfg = {
                Key.STAGE: Stage.UNMASK,
                Key.ACTIVE_NODE_ID_LIST: sorted(self.active),
                Key.DEAD_NODE_ID_LIST: sorted(dead),
            }
            contents[nid] = RecordDict({RECORD_KEY_CONFIGS: ConfigRecord(cfg)})  # type: ignore[arg-type]
        contributors = set(self.active)
        replies = self.send(contents, "unmask")
        shares: dict[int, list[bytes]] = {n: [] for n in self.sampled}
        for nid, rep in replies.items():
            try:
                res = rep.content.config_records[RECORD_KEY_CONFIGS]
                for owner, share in zip(res[Key.NODE_ID_LIST], res[Key.SHARE_LIST], strict=True):
                    if owner in shares and isinstance(share, bytes):
                        shares[owner].append(share)
            except (KeyError, ValueError, TypeError) as exc:
                self.failed[nid] = f"secure sum, unmask: malformed reply: {exc}"
        dims = [v.shape for v in masked]
        for nid, got in shares.items():
            if len(got) < self.t:
                raise RuntimeError(
                    f"secure aggregation ({self.phase}): {len(got)} shares of gateway "
                    f"{self.roster.label_of.get(nid, nid)}'s secrets, fewer than the {self.t} "
                    "needed to unmask the sum"
                )
            try:
                secret = combine_shares(got)
                if nid in contributors:  # its private mask
                    masked = parameters_subtraction(
                        masked, pseudo_rand_gen(secret, MOD_RANGE, dims)
                    )
                    continue
                sk1 = bytes_to_private_key(secret)
                for other in contributors:  # the pairwise masks the others still hold
                    shared = generate_shared_key(sk1, bytes_to_public_key(self.pks[other][0]))
                    mask = pseudo_rand_gen(shared, MOD_RANGE, dims)
                    masked = (
                        parameters_addition(masked, mask)
                        if nid > other
                        else parameters_subtraction(masked, mask)
                    )
            except (ValueError, TypeError) as exc:
                raise RuntimeError(
                    f"secure aggregation ({self.phase}): the shares of gateway "
                    f"{self.roster.label_of.get(nid, nid)} do not rebuild its secret: {exc}"
                ) from None
        self.active = contributors
        return parameters_mod(masked, MOD_RANGE)


def _named(roster: Roster, proto: _Protocol) -> list[tuple[str, str]]:
    return [(str(roster.label_of.get(n, n)), w) for n, w in proto.failed.items()]


def secure_sum(
    grid,
    roster: Roster,
    content: RecordDict | dict[str, RecordDict],
    shapes: dict[str, tuple[int, ...]],
    *,
    phase: str,
    timeout: float,
    min_clients: int,
    labels: list[str] | None = None,
    group_id: str | None = None,
) -> SecureSum:
    """The sum of the gateways' values by SecAgg+: four exchanges, the server sees
    masked vectors only.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
    roster : Roster
    content : RecordDict or dict of label -> RecordDict
        The query every gateway computes its values from (with ``SECSUM`` naming it),
        the same for all or one per gateway.
    shapes : dict of str -> tuple
        The arrays each gateway sums, by name and shape (a reply of other names or
        shapes drops its gateway).
    phase : str
        The phase's name in byte counts and errors.
    timeout : float
        Longest wait for each stage's replies.
    min_clients : int
        Fewest gateways the sum may hold.
    labels : list of str, optional
        The gateways asked (default: ``roster.order``).
    group_id : str, optional
        Flower's message group (default: ``phase``).

    Returns
    -------
    SecureSum

    Raises
    ------
    RuntimeError
        Fewer than ``max(min_clients, MIN_GATEWAYS)`` gateways asked or left, or too
        few left to unmask (one line naming the gateways that failed).
    """
    labels = list(roster.order if labels is None else labels)
    fewest = max(int(min_clients), MIN_GATEWAYS)
    if len(labels) < fewest:
        raise RuntimeError(
            f"secure aggregation ({phase}) needs at least {fewest} gateways; {len(labels)} "
            "in the run (with two, each would learn the other's values from the sum)"
        )
    proto = _Protocol(grid, roster, labels, phase, group_id or phase, timeout, shapes)
    per = content if isinstance(content, dict) else dict.fromkeys(labels, content)
    exps = proto.setup({roster.node_of[lab]: per[lab] for lab in labels})
    forward = proto.share_keys()
    agreed = {
        n: np.max([exps[nid][n] for nid in proto.active], axis=0).astype(np.int64)
        for n in proto.names
    }
    masked = proto.collect(forward, agreed)
    recon = proto.unmask(masked)
    n_in = len(proto.active)
    if n_in < fewest:  # with two, each would learn the other's values from the result
        raise RuntimeError(
            f"secure aggregation ({phase}): {n_in} gateways left in the sum, fewer than "
            f"{fewest}" + "".join(f"; gateway {lab}: {w}" for lab, w in _named(roster, proto))
        )
    q_total, arrays = factor_extract(recon)
    if int(q_total) != n_in * proto.q:
        raise RuntimeError(
            f"secure aggregation ({phase}): the unmasked weight {int(q_total)} is not "
            f"{n_in} gateways' (a gateway sent a malformed masked vector)"
        )
    values = dequantize(arrays, CLIPPING_RANGE, proto.q)
    offset = -(n_in - 1) * CLIPPING_RANGE
    sums, bound = {}, {}
    for name, v in zip(proto.names, values, strict=True):
        scale = np.exp2(agreed[name].astype(float))
        if len(shapes[name]) != 1:
            scale = float(scale[0])
        sums[name] = (v + offset) * scale
        bound[name] = quantisation_bound(n_in, np.broadcast_to(scale, v.shape), proto.q)
    failed = {roster.label_of.get(n, str(n)): why for n, why in proto.failed.items()}
    for lab, why in failed.items():
        roster.failed[lab] = why
    kept = [lab for lab in labels if roster.node_of[lab] in proto.active]
    lab_of = roster.label_of
    return SecureSum(
        sums=sums,
        labels=kept,
        failed=failed,
        bound=bound,
        bytes_sent={lab_of[n]: b for n, b in proto.sent.items()},
        bytes_received={lab_of[n]: b for n, b in proto.received.items()},
    )

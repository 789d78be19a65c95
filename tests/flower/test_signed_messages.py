"""Gateways that refuse unsigned or altered server messages (global model included)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

import fedep  # noqa: E402
from fedep.flower import FaultPlan, run_local  # noqa: E402
from fedep.flower.client_app import app as client_app  # noqa: E402
from fedep.flower.local import wire_copy  # noqa: E402
from fedep.flower.messages import content_digest  # noqa: E402
from fedep.modelfile import generate_signing_key  # noqa: E402

SECRET = "hmac:" + "s" * 32
RC = {"n-components": 2, "n-rounds": 3, "tol": 0.0, "random-state": 0}


@pytest.fixture(autouse=True)
def _flower_env(monkeypatch, tmp_path):
    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "flwr-home"))


def _gateways(tmp_path, key=None, d=3):
    cfgs = []
    for i in range(d):
        c = {"partition-id": i, "synthetic-seed": 2, "model-path": str(tmp_path / f"g{i}.fedep")}
        if key is not None:
            c["verify-key"] = key
        cfgs.append(c)
    return cfgs


def test_signed_run_equals_the_plain_run(tmp_path):
    plain, _ = run_local(_gateways(tmp_path / "a"), RC)
    signed, grid = run_local(_gateways(tmp_path / "b", SECRET), {**RC, "sign-key": SECRET})
    assert signed.failed == {} and signed.finalized == ["0", "1", "2"]
    np.testing.assert_array_equal(signed.V, plain.V)
    m = fedep.load(tmp_path / "b" / "g0.fedep")
    assert m.n_iter_ == 3


def test_unsigned_or_other_key_is_refused(tmp_path):
    res, _ = run_local(_gateways(tmp_path / "a", SECRET)[:2] + _gateways(tmp_path / "a")[2:], RC)
    # The two gateways that verify refuse the first (unsigned) message, before they are
    # known by label; the third runs.
    assert len(res.failed) == 2
    assert all("not signed" in why for why in res.failed.values())
    assert res.clients == ["2"]
    generate_signing_key(tmp_path / "k.pem", tmp_path / "k.pub")
    generate_signing_key(tmp_path / "o.pem", tmp_path / "o.pub")
    res, _ = (
        run_local(
            _gateways(tmp_path / "b", str(tmp_path / "o.pub"), d=2),
            {**RC, "sign-key": str(tmp_path / "k.pem"), "min-clients": 1},
        )
        if False
        else (None, None)
    )
    with pytest.raises(RuntimeError, match="does not verify"):
        run_local(
            _gateways(tmp_path / "b", str(tmp_path / "o.pub"), d=2),
            {**RC, "sign-key": str(tmp_path / "k.pem")},
        )
    ok, _ = run_local(
        _gateways(tmp_path / "c", str(tmp_path / "k.pub"), d=2),
        {**RC, "sign-key": str(tmp_path / "k.pem")},
    )
    assert ok.failed == {} and ok.n_rounds == 3


def test_digest_covers_every_record_and_the_message_type():
    from flwr.app import ArrayRecord, ConfigRecord, RecordDict

    from fedep.flower.messages import to_array_record

    def content(v):
        return RecordDict({"global": to_array_record(V=v), "round": ConfigRecord({"round": 1})})

    V = np.eye(4, 2)
    base = content_digest(content(V), "train", "1")
    V2 = V.copy()
    V2[0, 0] = np.nextafter(1.0, 2.0)
    assert content_digest(content(V2), "train", "1") != base
    assert content_digest(content(V), "train", "2") != base
    assert content_digest(content(V), "evaluate.finalize", "1") != base
    c = content(V)
    c["round"] = ConfigRecord({"round": 2})
    assert content_digest(c, "train", "1") != base
    assert isinstance(content(V)["global"], ArrayRecord)


def _arrays(ctx):
    recs = ctx.state.array_records.items()
    return {(r, k): a.numpy().copy() for r, rec in recs for k, a in rec.items()}


def _capture(tmp_path, key, run_id):
    """Run a signed federation; return it, its grid and every server message gateway 0
    received (as delivered), by message type and group."""
    seen = {}

    def spy(msg, reply):
        seen[(msg.metadata.message_type, msg.metadata.group_id)] = msg
        return None

    res, grid = run_local(
        _gateways(tmp_path, key),
        {**RC, "sign-key": key},
        faults=FaultPlan(tamper={0: spy}),
        run_id=run_id,
    )
    assert res.failed == {} and res.n_rounds == 3
    return res, grid, seen


def test_a_message_from_another_run_or_for_another_node_is_refused(tmp_path):
    # Run A signs a round-2 global model for gateway 0 (node 1001); run B uses the same
    # key. Delivered to gateway 0 in run B, or to gateway 1 in run A, it is refused
    # before the gateway acts on it (its basis stays as it was).
    _, _, seen = _capture(tmp_path / "a", SECRET, run_id=7)
    captured = seen[("train", "2")]
    assert captured.metadata.run_id == 7 and captured.metadata.dst_node_id == 1001
    _, grid_b, _ = _capture(tmp_path / "b", SECRET, run_id=8)
    ctx = grid_b.contexts[1001]
    before = _arrays(ctx)
    line = r"^refused train message: signed for run 7, this is run 8$"
    with pytest.raises(ValueError, match=line):
        client_app(wire_copy(captured), ctx)
    after = _arrays(ctx)
    assert before.keys() == after.keys()
    for k in before:
        np.testing.assert_array_equal(before[k], after[k])
    # Rewriting the metadata to run B does not help: the signature names run 7.
    forged = wire_copy(captured)
    forged.metadata.__dict__["_run_id"] = 8
    with pytest.raises(ValueError, match="signed for run 7, this is run 8"):
        client_app(forged, ctx)
    # Nor does rewriting the signature record's run: the signature no longer verifies.
    forged = wire_copy(captured)
    forged.content["signature"]["run-id"] = 8
    with pytest.raises(ValueError, match="does not verify|altered"):
        client_app(forged, ctx)
    # Redirected to gateway 1 of the same run (A's contexts: its own run id).
    _, grid_a, _ = _capture(tmp_path / "c", SECRET, run_id=7)
    with pytest.raises(
        ValueError, match=r"^refused train message: signed for node 1001, this node is 1002$"
    ):
        client_app(wire_copy(captured), grid_a.contexts[1002])


def test_sign_and_verify_bind_the_run_and_the_node():
    from flwr.app import ConfigRecord, Message, RecordDict

    from fedep.flower.messages import sign_message, verify_message

    saved = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 0
    try:
        m = Message(RecordDict({"round": ConfigRecord({"round": 1})}), 5, "train", group_id="1")
    finally:
        TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved
    sign_message(m, SECRET)
    verify_message(m, SECRET, run_id=1, node_id=5)
    with pytest.raises(ValueError, match="signed for run 1, this is run 2"):
        verify_message(m, SECRET, run_id=2, node_id=5)
    with pytest.raises(ValueError, match="signed for node 5, this node is 6"):
        verify_message(m, SECRET, run_id=1, node_id=6)
    del m.content["signature"]["run-id"]
    with pytest.raises(ValueError, match="signature record lacks 'run-id'"):
        verify_message(m, SECRET, run_id=1, node_id=5)
    base = content_digest(m.content, "train", "1", 1, 5)
    assert content_digest(m.content, "train", "1", 2, 5) != base
    assert content_digest(m.content, "train", "1", 1, 6) != base


def test_an_earlier_round_replayed_in_the_same_run_is_refused(tmp_path):
    # Every signed message carries the server's exchange number; a gateway refuses one
    # at or below the last it accepted in this run, before it acts on it.
    _, grid, seen = _capture(tmp_path, SECRET, run_id=3)
    ctx = grid.contexts[1001]
    before = _arrays(ctx)
    for key in [("train", "1"), ("train", "3"), ("train.setup", "setup")]:
        if key not in seen:
            continue
        with pytest.raises(ValueError, match=r"replayed \(signed as exchange \d+ of run 3"):
            client_app(wire_copy(seen[key]), ctx)
    after = _arrays(ctx)
    for k in before:
        np.testing.assert_array_equal(before[k], after[k])
    # The exchange number is signed: raising it breaks the signature.
    forged = wire_copy(seen[("train", "1")])
    forged.content["signature"]["seq"] = 10**6
    with pytest.raises(ValueError, match="does not verify|altered"):
        client_app(forged, ctx)


def test_a_message_delivered_twice_is_refused_the_second_time():
    from flwr.app import ConfigRecord, Message, RecordDict

    from fedep.flower.messages import sign_message, verify_message

    saved = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 0
    try:
        m = Message(RecordDict({"round": ConfigRecord({"round": 4})}), 5, "train", group_id="4")
    finally:
        TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved
    sign_message(m, SECRET, seq=9)
    assert verify_message(m, SECRET, run_id=1, node_id=5, last_seq=8) == 9
    with pytest.raises(ValueError, match="replayed .*exchange 9 of run 1.*at exchange 9"):
        verify_message(m, SECRET, run_id=1, node_id=5, last_seq=9)
    assert content_digest(m.content, "train", "4", 1, 5, 9) != content_digest(
        m.content, "train", "4", 1, 5, 10
    )
    del m.content["signature"]["seq"]
    with pytest.raises(ValueError, match="signature record lacks 'seq'"):
        verify_message(m, SECRET, run_id=1, node_id=5)

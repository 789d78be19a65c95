"""The long-running ClientApp executor runs fedep's app only, and every failure is an
error reply (as ``flwr-clientapp`` gives), never a dead executor."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("flwr")

from flwr.app import Context, Message, RecordDict  # noqa: E402
from flwr.common.constant import SubStatus  # noqa: E402
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from fedep.flower import executor  # noqa: E402


class _Beat:
    is_running = False

    def __init__(self, fn):
        pass

    def start(self):
        self.is_running = True

    def stop(self):
        self.is_running = False


def _task(monkeypatch, fab_id: str, message_type: str):
    for name in ("_task_id", "_run_id", "_node_id"):  # what pull_task_input sets
        monkeypatch.setattr(TaskIdentity, name, 1, raising=False)
    msg = Message(RecordDict(), dst_node_id=7, message_type=message_type)
    msg.metadata.__dict__["_message_id"] = "m1"
    ctx = Context(run_id=1, node_id=7, node_config={}, state=RecordDict(), run_config={})
    pushed = {}
    monkeypatch.setattr(executor, "HeartbeatSender", _Beat)
    monkeypatch.setattr(executor, "make_task_heartbeat_fn_http", lambda c: None)
    monkeypatch.setattr(executor, "_client", lambda *a: SimpleNamespace(close=lambda: None))
    monkeypatch.setattr(
        executor,
        "pull_task_input",
        lambda c: (msg, ctx, SimpleNamespace(fab_id=fab_id), None),
    )
    monkeypatch.setattr(executor, "push_message", lambda c, rep, cx: pushed.update(reply=rep))
    monkeypatch.setattr(
        executor, "push_task_output", lambda c, cx, st, d: pushed.update(status=st, details=d)
    )
    return pushed


def test_a_run_of_another_app_is_answered_with_an_error(monkeypatch):
    pushed = _task(monkeypatch, "evil/app", "query.moments")
    assert executor.run_task("127.0.0.1:1", "token", None) == SubStatus.FAILED
    assert pushed["reply"].has_error()
    assert "runs fedep's app only" in pushed["reply"].error.reason
    assert pushed["status"] == SubStatus.FAILED


def test_a_handler_that_raises_is_an_error_reply(monkeypatch):
    # no handler for this message type: Flower's ClientApp raises, the executor answers
    pushed = _task(monkeypatch, executor.FAB_ID, "query.no_such_phase")
    assert executor.run_task("127.0.0.1:1", "token", None) == SubStatus.FAILED
    assert pushed["reply"].has_error() and pushed["status"] == SubStatus.FAILED

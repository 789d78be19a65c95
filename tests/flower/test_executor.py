"""The long-running ClientApp executor runs fedep's app only, and every failure is an
error reply (as ``flwr-clientapp`` gives), never a dead executor."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import time
from types import SimpleNamespace

import pytest

pytest.importorskip("flwr")

from flwr.app import Context, Message, RecordDict  # noqa: E402
from flwr.common.constant import SubStatus  # noqa: E402
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from fedep._procs import stop_group  # noqa: E402
from fedep.flower import executor  # noqa: E402
from fedep.flower.deployment import (  # noqa: E402
    executor_cmd,
    flower_executable,
    free_port,
    write_auth_secret,
)


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


def test_only_an_executor_holding_the_secret_claims_the_supernodes_tasks(tmp_path):
    # Flower 1.42's SuperExec authentication: the SuperNode answers an unsigned or
    # wrongly signed AcquireTask with 401; fedep's executor signs with the shared secret
    secret = write_auth_secret(tmp_path / "node.secret")
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600 and len(secret.read_bytes()) == 32
    wrong = write_auth_secret(tmp_path / "other.secret")
    port, link = free_port(), free_port()
    env = {**os.environ, "FLWR_HOME": str(tmp_path / "home"), "FLWR_TELEMETRY_ENABLED": "0"}
    node_cmd = [flower_executable("flower-supernode") or "flower-supernode", "--insecure",
                "--superlink", f"127.0.0.1:{link}", "--isolation", "process", "--host",
                "127.0.0.1", "--port", str(port),
                "--superexec-auth-secret-file", str(secret)]  # fmt: skip
    procs = []

    def spawn(cmd, name):
        log = open(tmp_path / f"{name}.log", "wb")  # noqa: SIM115 - closed below
        procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True))  # fmt: skip
        log.close()
        return procs[-1]

    try:
        node = spawn(node_cmd, "supernode")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and node.poll() is None:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        else:
            pytest.fail("the SuperNode did not open its Runtime API")
        good = spawn(executor_cmd(port, node.pid, None, secret), "good")
        bad = [spawn(executor_cmd(port, node.pid, None, wrong), "wrong"),
               spawn(executor_cmd(port, node.pid), "none")]  # fmt: skip
        for p, name in zip(bad, ("wrong", "none"), strict=True):
            p.wait(timeout=120)  # refused: Flower's client gives up on 401
            assert "401 Unauthorized" in (tmp_path / f"{name}.log").read_text(), name
        assert good.poll() is None  # still claiming (no task yet), never refused
        assert "401" not in (tmp_path / "good.log").read_text()
    finally:
        for p in procs:
            stop_group(p, grace=10)


def test_the_executor_serves_loopback_only(capsys):
    with pytest.raises(SystemExit):
        executor.main(["--runtime-api-address", "10.0.0.5:9094"])
    assert "this machine only" in capsys.readouterr().err
    executor.check_loopback("127.0.0.1:9094")

"""``fedep watch`` as a process: ``--once``, the status line, SIGTERM, and exactly once
over 20 random ``kill -9``\\ s (its alerts against a batch ``fedep score`` of the same
records, record for record). Every process started here runs in a session of its own and
its group is terminated, then killed, on every path."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from fedep._procs import signal_group
from fedep.cli import main
from test_readme import _run

from ._writer import ZeekWriter

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}


def _watch(*args) -> list[str]:
    return [sys.executable, "-m", "fedep", "watch", *map(str, args)]


@contextlib.contextmanager
def _started(cmd, **kw):
    """``cmd`` in a session of its own; its group terminated, then killed, on exit."""
    proc = subprocess.Popen(cmd, env=ENV, start_new_session=True, text=True, **kw)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                signal_group(proc.pid, signal.SIGKILL)
                proc.wait()
        for f in (proc.stdin, proc.stdout, proc.stderr):
            if f is not None:
                f.close()


def _wait_for(pred, timeout=120.0) -> None:
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


def _line_of(pos) -> int:
    """The committed line of the one followed log (0 before the first commit)."""
    if not pos.exists():
        return 0
    files = json.loads(pos.read_text())["files"]
    return files[0]["line"] if files else 0


def _size(path) -> int:
    """Bytes of the alert file and its rotated copies."""
    return sum(f.stat().st_size for f in path.parent.glob(path.name + "*"))


def _alerts(path) -> list[dict]:
    return [r for r in map(json.loads, open(path)) if r.get("event") == "alert"]


def _batch_anomalies(model, logs, tmp_path) -> dict[str, float]:
    """uid -> score of every anomaly of a batch ``fedep score`` (JSON lines, anomalies
    only) of each log file."""
    out = {}
    for i, log in enumerate(logs):
        dst = tmp_path / f"batch{i}.jsonl"
        args = ["score", "--model", str(model), "--input", str(log), "--output", str(dst),
                "--anomalies-only", "--quiet"]  # fmt: skip
        assert main(args) == 0
        for a in _alerts(dst):
            assert a["uid"] not in out
            out[a["uid"]] = a["score"]
    return out


def test_sigterm_flushes_saves_the_position_and_exits_0(tmp_path, model):
    w = ZeekWriter(tmp_path, seed=21)
    w.append(300)
    alerts = tmp_path / "alerts.json"
    cmd = _watch(tmp_path, "--pattern", "conn*", "--model", model, "--alerts", alerts,
                 "--status-interval", "0.2", "--poll-interval", "0.05")  # fmt: skip
    with _started(cmd, stderr=subprocess.PIPE) as proc:
        pos = tmp_path / "alerts.json.position"
        _wait_for(lambda: _line_of(pos) > 300)
        w.append(50)
        _wait_for(lambda: _line_of(pos) == 358)
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        err = proc.stderr.read()
    lines = [x for x in err.splitlines() if x.strip()]
    # the unsigned model is announced once, then only status lines
    assert lines[0].startswith("fedep: warning: model ") and "NOT SIGNED" in lines[0], err
    lines = lines[1:]
    assert lines and all(x.startswith("fedep watch: ") and "records" in x for x in lines), err
    saved = json.loads(pos.read_text())
    assert saved["pending"] is None and saved["files"][0]["line"] == 358
    got = [a["uid"] for a in _alerts(alerts)]
    assert len(got) == len(set(got)) and set(got) == set(
        _batch_anomalies(model, [w.path], tmp_path)
    )


def test_usage_errors_are_one_line(tmp_path, model, capsys):
    for argv, said in (
        ([tmp_path, "--model", model], "--alerts"),
        ([tmp_path, "--model", model, "--stdout"], "--position-file"),
        ([tmp_path, "--model", model, "--alerts", tmp_path / "a.json", "--group-cap", "3"],
         "--group-by"),
        ([tmp_path, "--model", model, "--alerts", tmp_path / "a.json", "--gateway-pattern", "("],
         "--gateway-pattern"),
    ):  # fmt: skip
        assert main(["watch", *map(str, argv)]) == 1
        err = capsys.readouterr().err
        assert err.startswith("fedep: error: ") and err.count("\n") == 1 and said in err, err


def test_exactly_once_over_20_random_kill_9(tmp_path, model):
    rng = np.random.default_rng(2024)
    (logs := tmp_path / "logs").mkdir()
    w = ZeekWriter(logs, seed=22, attack_rate=0.1)
    w.append(400)
    alerts = tmp_path / "alerts.json"
    argv = ["watch", str(logs), "--pattern", "conn*", "--model", str(model), "--alerts",
            str(alerts), "--max-bytes", "20000", "--backups", "1000", "--batch-bytes", "2000",
            "--poll-interval", "0.02", "--status-interval", "0"]  # fmt: skip
    zygote = [sys.executable, str(Path(__file__).with_name("_zygote.py"))]
    kills = 0
    err = open(tmp_path / "watch.err", "w")  # noqa: SIM115 - the watchers' stderr
    with err, _started(zygote, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err) as parent:
        for i in range(20):
            parent.stdin.write(json.dumps(argv) + "\n")
            parent.stdin.flush()
            pid = int(parent.stdout.readline())
            time.sleep(rng.uniform(0.0, 0.4))
            at = _size(alerts)
            if i % 6 == 5:
                w.rotate()  # rename + gzip into a dated folder while the watcher runs
            w.append(int(rng.integers(200, 600)))
            if i % 4 == 3:
                w.partial()  # the watcher sees half a record ...
            if i % 2:
                time.sleep(rng.uniform(0.0, 0.4))
            else:  # while it writes alerts: in or near the batch's write-and-commit window
                _wait_for(lambda at=at: _size(alerts) > at, timeout=30)
                time.sleep(rng.uniform(0.0, 0.01))
            if w.rest:
                w.complete()  # ... and the rest after a restart, or not
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
                kills += 1
            done = parent.stdout.readline().split()
            assert done[:2] == ["exit", str(pid)]
    assert kills >= 15  # (a run may end by itself only on an error)
    notes = (tmp_path / "watch.err").read_text()
    assert "Traceback" not in notes
    # how many restarts found a batch cut by the kill between the alerts and the position
    print("interrupted batches finished on restart:", notes.count("finished a batch"))
    # the last run, a plain `fedep watch --once`, reads what is left
    final = [*argv[: argv.index("--batch-bytes")], *argv[argv.index("--batch-bytes") + 2 :]]
    proc = _run([sys.executable, "-m", "fedep", *final, "--once"], tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = []
    for f in sorted(tmp_path.glob("alerts.json*")):
        if not f.name.endswith(".position"):
            got += _alerts(f)
    uids = [a["uid"] for a in got]
    assert len(uids) == len(set(uids)), "an alert was repeated"
    logs_now = [w.path, *sorted((logs / "2024-01-01").glob("*.gz"))]
    want = _batch_anomalies(model, logs_now, tmp_path)
    assert len(w.written) == sum(1 for _ in w.written) and len(want) > 50
    assert set(uids) == set(want), (set(want) - set(uids), set(uids) - set(want))
    for a in got:  # record for record: the same score
        assert abs(a["score"] - want[a["uid"]]) <= 1e-9 * max(1.0, abs(want[a["uid"]]))

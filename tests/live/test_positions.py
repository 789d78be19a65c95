"""Exactly once across a crash between the alert flush and the position save
(fedep.live.positions): every state a crash can leave is finished without a lost or a
repeated record."""

from __future__ import annotations

import json
import os

import pytest

from fedep.alerts import AlertSink
from fedep.data import DataError
from fedep.live.positions import Positions, alert_file_mark, recover

RECORDS = [{"event": "alert", "uid": f"C{i}", "score": 1.0 + i} for i in range(5)]
FILES = [{"path": "conn.log", "dev": 1, "ino": 2, "offset": 999, "line": 20}]


def _line(r) -> bytes:
    return json.dumps(r).encode() + b"\n"


def _all_uids(path, backups=3) -> list[str]:
    out = []
    for f in [f"{path}.{i}" for i in range(backups, 0, -1)] + [str(path)]:
        if os.path.exists(f):
            out += [json.loads(x)["uid"] for x in open(f)]
    return out


def _crashed(tmp_path, before: list[dict]):
    """A position file left with a pending batch of RECORDS, after ``before`` records."""
    alerts = tmp_path / "alerts.json"
    alerts.write_bytes(b"".join(_line(r) for r in before))
    pos = Positions(tmp_path / "pos.json")
    pos.save(pending={"records": RECORDS, "files": FILES, "mark": alert_file_mark(alerts),
                      "threshold": 3.5})  # fmt: skip
    return alerts, pos


def _finish(tmp_path, alerts, backups=3):
    pos = Positions(tmp_path / "pos.json")
    pos.load()
    sinks = []
    n, note = recover(pos, alerts, backups, lambda: sinks.append(AlertSink(alerts)) or sinks[0])
    sinks[0].close()
    saved = json.loads((tmp_path / "pos.json").read_text())
    assert saved["pending"] is None and saved["files"] == FILES and saved["threshold"] == 3.5
    return n, note


OLD = [{"event": "alert", "uid": "old"}]


@pytest.mark.parametrize("k", [0, 2, 5])
def test_a_crash_after_k_of_n_records_were_written(tmp_path, k):
    alerts, _ = _crashed(tmp_path, OLD)
    with open(alerts, "ab") as fh:
        fh.write(b"".join(_line(r) for r in RECORDS[:k]))
    n, note = _finish(tmp_path, alerts)
    assert n == 5 - k and f"{k} of its 5" in note
    assert _all_uids(alerts) == ["old"] + [r["uid"] for r in RECORDS]


def test_a_torn_last_line_is_cut_and_written_whole(tmp_path):
    alerts, _ = _crashed(tmp_path, OLD)
    with open(alerts, "ab") as fh:
        fh.write(_line(RECORDS[0]) + _line(RECORDS[1])[:7])
    n, note = _finish(tmp_path, alerts)
    assert n == 4 and "torn" in note
    assert _all_uids(alerts) == ["old"] + [r["uid"] for r in RECORDS]


def test_a_size_rotation_of_the_alert_file_during_the_batch(tmp_path):
    alerts, _ = _crashed(tmp_path, OLD)
    with open(alerts, "ab") as fh:
        fh.write(_line(RECORDS[0]))
    os.rename(alerts, f"{alerts}.1")  # rotated by size, then two more records
    alerts.write_bytes(_line(RECORDS[1]) + _line(RECORDS[2]))
    n, _ = _finish(tmp_path, alerts)
    assert n == 2
    assert _all_uids(alerts) == ["old"] + [r["uid"] for r in RECORDS]


def test_no_alert_file_before_the_batch(tmp_path):
    alerts = tmp_path / "alerts.json"
    pos = Positions(tmp_path / "pos.json")
    pos.save(pending={"records": RECORDS, "files": FILES, "mark": alert_file_mark(alerts),
                      "threshold": 3.5})  # fmt: skip
    alerts.write_bytes(_line(RECORDS[0]))
    n, _ = _finish(tmp_path, alerts)
    assert n == 4 and _all_uids(alerts) == [r["uid"] for r in RECORDS]


def test_write_batch_commits_after_the_flush(tmp_path):
    alerts = tmp_path / "alerts.json"
    pos = Positions(tmp_path / "pos.json")
    order = []

    class Sink:
        def write(self, records):
            saved = json.loads((tmp_path / "pos.json").read_text())
            order.append(("write", saved["pending"] is not None))

        def flush(self):
            order.append(("flush", None))

    pos.write_batch(Sink(), alerts, RECORDS, FILES, threshold=None)
    saved = json.loads((tmp_path / "pos.json").read_text())
    assert order == [("write", True), ("flush", None)]
    assert saved["pending"] is None and saved["files"] == FILES


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b'{"format": "other"}',
        b'{"format": "fedep-watch-positions", "version": 9, "files": []}',
        b'{"format": "fedep-watch-positions", "version": 1, "files": [{"path": 1}]}',
        b'{"format": "fedep-watch-positions", "version": 1, "files": [], '
        b'"pending": {"records": 3}}',
    ],
)
def test_a_bad_position_file_is_one_line(tmp_path, content):
    (tmp_path / "pos.json").write_bytes(content)
    with pytest.raises(DataError) as err:
        Positions(tmp_path / "pos.json").load()
    assert "pos.json" in str(err.value) and "\n" not in str(err.value)

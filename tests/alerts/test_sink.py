"""AlertSink: JSON lines, rotation by size keeping every record exactly once, fsync on
flush, stdout, a cut last line repaired, bad records refused."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from fedep.alerts import AlertSink
from fedep.alerts.sink import encode_record


def _records(n: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [
        {"event": "alert", "uid": f"C{i}", "pad": "x" * int(rng.integers(0, 120)), "score": i * 0.5}
        for i in range(n)
    ]


def _read_all(path, backups: int) -> list[dict]:
    """Every file of a rotated sink, oldest first."""
    files = [f"{path}.{i}" for i in range(backups, 0, -1)] + [str(path)]
    out = []
    for f in files:
        if os.path.exists(f):
            with open(f, "rb") as fh:
                data = fh.read()
            assert data == b"" or data.endswith(b"\n")  # rotation only between records
            out += [json.loads(line) for line in data.splitlines()]
    return out


def test_rotation_keeps_every_record_exactly_once(tmp_path):
    path = tmp_path / "alerts.jsonl"
    recs = _records(300)
    sink = AlertSink(path, max_bytes=2_000, backups=100)
    for i in range(0, 300, 7):  # batches, flushed now and then
        sink.write(recs[i : i + 7])
        if i % 21 == 0:
            sink.flush()
    sink.close()
    assert sink.rotations > 5
    assert _read_all(path, 100) == recs
    sizes = [os.path.getsize(f"{path}.{i}") for i in range(1, sink.rotations + 1)]
    assert max(sizes) <= 2_000
    assert not os.path.exists(f"{path}.{sink.rotations + 1}")


def test_rotation_keeps_backups_files_and_a_long_record_alone(tmp_path):
    path = tmp_path / "a.jsonl"
    with AlertSink(path, max_bytes=500, backups=2) as sink:
        sink.write([{"event": "alert", "big": "y" * 2_000}])  # longer than max_bytes
        sink.write(_records(40))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl", "a.jsonl.1", "a.jsonl.2"]
    kept = _read_all(path, 2)
    assert kept == _records(40)[-len(kept) :]  # the newest, in order, whole
    with pytest.raises(ValueError, match="backups"):
        AlertSink(tmp_path / "b.jsonl", max_bytes=100, backups=0)


def test_appends_and_repairs_a_cut_last_line(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(encode_record({"n": 1}) + b'{"n": 2, "cut')  # a crash mid-write
    with AlertSink(path) as sink:
        assert sink.repaired_bytes == len(b'{"n": 2, "cut')
        sink.write([{"n": 3}])
    assert [json.loads(x) for x in path.read_text().splitlines()] == [{"n": 1}, {"n": 3}]


def test_flush_fsyncs_and_writes_through(tmp_path, monkeypatch):
    path = tmp_path / "a.jsonl"
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    sink = AlertSink(path)
    sink.write(_records(3))
    assert path.read_bytes() == b""  # kept until flush
    sink.flush()
    assert synced and [json.loads(x) for x in path.read_text().splitlines()] == _records(3)
    sink.close()
    sink.close()  # twice is fine


def test_stdout_and_file_get_the_same_lines(tmp_path, capsys):
    path = tmp_path / "a.jsonl"
    recs = _records(5)
    with AlertSink(path, stdout=True) as sink:
        sink.write(recs)
    out = capsys.readouterr().out
    assert out == path.read_text()
    assert [json.loads(x) for x in out.splitlines()] == recs
    with AlertSink(None, stdout=True) as only:
        only.write(recs[:1])
    assert capsys.readouterr().out == encode_record(recs[0]).decode()


def test_bad_records_and_arguments_are_refused(tmp_path):
    sink = AlertSink(tmp_path / "a.jsonl")
    with pytest.raises(ValueError):
        sink.write([{"ok": 1}, {"score": float("nan")}])
    with pytest.raises(TypeError, match="cannot be written"):
        sink.write([{"x": object()}])
    sink.write([{"v": np.float64(1.5), "n": np.int64(2)}])  # NumPy values as Python's
    sink.close()
    assert (tmp_path / "a.jsonl").read_text() == '{"v":1.5,"n":2}\n'  # nothing of the bad ones
    with pytest.raises(ValueError, match="needs a path"):
        AlertSink(None)
    with pytest.raises(IsADirectoryError):
        AlertSink(tmp_path)
    with pytest.raises(ValueError, match="max_bytes"):
        AlertSink(tmp_path / "b.jsonl", max_bytes=0)


@pytest.mark.parametrize("rotate", [False, True])
def test_resume_takes_back_what_was_written_after_the_saved_state(tmp_path, rotate):
    path = tmp_path / "a.jsonl"
    recs = _records(200, seed=2)
    max_bytes = 1_500 if rotate else None
    sink = AlertSink(path, max_bytes=max_bytes, backups=50)
    sink.write(recs[:60])
    saved = json.loads(json.dumps(sink.state()))  # as a position file keeps it
    rotations = sink.rotations
    sink.write(recs[60:])  # flushed, then the process dies before saving its position
    sink.flush()
    assert (sink.rotations > rotations) is rotate
    del sink
    again = AlertSink(path, max_bytes=max_bytes, backups=50, resume=saved)
    assert again.rolled_back_bytes == sum(len(encode_record(r)) for r in recs[60:])
    again.write(recs[60:])  # the restarted caller makes them again
    again.close()
    assert _read_all(path, 50) == recs  # each exactly once
    with pytest.raises(ValueError, match="resume"):
        AlertSink(tmp_path / "b.jsonl", resume={"size": 1})

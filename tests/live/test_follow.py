"""Following growing logs (fedep.data.follow): every complete record handed out once, in
order, across partial lines, rotation (rename + gzip), truncation, late files, a
#fields change and a restart from saved positions."""

from __future__ import annotations

import gzip
import json
import os

import numpy as np

from fedep.data.follow import FINGERPRINT_BYTES, Follower
from fedep.data.readers.lines import parse_lines

from ._writer import ZeekWriter


def uids(follower: Follower) -> list[str]:
    """The uids of the records one poll hands out (each chunk parsed with its header)."""
    out = []
    for c in follower.poll():
        p = parse_lines(
            c.fmt, c.header, c.data, path=c.path, first_line=c.first_line, columns=["uid"]
        )
        assert p.bad == [], p.bad
        out += p.frame["uid"].tolist()
    return out


def test_appends_and_partial_lines_are_handed_out_once_in_order(tmp_path):
    w = ZeekWriter(tmp_path)
    f = Follower([w.path])
    assert uids(f) == []
    a = w.append(30)
    assert uids(f) == a
    assert uids(f) == []  # nothing new
    b = w.append(5)
    half = w.partial()
    assert uids(f) == b  # the partial line waits for its newline
    w.complete()
    c = w.append(3)
    assert uids(f) == [half, *c]
    assert f.take_notes()[0].kind == "new"


def test_the_lines_carry_their_file_line_numbers(tmp_path):
    w = ZeekWriter(tmp_path)
    w.append(10)
    f = Follower([w.path])
    (c,) = f.poll()
    assert c.first_line == 9  # after the 8 header lines
    p = parse_lines(c.fmt, c.header, c.data, path=c.path, first_line=c.first_line)
    np.testing.assert_array_equal(p.lines, np.arange(9, 19))
    text = w.path.read_text().splitlines()
    assert all(
        text[n - 1].split("\t")[1] == u for n, u in zip(p.lines, p.frame["uid"], strict=True)
    )


def test_rotation_rename_and_gzip_into_a_dated_folder(tmp_path):
    w = ZeekWriter(tmp_path)
    f = Follower([tmp_path])  # the directory: current log and archives
    seen = uids(f)
    w.append(20)
    seen += uids(f)
    w.append(7)  # written, then rotated before the follower looks
    w.rotate()
    w.append(4)
    seen += uids(f)
    seen += uids(f)  # the archive, seen by a later scan: a copy of what was read
    w.append(2)
    seen += uids(f)
    assert seen == w.written  # every record once, in order
    assert (tmp_path / "2024-01-01" / "conn.00:00:00-00:59:59.log.gz").exists()
    uids(f)
    kinds = [n.kind for n in f.take_notes()]
    assert "rotated" in kinds and "gone" not in kinds  # its compressed copy was found


def test_archives_present_at_start_are_read_oldest_first(tmp_path):
    w = ZeekWriter(tmp_path)
    w.append(10)
    w.rotate()
    w.append(10)
    w.rotate()
    w.append(5)
    f = Follower([tmp_path])
    seen = uids(f)
    assert sorted(seen) == sorted(w.written) and len(seen) == len(w.written)


def test_truncation_is_noted_and_the_log_read_again_from_its_start(tmp_path):
    w = ZeekWriter(tmp_path)
    f = Follower([w.path])
    w.append(40)
    assert len(uids(f)) == 40
    w.truncate()
    b = w.append(3)  # shorter than before: the size says so
    assert uids(f) == b
    w.truncate()
    c = w.append(60)  # longer than before: the fingerprint of the first bytes says so
    assert uids(f) == c
    assert [n.kind for n in f.take_notes()].count("truncated") == 2


def test_files_appearing_later_and_a_glob(tmp_path):
    (tmp_path / "gw1").mkdir()
    (tmp_path / "gw2").mkdir()
    f = Follower([str(tmp_path / "*" / "conn.log")])
    assert uids(f) == []
    w1 = ZeekWriter(tmp_path / "gw1", seed=1)
    w1.append(5)
    assert uids(f) == w1.written
    w2 = ZeekWriter(tmp_path / "gw2", seed=2)
    w2.append(6)
    w1.append(2)
    got = uids(f)
    assert sorted(got) == sorted(w1.written[5:] + w2.written)


def test_a_changed_fields_header_at_rotation_is_read_with_its_own_header(tmp_path):
    w = ZeekWriter(tmp_path)
    f = Follower([w.path])
    w.append(5)
    first = f.poll()
    new_fields = [
        "uid",
        "ts",
        "proto",
        "orig_bytes",
        "resp_bytes",
        "duration",
        "service",
        "conn_state",
        "id.orig_h",
        "id.resp_p",
        "history",
    ]
    new_types = [
        "string",
        "time",
        "enum",
        "count",
        "count",
        "interval",
        "string",
        "string",
        "addr",
        "port",
        "string",
    ]
    w.pool["history"] = "ShADad"
    w.rotate(compress=False, fields=new_fields, types=new_types)
    w.append(5)
    chunks = f.poll() + f.poll()
    assert {c.header for c in chunks} >= {first[0].header}
    frames = [
        parse_lines(c.fmt, c.header, c.data, path=c.path, first_line=c.first_line)
        for c in first + chunks
    ]
    got = [u for p in frames for u in p.frame["uid"]]
    assert got == w.written
    assert "history" in frames[-1].frame.columns
    last = frames[-1].frame
    want = w.pool.set_index("uid").loc[last["uid"], "orig_bytes"].to_numpy()
    np.testing.assert_array_equal(last["orig_bytes"].to_numpy(dtype=float), want)


def test_a_removed_file_is_read_to_its_end_and_noted(tmp_path):
    w = ZeekWriter(tmp_path)
    f = Follower([w.path])
    w.append(5)
    assert len(uids(f)) == 5
    w.append(3)
    w.path.unlink()  # before the follower read them: the open descriptor still does
    assert uids(f) == w.written[5:]
    assert uids(f) == uids(f) == []  # two more scans: no copy of it shows
    notes = f.take_notes()
    assert [n.kind for n in notes][-1] == "gone" and "removed" in notes[-1].text


def test_a_restart_resumes_at_the_saved_position_also_after_rename_and_gzip(tmp_path):
    w = ZeekWriter(tmp_path)
    w.append(30)
    f = Follower([tmp_path])
    seen = uids(f)
    saved = json.loads(json.dumps(f.positions()))  # as the position file keeps them
    f.close()
    w.append(12)  # written while the watcher is down, then rotated and compressed
    w.rotate()
    w.append(4)
    g = Follower([tmp_path])
    g.restore(saved)
    seen += uids(g) + uids(g)
    assert seen == w.written


def test_a_file_gone_while_down_is_noted(tmp_path):
    w = ZeekWriter(tmp_path)
    w.append(3)
    f = Follower([w.path])
    uids(f)
    saved = f.positions()
    f.close()
    w.path.unlink()
    g = Follower([w.path])
    g.restore(saved)
    assert uids(g) == []
    notes = g.take_notes()
    assert [n.kind for n in notes] == ["gone"] and "line 11" in notes[0].text


def test_from_end_skips_what_is_there(tmp_path):
    w = ZeekWriter(tmp_path)
    w.append(10)
    half = w.partial()
    f = Follower([w.path], from_end=True)
    assert uids(f) == []
    w.complete()  # the record completed after the start is handed out
    b = w.append(2)
    assert uids(f) == [half, *b]


def test_json_lines_and_compressed_archive_alias(tmp_path):
    log = tmp_path / "conn.json"
    recs = [{"ts": 1.7e9 + i, "uid": f"J{i}", "orig_bytes": i} for i in range(50)]
    log.write_text("".join(json.dumps(r) + "\n" for r in recs))
    f = Follower([tmp_path])
    got = uids(f)
    assert got == [r["uid"] for r in recs]
    assert log.stat().st_size > FINGERPRINT_BYTES
    with open(log, "rb") as src, gzip.open(tmp_path / "conn.old.json.gz", "wb") as dst:
        dst.write(src.read())
    assert uids(f) == []  # a compressed copy of a file read: not read again


def test_logs_with_the_same_first_bytes_are_different_files(tmp_path):
    body = "".join(json.dumps({"ts": 1.7e9, "uid": "same", "n": i}) + "\n" for i in range(40))
    (tmp_path / "a.json").write_text(body)
    (tmp_path / "b.json").write_text(body)  # another gateway's log, written alike
    f = Follower([tmp_path])
    assert len(uids(f)) == 80
    os.rename(tmp_path / "a.json", tmp_path / "a.old.json")  # a rename keeps the inode
    with open(tmp_path / "a.json", "w") as fh:  # and a new log starts alike
        fh.write(body)
    assert len(uids(f)) == 40

"""Blocks of lines (fedep.data.readers.lines) read as the whole-file readers read them,
with malformed lines left out and named."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from _zeek import flows, write_zeek
from fedep.data.readers import read_table
from fedep.data.readers.lines import header_columns, parse_lines


def _split(raw: bytes, n_header: int):
    lines = raw.splitlines(keepends=True)
    return b"".join(lines[:n_header]), lines[n_header:]


@pytest.mark.parametrize("block", [1, 7, 1000])
def test_zeek_blocks_read_as_read_table_reads_the_file(tmp_path, block):
    df = flows(40, seed=3)
    df.loc[3, "duration"] = np.nan  # unset: "-"
    write_zeek(df, tmp_path / "c.log")
    want = read_table(tmp_path / "c.log")
    header, body = _split((tmp_path / "c.log").read_bytes(), 8)
    parts = []
    for i in range(0, len(body), block):
        p = parse_lines(
            "zeek", header, b"".join(body[i : i + block]), path="c.log", first_line=9 + i
        )
        assert p.bad == []
        parts.append(p.frame)
    got = pd.concat(parts, ignore_index=True)
    pd.testing.assert_frame_equal(got, want)
    assert header_columns("zeek", header, "c.log") == list(want.columns)


def test_malformed_zeek_lines_are_left_out_and_named(tmp_path):
    df = flows(10, seed=4)
    write_zeek(df, tmp_path / "c.log")
    header, body = _split((tmp_path / "c.log").read_bytes(), 8)
    body = body[:10]
    body[2] = b"too\tfew\n"
    cells = body[5].split(b"\t")
    cells[8] = b"12x"  # orig_bytes, a count
    body[5] = b"\t".join(cells)
    p = parse_lines("zeek", header, b"".join(body), path="c.log", first_line=9)
    assert [line for line, _ in p.bad] == [11, 14]
    assert "has 2 fields" in p.bad[0][1] and "'12x'" in p.bad[1][1]
    assert p.lines.tolist() == [9, 10, 12, 13, 15, 16, 17, 18]
    keep = df.drop(index=[2, 5])
    assert p.frame["uid"].tolist() == keep["uid"].tolist()
    np.testing.assert_array_equal(
        p.frame["orig_bytes"].to_numpy(dtype=float), keep["orig_bytes"].to_numpy(dtype=float)
    )


def test_json_lines_blocks_and_a_bad_line():
    recs = [
        {"ts": 1.7e9 + i, "uid": f"J{i}", "id": {"orig_h": "10.0.0.1"}, "orig_bytes": i}
        for i in range(6)
    ]
    lines = [json.dumps(r).encode() + b"\n" for r in recs]
    lines.insert(3, b'{"ts": 1, "uid": \n')
    p = parse_lines("json", b"", b"".join(lines), path="c.json", first_line=1)
    assert p.bad[0][0] == 4 and "invalid JSON" in p.bad[0][1]
    assert p.lines.tolist() == [1, 2, 3, 5, 6, 7]
    assert p.frame["uid"].tolist() == [r["uid"] for r in recs]
    assert p.frame["id.orig_h"].tolist() == ["10.0.0.1"] * 6
    assert p.frame["orig_bytes"].tolist() == list(range(6))


def test_the_close_trailer_and_blank_lines_are_not_records(tmp_path):
    df = flows(3, seed=5)
    write_zeek(df, tmp_path / "c.log")
    header, body = _split((tmp_path / "c.log").read_bytes(), 8)
    p = parse_lines(
        "zeek", header, b"".join(body[:1] + [b"\n"] + body[1:]), path="c.log", first_line=9
    )
    assert p.bad == [] and p.lines.tolist() == [9, 11, 12]
    assert p.frame["uid"].tolist() == df["uid"].tolist()

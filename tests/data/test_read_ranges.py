"""The ranged read of a whole plain CSV (``fedep.data.readers.ranges``): on threads, a
chunk at a time, into one array per column -- the same frame as pandas' whole-file
read, or None where that read would differ (the caller then reads with pyarrow)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fedep.data.readers import ranges, read_table

TEXT_DTYPE = pd.Series(["a"], dtype=str).dtype


@pytest.fixture
def small_ranges(monkeypatch):
    """Tiny ranges and chunks, three threads: every path of a big file on a small one."""
    monkeypatch.setattr(ranges, "MIN_RANGE_BYTES", 64)
    monkeypatch.setattr(ranges, "CHUNK_ROWS", 7)
    monkeypatch.setattr(ranges, "worker_threads", lambda: 3)


def _table(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "i": rng.integers(-1000, 1000, n),
            "f": np.round(rng.standard_normal(n) * 100, 4),
            "w": rng.integers(0, 5, n).astype(float),  # a float column written as integers
            "t": rng.choice(["tcp", "udp", "x y"], n),
        }
    )


def _read(path, kinds, names=("i", "f", "w", "t")):
    return ranges.read_ranges(path, list(names), ",", kinds, TEXT_DTYPE)


KINDS = {"i": "int", "f": "float", "w": "float", "t": "text"}


@pytest.mark.parametrize("eol", ["\n", "\r\n"])
def test_ranges_equal_the_whole_file_read(tmp_path, small_ranges, eol):
    df = _table(300, seed=1)
    p = tmp_path / "t.csv"
    p.write_bytes(df.to_csv(index=False, lineterminator=eol, float_format="%.6g").encode())
    got = _read(p, KINDS)
    want = pd.read_csv(p, dtype={"w": float, "t": str})
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert got._mgr.nblocks == 4  # one array per column, not a consolidated block


def test_blank_lines_and_a_missing_final_newline(tmp_path, small_ranges):
    df = _table(100, seed=2)
    lines = df.to_csv(index=False).splitlines()
    text = "\n".join(line + ("\n\n" if k % 9 == 0 else "") for k, line in enumerate(lines))
    p = tmp_path / "b.csv"
    p.write_text(text)  # no newline after the last row
    got = _read(p, KINDS)
    pd.testing.assert_frame_equal(got, pd.read_csv(p, dtype={"w": float, "t": str}))


def test_a_quoted_line_break_reads_as_one_range(tmp_path, small_ranges):
    rows = [f'{k},{k / 8},{k % 3},"a\nb{k}"' for k in range(200)]
    p = tmp_path / "q.csv"
    p.write_text("i,f,w,t\n" + "\n".join(rows) + "\n")
    got = _read(p, KINDS)
    assert got is not None and len(got) == 200
    assert got["t"].iloc[5] == "a\nb5" and got["i"].tolist() == list(range(200))


@pytest.mark.parametrize(
    "bad",
    [
        "1,2.5,3",  # a row with too few fields (pandas would pad it with NaN)
        "1,2.5,3,x,9",  # one field too many (pandas would make an index of it)
        "1,,3,x",  # a missing number
        "1,2.5,3,",  # a missing text
        "1.5,2.5,3,x",  # a fraction in an integer column
        "1,abc,3,x",  # text in a number column
    ],
)
def test_anything_the_whole_read_would_type_otherwise_gives_none(tmp_path, small_ranges, bad):
    df = _table(200, seed=3)
    lines = df.to_csv(index=False).splitlines()
    lines.insert(150, bad)  # in a later range, after many chunks
    p = tmp_path / "x.csv"
    p.write_text("\n".join(lines) + "\n")
    assert _read(p, KINDS) is None


def test_more_rows_than_lines_gives_none(tmp_path, small_ranges):
    p = tmp_path / "cr.csv"
    p.write_bytes(b"i,f,w,t\r1,2.5,3,x\r2,3.5,4,y\r")  # bare carriage returns
    assert _read(p, KINDS) is None


def test_read_table_takes_the_ranged_path_and_keeps_errors(tmp_path, small_ranges):
    df = _table(120, seed=4)
    p = tmp_path / "ok.csv"
    df.to_csv(p, index=False)
    got = read_table(p)
    assert got._mgr.nblocks == 4 and len(got) == 120
    lines = df.to_csv(index=False).splitlines()
    lines.insert(100, "1,2,3,x,5")
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(Exception, match=r"bad\.csv.*line 101.*wrong number of fields"):
        read_table(bad)


def test_a_quoted_header(tmp_path, small_ranges):
    df = _table(60, seed=5)
    p = tmp_path / "h.csv"
    p.write_text('"i","f","w","t"\n' + df.to_csv(index=False, header=False))
    got = _read(p, KINDS)
    assert got is not None and got["i"].tolist() == df["i"].tolist()
    p.write_text('"i","f\nx","w","t"\n' + df.to_csv(index=False, header=False))
    assert _read(p, KINDS) is None  # a header field across lines: not this path


def test_text_columns_asked_for_are_read_as_written(tmp_path, small_ranges):
    rows = [f"{k},{k / 4},{k % 3},0{k % 7}" for k in range(120)]  # "t" holds 00 .. 06
    p = tmp_path / "ids.csv"
    p.write_text("i,f,w,t\n" + "\n".join(rows) + "\n")
    assert _read(p, KINDS) is None  # inferred: a chunk of numbers in a text column
    got = ranges.read_ranges(p, ["i", "f", "w", "t"], ",", KINDS, TEXT_DTYPE, as_text=["t"])
    assert got["t"].tolist()[:8] == ["00", "01", "02", "03", "04", "05", "06", "00"]

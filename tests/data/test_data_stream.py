"""fedep.data.stream: the block-wise CSV reader used by ``fedep score``."""

from __future__ import annotations

import numpy as np
import pytest

from fedep.data import DataError
from fedep.data.stream import (
    CsvBlockReader,
    ScoreTailFormatter,
    read_csv_header,
)

HEADER = "host,note,a,b,label"


def _rows(n):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 2)).round(6)
    lines = []
    for i, (a, b) in enumerate(X):
        note = '"x, y"' if i % 3 == 0 else "z"
        lines.append(f"gw{i % 2},{note},{float(a)!r},{float(b)!r},{i % 2}")
    return X, lines


def _write(tmp_path, lines, *, header=HEADER, nl="\n", bom=False, name="t.csv"):
    p = tmp_path / name
    data = nl.join([header, *lines]) + nl
    p.write_bytes((b"\xef\xbb\xbf" if bom else b"") + data.encode())
    return p


def _read_all(path, names=("a", "b"), chunk=100_000, client=None):
    blocks = list(CsvBlockReader(path, list(names), chunk, client))
    X = np.vstack([b.X for b in blocks])
    ids = None if client is None else np.concatenate([b.ids for b in blocks])
    lines = [ln for b in blocks for ln in b.lines]
    firsts = [b.first_line for b in blocks]
    return X, ids, lines, firsts


def test_reads_requested_columns_and_keeps_lines(tmp_path):
    X, lines = _rows(10)
    p = _write(tmp_path, lines)
    got, ids, raw, firsts = _read_all(p, ("b", "a"), client="host")
    np.testing.assert_array_equal(got, X[:, ::-1])
    assert ids.tolist() == [f"gw{i % 2}" for i in range(10)]
    assert [ln.decode() for ln in raw] == lines  # byte for byte
    assert firsts == [2]


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 10, 11, 1000])
@pytest.mark.parametrize(("nl", "bom"), [("\n", False), ("\r\n", True)])
def test_chunk_boundaries_give_identical_results(tmp_path, chunk, nl, bom):
    X, lines = _rows(10)
    p = _write(tmp_path, [*lines, "", ""], nl=nl, bom=bom)  # trailing blank lines: fine
    ref = _read_all(p, chunk=10_000, client="host")
    got = _read_all(p, chunk=chunk, client="host")
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_array_equal(got[0], X)
    assert got[1].tolist() == ref[1].tolist()
    assert got[2] == ref[2] and len(got[2]) == 10
    assert got[3] == list(range(2, 12, chunk))  # first line of each block


@pytest.mark.parametrize("chunk", [1, 4, 100])
@pytest.mark.parametrize(
    ("value", "what"),
    [("abc", "'abc'"), ("", "missing value"), ("nan", "'nan'"), ("inf", "'inf'")],
)
def test_bad_value_names_line_and_column(tmp_path, chunk, value, what):
    _, lines = _rows(10)
    cells = lines[7].split(",")  # line 9 of the file; row 7 has no quoted note
    cells[3] = value  # column b
    lines[7] = ",".join(cells)
    p = _write(tmp_path, lines)
    with pytest.raises(DataError) as exc:
        _read_all(p, chunk=chunk)
    assert exc.value.line == 9 and exc.value.column == "b"
    assert "line 9" in str(exc.value) and "column 'b'" in str(exc.value) and what in str(exc.value)


@pytest.mark.parametrize("chunk", [1, 5, 100])
@pytest.mark.parametrize(("extra", "found"), [(",1", 6), (",1,2", 7)])
def test_ragged_row_names_the_line(tmp_path, chunk, extra, found):
    _, lines = _rows(10)
    lines[4] += extra  # line 6
    p = _write(tmp_path, lines)
    with pytest.raises(DataError) as exc:
        _read_all(p, chunk=chunk)
    assert exc.value.line == 6
    assert f"wrong number of fields: expected 5, found {found}" in str(exc.value)


def test_short_row_names_the_line(tmp_path):
    _, lines = _rows(10)
    lines[2] = "gw0,z,1.0"  # line 4, 3 fields
    p = _write(tmp_path, lines)
    with pytest.raises(DataError) as exc:
        _read_all(p, chunk=3)
    assert exc.value.line == 4 and "wrong number of fields: expected 5, found 3" in str(exc.value)


@pytest.mark.parametrize("chunk", [1, 3, 100])
def test_blank_line_inside_data(tmp_path, chunk):
    _, lines = _rows(6)
    p = _write(tmp_path, [*lines[:3], "", *lines[3:]])  # line 5 is blank
    with pytest.raises(DataError) as exc:
        _read_all(p, chunk=chunk)
    assert exc.value.line == 5 and "blank line" in str(exc.value)


def test_header_errors_are_raised_on_construction(tmp_path):
    _, lines = _rows(3)
    p = _write(tmp_path, lines)
    with pytest.raises(DataError) as exc:
        CsvBlockReader(p, ["a", "zz"])
    assert exc.value.line == 1 and exc.value.column == "zz"
    with pytest.raises(DataError) as exc:
        CsvBlockReader(p, ["a"], client_column="site")
    assert exc.value.column == "site"
    dup = _write(tmp_path, lines, header="host,note,a,a,label", name="dup.csv")
    with pytest.raises(DataError, match="duplicate"):
        CsvBlockReader(dup, ["a"])
    empty = tmp_path / "empty.csv"
    empty.write_bytes(b"")
    with pytest.raises(DataError, match="empty file"):
        read_csv_header(empty)
    with pytest.raises(FileNotFoundError):
        CsvBlockReader(tmp_path / "absent.csv", ["a"])


def test_header_only_file(tmp_path):
    p = _write(tmp_path, [], nl="\n")
    reader = CsvBlockReader(p, ["a"])  # the header is fine
    with pytest.raises(DataError) as exc:
        list(reader)
    assert exc.value.line == 2 and "no data rows" in str(exc.value)


def test_header_raw_and_row_count(tmp_path):
    _, lines = _rows(5)
    p = _write(tmp_path, lines, nl="\r\n", bom=True)
    reader = CsvBlockReader(p, ["a"], chunk_rows=2)
    assert reader.header == HEADER.split(",") and reader.header_raw == HEADER.encode()
    assert [len(b) for b in reader] == [2, 2, 1] and reader.n_rows == 5


def test_with_tails_and_formatter(tmp_path):
    _, lines = _rows(3)
    p = _write(tmp_path, lines)
    (block,) = list(CsvBlockReader(p, ["a", "b"]))
    fmt = ScoreTailFormatter(["a", "b"], 1)
    tails = fmt(np.array([1.5, 0.25, 2.0]), np.array([1, 0, 1]), np.array([0.9, 0.0, 0.12345]),
                np.array([[1], [0], [1]]), np.array([[1.0], [0.2], [1.5]]))  # fmt: skip
    assert tails[0] == b",1.5,1,0.9,b:1\n"
    assert tails[2] == b",2,1,0.1235,b:1.5\n"
    out = block.with_tails(tails).decode().splitlines()
    assert out == [ln + t.decode().rstrip("\n") for ln, t in zip(lines, tails, strict=True)]
    quoted = ScoreTailFormatter(['x,"y"', "b"], 2)
    (tail,) = quoted(
        np.array([1.0]), np.array([0]), np.array([1e-5]), np.array([[0, 1]]), np.array([[0.6, 0.4]])
    )
    assert tail == b',1,0,1e-05,"x,""y"":0.6;b:0.4"\n'
    one = ScoreTailFormatter(["a"], 0)(np.array([3.0]), np.array([1]), np.array([1.0]))
    assert one == [b",3,1,1,\n"]


def _reference_lines(path, chunk, n_fields):
    """The per-line reader the vectorised one replaced: (first_line, lines) per block,
    or the (message, line) of its first error."""
    import csv
    from itertools import islice

    out, line_no, pending = [], 2, 0
    with open(path, "rb") as fh:
        fh.readline()
        while True:
            lines = list(islice(fh, chunk))
            if not lines:
                break
            body = [ln.rstrip(b"\r\n") for ln in lines]
            blank = [i for i, ln in enumerate(body) if not ln.strip()]
            if blank:
                if any(body[i].strip() for i in range(blank[0], len(body))):
                    return ("blank line inside the data", line_no + blank[0])
                pending += len(body) - blank[0]
                body = body[: blank[0]]
            elif pending:
                return ("blank line inside the data", line_no - pending)
            for i, ln in enumerate(body):
                if b'"' in ln:
                    n = len(next(csv.reader([ln.decode("utf-8")])))
                else:
                    n = ln.count(b",") + 1
                if n != n_fields:
                    return ("wrong number of fields", line_no + i)
            if body:
                out.append((line_no, body))
            line_no += len(lines)
    return out


@pytest.mark.parametrize("seed", range(12))
def test_vectorised_lines_equal_per_line_reference(tmp_path, seed):
    # messy files: CR / CRLF line ends, quotes with commas, whitespace-only and blank
    # lines (inside the data or trailing), rows with a field too many or too few
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(int(rng.integers(1, 40))):
        a = f"{rng.normal():.3f}"
        note = rng.choice(["z", '"x, y"', '""', " sp ace "])
        rows.append(f"gw{i % 3},{note},{a},{i},0")
    for _ in range(int(rng.integers(0, 3))):  # defects
        k = int(rng.integers(0, len(rows) + 1))
        rows.insert(k, str(rng.choice(["", "   ", "\t", "1,2,3", "a,b,c,d,e,f", "1,2,3,4,5"])))
    rows += [""] * int(rng.integers(0, 3))
    nl = str(rng.choice(["\n", "\r\n"]))
    text = nl.join(["host,note,a,b,label", *rows]) + (nl if rng.uniform() < 0.7 else "")
    p = tmp_path / "m.csv"
    p.write_bytes(text.encode())
    for chunk in (1, 3, 7, 1000):
        ref = _reference_lines(p, chunk, 5)
        try:
            got = [(b.first_line, b.lines) for b in CsvBlockReader(p, ["b"], chunk)]
        except DataError as exc:
            msg = str(exc)
            assert isinstance(ref, tuple), (msg, ref)
            assert ref[0] in msg and f"line {ref[1]}:" in msg, (msg, ref)
            continue
        if not got:
            continue
        assert got == ref


@pytest.mark.parametrize("chunk_rows", [1, 3, 50])
@pytest.mark.parametrize("piece", [1, 7, 4096])
def test_line_chunks_carry_their_newlines(chunk_rows, piece):
    import io

    from fedep.data.stream import _line_chunks

    rng = np.random.default_rng(chunk_rows * piece)
    lines = [b"x" * int(n) for n in rng.integers(0, 12, 120)]
    text = b"\n".join(lines) + b"\nlast without line end"
    out = list(_line_chunks(io.BytesIO(text), chunk_rows, piece=piece))
    assert b"".join(d for d, _ in out) == text
    for data, nl in out:
        np.testing.assert_array_equal(nl, np.flatnonzero(np.frombuffer(data, np.uint8) == 10))
    assert all(len(nl) == chunk_rows for _, nl in out[:-1])

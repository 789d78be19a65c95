"""Hostile text files: a first line that never ends, UTF-16/UTF-32 text, NUL bytes.

Each is refused with one line naming the file (and the line where there is one), by
the table reader (``read_table`` / ``detect_format``) and by the streaming CSV reader
of ``fedep score`` (:class:`fedep.data.stream.CsvBlockReader`).
"""

from __future__ import annotations

import gzip

import pytest

from fedep.data import DataError, ReadError, detect_format, read_table
from fedep.data.stream import CsvBlockReader

_LONG = b"a," * (2 << 20)  # 4 MiB, no line break


def _one_line(exc: Exception) -> str:
    msg = str(exc)
    assert "\n" not in msg and "Traceback" not in msg
    return msg


@pytest.mark.parametrize("packed", [False, True], ids=["plain", "gzip"])
def test_endless_first_line_is_refused(tmp_path, packed):
    path = tmp_path / ("wide.csv.gz" if packed else "wide.csv")
    path.write_bytes(gzip.compress(_LONG, compresslevel=1) if packed else _LONG)
    for read in (read_table, detect_format, lambda p: read_table(p, chunksize=10)):
        with pytest.raises(ReadError) as info:
            read(path)
        msg = _one_line(info.value)
        assert msg.startswith(f"{path}: the first line is longer than 1 MiB")
        assert msg.endswith("not a flow-record table")
    with pytest.raises(DataError) as info:
        CsvBlockReader(path, ["a"])
    assert "the first line is longer than 1 MiB" in _one_line(info.value)


def test_long_line_after_a_header_is_not_the_first_line_check(tmp_path):
    # a wide but finite header (2 MiB would be refused; 200 KB is fine)
    names = [f"c{i}" for i in range(20_000)]
    path = tmp_path / "wide_ok.csv"
    path.write_text(",".join(names) + "\n" + ",".join("1" for _ in names) + "\n")
    assert read_table(path).shape == (1, 20_000)


def test_one_line_json_array_is_not_refused(tmp_path):
    # a JSON array is one line by design (pandas' to_json): read whole, no cap
    path = tmp_path / "flows.json"
    body = ",".join(f'{{"a": {i}, "b": "{"x" * 40}"}}' for i in range(30_000))
    path.write_text("[" + body + "]")
    assert path.stat().st_size > 1 << 20
    assert read_table(path).shape == (30_000, 2)


_TABLE = "a,b\n1,2\n3,4\n"


@pytest.mark.parametrize(
    "encoding, named",
    [
        ("utf-16", "UTF-16"),  # with a byte-order mark
        ("utf-16-le", "UTF-16LE"),  # without
        ("utf-16-be", "UTF-16BE"),
        ("utf-32", "UTF-32"),
        ("utf-32-le", "UTF-32LE"),
    ],
)
def test_wide_text_is_refused_by_name(tmp_path, encoding, named):
    path = tmp_path / "wide.csv"
    path.write_bytes(_TABLE.encode(encoding))
    want = f"{path}: {named} text; convert it to UTF-8 (iconv -f {named} -t UTF-8)"
    for read in (read_table, detect_format, lambda p: read_table(p, format="csv")):
        with pytest.raises(ReadError) as info:
            read(path)
        assert _one_line(info.value) == want
    with pytest.raises(DataError) as info:
        CsvBlockReader(path, ["a"])
    assert _one_line(info.value) == want


def test_utf8_bom_stays_accepted(tmp_path):
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbf" + _TABLE.encode())
    assert read_table(path)["a"].tolist() == [1, 3]
    reader = CsvBlockReader(path, ["a", "b"])
    assert sum(len(b) for b in reader) == 2


@pytest.mark.parametrize("packed", [False, True], ids=["plain", "gzip"])
def test_nul_byte_in_csv_names_the_line(tmp_path, packed):
    data = b"a,b\n1,2\n3,4\n5,\x006\n7,8\n"
    path = tmp_path / ("nul.csv.gz" if packed else "nul.csv")
    path.write_bytes(gzip.compress(data) if packed else data)
    for kw in ({}, {"chunksize": 1}):
        with pytest.raises(ReadError) as info:
            read_table(path, **kw)
        assert _one_line(info.value) == (
            f"{path}, line 4: NUL byte in a text file (binary data, or UTF-16 text?)"
        )
    for chunk in (1, 100):
        with pytest.raises(DataError) as info:
            list(CsvBlockReader(path, ["a", "b"], chunk_rows=chunk))
        assert _one_line(info.value) == (
            f"{path}, line 4: NUL byte in a text file (binary data, or UTF-16 text?)"
        )


def test_nul_byte_in_csv_header(tmp_path):
    path = tmp_path / "nul_head.csv"
    path.write_bytes(b"a,\x00b\n1,2\n")
    with pytest.raises(ReadError, match=r"nul_head\.csv, line 1: NUL byte"):
        read_table(path)
    with pytest.raises(DataError, match=r"nul_head\.csv, line 1: NUL byte"):
        CsvBlockReader(path, ["a"])


def test_nul_byte_in_zeek_tsv_names_the_line(tmp_path):
    path = tmp_path / "conn.log"
    path.write_bytes(
        b"#separator \\x09\n#fields\ta\tb\n#types\tcount\tcount\n1\t2\n3\t\x004\n#close\tx\n"
    )
    for kw in ({}, {"chunksize": 1}):
        with pytest.raises(ReadError) as info:
            read_table(path, **kw)
        assert _one_line(info.value) == (
            f"{path}, line 5: NUL byte in a text file (binary data, or UTF-16 text?)"
        )

"""Tests of fedep.data.readers: every format from small files written here, and broken files."""

from __future__ import annotations

import bz2
import gzip
import lzma

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fedep.data import DataError, ReadError, detect_format, gateway_files, read_many, read_table
from fedep.data.readers import gateway_id

# ---------------------------------------------------------------------------- helpers

CSV_ROWS = [("1", "0.5", "x"), ("2", "1.25", "y"), ("3", "-4.0", "z")]


def _write_delimited(path, sep):
    lines = [sep.join(["a", "b", "c"])] + [sep.join(r) for r in CSV_ROWS]
    path.write_text("\n".join(lines) + "\n")
    return path


def _assert_abc(df):
    assert list(df.columns) == ["a", "b", "c"]
    assert df["a"].dtype == np.int64
    assert df["b"].dtype == np.float64
    assert pd.api.types.is_string_dtype(df["c"].dtype)
    assert df["a"].tolist() == [1, 2, 3]
    assert df["b"].tolist() == [0.5, 1.25, -4.0]
    assert df["c"].tolist() == ["x", "y", "z"]


def _zstd(data: bytes, path):
    with pa.output_stream(str(path), compression="zstd") as f:
        f.write(data)
    return path


ZEEK_LINES = [
    "#separator \\x09",
    "#set_separator\t,",
    "#empty_field\t(empty)",
    "#unset_field\t-",
    "#path\tconn",
    "#open\t2024-01-01-00-00-00",
    "#fields\tts\tuid\tid.orig_h\tid.orig_p\tproto\tduration\torig_bytes\tlocal_orig\ttunnel_parents",
    "#types\ttime\tstring\taddr\tport\tenum\tinterval\tcount\tbool\tset[string]",
    "1700000000.5\tCa1\t10.0.0.1\t5353\tudp\t0.25\t100\tT\t(empty)",
    "1700000001.25\tCb2\t10.0.0.2\t80\ttcp\t-\t-\tF\tA,B",
    "1700000002\tCc3\tfe80::1\t443\ttcp\t1.5\t7\t-\t-",
    "#close\t2024-01-01-00-00-10",
]


def _zeek(tmp_path, lines=ZEEK_LINES, name="conn.log"):
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return p


CIC = (
    "Flow ID, Source IP, Flow Duration, Flow Bytes/s, Flow Packets/s, Label\n"
    "f1,10.0.0.1,100,250.5,Infinity,BENIGN\n"
    "f2,10.0.0.2,200,Infinity,3.0,BENIGN\n"
    "f3,10.0.0.3,300,-Infinity,inf,DDoS\n"
    "f4,10.0.0.4,400,1000.0,NaN,DDoS\n"
)


# ---------------------------------------------------------------------------- CSV / TSV


@pytest.mark.parametrize("sep", [",", ";", "\t", "|"])
def test_csv_delimiters_sniffed(tmp_path, sep):
    p = _write_delimited(tmp_path / "t.csv", sep)
    _assert_abc(read_table(p))
    assert detect_format(p) == "csv"  # the extension names the format


def test_tsv_detected_from_content_and_extension(tmp_path):
    p = _write_delimited(tmp_path / "t.tsv", "\t")
    assert detect_format(p) == "tsv"
    _assert_abc(read_table(p))
    q = _write_delimited(tmp_path / "t.txt", "\t")
    assert detect_format(q) == "tsv"
    _assert_abc(read_table(q, format="tsv"))


def test_explicit_delimiter_and_format(tmp_path):
    p = tmp_path / "weird.dat"
    p.write_text("a:b:c\n1:0.5:x\n2:1.25:y\n3:-4.0:z\n")
    _assert_abc(read_table(p, format="csv", delimiter=":"))


def test_column_names_stripped_and_columns_subset(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text(" a , b,c \n1,0.5,x\n2,1.25,y\n3,-4.0,z\n")
    _assert_abc(read_table(p))
    df = read_table(p, columns=["c", "a"])
    assert list(df.columns) == ["c", "a"]
    assert df["a"].tolist() == [1, 2, 3]
    with pytest.raises(ReadError, match=r"column 'nope': unknown column"):
        read_table(p, columns=["nope"])


def test_bom_and_crlf(tmp_path):
    p = tmp_path / "t.csv"
    p.write_bytes(b"\xef\xbb\xbfa,b,c\r\n1,0.5,x\r\n2,1.25,y\r\n3,-4.0,z\r\n")
    _assert_abc(read_table(p))


@pytest.mark.parametrize(
    "suffix,compress",
    [
        (".gz", gzip.compress),
        (".bz2", bz2.compress),
        (".xz", lzma.compress),
        (".zst", None),
    ],
)
def test_compressed_csv(tmp_path, suffix, compress):
    raw = _write_delimited(tmp_path / "plain.csv", ",").read_bytes()
    p = tmp_path / f"t.csv{suffix}"
    if compress is None:
        _zstd(raw, p)
    else:
        p.write_bytes(compress(raw))
    assert detect_format(p) == "csv"
    _assert_abc(read_table(p))
    chunks = list(read_table(p, chunksize=2))
    assert [len(c) for c in chunks] == [2, 1]
    _assert_abc(pd.concat(chunks, ignore_index=True))


def test_compression_detected_from_magic_not_extension(tmp_path):
    raw = _write_delimited(tmp_path / "plain.csv", ";").read_bytes()
    p = tmp_path / "upload.bin"  # no telling extension at all
    p.write_bytes(gzip.compress(raw))
    assert detect_format(p) == "csv"
    _assert_abc(read_table(p))
    q = tmp_path / "upload2.dat"
    _zstd(raw, q)
    _assert_abc(read_table(q))


def test_chunks_share_dtypes_across_type_changes(tmp_path):
    # the first rows look integer and the column is empty: a streaming reader that
    # infers from its first block would fail, or return int64 then float64 chunks
    n = 250_000
    p = tmp_path / "big.csv"
    p.write_text("a,b,c\n" + "1,,7\n" * n + "2.5,text,8\n")
    whole = read_table(p)
    assert whole["a"].dtype == np.float64 and whole["c"].dtype == np.int64
    assert pd.api.types.is_string_dtype(whole["b"].dtype)
    assert whole["b"].iloc[-1] == "text" and whole["b"].iloc[:n].isna().all()
    chunks = list(read_table(p, chunksize=100_000))
    assert [len(c) for c in chunks] == [100_000, 100_000, 50_001]
    for c in chunks:
        assert c.dtypes.tolist() == whole.dtypes.tolist()
        assert c.index.tolist() == list(range(len(c)))
    pd.testing.assert_frame_equal(pd.concat(chunks, ignore_index=True), whole)


# ---------------------------------------------------------------------------- CICFlowMeter infinity


def test_cicflowmeter_infinity_nan(tmp_path):
    p = tmp_path / "cic.csv"
    p.write_text(CIC)
    df = read_table(p)
    assert list(df.columns) == [
        "Flow ID",
        "Source IP",
        "Flow Duration",
        "Flow Bytes/s",
        "Flow Packets/s",
        "Label",
    ]
    assert df["Flow Bytes/s"].dtype == np.float64
    np.testing.assert_array_equal(df["Flow Bytes/s"], [250.5, np.nan, np.nan, 1000.0])
    np.testing.assert_array_equal(df["Flow Packets/s"], [np.nan, 3.0, np.nan, np.nan])
    assert df["Flow Duration"].tolist() == [100, 200, 300, 400]
    assert df["Label"].tolist() == ["BENIGN", "BENIGN", "DDoS", "DDoS"]


def test_cicflowmeter_infinity_clip(tmp_path):
    p = tmp_path / "cic.csv"
    p.write_text(CIC)
    df = read_table(p, infinity="clip")
    # +inf -> the largest finite value, -inf -> the smallest; NaN stays missing
    np.testing.assert_array_equal(df["Flow Bytes/s"], [250.5, 1000.0, 250.5, 1000.0])
    np.testing.assert_array_equal(df["Flow Packets/s"], [3.0, 3.0, 3.0, np.nan])
    # streaming clips to the whole file's range, not each chunk's
    chunks = list(read_table(p, infinity="clip", chunksize=2))
    pd.testing.assert_frame_equal(pd.concat(chunks, ignore_index=True), df)


def test_cicflowmeter_infinity_error(tmp_path):
    p = tmp_path / "cic.csv"
    p.write_text(CIC)
    with pytest.raises(ReadError) as info:
        read_table(p, infinity="error")
    # columns are checked in order: Flow Bytes/s first, its first inf is on line 3
    assert (info.value.line, info.value.column) == (3, "Flow Bytes/s")
    assert str(info.value) == (
        f"{p}, line 3, column 'Flow Bytes/s': infinite value inf (infinity='error')"
    )
    assert isinstance(info.value, DataError) and isinstance(info.value, ValueError)
    # the line counts physical lines: a quoted field spanning two lines shifts it
    q = tmp_path / "cic2.csv"
    q.write_text('a,b\n"multi\nline",1.0\nx,Infinity\n')
    with pytest.raises(ReadError, match=r"cic2\.csv, line 4, column 'b': infinite value"):
        read_table(q, infinity="error")
    with pytest.raises(ReadError, match=r"line 4, column 'b'"):
        list(read_table(q, infinity="error", chunksize=1))


def test_clip_without_finite_value_is_an_error(tmp_path):
    p = tmp_path / "allinf.csv"
    p.write_text("a,b\n1,inf\n2,-Infinity\n")
    with pytest.raises(ReadError, match=r"column 'b': infinite values but no finite value"):
        read_table(p, infinity="clip")


def test_unknown_policy_and_format(tmp_path):
    p = _write_delimited(tmp_path / "t.csv", ",")
    with pytest.raises(ReadError, match="unknown infinity policy"):
        read_table(p, infinity="drop")
    with pytest.raises(ReadError, match="unknown format"):
        read_table(p, format="xlsx")


# ---------------------------------------------------------------------------- mixed / missing


def test_mixed_type_column_kept_as_string(tmp_path):
    p = tmp_path / "mixed.csv"
    p.write_text("a,b\n1,10\n2,x20\n3,30\n")
    df = read_table(p)
    assert len(df) == 3
    assert pd.api.types.is_string_dtype(df["b"].dtype)
    assert df["b"].tolist() == ["10", "x20", "30"]
    assert df["a"].tolist() == [1, 2, 3]


def test_cp1252_labels(tmp_path):
    # CIC-IDS2017 writes "Web Attack \x96 Brute Force" (Windows-1252 en dash), not UTF-8
    p = tmp_path / "cic.csv"
    p.write_bytes(b"a, Label\n1,BENIGN\n2,Web Attack \x96 Brute Force\n")
    for df in (read_table(p), pd.concat(read_table(p, chunksize=1), ignore_index=True)):
        assert df["Label"].tolist() == ["BENIGN", "Web Attack \u2013 Brute Force"]
        assert df["a"].tolist() == [1, 2]
    q = tmp_path / "latin.csv"
    q.write_bytes(b"a,b\n1,x\x81y\n")  # 0x81: undefined in Windows-1252, Latin-1 decodes it
    assert read_table(q)["b"].tolist() == ["x\x81y"]


def test_all_missing_column_is_float_nan(tmp_path):
    p = tmp_path / "missing.csv"
    p.write_text("a,b,c\n1,,x\n2,,\n3,,z\n")
    df = read_table(p)
    assert df["b"].dtype == np.float64 and df["b"].isna().all() and len(df) == 3
    assert df["c"].iloc[0] == "x" and pd.isna(df["c"].iloc[1])


# ---------------------------------------------------------------------------- Parquet / Feather


def _arrow_table():
    return pa.table(
        {
            " dur": pa.array([0.5, np.inf, 2.0]),
            "pkts": pa.array([1, 2, 3], pa.int64()),
            "proto": pa.array(["tcp", "udp", None]),
        }
    )


def _assert_arrow_frame(df, inf_value=np.nan):
    assert list(df.columns) == ["dur", "pkts", "proto"]
    np.testing.assert_array_equal(df["dur"], [0.5, inf_value, 2.0])
    assert df["pkts"].dtype == np.int64 and df["pkts"].tolist() == [1, 2, 3]
    assert df["proto"].iloc[:2].tolist() == ["tcp", "udp"] and pd.isna(df["proto"].iloc[2])


def test_parquet(tmp_path):
    p = tmp_path / "gw.parquet"
    pq.write_table(_arrow_table(), p)
    assert detect_format(p) == "parquet"
    _assert_arrow_frame(read_table(p))
    _assert_arrow_frame(read_table(p, infinity="clip"), inf_value=2.0)
    with pytest.raises(ReadError, match=r"gw\.parquet, row 2, column 'dur': infinite"):
        read_table(p, infinity="error")
    with pytest.raises(ReadError, match=r"row 2, column 'dur'"):
        list(read_table(p, infinity="error", chunksize=1))
    chunks = list(read_table(p, chunksize=2))
    assert [len(c) for c in chunks] == [2, 1]
    _assert_arrow_frame(pd.concat(chunks, ignore_index=True))
    assert read_table(p, columns=["pkts"]).columns.tolist() == ["pkts"]
    # magic bytes win over a misleading name
    q = tmp_path / "gw.csv"
    q.write_bytes(p.read_bytes())
    assert detect_format(q) == "parquet"


@pytest.mark.filterwarnings("ignore:Feather V1:DeprecationWarning")
@pytest.mark.parametrize("version", [1, 2])
def test_feather(tmp_path, version):
    p = tmp_path / "gw.feather"
    t = _arrow_table()
    if version == 1:
        t = t.rename_columns(["dur", "pkts", "proto"])
    feather.write_feather(t, p, version=version)
    assert detect_format(p) == "feather"
    _assert_arrow_frame(read_table(p))
    chunks = list(read_table(p, chunksize=2))
    _assert_arrow_frame(pd.concat(chunks, ignore_index=True))


def test_arrow_ipc_stream(tmp_path):
    p = tmp_path / "gw.arrows"
    t = _arrow_table()
    with pa.OSFile(str(p), "wb") as sink, pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    assert detect_format(p) == "feather"
    _assert_arrow_frame(read_table(p))


def test_compressed_parquet(tmp_path):
    p = tmp_path / "gw.parquet"
    pq.write_table(_arrow_table(), p)
    q = tmp_path / "gw.parquet.gz"
    q.write_bytes(gzip.compress(p.read_bytes()))
    _assert_arrow_frame(read_table(q))


# ---------------------------------------------------------------------------- Zeek


def _assert_conn(df):
    assert list(df.columns) == [
        "ts",
        "uid",
        "id.orig_h",
        "id.orig_p",
        "proto",
        "duration",
        "orig_bytes",
        "local_orig",
        "tunnel_parents",
    ]
    assert df["ts"].dtype == np.float64
    assert df["ts"].tolist() == [1700000000.5, 1700000001.25, 1700000002.0]
    assert df["uid"].tolist() == ["Ca1", "Cb2", "Cc3"]
    assert pd.api.types.is_string_dtype(df["id.orig_h"].dtype)
    assert df["id.orig_h"].tolist() == ["10.0.0.1", "10.0.0.2", "fe80::1"]
    assert df["id.orig_p"].dtype == pd.Int64Dtype()
    assert df["id.orig_p"].tolist() == [5353, 80, 443]
    assert df["duration"].dtype == np.float64
    np.testing.assert_array_equal(df["duration"], [0.25, np.nan, 1.5])
    assert df["orig_bytes"].dtype == pd.Int64Dtype()
    assert df["orig_bytes"].iloc[0] == 100 and df["orig_bytes"].iloc[2] == 7
    assert df["orig_bytes"].isna().tolist() == [False, True, False]
    assert df["local_orig"].dtype == pd.BooleanDtype()
    assert df["local_orig"].iloc[:2].tolist() == [True, False]
    assert pd.isna(df["local_orig"].iloc[2])
    # set[string]: (empty) is an empty set -> "", "-" is unset -> missing, elements joined
    assert pd.api.types.is_string_dtype(df["tunnel_parents"].dtype)
    assert df["tunnel_parents"].iloc[0] == ""
    assert df["tunnel_parents"].iloc[1] == "A,B"
    assert pd.isna(df["tunnel_parents"].iloc[2])


def test_zeek_conn_log(tmp_path):
    p = _zeek(tmp_path)
    assert detect_format(p) == "zeek"
    df = read_table(p)
    assert len(df) == 3  # the #close trailer is not a row
    _assert_conn(df)


def test_zeek_conn_log_gz_chunks_and_columns(tmp_path):
    p = _zeek(tmp_path)
    q = tmp_path / "conn.log.gz"
    q.write_bytes(gzip.compress(p.read_bytes()))
    assert detect_format(q) == "zeek"
    chunks = list(read_table(q, chunksize=2))
    assert [len(c) for c in chunks] == [2, 1]
    _assert_conn(pd.concat(chunks, ignore_index=True))
    df = read_table(q, columns=["orig_bytes", "uid"])
    assert df.columns.tolist() == ["orig_bytes", "uid"] and df["uid"].tolist()[0] == "Ca1"


def test_zeek_wrong_field_count_names_line(tmp_path):
    lines = list(ZEEK_LINES)
    lines[9] = lines[9].replace("\tCb2", "")  # line 10 of the file loses a field
    p = _zeek(tmp_path, lines)
    with pytest.raises(ReadError) as info:
        read_table(p)
    assert info.value.line == 10
    assert str(info.value).startswith(f"{p}, line 10: Zeek log line has 8 fields, #fields")
    with pytest.raises(ReadError, match="line 10"):
        list(read_table(p, chunksize=1))


def test_zeek_types_fields_mismatch(tmp_path):
    lines = list(ZEEK_LINES)
    lines[7] = lines[7].replace("\tset[string]", "")
    p = _zeek(tmp_path, lines)
    with pytest.raises(ReadError, match=r"line 8: #types has 8 entries but #fields has 9"):
        read_table(p)


def test_zeek_bad_count_value(tmp_path):
    lines = list(ZEEK_LINES)
    lines[8] = lines[8].replace("\t100\t", "\tlots\t")
    p = _zeek(tmp_path, lines)
    with pytest.raises(ReadError, match=r"column 'orig_bytes': invalid Zeek count value 'lots'"):
        read_table(p)


def test_zeek_header_only(tmp_path):
    p = _zeek(tmp_path, ZEEK_LINES[:8])
    df = read_table(p)
    assert len(df) == 0 and df["id.orig_p"].dtype == pd.Int64Dtype()


ZEEK_JSON = (
    '{"ts":1700000000.5,"uid":"Ca1","id.orig_h":"10.0.0.1","id.orig_p":5353,'
    '"proto":"udp","tunnel_parents":["A","B"],"local_orig":true}\n'
    '{"ts":1700000001.25,"uid":"Cb2","id.orig_h":"10.0.0.2","id.orig_p":80,'
    '"proto":"tcp","duration":0.5}\n'
)


def _assert_zeek_json(df):
    assert df["ts"].dtype == np.float64 and df["ts"].tolist() == [1700000000.5, 1700000001.25]
    assert df["uid"].tolist() == ["Ca1", "Cb2"]
    assert df["id.orig_h"].tolist() == ["10.0.0.1", "10.0.0.2"]
    assert df["id.orig_p"].dtype == pd.Int64Dtype() and df["id.orig_p"].tolist() == [5353, 80]
    assert df["tunnel_parents"].iloc[0] == "A,B" and pd.isna(df["tunnel_parents"].iloc[1])
    np.testing.assert_array_equal(df["duration"], [np.nan, 0.5])


def test_zeek_json(tmp_path):
    p = tmp_path / "conn.log"
    p.write_text(ZEEK_JSON)
    assert detect_format(p) == "zeek-json"
    _assert_zeek_json(read_table(p))
    chunks = list(read_table(p, chunksize=1))
    assert [len(c) for c in chunks] == [1, 1]


def test_zeek_json_iso_timestamps(tmp_path):
    p = tmp_path / "conn.json"
    text = ZEEK_JSON.replace("1700000000.5", '"2023-11-14T22:13:20.500000Z"').replace(
        "1700000001.25", '"2023-11-14T22:13:21.250000Z"'
    )
    p.write_text(text)
    _assert_zeek_json(read_table(p))


def test_json_lines_generic_and_mixed(tmp_path):
    p = tmp_path / "flows.jsonl"
    p.write_text('{"a": 1, "b": "x"}\n{"a": 2, "b": 3}\n')
    assert detect_format(p) == "json"
    df = read_table(p)
    assert df["a"].tolist() == [1, 2]
    assert pd.api.types.is_string_dtype(df["b"].dtype) and df["b"].tolist() == ["x", "3"]


def test_json_array(tmp_path):
    p = tmp_path / "flows.json"
    p.write_text('[{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]')
    assert detect_format(p) == "json"
    df = read_table(p)
    assert df["a"].tolist() == [1, 2] and df["b"].tolist() == ["x", "y"]


def test_json_bad_line(tmp_path):
    p = tmp_path / "conn.json"
    p.write_text(ZEEK_JSON + '{"ts": 3,\n')
    with pytest.raises(ReadError, match=r"conn\.json, line 3: invalid JSON"):
        read_table(p)


# ---------------------------------------------------------------------------- broken files


def test_ragged_row_names_line(tmp_path):
    p = tmp_path / "ragged.csv"
    p.write_text("a,b\n1,2\n3,4\n5,6,7\n8,9\n")
    with pytest.raises(ReadError) as info:
        read_table(p)
    assert info.value.line == 4
    assert str(info.value) == (
        f"{p}, line 4: wrong number of fields: expected 2, found 3 ('5,6,7')"
    )
    with pytest.raises(ReadError, match="line 4: wrong number of fields"):
        list(read_table(p, chunksize=1))
    short = tmp_path / "short.tsv"
    short.write_text("a\tb\n1\t2\n3\n")
    with pytest.raises(ReadError, match=r"line 3: wrong number of fields: expected 2, found 1"):
        read_table(short)


def test_ragged_row_after_multiline_field(tmp_path):
    p = tmp_path / "ragged.csv"
    p.write_text('a,b\n"two\nlines",2\n3,4,5\n')
    with pytest.raises(ReadError, match=r"line 4: wrong number of fields"):
        read_table(p)


def test_corrupt_gzip(tmp_path):
    raw = _write_delimited(tmp_path / "plain.csv", ",").read_bytes() * 50
    p = tmp_path / "cut.csv.gz"
    p.write_bytes(gzip.compress(raw)[:40])  # truncated stream
    with pytest.raises(ReadError, match=r"cut\.csv\.gz: not a valid gzip file") as info:
        read_table(p)
    assert "codec" not in str(info.value)
    q = tmp_path / "garbage.csv.gz"
    q.write_bytes(b"\x1f\x8b\x08\x00" + bytes(range(256)) * 4)
    with pytest.raises(ReadError, match="not a valid gzip file"):
        read_table(q)
    r = tmp_path / "notgz.csv.gz"
    r.write_bytes(b"\x8b\x1f\x00\xff" * 10)
    with pytest.raises(ReadError, match=r"notgz\.csv\.gz: not a valid gzip file"):
        read_table(r)
    with pytest.raises(ReadError, match="not a valid gzip file"):
        detect_format(r)


@pytest.mark.parametrize("suffix,name", [(".bz2", "bzip2"), (".xz", "xz"), (".zst", "zstd")])
def test_truncated_other_compressions(tmp_path, suffix, name):
    rng = np.random.default_rng(0)
    rows = rng.integers(0, 10**6, (20_000, 2))
    raw = b"a,b\n" + b"".join(b"%d,%d\n" % (x, y) for x, y in rows)
    full = tmp_path / f"full{suffix}"
    if suffix == ".zst":
        _zstd(raw, full)
    else:
        full.write_bytes({".bz2": bz2.compress, ".xz": lzma.compress}[suffix](raw))
    assert read_table(full, format="csv")["a"].tolist() == rows[:, 0].tolist()
    cut = tmp_path / f"cut.csv{suffix}"
    cut.write_bytes(full.read_bytes()[: full.stat().st_size // 2])
    with pytest.raises(ReadError, match=rf"cut\.csv\{suffix}: not a valid {name} file"):
        read_table(cut)
    with pytest.raises(ReadError, match=f"not a valid {name} file"):
        list(read_table(cut, chunksize=1000))


def test_truncated_parquet(tmp_path):
    p = tmp_path / "gw.parquet"
    pq.write_table(_arrow_table(), p)
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    with pytest.raises(ReadError, match=r"cut\.parquet: truncated or corrupt Parquet file"):
        read_table(cut)


def test_truncated_feather(tmp_path):
    p = tmp_path / "gw.feather"
    feather.write_feather(_arrow_table(), p)
    cut = tmp_path / "cut.feather"
    cut.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    with pytest.raises(ReadError, match=r"cut\.feather: not a valid Arrow IPC / Feather file"):
        read_table(cut)


@pytest.mark.parametrize("content", [b"", b"\n\n  \n"])
def test_empty_file(tmp_path, content):
    p = tmp_path / "empty.csv"
    p.write_bytes(content)
    with pytest.raises(ReadError, match=r"empty\.csv: empty file"):
        read_table(p)


def test_header_without_rows_and_missing_file(tmp_path):
    p = tmp_path / "hdr.csv"
    p.write_text("a,b\n")
    with pytest.raises(ReadError, match=r"line 2: file has a header but no data rows"):
        read_table(p)
    with pytest.raises(ReadError, match=r"nope\.csv: no such file"):
        read_table(tmp_path / "nope.csv")
    with pytest.raises(ReadError, match="is a directory"):
        read_table(tmp_path)


def test_duplicate_column_after_strip(tmp_path):
    p = tmp_path / "dup.csv"
    p.write_text("a, a\n1,2\n")
    with pytest.raises(ReadError, match=r"line 1, column 'a': duplicate column name"):
        read_table(p)


# ---------------------------------------------------------------------------- many files


def test_gateway_files_and_read_many(tmp_path):
    d = tmp_path / "gws"
    d.mkdir()
    _write_delimited(d / "gw-b.csv", ",")
    (d / "conn.log.gz").write_bytes(gzip.compress(_zeek(tmp_path).read_bytes()))
    pq.write_table(_arrow_table(), d / "gw-a.parquet")
    (d / "notes.md").write_text("not data")
    (d / ".hidden.csv").write_text("a\n1\n")
    files = gateway_files(d)
    assert [f.name for f in files] == ["conn.log.gz", "gw-a.parquet", "gw-b.csv"]
    tables = read_many(d)
    assert list(tables) == ["conn", "gw-a", "gw-b"]
    _assert_conn(tables["conn"])
    _assert_abc(tables["gw-b"])
    assert gateway_id("conn.log.gz") == "conn" and gateway_id("site.a.parquet") == "site.a"
    assert gateway_id("x.csv.zst") == "x"
    (d / "gw-c.csv").symlink_to(tmp_path / "gone.csv")  # a gateway's file went missing
    with pytest.raises(ReadError, match=r"gw-c\.csv: broken symbolic link"):
        gateway_files(d)


def test_read_many_refuses_one_gateway_twice(tmp_path):
    a = _write_delimited(tmp_path / "a.log", ",")
    gz = tmp_path / "a.log.gz"
    gz.write_bytes(gzip.compress(a.read_bytes()))
    # a log and its compressed copy: one gateway id, both paths named
    with pytest.raises(ReadError, match=r"a\.log\.gz: same gateway id 'a' as '.*a\.log'"):
        read_many([a, gz])
    with pytest.raises(ReadError, match=r"same file as"):
        read_many([a, a])
    link = tmp_path / "b.csv"
    link.symlink_to(a)
    with pytest.raises(ReadError, match=r"b\.csv: same file as '.*a\.log'"):
        read_many([a, link])
    copy = tmp_path / "c.csv"
    copy.write_bytes(a.read_bytes())
    with pytest.raises(ReadError, match=r"c\.csv: same content as '.*a\.log'"):
        read_many([a, copy])
    other = _write_delimited(tmp_path / "d.csv", ";")  # other bytes: a gateway of its own
    assert list(read_many([a, other])) == ["a", "d"]


def test_read_many_stem_collisions(tmp_path):
    a = _write_delimited(tmp_path / "gw.csv", ",")
    b = tmp_path / "gw.parquet"
    pq.write_table(_arrow_table(), b)
    with pytest.raises(ReadError, match=r"gw\.parquet: same gateway id 'gw' as '.*gw\.csv'"):
        read_many([a, b])
    sub = tmp_path / "sub"
    sub.mkdir()
    c = _write_delimited(sub / "gw.csv", ",")
    with pytest.raises(ReadError, match=r"same gateway id 'gw' as"):
        read_many([a, c])
    empty = tmp_path / "empty_dir"
    empty.mkdir()
    with pytest.raises(ReadError, match="no supported flow-record file"):
        gateway_files(empty)


# ---------------------------------------------------------------------------- property


_frames = st.integers(min_value=1, max_value=30).flatmap(
    lambda n: st.tuples(
        hnp.arrays(
            np.float64,
            (n, 3),
            elements=st.floats(allow_nan=True, allow_infinity=False, width=64),
        ),
        hnp.arrays(np.int64, (n,), elements=st.integers(-(2**53), 2**53)),
    )
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=_frames, kind=st.sampled_from(["csv", "csv.gz", "tsv.xz", "parquet", "feather"]))
def test_numeric_frames_round_trip_exactly(tmp_path, data, kind):
    floats, ints = data
    df = pd.DataFrame(floats, columns=["f0", "f1", "f2"])
    df["i"] = ints
    p = tmp_path / f"frame.{kind}"
    if kind == "parquet":
        df.to_parquet(p)
    elif kind == "feather":
        df.to_feather(p)
    else:
        df.to_csv(p, index=False, sep="\t" if kind.startswith("tsv") else ",")
    back = read_table(p)
    assert back["i"].dtype == np.int64
    for c in ["f0", "f1", "f2"]:
        assert back[c].dtype == np.float64
    pd.testing.assert_frame_equal(back, df, check_exact=True)


_MESSY_COLUMNS = {
    "int_then_float": ["1", "2", "3", "4", "5", "6", "7", "8.5"],
    "int_then_text": ["1", "2", "3", "4", "5", "6", "7", "x"],
    "empty_then_int": ["", "", "", "", "", "", "", "9"],
    "int_then_empty": ["1", "2", "3", "4", "5", "6", "7", ""],
    "bool_then_int": ["true", "false", "true", "true", "false", "true", "true", "2"],
    "time_then_text": ["2024-01-01 00:00:00"] * 7 + ["later"],
    "float_then_inf": ["1.5", "2", "3", "4", "5", "6", "7", "inf"],
    "text": ["a", "b", "c", "d", "e", "f", "g", "h"],
}


@pytest.mark.parametrize("column", sorted(_MESSY_COLUMNS))
@pytest.mark.parametrize("block", [24, 64, 1 << 22])
def test_typed_read_equals_inferring_read(tmp_path, monkeypatch, column, block):
    # the fast path types the columns from the first block; a type that changes later in
    # the file must give exactly what inferring over the whole file gives
    import fedep.data.readers.csv as rcsv

    values = _MESSY_COLUMNS[column]
    lines = [f"{v},{i}" for i, v in enumerate(values)]
    p = tmp_path / "m.csv"
    p.write_text(f"{column},n\n" + "\n".join(lines) + "\n")
    monkeypatch.setattr(rcsv, "_BLOCK_SIZE", block)
    typed = read_table(p)
    monkeypatch.setattr(rcsv, "_first_block_types", lambda *a: {})
    reference = read_table(p)
    pd.testing.assert_frame_equal(typed, reference)


# number and text files that pandas' C parser might read differently from pyarrow's
_NUMERIC_FILES = {
    "text": 'a,b\nx y,1\n"q,uoted",2\n  spaced ,3\n"say ""hi""",4\n',
    "text_missing": "a,b\nx,1\n,2\nNA,3\n",
    "text_none_word": "a,b\nx,1\nNone,2\n<NA>,3\n",
    "text_numbers_later": "a,b\nx,1\n5,2\n",
    "bool": "a,b\ntrue,1\nfalse,2\n",
    "timestamp": "a,b\n2024-01-01 00:00:00,1\n2024-01-02 00:00:00,2\n",
    "plain": "a,b\n1,0.5\n2,-1e-3\n3,4\n",
    "plus_and_spaces": "a,b\n+1, 2.5\n2,2.5 \n 3,.5\n",
    "overflow_float": "a,b\n1,1e400\n2,-1e400\n",
    "infinity_words": "a,b\n1,Infinity\n2,-inf\n3,INF\n",
    "int_too_big": "a,b\n1,2\n9223372036854775808,3\n",
    "quoted": 'a,b\n"1","2.5"\n2,3\n',
    "crlf_and_blank": "a,b\r\n1,2\r\n\r\n3,4\r\n",
    "trailing_field": "a,b\n1,2\n3,4,\n",
    "trailing_every_row": "a,b\n1,2,\n3,4,\n",
    "short_row": "a,b\n1,2\n3\n",
    "missing_value": "a,b\n1,2\n3,\n",
    "nan_word": "a,b\n1,2\n3,NaN\n",
    "text_later": "a,b\n" + "".join(f"{i},{i}\n" for i in range(20)) + "9,x\n",
    "float_in_int": "a,b\n1,2\n3.5,4\n",
}


def _read_or_error(p, **kw):
    try:
        return read_table(p, **kw)
    except ReadError as exc:
        return str(exc)


@pytest.mark.parametrize("name", sorted(_NUMERIC_FILES))
@pytest.mark.parametrize("infinity", ["nan", "clip"])
@pytest.mark.parametrize("block", [24, 1 << 22])
def test_numeric_fast_path_equals_pyarrow_read(tmp_path, monkeypatch, name, infinity, block):
    # a file of numbers and text is read by pandas' C parser; whatever it reads
    # differently must fall back, so that the result (or the error) is pyarrow's (a
    # small block: the first block's types differ from the whole file's)
    import fedep.data.readers.csv as rcsv

    monkeypatch.setattr(rcsv, "_BLOCK_SIZE", block)
    p = tmp_path / "n.csv"
    p.write_bytes(_NUMERIC_FILES[name].encode())
    fast = _read_or_error(p, infinity=infinity)
    fast_subset = _read_or_error(p, infinity=infinity, columns=["b", "a"])
    monkeypatch.setattr(rcsv, "_numeric_table", lambda *a: None)
    reference = _read_or_error(p, infinity=infinity)
    reference_subset = _read_or_error(p, infinity=infinity, columns=["b", "a"])
    for got, want in [(fast, reference), (fast_subset, reference_subset)]:
        if isinstance(want, str):
            assert got == want
        else:
            pd.testing.assert_frame_equal(got, want, check_exact=True)


def test_numeric_fast_path_is_taken_and_refuses_what_it_cannot_vouch_for(tmp_path):
    import fedep.data.readers.csv as rcsv
    from fedep.data.readers.source import _open_source

    def fast(text, name="n.csv", columns=None):
        p = tmp_path / name
        p.write_text(text)
        src = _open_source(p)
        names = ["a", "b"]
        types = rcsv._first_block_types(src, names, ",", columns)
        return rcsv._numeric_table(src, names, ",", columns, types)

    df = fast("a,b\n1,0.5\n2,1.5\n", name="plain.csv.zip")  # no compression by its name
    assert df is not None and df["b"].tolist() == [0.5, 1.5]
    df = fast("a,b\n1,0.5\n2,1.5\n")
    assert df is not None and df["a"].dtype == np.int64 and df["b"].tolist() == [0.5, 1.5]
    df = fast("a,b\nx,0.5\ny,1.5\n")
    assert df is not None and df["a"].tolist() == ["x", "y"]
    assert fast("a,b\n1,0.5\n", columns=["b", "a"]) is None  # usecols would hide long rows
    for text in [
        _NUMERIC_FILES["short_row"],
        _NUMERIC_FILES["trailing_field"],
        _NUMERIC_FILES["missing_value"],
        _NUMERIC_FILES["int_too_big"],
        "a,b\n2024-01-01 00:00:00,1\n",  # a timestamp in the first block: not tried
        "a,b\ntrue,1\n",  # a boolean column: not tried
        "a,b\nx,1\nNone,2\n",  # pandas' missing marker, not pyarrow's
    ]:
        assert fast(text) is None, text
    # pyarrow's first block says float64, pandas int64: the chunk is widened to float64
    df = fast("a,b\n+1,2\n")
    assert df is not None and df["a"].dtype == np.float64 and df["a"].tolist() == [1.0]


def test_nested_and_dictionary_columns_become_text(tmp_path):
    # Python lists / dicts in a column cannot be typed or hashed by the feature
    # pipeline: they are read as their JSON text (and dictionary columns as values)
    t = pa.table(
        {
            "x": [1.0, 2.0, 3.0],
            "s": pa.array([{"a": 1, "b": [1, 2]}, None, {"a": 2, "b": []}]),
            "l": pa.array([[1, 2], [], None]),
            "d": pa.array(["u", "v", "u"]).dictionary_encode(),
        }
    )
    p = tmp_path / "n.parquet"
    pq.write_table(t, p)
    for df in (read_table(p), pd.concat(read_table(p, chunksize=2), ignore_index=True)):
        assert df["s"].tolist()[0] == '{"a": 1, "b": [1, 2]}' and pd.isna(df["s"].iloc[1])
        assert df["l"].tolist()[:2] == ["[1, 2]", "[]"] and pd.isna(df["l"].iloc[2])
        assert df["d"].tolist() == ["u", "v", "u"]
        assert all(pd.api.types.is_string_dtype(df[c].dtype) for c in "sld")


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("chunksize", [None, 2])
@pytest.mark.parametrize("block", [16, 1 << 22])
def test_text_columns_keep_identifiers_as_written(tmp_path, monkeypatch, fast, chunksize, block):
    # "1", "01" and "1.0" are three gateways: typed as numbers they would be one; a
    # first block of numbers only (small block) must not type the column either
    import fedep.data.readers.csv as rcsv

    monkeypatch.setattr(rcsv, "_BLOCK_SIZE", block)
    if not fast:
        monkeypatch.setattr(rcsv, "_numeric_table", lambda *a: None)
    ids = ["1", "01", "1.0", "2", "02", "3"]
    p = tmp_path / "ids.csv"
    p.write_text("gw,a\n" + "".join(f"{g},{i}.5\n" for i, g in enumerate(ids)))

    def read(**kw):
        got = read_table(p, chunksize=chunksize, **kw)
        return got if chunksize is None else pd.concat(list(got), ignore_index=True)

    df = read(text_columns=["gw", "absent"])
    assert df["gw"].tolist() == ids
    assert df["a"].dtype == np.float64 and df["a"].tolist() == [i + 0.5 for i in range(6)]
    assert read()["gw"].dtype.kind in "if"  # without it the column is typed as numbers
    assert read(text_columns=["gw"], columns=["gw"])["gw"].tolist() == ids


def test_text_columns_in_json(tmp_path):
    import json

    rows = [{"gw": g, "a": float(i)} for i, g in enumerate(["1", "01", "1.0", "2"])]
    arr = tmp_path / "ids.json"
    arr.write_text(json.dumps(rows))
    lines = tmp_path / "ids.jsonl"
    lines.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for p in (arr, lines):
        df = read_table(p, text_columns=["gw"])
        assert df["gw"].tolist() == ["1", "01", "1.0", "2"], p
        assert df["a"].tolist() == [0.0, 1.0, 2.0, 3.0]
    # a float's digits survive the JSON array reader (pandas' default parser rounds)
    arr.write_text(json.dumps([{"a": 0.12573022109339302}, {"a": 1e-300}]))
    assert read_table(arr)["a"].tolist() == [0.12573022109339302, 1e-300]
    with pytest.raises(ReadError, match="text_columns must be a sequence"):
        read_table(arr, text_columns="gw")


def test_first_line_of_data_is_no_header(tmp_path):
    body = "1700000000.5\tC1\t10.0.0.1\t443\ttcp\t-\n1700000001.5\tC2\t10.0.0.2\t80\tudp\tdns\n"
    cut = tmp_path / "cut.tsv"
    cut.write_text(body)
    with pytest.raises(ReadError, match=r"cut\.tsv, line 1: no header line: .*zeek-cut -c"):
        read_table(cut)
    nums = tmp_path / "nums.csv"
    nums.write_text("0.5,1.25,3\n1.5,2.0,4\n")
    with pytest.raises(ReadError, match=r"no header line: nums\.csv starts with data"):
        read_table(nums)
    ints = tmp_path / "ints.csv"  # integer column names are a header
    ints.write_text("0,1,2\n0.5,1.5,2.5\n")
    assert list(read_table(ints).columns) == ["0", "1", "2"]

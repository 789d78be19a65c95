"""Read raw flow-record files (Zeek logs, flow-exporter CSVs, Parquet, Arrow) into DataFrames.

:func:`read_table` reads one file into a :class:`pandas.DataFrame` (or, with ``chunksize``,
an iterator of DataFrames for streaming scoring); :func:`detect_format` says how a file
would be read; :func:`gateway_files` and :func:`read_many` turn a directory or a list of
files into one table per gateway (the gateway id is the file stem).

Supported formats (``format=``):

``"csv"`` / ``"tsv"``
    Delimited text with a header line; the delimiter is sniffed from the header line
    (the most frequent of ``,`` tab ``;`` ``|``) unless given. Parsed by ``pyarrow.csv``
    (multi-threaded); column types are inferred over the whole file, so a column mixing
    numbers and text is kept as a string column (never dropped). Empty fields and the
    usual missing markers (``NA``, ``NaN``, ``null`` ...) are missing values; a column
    with no value at all is float64 NaN. Blank lines carry no data and are ignored. Text
    that is not UTF-8 is decoded as Windows-1252 (CIC-IDS2017's labels hold byte ``0x96``)
    or, failing that, Latin-1.
``"zeek"``
    Zeek ASCII (TSV) logs with their ``#separator``, ``#set_separator``, ``#empty_field``,
    ``#unset_field``, ``#path``, ``#open``, ``#fields``, ``#types`` header and ``#close``
    trailer. The unset marker (``-``) is a missing value; the empty marker (``(empty)``)
    is an empty string. Dtypes come from ``#types``: ``count`` / ``int`` / ``port`` ->
    nullable ``Int64``; ``double`` / ``interval`` / ``time`` -> float64 (``time`` in
    seconds since the epoch); ``bool`` (``T`` / ``F``) -> nullable ``boolean``; anything
    else (``string``, ``addr``, ``subnet``, ``enum``, ``set[...]``, ``vector[...]``,
    ``table[...]``) -> string. **Set and vector fields are kept as one string, the
    elements joined with the log's set separator** (``"dns,http"``); Zeek's ``\\xHH``
    escapes are kept as written.
``"zeek-json"``
    Zeek JSON logs (one object per line, dotted keys such as ``id.orig_h``). Same dtype
    conventions as ``"zeek"`` where the JSON allows: integers -> ``Int64``, JSON arrays
    (sets, vectors) -> strings joined with ``,``; ``ts`` (a number or an ISO 8601 string)
    -> float64 seconds since the epoch. A key absent from a line is a missing value.
``"json"``
    Generic JSON Lines (or one JSON array of objects).
``"parquet"``, ``"feather"``
    Parquet, and Arrow IPC files (Feather v1/v2, ``.arrow``) or streams.

Compressed files (gzip, bzip2, xz, zstd) are recognised by their magic bytes (and a
``.gz`` / ``.bz2`` / ``.xz`` / ``.zst`` name must hold what it says); they are
decompressed on the fly (zstd through pyarrow's codec, so no extra dependency).

Column names are stripped of surrounding whitespace (CICFlowMeter writes ``" Flow Bytes/s"``).

Infinity policy (``infinity=``), for CICFlowMeter-style ``Infinity`` / ``-Infinity`` /
``inf`` values in floating-point columns: ``"nan"`` (the default) turns them into missing
values (NaN), ``"clip"`` replaces ``+inf`` with the column's largest finite value and
``-inf`` with its smallest (over the whole file, also when streaming: a first pass finds
the range; a column with no finite value is an error), ``"error"`` raises
:class:`ReadError` naming the file, the 1-based line (the header is line 1; the data row
for Parquet, Arrow and JSON) and the column.

Every failure is a :class:`ReadError` (a :class:`~fedep.data.errors.DataError`, hence a
:class:`ValueError`) whose one-line message names the file and, where known, the line and
the column. Nothing is silently dropped: a row with the wrong number of fields is an error.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import lzma
import math
import os
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

import numpy as np
import pandas as pd
import pyarrow as pa

from fedep.data.errors import DataError

__all__ = [
    "FORMATS",
    "INFINITY_POLICIES",
    "ReadError",
    "detect_format",
    "gateway_files",
    "gateway_id",
    "read_many",
    "read_table",
]

FORMATS = ("csv", "tsv", "parquet", "feather", "zeek", "zeek-json", "json")
INFINITY_POLICIES = ("nan", "clip", "error")

_BOM = b"\xef\xbb\xbf"
# magic bytes -> codec; xz has no pyarrow codec, the stdlib reads it
_COMPRESSION_MAGIC = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bz2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
)
_COMPRESSION_SUFFIX = {
    ".gz": "gzip",
    ".gzip": "gzip",
    ".bz2": "bz2",
    ".xz": "xz",
    ".zst": "zstd",
    ".zstd": "zstd",
}
_COMPRESSION_NAME = {"gzip": "gzip", "bz2": "bzip2", "xz": "xz", "zstd": "zstd"}
# a suffix that names a format; None: the content decides (Zeek writes ``conn.log``)
_FORMAT_SUFFIX: dict[str, str | None] = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".tab": "tsv",
    ".txt": None,
    ".log": None,
    ".json": None,
    ".jsonl": None,
    ".ndjson": None,
    ".parquet": "parquet",
    ".pq": "parquet",
    ".feather": "feather",
    ".arrow": "feather",
    ".ipc": "feather",
}
_DELIMITERS = (",", "\t", ";", "|")
# CSV text that is not UTF-8 is read as Windows-1252 (CIC-IDS2017's labels hold byte 0x96,
# an en dash), else Latin-1, which decodes any byte
_ENCODINGS = ("utf-8", "cp1252", "latin-1")
_HEAD_BYTES = 1 << 16
_ZEEK_INT = {"count", "int", "port"}
_ZEEK_FLOAT = {"double", "interval", "time"}
# a callable returning a fresh iterator over the file's frames (streaming clip reads twice)
_NO_ROWS = "file has a header but no data rows"  # almost always a truncated export
_Frames = Callable[[], Iterator[pd.DataFrame]]


class ReadError(DataError):
    """A raw flow-record file cannot be read.

    Same parameters and attributes as :class:`~fedep.data.errors.DataError`; the message
    is one line: ``"<file>[, line N][, row N][, column 'c']: <what is wrong>"``.
    """

    def __init__(self, path, message: str, **where) -> None:
        # one line even when the reason quotes a multi-line pyarrow message
        super().__init__(path, re.sub(r"\s*\n\s*", " ", str(message)).strip(), **where)


# --------------------------------------------------------------------------------------
# sources: a path plus its compression


@dataclass(frozen=True)
class _Source:
    path: Path
    compression: str | None  # None, "gzip", "bz2", "xz", "zstd"
    encoding: str = "utf-8"  # text formats; see _ENCODINGS

    def open(self) -> IO[bytes] | pa.NativeFile:
        """A binary stream of the decompressed content."""
        if self.compression is None:
            # a plain OS file, not a memory map: mapped pages would count as resident memory
            return pa.OSFile(str(self.path), "rb")
        if self.compression == "xz":
            return lzma.open(self.path, "rb")
        # gzip, bz2 and zstd: pyarrow's C++ codecs (zstd without the zstandard package)
        return pa.input_stream(str(self.path), compression=self.compression)

    @contextmanager
    def errors(self) -> Iterator[None]:
        """Turn decompression and I/O failures into one-line ReadErrors."""
        try:
            yield
        except ReadError:
            raise
        except (OSError, EOFError, zlib.error, lzma.LZMAError) as exc:
            if isinstance(exc, FileNotFoundError | PermissionError | IsADirectoryError):
                raise ReadError(self.path, f"cannot read file: {exc.strerror}") from None
            if self.compression is not None:
                name = _COMPRESSION_NAME[self.compression]
                raise ReadError(
                    self.path, f"not a valid {name} file (truncated or corrupt: {exc})"
                ) from None
            raise ReadError(self.path, f"cannot read file: {exc}") from None


def _check_file(path: Path) -> None:
    if not path.exists():
        raise ReadError(path, "no such file")
    if path.is_dir():
        raise ReadError(path, "is a directory, not a file")
    if not os.access(path, os.R_OK):
        raise ReadError(path, "cannot read file: permission denied")


def _open_source(path: Path) -> _Source:
    """Check the file and find its compression from its magic bytes."""
    _check_file(path)
    try:
        with open(path, "rb") as fh:
            magic = fh.read(8)
    except OSError as exc:
        raise ReadError(path, f"cannot read file: {exc.strerror or exc}") from None
    if not magic:
        raise ReadError(path, "empty file")
    found = next((c for m, c in _COMPRESSION_MAGIC if magic.startswith(m)), None)
    claimed = _COMPRESSION_SUFFIX.get(path.suffix.lower())
    if claimed is not None and found != claimed:
        # the name promises a compressed file: reading it as text would only produce a
        # confusing decode error (e.g. "can't decode byte 0x8b") further down
        raise ReadError(
            path,
            f"not a valid {_COMPRESSION_NAME[claimed]} file (its first bytes are not the "
            f"{_COMPRESSION_NAME[claimed]} magic bytes)",
        )
    return _Source(path, found)


def _read_head(src: _Source, n: int = _HEAD_BYTES) -> bytes:
    """The first ``n`` decompressed bytes, extended to the end of the first line."""
    with src.errors():
        fh = src.open()
        try:
            head = fh.read(n)
            # a very wide header: read on until its line ends (or the file does)
            while b"\n" not in head:
                more = fh.read(n)
                if not more:
                    break
                head += more
        finally:
            fh.close()
    return bytes(head)


# --------------------------------------------------------------------------------------
# format detection


def _strip_suffixes(name: str) -> tuple[str, list[str]]:
    """``conn.log.gz`` -> (``conn``, [``.gz``, ``.log``]): known suffixes, outermost first."""
    removed = []
    while True:
        stem, dot, ext = name.rpartition(".")
        ext = "." + ext.lower()
        if not dot or not stem or (ext not in _COMPRESSION_SUFFIX and ext not in _FORMAT_SUFFIX):
            return name, removed
        removed.append(ext)
        name = stem
        if ext in _FORMAT_SUFFIX:
            # only one format suffix: ``a.csv.log`` keeps ``a.csv``
            return name, removed


def _sniff_delimiter(first_line: str) -> str:
    """The most frequent of ``, \\t ; |`` in the header line (outside quotes); ``,`` if none."""
    unquoted = re.sub(r'"[^"]*"', "", first_line)
    counts = {d: unquoted.count(d) for d in _DELIMITERS}
    best = max(_DELIMITERS, key=lambda d: counts[d])  # ties: earlier in _DELIMITERS wins
    return best if counts[best] > 0 else ","


def _first_line(head: bytes) -> bytes:
    if head.startswith(_BOM):
        head = head[len(_BOM) :]
    return head.split(b"\n", 1)[0].rstrip(b"\r")


def _looks_like_zeek_json(line: bytes) -> bool:
    try:
        obj = json.loads(line)
    except ValueError:
        return False
    return isinstance(obj, dict) and (
        "uid" in obj or "id.orig_h" in obj or ("ts" in obj and "_path" in obj)
    )


def _detect(src: _Source, head: bytes) -> str:
    if head.startswith(b"PAR1"):
        return "parquet"
    if head.startswith(b"ARROW1") or head.startswith(b"FEA1") or head[:4] == b"\xff" * 4:
        return "feather"
    _stem, suffixes = _strip_suffixes(src.path.name)
    by_name = next((_FORMAT_SUFFIX[s] for s in suffixes if s in _FORMAT_SUFFIX), None)
    if by_name in ("parquet", "feather"):
        return by_name  # a binary format without its magic: its reader says what is wrong
    text = head[len(_BOM) :] if head.startswith(_BOM) else head
    stripped = text.lstrip()
    if not stripped:
        raise ReadError(src.path, "empty file")
    if stripped.startswith(b"#separator"):
        return "zeek"
    if stripped.startswith(b"{"):
        return "zeek-json" if _looks_like_zeek_json(stripped.split(b"\n", 1)[0]) else "json"
    if stripped.startswith(b"["):
        return "json"
    if by_name is not None:
        return by_name
    first = _first_line(head).decode("utf-8", errors="replace")
    return "tsv" if _sniff_delimiter(first) == "\t" else "csv"


def detect_format(path: str | os.PathLike) -> str:
    """How :func:`read_table` would read a file with ``format="auto"``.

    Parameters
    ----------
    path : str or PathLike
        The file; it may be gzip-, bzip2-, xz- or zstd-compressed.

    Returns
    -------
    str
        One of :data:`FORMATS`: from the content first (``PAR1`` / ``ARROW1`` magic bytes,
        a ``#separator`` first line for Zeek, a ``{`` first character for JSON Lines,
        Zeek JSON when the first object has Zeek keys such as ``uid`` / ``id.orig_h``),
        then the extension, else CSV or TSV by the delimiter sniffed in the header line.

    Raises
    ------
    ReadError
        Missing, unreadable or empty file, corrupt compression.
    """
    path = Path(path)
    src = _open_source(path)
    return _detect(src, _read_head(src))


# --------------------------------------------------------------------------------------
# shared post-processing


def _clean_names(path: Path, names: Sequence[str], line: int | None = 1) -> list[str]:
    """Strip whitespace around names; name unnamed columns like pandas; refuse duplicates."""
    out: list[str] = []
    seen: set[str] = set()
    for i, raw in enumerate(names):
        name = str(raw).strip()
        if name == "":
            name = f"Unnamed: {i}"
        if name in seen:
            raise ReadError(path, "duplicate column name in header", line=line, column=name)
        seen.add(name)
        out.append(name)
    return out


def _check_columns(path: Path, available: Sequence[str], columns: Sequence[str] | None) -> None:
    if columns is None:
        return
    known = set(available)
    for c in columns:
        if c not in known:
            raise ReadError(path, f"unknown column (the file has {len(known)} columns)", column=c)


def _types_mapper(ints_nullable: bool):
    """pyarrow -> pandas dtypes: bool always nullable ``boolean``; int64 -> ``Int64`` if asked."""
    mapping: dict[pa.DataType, Any] = {pa.bool_(): pd.BooleanDtype()}
    if ints_nullable:
        for t in (pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16()):
            mapping[t] = pd.Int64Dtype()
        mapping[pa.uint32()] = pd.Int64Dtype()
    return mapping.get


def _to_pandas(
    table: pa.Table, *, ints_nullable: bool = False, release: bool = False
) -> pd.DataFrame:
    # a column with no value at all has Arrow type null: make it float64 NaN (a missing
    # number), not an object column of None
    for i, f in enumerate(table.schema):
        if pa.types.is_null(f.type):
            table = table.set_column(i, f.name, pa.nulls(len(table), pa.float64()))
    names = list(table.column_names)
    # release=True: the caller drops the table; free each Arrow column as soon as it is
    # converted, so the peak is about one copy of the data instead of two
    df = table.to_pandas(
        types_mapper=_types_mapper(ints_nullable), split_blocks=release, self_destruct=release
    )
    df.columns = names
    return df


def _apply_infinity(
    df: pd.DataFrame,
    policy: str,
    path: Path,
    locate,
    row_offset: int = 0,
    bounds: dict[str, tuple[float, float]] | None = None,
) -> pd.DataFrame:
    """Apply the infinity policy to the float columns of ``df`` (modified in place).

    ``locate(i)`` returns ``{"line": n}`` or ``{"row": n}`` for the 0-based data row ``i``;
    ``bounds`` (clip only) maps a column to its finite (min, max) over the whole file,
    else they are taken from ``df``.
    """
    for name in df.columns:
        col = df[name]
        if not (isinstance(col.dtype, np.dtype) and col.dtype.kind == "f"):
            continue
        values = col.to_numpy()
        inf = np.isinf(values)
        if not inf.any():
            continue
        if policy == "error":
            i = int(np.flatnonzero(inf)[0])
            raise ReadError(
                path,
                f"infinite value {values[i]} (infinity='error')",
                column=str(name),
                **locate(row_offset + i),
            )
        fixed = values.copy()
        if policy == "nan":
            fixed[inf] = np.nan
        else:  # clip
            if bounds is None:
                finite = values[np.isfinite(values)]
                lo_hi = (finite.min(), finite.max()) if finite.size else None
            else:
                lo_hi = bounds.get(str(name))
            if lo_hi is None:
                raise ReadError(
                    path,
                    "infinite values but no finite value to clip them to (infinity='clip')",
                    column=str(name),
                )
            fixed[values == np.inf] = lo_hi[1]
            fixed[values == -np.inf] = lo_hi[0]
        df[name] = fixed
    return df


def _finite_bounds(frames: Iterable[pd.DataFrame]) -> dict[str, tuple[float, float]]:
    """Finite (min, max) of every float column over all frames (for ``"clip"`` in chunks)."""
    lo: dict[str, float] = {}
    hi: dict[str, float] = {}
    for df in frames:
        for name in df.columns:
            col = df[name]
            if not (isinstance(col.dtype, np.dtype) and col.dtype.kind == "f"):
                continue
            v = col.to_numpy()
            v = v[np.isfinite(v)]
            if v.size:
                lo[name] = min(lo.get(name, np.inf), float(v.min()))
                hi[name] = max(hi.get(name, -np.inf), float(v.max()))
    return {n: (lo[n], hi[n]) for n in lo}


def _rechunk(frames: Iterable[pd.DataFrame], chunksize: int) -> Iterator[pd.DataFrame]:
    """Re-cut a stream of frames into frames of exactly ``chunksize`` rows (the last: fewer)."""
    buf: list[pd.DataFrame] = []
    n = 0
    for f in frames:
        while len(f):
            take = f.iloc[: chunksize - n]
            f = f.iloc[len(take) :]
            buf.append(take)
            n += len(take)
            if n == chunksize:
                yield pd.concat(buf, ignore_index=True) if len(buf) > 1 else _reset(buf[0])
                buf, n = [], 0
    if n:
        yield pd.concat(buf, ignore_index=True) if len(buf) > 1 else _reset(buf[0])


def _reset(df: pd.DataFrame) -> pd.DataFrame:
    return df.reset_index(drop=True)


# --------------------------------------------------------------------------------------
# CSV / TSV


def _csv_header(src: _Source, head: bytes, delimiter: str) -> list[str]:
    line = _first_line(head)
    if not line.strip():
        raise ReadError(src.path, "empty header line (no column names)", line=1)
    try:
        text = line.decode(src.encoding)
    except UnicodeDecodeError:
        raise _WrongEncoding from None
    try:
        fields = next(csv.reader([text], delimiter=delimiter))
    except (csv.Error, StopIteration) as exc:
        raise ReadError(src.path, f"unreadable header ({exc})", line=1) from None
    return _clean_names(src.path, fields)


def _text_lines(src: _Source) -> Iterator[str]:
    """The decompressed file as text lines (error paths only: slow but exact)."""
    fh = src.open()
    try:
        raw = fh if not isinstance(fh, pa.NativeFile) else io.BufferedReader(fh)
        yield from io.TextIOWrapper(raw, encoding=src.encoding, errors="replace", newline="")
    finally:
        fh.close()


def _csv_record_lines(src: _Source, delimiter: str) -> Iterator[tuple[int, list[str]]]:
    """(1-based physical line where each record starts, fields); blank lines skipped."""
    lines = _text_lines(src)
    first = next(lines, "")
    if first.startswith("\ufeff"):
        first = first[1:]

    def chained():
        yield first
        yield from lines

    reader = csv.reader(chained(), delimiter=delimiter)
    start = 1
    for fields in reader:
        if fields:
            yield start, fields
        start = reader.line_num + 1


def _csv_data_line(src: _Source, delimiter: str, index: int) -> dict[str, int]:
    """``{"line": n}`` for the 0-based data row ``index`` (after the header)."""
    with src.errors():
        for k, (line, _fields) in enumerate(_csv_record_lines(src, delimiter)):
            if k == index + 1:
                return {"line": line}
    return {"row": index + 1}


def _ragged_error(src: _Source, delimiter: str, n_expected: int, bad: list) -> ReadError:
    number, actual, text = bad[0]
    line = number
    with src.errors():
        # pyarrow numbers records (and only when single-threaded); the csv module gives
        # the physical line, which differs once a quoted field spans lines
        for ln, fields in _csv_record_lines(src, delimiter):
            if len(fields) != n_expected:
                line, actual = ln, len(fields)
                break
    snippet = text if len(text) <= 60 else text[:57] + "..."
    more = f"; {len(bad) - 1} more malformed rows" if len(bad) > 1 else ""
    return ReadError(
        src.path,
        f"wrong number of fields: expected {n_expected}, found {actual} ({snippet!r}){more}",
        line=line,
    )


class _WrongEncoding(Exception):
    """The text does not decode with the encoding tried: try the next of _ENCODINGS."""


def _is_encoding_error(exc: Exception) -> bool:
    return isinstance(exc, UnicodeDecodeError) or "invalid UTF8" in str(exc)


def _check_decoded(src: _Source, schema: pa.Schema) -> None:
    # pyarrow infers a column with invalid UTF-8 as binary instead of failing
    if src.encoding == "utf-8" and any(pa.types.is_binary(f.type) for f in schema):
        raise _WrongEncoding


def _try_encodings(fn, src: _Source, *args):
    """``fn(src_with_encoding, *args)`` for the first of _ENCODINGS that decodes the file."""
    for enc in _ENCODINGS:
        try:
            return fn(replace(src, encoding=enc), *args)
        except _WrongEncoding:
            continue
    raise ReadError(src.path, "cannot decode the text")  # pragma: no cover (latin-1 decodes)


def _csv_options(src, names, delimiter, columns, column_types, threads: bool, bad):
    import pyarrow.csv as pacsv

    def on_invalid(row) -> str:
        bad.append((row.number, row.actual_columns, row.text))
        return "skip"  # collected, then raised as an error: never silently dropped

    return dict(
        read_options=pacsv.ReadOptions(
            column_names=names,
            skip_rows=1,
            use_threads=threads,
            block_size=1 << 22,
            encoding=src.encoding,
        ),
        parse_options=pacsv.ParseOptions(delimiter=delimiter, invalid_row_handler=on_invalid),
        convert_options=pacsv.ConvertOptions(
            include_columns=list(columns) if columns is not None else None,
            column_types=column_types or None,
            strings_can_be_null=True,
        ),
    )


def _conversion_column(exc: Exception, names: list[str]) -> tuple[str, str] | None:
    m = re.search(r"In CSV column #(\d+): .*?conversion error to (\w+)", str(exc))
    if not m or int(m.group(1)) >= len(names):
        return None
    return names[int(m.group(1))], m.group(2)


def _csv_table(src, head, delimiter, columns) -> pd.DataFrame:
    return _try_encodings(_csv_table_encoded, src, head, delimiter, columns)


def _csv_table_encoded(src, head, delimiter, columns) -> pd.DataFrame:
    import pyarrow.csv as pacsv

    names = _csv_header(src, head, delimiter)
    _check_columns(src.path, names, columns)
    bad: list = []
    opts = _csv_options(src, names, delimiter, columns, None, True, bad)
    with src.errors():
        fh = src.open()
        try:
            table = pacsv.read_csv(fh, **opts)
        except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
            if _is_encoding_error(exc) and src.encoding != _ENCODINGS[-1]:
                raise _WrongEncoding from None
            raise ReadError(src.path, f"cannot parse {_what(delimiter)}: {exc}") from None
        finally:
            fh.close()
    _check_decoded(src, table.schema)
    if bad:
        raise _ragged_error(src, delimiter, len(names), bad)
    if table.num_rows == 0:
        raise ReadError(src.path, _NO_ROWS, line=2)
    return _to_pandas(table, release=True)


def _what(delimiter: str) -> str:
    return "TSV" if delimiter == "\t" else "CSV"


def _stream_types(src, names, delimiter, columns) -> tuple[dict, set[str]]:
    """First pass of the streaming reader: settle every column's type over the whole file.

    pyarrow's streaming reader infers types from its first block only, so a later block
    with ``1.5`` in an integer column or text in a number column fails; the failing column
    is widened (null/int -> float64 -> string) and the pass restarted. The pass also finds
    malformed rows before any chunk is handed out, and the integer columns with missing
    values (read as float64 in every chunk, so that all chunks share their dtypes).
    """
    import pyarrow.csv as pacsv

    types: dict[str, pa.DataType] = {}
    for _ in range(2 * len(names) + 1):
        bad: list = []
        opts = _csv_options(src, names, delimiter, columns, types, True, bad)
        int_with_nulls: set[str] = set()
        schema = None
        n_rows = 0
        try:
            with src.errors():
                fh = src.open()
                try:
                    reader = pacsv.open_csv(fh, **opts)
                    schema = reader.schema
                    _check_decoded(src, schema)
                    for batch in reader:
                        n_rows += batch.num_rows
                        for f, col in zip(batch.schema, batch.columns, strict=True):
                            if pa.types.is_integer(f.type) and col.null_count:
                                int_with_nulls.add(f.name)
                finally:
                    fh.close()
        except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
            if _is_encoding_error(exc) and src.encoding != _ENCODINGS[-1]:
                raise _WrongEncoding from None
            hit = _conversion_column(exc, names)
            if hit is None:
                raise ReadError(src.path, f"cannot parse {_what(delimiter)}: {exc}") from None
            name, target = hit
            types[name] = pa.float64() if target in ("null", "int64") else pa.string()
            continue
        if bad:
            raise _ragged_error(src, delimiter, len(names), bad)
        if n_rows == 0:
            raise ReadError(src.path, _NO_ROWS, line=2)
        for f in schema:
            types.setdefault(f.name, f.type)
        return types, int_with_nulls
    raise ReadError(src.path, "cannot settle the column types")  # pragma: no cover


def _csv_reader(src, head, delimiter, columns, chunksize) -> _Frames:
    if chunksize is None:
        return lambda: iter([_csv_table(src, head, delimiter, columns)])
    return _try_encodings(_csv_stream, src, head, delimiter, columns, chunksize)


def _csv_stream(src, head, delimiter, columns, chunksize) -> _Frames:
    import pyarrow.csv as pacsv

    names = _csv_header(src, head, delimiter)
    _check_columns(src.path, names, columns)
    types, int_with_nulls = _stream_types(src, names, delimiter, columns)
    for name in int_with_nulls:
        types[name] = pa.float64()

    def frames() -> Iterator[pd.DataFrame]:
        bad: list = []
        opts = _csv_options(src, names, delimiter, columns, types, True, bad)
        with src.errors():
            fh = src.open()
            try:
                for batch in pacsv.open_csv(fh, **opts):
                    yield _to_pandas(pa.Table.from_batches([batch]))
            finally:
                fh.close()

    return lambda: _rechunk(frames(), chunksize)


# --------------------------------------------------------------------------------------
# Zeek TSV


@dataclass
class _ZeekHeader:
    separator: str
    set_separator: str
    empty: str
    unset: str
    fields: list[str]
    types: list[str]
    n_lines: int  # header lines before the first data line


def _zeek_unescape(value: str) -> str:
    return re.sub(r"\\x([0-9a-fA-F]{2})", lambda m: chr(int(m.group(1), 16)), value)


def _zeek_header(src: _Source) -> _ZeekHeader:
    meta: dict[str, tuple[int, list[str]]] = {}
    sep = "\t"
    n = 0
    with src.errors():
        for n, raw in enumerate(_text_lines(src), start=1):
            line = raw.rstrip("\r\n")
            if n == 1 and line.startswith("\ufeff"):
                line = line[1:]
            if not line.startswith("#"):
                n -= 1
                break
            if line.startswith("#separator"):
                # the one directive separated by a space: it defines the separator
                sep = _zeek_unescape(line[len("#separator") :].strip()) or "\t"
                continue
            key, *values = line[1:].split(sep)
            meta.setdefault(key, (n, values))
    if "fields" not in meta:
        raise ReadError(src.path, "Zeek log without a #fields header line")
    fields_line, raw_fields = meta["fields"]
    fields = _clean_names(src.path, raw_fields, line=fields_line)
    if "types" in meta:
        types_line, types = meta["types"]
        if len(types) != len(fields):
            raise ReadError(
                src.path,
                f"#types has {len(types)} entries but #fields has {len(fields)}",
                line=types_line,
            )
    else:
        types = ["string"] * len(fields)

    def one(key: str, default: str) -> str:
        return _zeek_unescape(meta[key][1][0]) if key in meta and meta[key][1] else default

    return _ZeekHeader(
        separator=sep,
        set_separator=one("set_separator", ","),
        empty=one("empty_field", "(empty)"),
        unset=one("unset_field", "-"),
        fields=fields,
        types=list(types),
        n_lines=n,
    )


def _zeek_arrow_type(zeek_type: str) -> pa.DataType:
    if zeek_type in _ZEEK_INT:
        return pa.int64()
    if zeek_type in _ZEEK_FLOAT:
        return pa.float64()
    if zeek_type == "bool":
        return pa.bool_()
    return pa.string()  # string, addr, subnet, enum, set[...], vector[...], ...


def _zeek_options(h: _ZeekHeader, columns, bad):
    import pyarrow.csv as pacsv

    def on_invalid(row) -> str:
        if row.text.startswith("#"):
            return "skip"  # the #close trailer (or another comment line)
        bad.append((row.number, row.actual_columns, row.text))
        return "skip"

    return dict(
        read_options=pacsv.ReadOptions(
            column_names=h.fields, skip_rows=h.n_lines, use_threads=False, block_size=1 << 22
        ),
        parse_options=pacsv.ParseOptions(
            delimiter=h.separator,
            quote_char=False,  # Zeek escapes, it never quotes
            invalid_row_handler=on_invalid,
        ),
        convert_options=pacsv.ConvertOptions(
            include_columns=list(columns) if columns is not None else None,
            column_types={f: _zeek_arrow_type(t) for f, t in zip(h.fields, h.types, strict=True)},
            null_values=[h.unset],
            strings_can_be_null=True,
            true_values=["T"],
            false_values=["F"],
        ),
    )


def _zeek_batches(src, h, columns) -> Iterator[pa.RecordBatch]:
    import pyarrow.csv as pacsv

    bad: list = []
    opts = _zeek_options(h, columns, bad)
    with src.errors():
        fh = src.open()
        try:
            try:
                for batch in pacsv.open_csv(fh, **opts):
                    if bad:
                        break
                    yield batch
            except pa.ArrowInvalid as exc:
                hit = _conversion_column(exc, h.fields)
                m = re.search(r"invalid value '([^']*)'", str(exc))
                if hit is not None:
                    zt = h.types[h.fields.index(hit[0])]
                    value = f" {m.group(1)!r}" if m else ""
                    raise ReadError(
                        src.path, f"invalid Zeek {zt} value{value}", column=hit[0]
                    ) from None
                raise ReadError(src.path, f"cannot parse Zeek log: {exc}") from None
        finally:
            fh.close()
    if bad:
        number, actual, text = bad[0]
        snippet = text if len(text) <= 60 else text[:57] + "..."
        raise ReadError(
            src.path,
            f"Zeek log line has {actual} fields, #fields declares {len(h.fields)} ({snippet!r})",
            line=number,
        )


def _zeek_frame(h: _ZeekHeader, table: pa.Table) -> pd.DataFrame:
    df = _to_pandas(table, ints_nullable=True)
    for name in df.columns:
        if not pd.api.types.is_string_dtype(df[name].dtype):
            continue
        # "(empty)" is an empty set / string, not a missing value
        df[name] = df[name].mask(df[name] == h.empty, "")
    return df


def _zeek_reader(src, columns, chunksize) -> tuple[_Frames, Any]:
    h = _zeek_header(src)
    _check_columns(src.path, h.fields, columns)

    def locate(i: int) -> dict[str, int]:
        # Zeek writes no blank lines and no comments before #close: line = header + row
        return {"line": h.n_lines + i + 1}

    def frames() -> Iterator[pd.DataFrame]:
        for b in _zeek_batches(src, h, columns):
            yield _zeek_frame(h, pa.Table.from_batches([b]))

    def whole() -> Iterator[pd.DataFrame]:
        parts = list(frames())
        if parts:
            yield pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
            return
        fields = zip(h.fields, h.types, strict=True)
        empty = pa.schema([(f, _zeek_arrow_type(t)) for f, t in fields]).empty_table()
        yield _zeek_frame(h, empty if columns is None else empty.select(list(columns)))

    if chunksize is None:
        return whole, locate
    return (lambda: _rechunk(frames(), chunksize)), locate


# --------------------------------------------------------------------------------------
# JSON / Zeek JSON


def _json_python(src: _Source) -> pd.DataFrame:
    """Line-by-line fallback: exact line numbers for bad JSON, mixed-type columns as strings."""
    records = []
    with src.errors():
        for n, raw in enumerate(_text_lines(src), start=1):
            line = raw.strip().lstrip("\ufeff")
            if not line:
                continue
            try:
                obj = json.loads(line)
            except ValueError as exc:
                raise ReadError(src.path, f"invalid JSON ({exc.msg})", line=n) from None
            if not isinstance(obj, dict):
                raise ReadError(src.path, "a JSON Lines row must be an object", line=n)
            records.append(obj)
    df = pd.DataFrame.from_records(records)
    for name in df.columns:
        col = df[name]
        if col.dtype != object:
            continue
        vals = [v for v in col if v is not None and not (isinstance(v, float) and math.isnan(v))]
        if vals and all(isinstance(v, int | float) and not isinstance(v, bool) for v in vals):
            df[name] = pd.to_numeric(col)
        else:
            df[name] = pd.array([None if v is None else _json_text(v) for v in col], dtype="str")
    return df


def _json_text(v) -> str:
    if isinstance(v, list):
        return ",".join(_json_text(x) for x in v)
    if isinstance(v, dict):
        return json.dumps(v)
    return str(v)


def _flatten_lists(table: pa.Table) -> pa.Table:
    """Struct columns -> dotted columns; list columns (Zeek sets/vectors) -> joined strings."""
    while any(pa.types.is_struct(f.type) for f in table.schema):
        table = table.flatten()
    for i, f in enumerate(table.schema):
        if pa.types.is_list(f.type) or pa.types.is_large_list(f.type):
            joined = [None if v is None else _json_text(v) for v in table.column(i).to_pylist()]
            table = table.set_column(i, f.name, pa.array(joined, pa.string()))
    return table


def _read_json(src: _Source, head: bytes, zeek: bool, columns) -> pd.DataFrame:
    import pyarrow.json as pajson

    text = head[len(_BOM) :] if head.startswith(_BOM) else head
    if text.lstrip().startswith(b"["):
        with src.errors():
            fh = src.open()
            try:
                df = pd.read_json(io.BytesIO(fh.read()), orient="records", dtype=True)
            except ValueError as exc:
                raise ReadError(src.path, f"invalid JSON ({exc})") from None
            finally:
                fh.close()
    else:
        try:
            with src.errors():
                fh = src.open()
                try:
                    table = pajson.read_json(fh)
                finally:
                    fh.close()
            df = _to_pandas(_flatten_lists(table), ints_nullable=zeek)
        except pa.ArrowInvalid:
            # a malformed line, or a column that changes type: the Python reader gives the
            # line number, or keeps the mixed column as strings
            df = _json_python(src)
            if zeek:
                for name in df.columns:
                    if df[name].dtype.kind == "i":
                        df[name] = df[name].astype("Int64")
                    elif df[name].dtype.kind == "f" and _all_integral(df[name]):
                        df[name] = df[name].astype("Int64")
    df.columns = _clean_names(src.path, df.columns, line=None)
    if zeek and "ts" in df.columns:
        df["ts"] = _epoch_seconds(src.path, df["ts"])
    if columns is not None:
        _check_columns(src.path, list(df.columns), columns)
        df = df[list(columns)]
    return df


def _all_integral(col: pd.Series) -> bool:
    v = col.to_numpy(dtype=float)
    v = v[~np.isnan(v)]
    return v.size > 0 and bool(np.all(v == np.round(v)))


def _epoch_seconds(path: Path, ts: pd.Series) -> pd.Series:
    """Zeek's ``ts`` as float64 seconds since the epoch (numbers pass; ISO strings parse)."""
    if ts.dtype.kind in "fiu" or isinstance(ts.dtype, pd.Int64Dtype):
        return ts.astype("float64")
    try:
        dt = pd.to_datetime(ts, utc=True, format="ISO8601")
    except (ValueError, TypeError) as exc:
        raise ReadError(path, f"unreadable timestamp ({exc})", column="ts") from None
    missing = dt.isna().to_numpy()
    ns = dt.dt.as_unit("ns").array.asi8.copy()
    ns[missing] = 0
    # whole seconds + fraction: the same float as parsing Zeek's "1700000001.250000" text
    out = (ns // 1_000_000_000).astype("float64") + (ns % 1_000_000_000) / 1e9
    out[missing] = np.nan
    return pd.Series(out, index=ts.index, name=ts.name)


# --------------------------------------------------------------------------------------
# Parquet / Arrow IPC


def _binary_source(src: _Source) -> Any:
    if src.compression is None:
        return str(src.path)
    with src.errors():
        fh = src.open()
        try:
            return pa.BufferReader(fh.read())
        finally:
            fh.close()


def _parquet_file(src: _Source):
    import pyarrow.parquet as pq

    if src.compression is None:
        size = src.path.stat().st_size
        with open(src.path, "rb") as fh:
            start = fh.read(4)
            fh.seek(max(size - 4, 0))
            end = fh.read(4)
        if start != b"PAR1":
            raise ReadError(src.path, "not a Parquet file (no PAR1 magic bytes at the start)")
        if size < 12 or end != b"PAR1":
            raise ReadError(
                src.path, "truncated or corrupt Parquet file (no PAR1 magic bytes at the end)"
            )
    try:
        return pq.ParquetFile(_binary_source(src))
    except (pa.ArrowInvalid, OSError) as exc:
        raise ReadError(src.path, f"not a valid Parquet file ({exc})") from None


def _parquet_reader(src, columns, chunksize) -> _Frames:
    pf = _parquet_file(src)
    raw_names = pf.schema_arrow.names
    names = _clean_names(src.path, raw_names, line=None)
    _check_columns(src.path, names, columns)
    wanted = None if columns is None else [raw_names[names.index(c)] for c in columns]
    kept = names if columns is None else list(columns)

    def frames() -> Iterator[pd.DataFrame]:
        try:
            if chunksize is None:
                yield _to_pandas(pf.read(columns=wanted).rename_columns(kept), release=True)
                return
            for batch in pf.iter_batches(batch_size=chunksize, columns=wanted):
                yield _to_pandas(pa.Table.from_batches([batch]).rename_columns(kept))
        except (pa.ArrowInvalid, OSError) as exc:
            raise ReadError(src.path, f"corrupt Parquet data ({exc})") from None

    return frames


def _arrow_table(src: _Source) -> pa.Table:
    import pyarrow.feather as feather

    source = _binary_source(src)
    try:
        return feather.read_table(source, memory_map=src.compression is None)
    except (pa.ArrowInvalid, OSError) as first:
        try:
            if isinstance(source, str):
                with pa.memory_map(source, "r") as fh:
                    return pa.ipc.open_stream(fh).read_all()
            source.seek(0)
            return pa.ipc.open_stream(source).read_all()
        except (pa.ArrowInvalid, OSError):
            raise ReadError(src.path, f"not a valid Arrow IPC / Feather file ({first})") from None


def _feather_reader(src, columns, chunksize) -> _Frames:
    table = _arrow_table(src)
    names = _clean_names(src.path, table.column_names, line=None)
    table = table.rename_columns(names)
    _check_columns(src.path, names, columns)
    if columns is not None:
        table = table.select(list(columns))
    return _slices(lambda: _to_pandas(table), table.num_rows, chunksize, table)


def _slices(whole, n_rows: int, chunksize: int | None, table: pa.Table | None = None) -> _Frames:
    """Frames from an in-memory table (Arrow slices are zero-copy) or DataFrame."""
    if chunksize is None:
        return lambda: iter([whole()])
    if table is not None:
        return lambda: (_to_pandas(table.slice(i, chunksize)) for i in range(0, n_rows, chunksize))
    df = whole()
    return lambda: (_reset(df.iloc[i : i + chunksize]) for i in range(0, n_rows, chunksize))


# --------------------------------------------------------------------------------------
# public entry points


def _iter_table(path, format, delimiter, infinity, columns, chunksize):
    path = Path(path)
    if format not in ("auto", *FORMATS):
        raise ReadError(path, f"unknown format {format!r}; expected 'auto' or one of {FORMATS}")
    if infinity not in INFINITY_POLICIES:
        raise ReadError(path, f"unknown infinity policy {infinity!r}; expected {INFINITY_POLICIES}")
    if chunksize is not None and (not isinstance(chunksize, int) or chunksize < 1):
        raise ReadError(path, f"chunksize must be a positive integer, got {chunksize!r}")
    if columns is not None:
        columns = [str(c) for c in columns]
    src = _open_source(path)
    head = _read_head(src)
    fmt = _detect(src, head) if format == "auto" else format
    text_format = fmt in ("csv", "tsv", "zeek", "json", "zeek-json")
    if text_format and not head.removeprefix(_BOM).strip():
        raise ReadError(path, "empty file")
    locate = _by_row
    if fmt == "parquet":
        frames = _parquet_reader(src, columns, chunksize)
    elif fmt == "feather":
        frames = _feather_reader(src, columns, chunksize)
    elif fmt == "zeek":
        frames, locate = _zeek_reader(src, columns, chunksize)
    elif fmt in ("json", "zeek-json"):
        df = _read_json(src, head, fmt == "zeek-json", columns)
        frames = _slices(lambda: df, len(df), chunksize)
    else:
        if delimiter is None:
            if fmt == "tsv":
                delimiter = "\t"
            else:
                delimiter = _sniff_delimiter(_first_line(head).decode("utf-8", errors="replace"))
        if len(delimiter) != 1:
            raise ReadError(path, f"delimiter must be one character, got {delimiter!r}")
        frames = _csv_reader(src, head, delimiter, columns, chunksize)
        locate = functools.partial(_csv_data_line, src, delimiter)

    return _with_policy(frames, infinity, src.path, locate, chunksize is not None)


def _by_row(i: int) -> dict[str, int]:
    return {"row": i + 1}


def _with_policy(frames: _Frames, infinity, path, locate, streaming) -> Iterator[pd.DataFrame]:
    # clip in chunks: a first pass finds each column's finite range over the whole file,
    # so that every chunk is clipped to the same values as a whole-file read
    bounds = _finite_bounds(frames()) if streaming and infinity == "clip" else None
    offset = 0
    for df in frames():
        yield _apply_infinity(df, infinity, path, locate, offset, bounds)
        offset += len(df)


def read_table(
    path: str | os.PathLike,
    *,
    format: str = "auto",
    delimiter: str | None = None,
    infinity: str = "nan",
    columns: Sequence[str] | None = None,
    chunksize: int | None = None,
) -> pd.DataFrame | Iterator[pd.DataFrame]:
    """Read one flow-record file into a DataFrame.

    See the module docstring for the formats, the Zeek dtype mapping and the handling of
    missing values.

    Parameters
    ----------
    path : str or PathLike
        CSV/TSV, Zeek TSV or JSON log, JSON Lines, Parquet or Arrow IPC/Feather file,
        optionally gzip/bzip2/xz/zstd-compressed (recognised by magic bytes).
    format : {"auto", "csv", "tsv", "parquet", "feather", "zeek", "zeek-json", "json"}
        ``"auto"`` (default) detects it with :func:`detect_format`.
    delimiter : str, optional
        One character, for CSV/TSV; sniffed from the header line when None.
    infinity : {"nan", "clip", "error"}
        What to do with infinite values in float columns: ``"nan"`` (default) treats
        them as missing (NaN); ``"clip"`` replaces ``+inf`` / ``-inf`` with the column's
        largest / smallest finite value in the whole file (when streaming, an extra
        pass over the file finds them); ``"error"`` raises :class:`ReadError` naming
        the file, the 1-based line (data row for Parquet/Arrow/JSON) and the column.
    columns : sequence of str, optional
        Read only these columns (names after whitespace stripping), in this order.
    chunksize : int, optional
        Return an iterator of DataFrames of ``chunksize`` rows each (the last may be
        shorter), every chunk with the same columns and dtypes. CSV/TSV files are read
        twice (a first pass settles the column types and finds malformed rows before any
        chunk is returned); Zeek TSV, Parquet and Arrow stream in one pass with bounded
        memory (a malformed Zeek line raises when the stream reaches it); JSON is read
        whole and then cut.

    Returns
    -------
    DataFrame of shape (n_rows, n_columns), or iterator of DataFrames
        Index ``0 .. n_rows-1`` (per chunk); column names stripped of whitespace.
        Numbers are int64 / float64 (an integer column with missing values is float64,
        except Zeek integers, which are nullable ``Int64``), booleans nullable
        ``boolean``, text the pandas string dtype.

    Raises
    ------
    ReadError
        Missing, unreadable or empty file; corrupt compression ("not a valid gzip file");
        a row with the wrong number of fields (names the line); Zeek ``#types`` /
        ``#fields`` length mismatch; truncated Parquet; unknown column; infinite value
        under ``infinity="error"``. The message is one line.
    """
    it = _iter_table(path, format, delimiter, infinity, columns, chunksize)
    if chunksize is None:
        return next(it)
    return it


def gateway_id(path: str | os.PathLike) -> str:
    """A gateway id from a file name: the name without known suffixes.

    ``conn.log.gz`` -> ``conn``, ``gw-03.csv`` -> ``gw-03``, ``site.a.parquet`` -> ``site.a``.
    """
    name = Path(path).name
    while True:
        stem, removed = _strip_suffixes(name)
        if not removed or stem == name:
            return stem
        if any(s in _FORMAT_SUFFIX for s in removed):
            return stem
        name = stem


def _supported(path: Path) -> bool:
    _stem, removed = _strip_suffixes(path.name)
    return any(s in _FORMAT_SUFFIX for s in removed)


def gateway_files(path_or_paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[Path]:
    """Expand files and directories into the list of files to read, one per gateway.

    Parameters
    ----------
    path_or_paths : path or iterable of paths
        A file is kept as given; a directory contributes its (non-hidden) files with a
        supported extension (``.csv .tsv .tab .txt .log .json .jsonl .ndjson .parquet
        .pq .feather .arrow .ipc``, optionally followed by ``.gz .bz2 .xz .zst``), sorted
        by name; subdirectories are not searched.

    Returns
    -------
    list of Path

    Raises
    ------
    ReadError
        A path that does not exist, or a directory with no supported file.
    """
    if isinstance(path_or_paths, str | os.PathLike):
        items: list = [path_or_paths]
    else:
        items = list(path_or_paths)
    out: list[Path] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            found = sorted(
                f
                for f in p.iterdir()
                if f.is_file() and not f.name.startswith(".") and _supported(f)
            )
            if not found:
                raise ReadError(p, "directory has no supported flow-record file")
            out.extend(found)
        elif p.exists():
            out.append(p)
        else:
            raise ReadError(p, "no such file or directory")
    return out


def read_many(
    paths: str | os.PathLike | Iterable[str | os.PathLike], **kwargs: Any
) -> dict[str, pd.DataFrame]:
    """Read one file per gateway.

    Parameters
    ----------
    paths : path or iterable of paths
        Files and/or directories, expanded by :func:`gateway_files`.
    **kwargs
        Passed to :func:`read_table` (``format``, ``delimiter``, ``infinity``,
        ``columns``; not ``chunksize``).

    Returns
    -------
    dict of str to DataFrame
        Gateway id (:func:`gateway_id`, e.g. ``conn.log.gz`` -> ``conn``) to its table, in
        file order. Files whose ids collide are keyed by their full file names instead.

    Raises
    ------
    ReadError
        From :func:`read_table`, or two files with the same file name (naming both).
    """
    if "chunksize" in kwargs:
        raise TypeError("read_many does not stream: read_table(..., chunksize=) per file")
    files = gateway_files(paths)
    ids = [gateway_id(f) for f in files]
    keys: list[str] = []
    for f, gid in zip(files, ids, strict=True):
        key = gid if ids.count(gid) == 1 else f.name
        if key in keys:
            other = files[keys.index(key)]
            raise ReadError(
                f, f"same gateway id {key!r} as {str(other)!r}: rename one of the files"
            )
        keys.append(key)
    return {k: read_table(f, **kwargs) for k, f in zip(keys, files, strict=True)}

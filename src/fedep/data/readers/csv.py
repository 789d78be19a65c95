"""CSV / TSV: pyarrow's parser, whole-file or streamed in chunks, with an encoding
fallback and exact line numbers for malformed rows; a whole file of plain numbers goes
through pandas' C parser first (faster on few cores), and anything it would read
differently falls back to pyarrow."""

from __future__ import annotations

import csv
import functools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import pandas as pd
import pyarrow as pa

from fedep.data.readers.detect import _first_line, header_looks_like_data, no_header_message
from fedep.data.readers.frames import (
    _check_columns,
    _clean_names,
    _conversion_column,
    _Frames,
    _rechunk,
    _to_pandas,
)
from fedep.data.readers.ranges import read_ranges
from fedep.data.readers.source import ReadError, _Source, _text_lines

# CSV text that is not UTF-8 is read as Windows-1252 (CIC-IDS2017's labels hold byte 0x96,
# an en dash), else Latin-1, which decodes any byte
_ENCODINGS = ("utf-8", "cp1252", "latin-1")
_NO_ROWS = "file has a header but no data rows"  # almost always a truncated export
_BLOCK_SIZE = 1 << 22  # bytes per pyarrow parse block (and of the type-inference block)


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
    if header_looks_like_data(fields):
        raise ReadError(src.path, no_header_message(src.path, fields, delimiter), line=1)
    return _clean_names(src.path, fields)


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
            block_size=_BLOCK_SIZE,
            encoding=src.encoding,
        ),
        parse_options=pacsv.ParseOptions(delimiter=delimiter, invalid_row_handler=on_invalid),
        convert_options=pacsv.ConvertOptions(
            include_columns=list(columns) if columns is not None else None,
            column_types=column_types or None,
            strings_can_be_null=True,
        ),
    )


@contextmanager
def _open_csv(src: _Source, opts: dict) -> Iterator:
    """pyarrow's streaming CSV reader over ``src`` (``opts``: :func:`_csv_options`); the
    file is closed on exit, I/O and decompression failures become ReadErrors."""
    import pyarrow.csv as pacsv

    with src.errors():
        fh = src.open()
        try:
            reader = pacsv.open_csv(fh, **opts)
            try:
                yield reader
            finally:
                reader.close()
        finally:
            fh.close()


def _read_csv(src: _Source, opts: dict) -> pa.Table:
    """The whole of ``src`` as one table (pyarrow's multi-threaded reader)."""
    import pyarrow.csv as pacsv

    with src.errors():
        fh = src.open()
        try:
            return pacsv.read_csv(fh, **opts)
        finally:
            fh.close()


def _csv_table(src, head, delimiter, columns, text_columns=()) -> pd.DataFrame:
    return _try_encodings(_csv_table_encoded, src, head, delimiter, columns, text_columns)


def _text_types(names, columns, text_columns) -> dict[str, pa.DataType]:
    """pyarrow column types that keep ``text_columns`` (those read) as written."""
    read = set(names if columns is None else columns)
    return {c: pa.string() for c in text_columns if c in read}


def _csv_table_encoded(src, head, delimiter, columns, text_columns=()) -> pd.DataFrame:
    names = _csv_header(src, head, delimiter)
    _check_columns(src.path, names, columns)
    table = None
    text = _text_types(names, columns, text_columns)
    types = _first_block_types(src, names, delimiter, columns, text)
    fast = _numeric_table(src, names, delimiter, columns, types, text)
    if fast is not None:
        return fast
    if types:
        # The types pyarrow infers from the first block, given up front: parsing then
        # skips the inference (about 30 % less CPU time and a smaller peak). The whole
        # file's inferred type of a column is the first type (null, int64, ..., float64,
        # string) that every block converts to; a typed read that succeeds therefore
        # gives the same table. A later block that does not convert falls back to the
        # inferring read below.
        bad: list = []
        try:
            table = _read_csv(src, _csv_options(src, names, delimiter, columns, types, True, bad))
        except (pa.ArrowInvalid, UnicodeDecodeError):
            table = None
    if table is None:
        bad = []
        try:
            table = _read_csv(src, _csv_options(src, names, delimiter, columns, text, True, bad))
        except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
            if _is_encoding_error(exc) and src.encoding != _ENCODINGS[-1]:
                raise _WrongEncoding from None
            raise ReadError(src.path, f"cannot parse {_what(delimiter)}: {exc}") from None
    _check_decoded(src, table.schema)
    if bad:
        raise _ragged_error(src, delimiter, len(names), bad)
    if table.num_rows == 0:
        raise ReadError(src.path, _NO_ROWS, line=2)
    return _to_pandas(table, release=True)


_FAST_TYPES = (pa.int64(), pa.float64(), pa.string())


@functools.cache
def _fast_dtypes() -> dict[pa.DataType, object]:
    """The pandas dtype the pyarrow read gives each of _FAST_TYPES (text: pandas' string
    dtype, Arrow-backed)."""
    probe = pa.table({"i": [1], "f": [0.5], "s": ["a"]})
    df = _to_pandas(probe)
    return {pa.int64(): df["i"].dtype, pa.float64(): df["f"].dtype, pa.string(): df["s"].dtype}


def _numeric_table(src, names, delimiter, columns, types, text=None) -> pd.DataFrame | None:
    """The whole file by pandas' C parser when every column is a number or plain text.

    Tried only for a whole uncompressed UTF-8 file (no ``columns``: pandas' ``usecols``
    would let a row with too many fields through) whose every column pyarrow typed
    int64, float64 or string in the first block: pandas' parser reads such a file
    about 1.5x as fast as pyarrow's on two cores. It is read in byte ranges on
    threads, a chunk at a time, into one array per column
    (:func:`fedep.data.readers.ranges.read_ranges`, which says why: the peak). Every
    chunk must give every column the dtype the pyarrow read gives the first block's
    type, with no missing value and the default index; anything else gives None and
    the pyarrow read below, which also words the errors (line, column). That covers a
    parse error, text in a number column, a missing value (pandas and pyarrow know
    different markers), a row with too few fields (pandas pads it with NaN instead of
    refusing it) and a row one field too long (pandas would take its first field as
    an index). The numbers' dtypes are checked after the read, not given to pandas:
    given, they make its parse about twice as slow. One known difference remains: an
    integer written ``+5`` after the first block keeps its column int64 here, where
    pyarrow would make the column float64 (same values). The ``text`` columns (an
    identifier column read as written) are the exception: their dtype is given.
    """
    if columns is not None or src.compression is not None or src.encoding != "utf-8":
        return None
    if len(types) != len(names) or any(t not in _FAST_TYPES for t in types.values()):
        return None
    kinds = {c: _KINDS[types[c]] for c in names}
    if text:
        kinds.update(dict.fromkeys(text, "text"))
    return read_ranges(
        src.path, names, delimiter, kinds, _fast_dtypes()[pa.string()], as_text=list(text or ())
    )


_KINDS = {pa.int64(): "int", pa.float64(): "float", pa.string(): "text"}


def _first_block_types(src, names, delimiter, columns, text=None) -> dict[str, pa.DataType]:
    """The column types pyarrow infers from the file's first block (columns of null type,
    all empty there, left out; the ``text`` columns given as text); empty when that
    block cannot be read (the full read then reports why)."""
    opts = _csv_options(src, names, delimiter, columns, text, False, [])
    try:
        with _open_csv(src, opts) as reader:
            schema = reader.schema
    except (pa.ArrowInvalid, UnicodeDecodeError, ReadError):
        return {}
    if src.encoding == "utf-8" and any(pa.types.is_binary(f.type) for f in schema):
        return {}
    return {f.name: f.type for f in schema if not pa.types.is_null(f.type)}


def _what(delimiter: str) -> str:
    return "TSV" if delimiter == "\t" else "CSV"


def _stream_types(src, names, delimiter, columns, text=None) -> tuple[dict, set[str]]:
    """First pass of the streaming reader: settle every column's type over the whole file.

    pyarrow's streaming reader infers types from its first block only, so a later block
    with ``1.5`` in an integer column or text in a number column fails; the failing column
    is widened (null/int -> float64 -> string) and the pass restarted. The pass also finds
    malformed rows before any chunk is handed out, and the integer columns with missing
    values (read as float64 in every chunk, so that all chunks share their dtypes). The
    ``text`` columns are text from the start.
    """
    types: dict[str, pa.DataType] = dict(text or {})
    for _ in range(2 * len(names) + 1):
        bad: list = []
        opts = _csv_options(src, names, delimiter, columns, types, True, bad)
        int_with_nulls: set[str] = set()
        schema = None
        n_rows = 0
        try:
            with _open_csv(src, opts) as reader:
                schema = reader.schema
                _check_decoded(src, schema)
                for batch in reader:
                    n_rows += batch.num_rows
                    for f, col in zip(batch.schema, batch.columns, strict=True):
                        if pa.types.is_integer(f.type) and col.null_count:
                            int_with_nulls.add(f.name)
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


def _csv_reader(src, head, delimiter, columns, chunksize, text_columns=()) -> _Frames:
    if chunksize is None:
        return lambda: iter([_csv_table(src, head, delimiter, columns, text_columns)])
    return _try_encodings(_csv_stream, src, head, delimiter, columns, chunksize, text_columns)


def _csv_stream(src, head, delimiter, columns, chunksize, text_columns=()) -> _Frames:
    names = _csv_header(src, head, delimiter)
    _check_columns(src.path, names, columns)
    text = _text_types(names, columns, text_columns)
    types, int_with_nulls = _stream_types(src, names, delimiter, columns, text)
    for name in int_with_nulls:
        types[name] = pa.float64()

    def frames() -> Iterator[pd.DataFrame]:
        opts = _csv_options(src, names, delimiter, columns, types, True, [])
        with _open_csv(src, opts) as reader:
            for batch in reader:
                yield _to_pandas(pa.Table.from_batches([batch]))

    return lambda: _rechunk(frames(), chunksize)

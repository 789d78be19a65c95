"""Blocks of complete lines of a growing log (from :mod:`fedep.data.follow`) as tables.

:func:`parse_lines` parses the lines with the readers' own rules (Zeek TSV: its header's
separator, unset / empty markers and ``#types``, as :mod:`~fedep.data.readers.zeek`
reads whole files; Zeek JSON and JSON lines; CSV with the file's header line), vectorised
by ``pyarrow``. Unlike a whole-file read, a malformed line does not stop the block: it is
left out and named (file line and reason) in :attr:`ParsedLines.bad`, and the file line
of every row kept is in :attr:`ParsedLines.lines`.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson

from fedep.data.readers.frames import _clean_names, _to_pandas
from fedep.data.readers.source import ReadError
from fedep.data.readers.zeek import (
    _epoch_seconds,
    _flatten_lists,
    _zeek_arrow_type,
    _zeek_frame,
    _ZeekHeader,
    zeek_header,
)

__all__ = ["ParsedLines", "header_columns", "parse_lines"]

_SNIPPET = 60


@dataclass
class ParsedLines:
    """The rows of a block of lines.

    Attributes
    ----------
    frame : pandas.DataFrame, shape (n_rows, n_columns)
        The rows read (the columns asked for that the file has).
    lines : ndarray of int64, shape (n_rows,)
        The file line number of each row.
    bad : list of (int, str)
        The malformed lines left out: file line number and what is wrong.
    """

    frame: pd.DataFrame
    lines: np.ndarray
    bad: list[tuple[int, str]]


def _snippet(text: str) -> str:
    return text if len(text) <= _SNIPPET else text[: _SNIPPET - 3] + "..."


class _Headers:
    """Parsed headers, by their bytes (a followed file's header is parsed once)."""

    def __init__(self) -> None:
        self._zeek: dict[bytes, _ZeekHeader] = {}

    def zeek(self, path, header: bytes) -> _ZeekHeader:
        h = self._zeek.get(header)
        if h is None:
            if len(self._zeek) > 256:
                self._zeek.clear()
            h = self._zeek[header] = zeek_header(path, header)
        return h


_HEADERS = _Headers()


def header_columns(fmt: str, header: bytes, path, first: bytes = b"") -> list[str]:
    """The columns a file declares: a Zeek log's ``#fields``, a CSV header line, or the
    keys of a JSON line (``first``: the file's first data line)."""
    if fmt == "zeek":
        return list(_HEADERS.zeek(path, header).fields)
    if fmt == "csv":
        line = header.decode("utf-8", "replace").lstrip("\ufeff").rstrip("\r\n")
        return _clean_names(Path(path), line.split(","))
    if not first.strip():
        return []
    try:
        obj = json.loads(first)
    except ValueError:
        return []
    if not isinstance(obj, dict):
        return []
    table = _flatten_lists(pa.Table.from_pylist([obj]))
    return list(table.column_names)


def _line_starts(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Starts and ends (without the newline) of the lines of ``data``."""
    buf = np.frombuffer(data, dtype=np.uint8)
    nl = np.flatnonzero(buf == 10)
    ends = nl if data.endswith(b"\n") else np.append(nl, len(data))
    starts = np.concatenate(([0], ends[:-1] + 1)) if ends.size else np.zeros(0, np.int64)
    return starts.astype(np.int64), ends.astype(np.int64)


def _drop_lines(data: bytes, starts, ends, keep: np.ndarray) -> bytes:
    """``data`` without the lines where ``keep`` is False (joined by runs of kept lines:
    a ``#close`` trailer costs one slice, not one per line)."""
    flips = np.flatnonzero(np.diff(np.concatenate(([0], keep.astype(np.int8), [0]))))
    runs = zip(flips[0::2], flips[1::2] - 1, strict=True)  # first, last kept line of a run
    return b"".join(data[starts[a] : ends[b] + 1] for a, b in runs)


def parse_lines(
    fmt: str,
    header: bytes,
    data: bytes,
    *,
    path,
    first_line: int,
    columns: list[str] | None = None,
) -> ParsedLines:
    """Parse a block of complete lines of one file.

    Parameters
    ----------
    fmt : {"zeek", "json", "csv"}
    header : bytes
        The file's header lines (Zeek ``#`` lines; the CSV header line; empty for JSON).
    data : bytes
        Whole lines (the last may lack its newline).
    path : str or Path
        The file, for messages.
    first_line : int
        The file line number of the first line of ``data``.
    columns : list of str, optional
        The columns to keep (those the file lacks are left out; the caller checks).

    Returns
    -------
    ParsedLines
    """
    starts, ends = _line_starts(data)
    buf = np.frombuffer(data, dtype=np.uint8)
    numbers = np.arange(first_line, first_line + starts.size, dtype=np.int64)
    # blank lines and comment lines (a Zeek log's #close) carry no record
    empty = starts == ends
    first_byte = buf[np.minimum(starts, max(len(buf) - 1, 0))] if buf.size else starts
    comment = ~empty & (first_byte == ord("#")) if fmt == "zeek" else np.zeros_like(empty)
    keep = ~(empty | comment)
    if not keep.all():
        data = _drop_lines(data, starts, ends, keep)
        starts, ends = _line_starts(data)
        numbers = numbers[keep]
    if fmt == "zeek":
        return _zeek_block(_HEADERS.zeek(path, header), data, numbers, path, columns)
    if fmt == "json":
        return _json_block(data, starts, ends, numbers, path, columns)
    return _csv_block(header, data, numbers, path, columns)


def _ragged_rows(numbers, n_fields: int, declared: str, bad: list, rows_bad: list):
    """pyarrow's ``invalid_row_handler``: a row with the wrong number of fields is
    skipped, its block row noted in ``rows_bad`` and its file line (``numbers``) with the
    reason in ``bad`` ("has 5 fields, <declared> 7 (...)")."""

    def on_invalid(row) -> str:
        rows_bad.append(row.number - 1)
        bad.append(
            (
                int(numbers[row.number - 1]),
                f"has {row.actual_columns} fields, {declared} {n_fields} ({_snippet(row.text)!r})",
            )
        )
        return "skip"

    return on_invalid


def _zeek_block(h: _ZeekHeader, data: bytes, numbers, path, columns) -> ParsedLines:
    wanted = [c for c in (columns if columns is not None else h.fields) if c in h.fields]
    bad: list[tuple[int, str]] = []
    if not data:
        empty = pa.schema([(f, _zeek_arrow_type(h.types[h.fields.index(f)])) for f in wanted])
        return ParsedLines(_zeek_frame(h, empty.empty_table()), numbers[:0], bad)
    rows_bad: list[int] = []

    on_invalid = _ragged_rows(numbers, len(h.fields), "#fields declares", bad, rows_bad)

    types = {f: _zeek_arrow_type(t) for f, t in zip(h.fields, h.types, strict=True)}
    opts = dict(
        read_options=pacsv.ReadOptions(column_names=h.fields, use_threads=False),
        parse_options=pacsv.ParseOptions(
            delimiter=h.separator,
            quote_char=False,
            invalid_row_handler=on_invalid,
            newlines_in_values=False,
            ignore_empty_lines=False,
        ),  # fmt: skip
        convert_options=pacsv.ConvertOptions(
            include_columns=wanted,
            column_types={f: types[f] for f in wanted},
            null_values=[h.unset],
            strings_can_be_null=True,
            true_values=["T"],
            false_values=["F"],
        ),  # fmt: skip
    )
    try:
        table = pacsv.read_csv(io.BytesIO(data), **opts)
    except pa.ArrowInvalid:
        # a value its #types refuses: find the lines (every column as text), leave them out
        return _zeek_bad_values(h, data, numbers, path, wanted, types, opts)
    kept = np.delete(numbers, rows_bad) if rows_bad else numbers
    return ParsedLines(_zeek_frame(h, table), kept, bad)


def _zeek_bad_values(h, data, numbers, path, wanted, types, opts) -> ParsedLines:
    bad: list[tuple[int, str]] = []
    rows_bad: list[int] = []

    on_invalid = _ragged_rows(numbers, len(h.fields), "#fields declares", bad, rows_bad)

    text_opts = dict(opts)
    text_opts["parse_options"] = pacsv.ParseOptions(
        delimiter=h.separator, quote_char=False, invalid_row_handler=on_invalid,
        ignore_empty_lines=False,
    )  # fmt: skip
    text_opts["convert_options"] = pacsv.ConvertOptions(
        include_columns=wanted, column_types=dict.fromkeys(wanted, pa.string()),
        null_values=[h.unset], strings_can_be_null=True,
    )  # fmt: skip
    table = pacsv.read_csv(io.BytesIO(data), **text_opts)
    kept_numbers = np.delete(numbers, rows_bad) if rows_bad else numbers
    ok = np.ones(table.num_rows, dtype=bool)
    for f in wanted:
        t = types[f]
        if pa.types.is_string(t):
            continue
        col = table.column(f).to_pandas()
        if pa.types.is_boolean(t):
            fails = col.notna() & ~col.isin(["T", "F"])
        else:
            fails = col.notna() & pd.to_numeric(col, errors="coerce").isna()
            if pa.types.is_integer(t):
                num = pd.to_numeric(col, errors="coerce")
                fails |= num.notna() & (num != np.round(num))
        for i in np.flatnonzero(fails.to_numpy() & ok):
            zt = h.types[h.fields.index(f)]
            bad.append((int(kept_numbers[i]), f"invalid Zeek {zt} value {col.iloc[i]!r} in "
                        f"column {f!r}"))  # fmt: skip
        ok &= ~fails.to_numpy()
    typed = []
    for f in wanted:
        c = table.column(f).filter(pa.array(ok))
        t = types[f]
        if pa.types.is_boolean(t):
            c = pc.equal(c, "T")
        elif not pa.types.is_string(t):
            c = pa.array(pd.to_numeric(c.to_pandas()).to_numpy(), type=pa.float64()).cast(t)
        typed.append(c)
    table = pa.table(typed, names=wanted)
    bad.sort()
    return ParsedLines(_zeek_frame(h, table), kept_numbers[ok], bad)


def _json_block(data: bytes, starts, ends, numbers, path, columns) -> ParsedLines:
    bad: list[tuple[int, str]] = []
    if not data:
        return ParsedLines(pd.DataFrame(columns=columns or []), numbers[:0], bad)
    try:
        table = pajson.read_json(io.BytesIO(data))
        kept = numbers
    except pa.ArrowInvalid:
        # a malformed line (or a column changing type): line by line
        records, idx = [], []
        for i, (s, e) in enumerate(zip(starts, ends, strict=True)):
            text = data[s:e]
            try:
                obj = json.loads(text)
            except ValueError as exc:
                bad.append((int(numbers[i]), f"invalid JSON ({exc.msg})"))
                continue
            if not isinstance(obj, dict):
                bad.append((int(numbers[i]), "a JSON Lines row must be an object"))
                continue
            records.append(obj)
            idx.append(i)
        kept = numbers[idx]
        try:
            table = pa.Table.from_pylist(records) if records else pa.table({})
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            df = pd.DataFrame.from_records(records)
            return ParsedLines(_json_columns(df, path, columns), kept, bad)
    df = _to_pandas(_flatten_lists(table), ints_nullable=True)
    return ParsedLines(_json_columns(df, path, columns), kept, bad)


def _json_columns(df: pd.DataFrame, path, columns) -> pd.DataFrame:
    df.columns = _clean_names(Path(path), [str(c) for c in df.columns], line=None)
    if "ts" in df.columns:
        df["ts"] = _epoch_seconds(Path(path), df["ts"])
    if columns is not None:
        df = df[[c for c in columns if c in df.columns]]
    return df


def _csv_block(header: bytes, data: bytes, numbers, path, columns) -> ParsedLines:
    names = header_columns("csv", header, path)
    bad: list[tuple[int, str]] = []
    rows_bad: list[int] = []

    on_invalid = _ragged_rows(numbers, len(names), "the header", bad, rows_bad)

    wanted = [c for c in (columns if columns is not None else names) if c in names]
    if not data:
        return ParsedLines(pd.DataFrame(columns=wanted), numbers[:0], bad)
    try:
        table = pacsv.read_csv(
            io.BytesIO(data),
            read_options=pacsv.ReadOptions(column_names=names, use_threads=False),
            parse_options=pacsv.ParseOptions(invalid_row_handler=on_invalid),
            convert_options=pacsv.ConvertOptions(include_columns=wanted),
        )
    except pa.ArrowInvalid as exc:
        raise ReadError(path, f"cannot parse CSV lines: {exc}", line=int(numbers[0])) from None
    kept = np.delete(numbers, rows_bad) if rows_bad else numbers
    return ParsedLines(_to_pandas(table), kept, bad)

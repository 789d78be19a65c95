"""Zeek logs: ASCII (TSV) with their ``#`` header, and JSON (Zeek JSON or generic JSON
Lines / a JSON array)."""

from __future__ import annotations

import io
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from fedep.data.readers.frames import (
    _check_columns,
    _clean_names,
    _conversion_column,
    _Frames,
    _rechunk,
    _to_pandas,
)
from fedep.data.readers.source import _BOM, ReadError, _open_source, _Source, _text_lines

_ZEEK_INT = {"count", "int", "port"}
_ZEEK_FLOAT = {"double", "interval", "time"}


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
    with src.errors():
        return _parse_zeek_header(src.path, _text_lines(src))


def zeek_header(path, header: bytes) -> _ZeekHeader:
    """The header of a Zeek TSV log from its ``#`` lines (``header``: the bytes of the
    file's first lines); a :class:`ReadError` naming ``path`` if it has no ``#fields``."""
    text = header.decode("utf-8", "replace")
    return _parse_zeek_header(Path(path), iter(text.splitlines(keepends=True)))


def _parse_zeek_header(path: Path, lines) -> _ZeekHeader:
    meta: dict[str, tuple[int, list[str]]] = {}
    sep = "\t"
    n = 0
    for n, raw in enumerate(lines, start=1):
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
        raise ReadError(path, "Zeek log without a #fields header line")
    fields_line, raw_fields = meta["fields"]
    fields = _clean_names(path, raw_fields, line=fields_line)
    if "types" in meta:
        types_line, types = meta["types"]
        if len(types) != len(fields):
            raise ReadError(
                path,
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


def zeek_unset_field(path) -> str:
    """The unset-field marker a Zeek TSV log declares (``#unset_field``, usually ``-``):
    what a copy of its records writes for a missing value."""
    return _zeek_header(_open_source(Path(path))).unset


def zeek_header_lines(path) -> int:
    """Lines before a Zeek TSV log's first record (``#separator`` ... ``#types``): record
    ``i`` (0-based) is on line ``zeek_header_lines(path) + i + 1`` (Zeek writes no blank
    line and no comment before ``#close``)."""
    return _zeek_header(_open_source(Path(path))).n_lines


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


def _read_json(src: _Source, head: bytes, zeek: bool, columns, text_columns=()) -> pd.DataFrame:
    import pyarrow.json as pajson

    text = head[len(_BOM) :] if head.startswith(_BOM) else head
    if text.lstrip().startswith(b"["):
        with src.errors():
            fh = src.open()
            try:
                # pandas would type "01" as the number 1: an identifier column stays text
                dtype = dict.fromkeys(text_columns, str) if text_columns else True
                df = pd.read_json(
                    io.BytesIO(fh.read()), orient="records", dtype=dtype, precise_float=True
                )
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

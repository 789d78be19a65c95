"""Shared post-processing of the readers: column names, Arrow -> pandas, re-chunking."""

from __future__ import annotations

import ctypes
import functools
import json
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from fedep.data.readers.source import ReadError

# a callable returning a fresh iterator over the file's frames (streaming clip reads twice)
_Frames = Callable[[], Iterator[pd.DataFrame]]


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
        elif pa.types.is_nested(f.type) or pa.types.is_dictionary(f.type):
            table = table.set_column(i, f.name, _as_text(table.column(i)))
    names = list(table.column_names)
    # release=True: the caller drops the table; free each Arrow column as soon as it is
    # converted, so the peak is about one copy of the data instead of two
    df = table.to_pandas(
        types_mapper=_types_mapper(ints_nullable), split_blocks=release, self_destruct=release
    )
    df.columns = names
    if release:
        # give the converted Arrow buffers back to the OS now (the pool would keep them
        # resident beside the DataFrame)
        release_arrow_memory()
    return df


def _as_text(col: pa.ChunkedArray) -> pa.Array:
    """A nested column (list, struct, map) as its JSON text, a dictionary-encoded one as
    its values: one text value per record, which the feature pipeline can type, instead
    of Python lists and dicts it cannot hash."""
    if pa.types.is_dictionary(col.type):
        return col.cast(col.type.value_type)
    values = col.to_pylist()
    return pa.array(
        [None if v is None else json.dumps(v, default=str, sort_keys=True) for v in values],
        pa.string(),
    )


def release_arrow_memory() -> None:
    """Return the memory pyarrow's allocator and the C allocator hold but no longer use
    to the OS.

    Tables read by pyarrow (and pandas' Arrow-backed columns) live in pyarrow's memory
    pool, which keeps freed pages resident for reuse: once a large table is converted
    or encoded and dropped, that is the size of the table in resident memory beside
    what replaced it. NumPy arrays come from the C allocator, whose freed blocks below
    its (adaptive) mapping threshold stay in its heap: a table's columns freed after
    encoding would stay resident beside what the fit allocates next (measured: +0.9x
    the float matrix at the peak of a FedEP fit of a 2,000,000 x 34 CSV), so glibc's
    ``malloc_trim`` is asked to give them back where it exists.
    """
    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim():
    """glibc's ``malloc_trim``, or None on another C library."""
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim  # glibc's name (no search)
    except (OSError, AttributeError):
        return None


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


def _slices(whole, n_rows: int, chunksize: int | None, table: pa.Table | None = None) -> _Frames:
    """Frames from an in-memory table (Arrow slices are zero-copy) or DataFrame."""
    if chunksize is None:
        return lambda: iter([whole()])
    if table is not None:
        return lambda: (_to_pandas(table.slice(i, chunksize)) for i in range(0, n_rows, chunksize))
    df = whole()
    return lambda: (_reset(df.iloc[i : i + chunksize]) for i in range(0, n_rows, chunksize))


def _conversion_column(exc: Exception, names: list[str]) -> tuple[str, str] | None:
    m = re.search(r"In CSV column #(\d+): .*?conversion error to (\w+)", str(exc))
    if not m or int(m.group(1)) >= len(names):
        return None
    return names[int(m.group(1))], m.group(2)

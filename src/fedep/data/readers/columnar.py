"""Parquet and Arrow IPC (Feather v1/v2, ``.arrow``) files or streams."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
import pyarrow as pa

from fedep.data.readers.frames import (
    _check_columns,
    _clean_names,
    _Frames,
    _slices,
    _to_pandas,
)
from fedep.data.readers.source import ReadError, _Source


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

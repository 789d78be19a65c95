"""The reading entry point, :func:`read_table`: one file, any format, whole or in chunks."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import pandas as pd

from fedep.data.readers.columnar import _feather_reader, _parquet_reader
from fedep.data.readers.csv import _csv_data_line, _csv_reader
from fedep.data.readers.detect import _detect, _first_line, _sniff_delimiter
from fedep.data.readers.frames import _slices
from fedep.data.readers.infinity import _policy_pairs, _with_policy
from fedep.data.readers.source import (
    _BOM,
    FORMATS,
    INFINITY_POLICIES,
    ReadError,
    _check_text_head,
    _find_nul,
    _open_source,
    _read_head,
)
from fedep.data.readers.zeek import _read_json, _zeek_reader


def _iter_table(path, format, delimiter, infinity, columns, chunksize, text_columns=()):
    frames, src_path, locate = _open_frames(
        path, format, delimiter, infinity, columns, chunksize, text_columns
    )
    return _with_policy(frames, infinity, src_path, locate, chunksize is not None)


def chunks_with_originals(
    path: str | os.PathLike,
    chunksize: int,
    *,
    format: str = "auto",
    delimiter: str | None = None,
    infinity: str = "nan",
    text_columns: Sequence[str] = (),
) -> Iterator[tuple[pd.DataFrame, pd.DataFrame]]:
    """``(as read, with the infinity policy applied)`` for each chunk of
    :func:`read_table` ``(path, chunksize=chunksize, ...)``.

    For a command that copies its input to its output (``fedep score``): the copy keeps
    an infinite value as the file has it, while the features see the policy's value.
    The two frames share every column that held no infinite value.
    """
    frames, src_path, locate = _open_frames(
        path, format, delimiter, infinity, None, chunksize, text_columns
    )
    return _policy_pairs(frames, infinity, src_path, locate, True)


def _open_frames(path, format, delimiter, infinity, columns, chunksize, text_columns):
    """The file's frames before the infinity policy, its path and the row locator."""
    path = Path(path)
    if format not in ("auto", *FORMATS):
        raise ReadError(path, f"unknown format {format!r}; expected 'auto' or one of {FORMATS}")
    if infinity not in INFINITY_POLICIES:
        raise ReadError(path, f"unknown infinity policy {infinity!r}; expected {INFINITY_POLICIES}")
    if chunksize is not None and (not isinstance(chunksize, int) or chunksize < 1):
        raise ReadError(path, f"chunksize must be a positive integer, got {chunksize!r}")
    if columns is not None:
        columns = [str(c) for c in columns]
    if isinstance(text_columns, str):
        raise ReadError(path, f"text_columns must be a sequence of names, got {text_columns!r}")
    text_columns = tuple(dict.fromkeys(str(c) for c in text_columns))
    src = _open_source(path)
    head = _read_head(src)
    fmt = _detect(src, head) if format == "auto" else format
    text_format = fmt in ("csv", "tsv", "zeek", "json", "zeek-json")
    if text_format:
        _check_text_head(path, head)
        if not head.removeprefix(_BOM).strip():
            raise ReadError(path, "empty file")
        _find_nul(src)
    locate = _by_row
    if fmt == "parquet":
        frames = _parquet_reader(src, columns, chunksize)
    elif fmt == "feather":
        frames = _feather_reader(src, columns, chunksize)
    elif fmt == "zeek":
        frames, locate = _zeek_reader(src, columns, chunksize)
    elif fmt in ("json", "zeek-json"):
        df = _read_json(src, head, fmt == "zeek-json", columns, text_columns)
        frames = _slices(lambda: df, len(df), chunksize)
    else:
        if delimiter is None:
            if fmt == "tsv":
                delimiter = "\t"
            else:
                delimiter = _sniff_delimiter(_first_line(head).decode("utf-8", errors="replace"))
        if len(delimiter) != 1:
            raise ReadError(path, f"delimiter must be one character, got {delimiter!r}")
        frames = _csv_reader(src, head, delimiter, columns, chunksize, text_columns)
        locate = functools.partial(_csv_data_line, src, delimiter)

    return frames, src.path, locate


def _by_row(i: int) -> dict[str, int]:
    return {"row": i + 1}


def read_table(
    path: str | os.PathLike,
    *,
    format: str = "auto",
    delimiter: str | None = None,
    infinity: str = "nan",
    columns: Sequence[str] | None = None,
    chunksize: int | None = None,
    text_columns: Sequence[str] = (),
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
    text_columns : sequence of str, default=()
        Columns read as text as written, never typed as numbers (names not in the file
        are ignored): identifiers such as a gateway column, where ``1``, ``01`` and
        ``1.0`` are three gateways. Applies to CSV/TSV and JSON, whose values carry no
        type; Zeek, Parquet and Arrow columns keep the type their file declares.

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
    it = _iter_table(path, format, delimiter, infinity, columns, chunksize, text_columns)
    if chunksize is None:
        try:
            return next(it)
        finally:
            # the suspended readers hold the frame (and the frame as read, which shares
            # its columns): closed now, they let the caller alone decide its lifetime
            it.close()
    return it

"""A whole plain CSV/TSV by pandas' C parser, in byte ranges on threads, into one array
per column: the fast path of :func:`fedep.data.readers.read_table` for files of
numbers and plain text.

``pandas.read_csv`` of a whole file parses it in chunks on threads and then joins the
chunks' frames into one: its peak holds the data about three times (a 2,000,000 x 34
file: 3.1x the float matrix above the imports). Here each range is parsed a chunk at a
time and every chunk's columns are copied straight into their place in arrays
allocated once for the whole file (their length: the file's line count, from one
counting pass), so the peak is the columns themselves plus one chunk per thread.

Every chunk is checked as the whole-file read was: each column of the dtype the
caller expects (``int64``, ``float64`` or text; an integer chunk of a float column
is widened, as the whole-file read types such a column), no missing value, a
``RangeIndex`` (a row with an extra field would make pandas take its first field as
an index). Anything else -- a parse error, a row with too many or too few fields,
more rows than lines -- gives ``None``: the caller then reads the file with pyarrow,
which words the error (line, column). A file with a double quote anywhere is parsed
in one range (a quoted field may hold a line break, where a range must not start).
"""

from __future__ import annotations

import io
import os
import threading
import warnings
from collections.abc import Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path

import numpy as np
import pandas as pd

from fedep.core._threads import worker_threads

__all__ = ["read_ranges"]

#: Rows per chunk of a range: the chunk a thread holds beside the columns.
CHUNK_ROWS = 1 << 15
#: Smallest range worth a thread of its own (bytes).
MIN_RANGE_BYTES = 16 << 20
_COUNT_BLOCK = 1 << 22


class _Range(io.RawIOBase):
    """The bytes ``[start, stop)`` of a file, as a readable binary stream."""

    def __init__(self, path: Path, start: int, stop: int) -> None:
        super().__init__()
        self._fh = open(path, "rb", buffering=0)  # noqa: SIM115 (closed in close())
        self._fh.seek(start)
        self._left = stop - start

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = min(len(b), self._left)
        if n <= 0:
            return 0
        got = self._fh.readinto(memoryview(b)[:n]) or 0
        self._left -= got
        return got

    def close(self) -> None:
        self._fh.close()
        super().close()


def _data_start(path: Path) -> int | None:
    """Byte offset of the line after the header line (None: a header line with an
    open quote, whose field goes on in the next line)."""
    with open(path, "rb") as fh:
        header = fh.readline()
        return None if header.count(b'"') % 2 else fh.tell()


def _split(path: Path, start: int, size: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` byte ranges of ``[start, size)``, each starting at a line's start."""
    cuts = [start]
    with open(path, "rb") as fh:
        for i in range(1, parts):
            fh.seek(start + (size - start) * i // parts)
            fh.readline()  # to the start of the next line
            pos = fh.tell()
            if cuts[-1] < pos < size:
                cuts.append(pos)
    cuts.append(size)
    return list(zip(cuts[:-1], cuts[1:], strict=True))


def _count(path: Path, start: int, stop: int) -> tuple[int, bool]:
    """(line breaks, plus one for a last line without one; whether a double quote
    occurs) in the bytes ``[start, stop)``: at least the rows the range can hold."""
    lines, quoted, last = 0, False, b"\n"
    buf = bytearray(_COUNT_BLOCK)
    with _Range(path, start, stop) as fh:
        while True:
            k = fh.readinto(buf)
            if not k:
                break
            view = memoryview(buf)[:k]
            # NumPy's vectorised compare counts about twice as fast as bytearray.count
            lines += int(np.count_nonzero(np.frombuffer(buf, np.uint8, k) == 10))
            quoted = quoted or buf.find(b'"', 0, k) >= 0
            last = bytes(view[k - 1 : k])
    return lines + (last != b"\n"), quoted


class _Mismatch(Exception):
    """A chunk the whole-file read would not have typed as expected."""


def _fill(
    path: Path,
    span: tuple[int, int],
    offset: int,
    capacity: int,
    kw: dict,
    kinds: dict[str, str],
    arrays: dict[str, np.ndarray],
    text_dtype,
    stop: threading.Event,
) -> tuple[int, dict[str, list[pd.Series]]]:
    """Parse one range into ``arrays`` from row ``offset``; (its rows, its text columns'
    chunks). Raises :class:`_Mismatch` (or pandas' errors) on anything unexpected, and
    as soon as another range has (``stop``)."""
    try:
        return _fill_range(path, span, offset, capacity, kw, kinds, arrays, text_dtype, stop)
    except BaseException:
        stop.set()
        raise


def _fill_range(path, span, offset, capacity, kw, kinds, arrays, text_dtype, stop):
    texts: dict[str, list[pd.Series]] = {c: [] for c, k in kinds.items() if k == "text"}
    n = 0
    with io.BufferedReader(_Range(path, *span), 1 << 20) as fh, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a mixed-types warning: such a file falls back
        for chunk in pd.read_csv(fh, chunksize=CHUNK_ROWS, **kw):
            m = len(chunk)
            if stop.is_set() or not isinstance(chunk.index, pd.RangeIndex) or n + m > capacity:
                raise _Mismatch
            for c, kind in kinds.items():
                s = chunk[c]
                if kind == "text":
                    if s.dtype != text_dtype or s.isna().any():
                        raise _Mismatch
                    texts[c].append(s)
                    continue
                v = s.to_numpy()
                if kind == "float" and v.dtype == np.int64:
                    v = v.astype(np.float64)  # the whole file's column is float64
                if v.dtype != arrays[c].dtype or (kind == "float" and np.isnan(v).any()):
                    raise _Mismatch
                arrays[c][offset + n : offset + n + m] = v
            n += m
    return n, texts


def read_ranges(
    path: Path,
    names: list[str],
    delimiter: str,
    kinds: dict[str, str],
    text_dtype,
    as_text: Sequence[str] = (),
) -> pd.DataFrame | None:
    """The whole file (header line first) as a DataFrame, or None (see the module).

    Parameters
    ----------
    path : Path
        An uncompressed UTF-8 text file.
    names : list of str
        The header's column names, in order.
    delimiter : str
    kinds : dict of str to {"int", "float", "text"}
        The dtype every column must have (``int64``, ``float64``, ``text_dtype``).
    text_dtype : dtype
        pandas' dtype of a text column.
    as_text : sequence of str, default=()
        Text columns read as written, never typed as numbers (given to the parser).

    Returns
    -------
    DataFrame of shape (n_rows, len(names)) or None
        One array per column (no consolidated block), default index.
    """
    size = os.path.getsize(path)
    start = _data_start(path)
    if start is None or start >= size:
        return None
    # threads: every core this process may use (parsing threads block, never spin)
    parts = max(1, min(worker_threads(), (size - start) // MIN_RANGE_BYTES))
    spans = _split(path, start, size, parts)
    with ThreadPoolExecutor(len(spans)) as pool:
        counted = list(pool.map(lambda s: _count(path, *s), spans))
        if len(spans) > 1 and any(q for _, q in counted):
            spans = [(start, size)]
            counted = [(sum(c for c, _ in counted), True)]
        caps = [c for c, _ in counted]
        total = sum(caps)
        dtypes = {"int": np.int64, "float": np.float64}
        arrays = {c: np.empty(total, dtypes[k]) for c, k in kinds.items() if k != "text"}
        kw = dict(
            sep=delimiter,
            header=None,
            names=names,
            engine="c",
            encoding="utf-8",
            compression=None,
            # only the columns asked for as text: a dtype given to pandas' parser
            # doubles its time on that column; the others' inferred dtypes are checked
            dtype=dict.fromkeys(as_text, str) or None,
        )
        offsets = np.concatenate([[0], np.cumsum(caps)[:-1]]).tolist()
        stop = threading.Event()
        jobs = [
            pool.submit(_fill, path, s, o, cap, kw, kinds, arrays, text_dtype, stop)
            for s, o, cap in zip(spans, offsets, caps, strict=True)
        ]
        wait(jobs, return_when=FIRST_EXCEPTION)
        try:
            done = [j.result() for j in jobs]
        except (_Mismatch, ValueError, TypeError, OverflowError, OSError, pd.errors.ParserError):
            return None
    n = _compact(arrays, offsets, [rows for rows, _ in done])
    if n == 0:
        return None
    cols: dict[str, object] = {}
    for c, kind in kinds.items():
        if kind == "text":
            parts_c = [s for _, texts in done for s in texts[c]]
            cols[c] = pd.concat(parts_c, ignore_index=True) if len(parts_c) > 1 else parts_c[0]
            cols[c].index = pd.RangeIndex(n)
        else:
            cols[c] = arrays[c][:n]
    return pd.DataFrame({c: cols[c] for c in names}, copy=False)


def _compact(arrays: dict[str, np.ndarray], offsets: list[int], rows: list[int]) -> int:
    """Move each range's rows to follow the previous range's (a range holds fewer rows
    than lines when it has blank lines); the total rows."""
    at = 0
    for off, m in zip(offsets, rows, strict=True):
        if off != at:
            for a in arrays.values():
                a[at : at + m] = a[off : off + m].copy()
        at += m
    return at

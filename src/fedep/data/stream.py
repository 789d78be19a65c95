"""Streaming CSV reading: numeric columns of a large CSV file, block by block.

:class:`CsvBlockReader` reads a CSV file with a header row as raw lines,
``chunk_rows`` lines at a time, and parses each block with pandas' C parser for the
requested numeric columns (and, optionally, one client-id column) only. Every block
keeps its original lines byte for byte, so that a caller can write them back with
fields appended (:meth:`CsvBlock.with_tails`, :class:`ScoreTailFormatter`): the
input's own columns keep their exact text (no float re-formatting, quoting or dtype
guessing) and memory is bounded by one block.

Validation is strict and line-numbered, as in :func:`fedep.data.load_csv`; every error
is a :class:`~fedep.data.errors.DataError` naming the file, the 1-based line (the
header is line 1) and, for a bad value, the column:

* a header lacking a requested column, or an empty / duplicate column name;
* a row with more or fewer fields than the header;
* an empty, non-numeric, NaN or infinite value in a requested numeric column;
* a blank line inside the data (blank lines at the end of the file are ignored);
* a header without data rows (raised once the file is exhausted).

With ``frame_columns`` (a model with a feature pipeline), those columns are also
returned as a DataFrame per block (:attr:`CsvBlock.frame`), parsed by pandas' C parser
with its type inference and missing-value markers; the pipeline reads text and numbers
alike. Infinite values in them follow ``infinity`` (``"nan"``: missing, ``"error"``: a
``DataError`` naming line and column), as :func:`fedep.data.readers.read_table` does.

Lines are found, counted and checked with NumPy on each block's bytes (no per-line
Python work unless a line holds a quote, a ``\r`` or only whitespace).

Limitation: a quoted field spanning several lines is not supported (a block's row
count then differs from its line count, which is reported). Results do not depend on
``chunk_rows``.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np
import pandas as pd

from fedep.data.errors import DataError
from fedep.data.readers.detect import header_looks_like_data, no_header_message
from fedep.data.readers.source import (
    _BOM,
    _COMPRESSION_MAGIC,
    MAX_FIRST_LINE,
    _check_text_head,
    _open_source,
)
from fedep.data.tabular import parse_header_line, strip_csv_text

__all__ = [
    "CsvBlock",
    "CsvBlockReader",
    "NotStreamable",
    "ScoreTailFormatter",
    "read_csv_header",
]


def read_csv_header(path) -> tuple[list[str], bytes]:
    """Column names and the raw header line (BOM and line end removed) of a CSV file.

    Raises
    ------
    DataError
        Empty file, unreadable header, empty or duplicate column name (line 1).
    FileNotFoundError
        ``path`` does not exist.
    """
    path = Path(path)
    with _open_decompressed(path) as fh:
        raw = _header_line(fh, path)
        _check_text_head(path, raw)
        raw = strip_csv_text(raw, path)
    _check_no_nul(raw, path, 1)
    names = parse_header_line(raw, path)
    if header_looks_like_data(names):
        raise DataError(path, no_header_message(path, names, ","), line=1)
    return names, raw


def _header_line(fh, path: Path) -> bytes:
    """The first line of ``fh`` (with its line end), refused beyond MAX_FIRST_LINE bytes."""
    limit = MAX_FIRST_LINE + len(_BOM) + 2  # the line, a BOM, \r\n
    raw = fh.readline(limit)
    if len(raw) >= limit and not raw.endswith(b"\n"):
        raise DataError(
            path,
            f"the first line is longer than {MAX_FIRST_LINE >> 20} MiB (no line break in "
            f"the first {len(raw):,} bytes): not a flow-record table",
        )
    return raw


_NUL_MESSAGE = "NUL byte in a text file (binary data, or UTF-16 text?)"


def _check_no_nul(data: bytes, path: Path, first_line: int) -> None:
    """A DataError naming the line of the first NUL byte in ``data`` (lines from
    ``first_line``), if it holds one."""
    at = data.find(b"\x00")
    if at >= 0:
        raise DataError(path, _NUL_MESSAGE, line=first_line + data.count(b"\n", 0, at))


@contextmanager
def _open_decompressed(path: Path) -> Iterator[IO[bytes]]:
    """The file as a binary stream, decompressed when its magic bytes say gzip, bzip2, xz
    or zstd (:mod:`fedep.data.readers.source`); decompression and I/O failures become
    one-line errors naming the file."""
    with open(path, "rb") as fh:
        magic = fh.read(8)
        if not any(magic.startswith(m) for m, _ in _COMPRESSION_MAGIC):
            fh.seek(0)
            yield fh
            return
    src = _open_source(path)
    with src.errors():
        raw = src.open()
        try:
            # pyarrow's decompressing streams have no readline: buffer them
            yield raw if hasattr(raw, "peek") else io.BufferedReader(raw, 1 << 20)
        finally:
            raw.close()


class NotStreamable(DataError):
    """A file :func:`fedep.data.read_table` reads but this byte-copying reader cannot
    stream (a blank line inside the data, a quoted field spanning lines, text that is
    not UTF-8): the caller reads it as a table instead."""


@dataclass
class CsvBlock:
    """Consecutive data rows of a CSV file.

    Attributes
    ----------
    X : ndarray of shape (n_rows, len(names)), float64
        The requested numeric columns, in the requested order; all finite.
    ids : ndarray of str, shape (n_rows,), or None
        The client column's text (stripped; ``""`` when empty), or None without one.
    buf : bytes
        The rows' bytes: row ``i``'s line (without its line end) is
        ``buf[starts[i]:ends[i]]``.
    starts, ends : ndarray of int64, shape (n_rows,)
    first_line : int
        1-based line number of the first row in the file (the header is line 1).
    frame : DataFrame or None
        The ``frame_columns`` of the reader (None without them).
    """

    X: np.ndarray
    ids: np.ndarray | None
    buf: bytes
    starts: np.ndarray
    ends: np.ndarray
    first_line: int
    frame: pd.DataFrame | None = None

    def __len__(self) -> int:
        return int(self.starts.shape[0])

    @property
    def lines(self) -> list[bytes]:
        """The rows' original lines, without line ends."""
        buf = self.buf
        return [buf[a:b] for a, b in zip(self.starts.tolist(), self.ends.tolist(), strict=True)]

    def with_tails(self, tails: Sequence[bytes]) -> bytes:
        """The block's lines, each followed by its tail (which ends the line)."""
        return b"".join([x for pair in zip(self.lines, tails, strict=True) for x in pair])


class CsvBlockReader:
    """Iterate over a CSV file in blocks of at most ``chunk_rows`` data rows.

    The header is read and checked on construction (so that a missing column is
    reported before any output is written); iterating reads the data.

    Parameters
    ----------
    path : str or Path
    names : sequence of str
        Numeric columns to parse (every value must be a finite number).
    chunk_rows : int, default=100_000
        Lines per block.
    client_column : str, optional
        A column returned as text in :attr:`CsvBlock.ids`.
    frame_columns : sequence of str, optional
        Columns returned as a DataFrame in :attr:`CsvBlock.frame` (any type).
    infinity : {"nan", "error"}, default="nan"
        Infinite values in ``frame_columns``.

    Attributes
    ----------
    header : list of str
        The file's column names.
    header_raw : bytes
        The header line as in the file (BOM and line end removed).
    n_rows : int
        Data rows yielded so far.

    Raises
    ------
    DataError
        See the module documentation.
    """

    def __init__(
        self,
        path,
        names: Sequence[str],
        chunk_rows: int = 100_000,
        client_column=None,
        frame_columns: Sequence[str] | None = None,
        infinity: str = "nan",
    ):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"input file {str(self.path)!r} does not exist")
        if int(chunk_rows) < 1:
            raise ValueError(f"chunk_rows must be >= 1; got {chunk_rows!r}")
        self.names = [str(c) for c in names]
        self.chunk_rows = int(chunk_rows)
        self.client_column = client_column
        self.frame_columns = None if frame_columns is None else [str(c) for c in frame_columns]
        if infinity not in ("nan", "error"):
            raise ValueError(f"infinity must be 'nan' or 'error' when streaming; got {infinity!r}")
        self.infinity = infinity
        self.header, self.header_raw = read_csv_header(self.path)
        wanted = self.names + (self.frame_columns or [])
        missing = [c for c in dict.fromkeys(wanted) if c not in self.header]
        if missing:
            raise DataError(
                self.path,
                f"lacks {len(missing)} required feature column(s): {missing[:5]}"
                + (" ..." if len(missing) > 5 else ""),
                line=1,
                column=missing[0],
            )
        if client_column is not None and client_column not in self.header:
            raise DataError(
                self.path,
                f"client column {client_column!r} is not a column",
                line=1,
                column=client_column,
            )
        self.n_rows = 0

    def __iter__(self) -> Iterator[CsvBlock]:
        src = self.path
        with _open_decompressed(src) as fh:
            _header_line(fh, src)
            line_no = 2  # of the next line to read
            pending_blank = 0
            for data, newlines in _line_chunks(fh, self.chunk_rows):
                _check_no_nul(data, src, line_no)
                buf, starts, ends, blank = _split_lines(data, newlines)
                n_lines = len(starts)
                # Blank lines: fine at the end of the file, an error inside the data.
                if blank.size:
                    first = int(blank[0])
                    if blank.size != n_lines - first:
                        raise NotStreamable(src, "blank line inside the data", line=line_no + first)
                    pending_blank += n_lines - first
                    starts, ends = starts[:first], ends[:first]
                elif pending_blank:
                    raise NotStreamable(
                        src, "blank line inside the data", line=line_no - pending_blank
                    )
                if len(starts):
                    yield self._block(buf, starts, ends, line_no)
                    self.n_rows += len(starts)
                line_no += n_lines
        if self.n_rows == 0:
            raise DataError(src, "file has a header but no data rows", line=2)

    # ------------------------------------------------------------------ parsing
    def _block(self, buf: bytes, starts, ends, first_line: int) -> CsvBlock:
        _check_field_counts(buf, starts, ends, len(self.header), self.path, first_line)
        n = len(starts)
        # the rows' lines, each ended by one \n (a view of buf when its lines end so)
        raw = buf[: int(ends[-1]) + 1] if ends[-1] < len(buf) else buf + b"\n"
        kw = dict(X=np.empty((n, 0)), buf=buf, starts=starts, ends=ends, first_line=first_line)
        if self.frame_columns is not None:
            frame, ids = self._parse_frame(raw, n, first_line)
            return CsvBlock(ids=ids, frame=frame, **kw)
        X, ids = self._parse(raw, n, first_line)
        kw["X"] = X
        return CsvBlock(ids=ids, **kw)

    def _read_block(self, block: bytes, n_lines: int, first_line: int, **kw) -> pd.DataFrame:
        """``pd.read_csv`` of a block; a malformed row or a row count other than
        ``n_lines`` is a DataError naming the line."""
        try:
            df = pd.read_csv(io.BytesIO(block), header=None, names=self.header, engine="c", **kw)
        except UnicodeDecodeError as exc:
            raise NotStreamable(
                self.path, f"not UTF-8 text ({exc.reason})", line=first_line
            ) from None
        except pd.errors.ParserError as exc:
            msg = " ".join(str(exc).split())
            m = re.search(r"line (\d+)", msg)
            line = first_line + int(m.group(1)) - 1 if m else None
            msg = re.sub(r"^Error tokenizing data\. C error: ", "", msg)
            msg = re.sub(r" in line \d+", "", msg)
            raise DataError(self.path, f"malformed row: {msg}", line=line) from None
        if len(df) != n_lines:
            raise NotStreamable(
                self.path,
                f"{n_lines} lines parsed as {len(df)} rows (a quoted field spanning lines is "
                "not supported)",
                line=first_line,
            )
        return df

    def _parse_frame(self, block: bytes, n_lines: int, first_line: int):
        """The frame columns (pandas type inference) and the client ids of one block."""
        cols, client = self.frame_columns, self.client_column
        usecols = list(dict.fromkeys(cols + ([client] if client is not None else [])))
        dtype = {client: str} if client is not None and client not in cols else None
        df = self._read_block(
            block, n_lines, first_line, usecols=usecols, dtype=dtype, skip_blank_lines=False
        )
        frame = df[cols]
        for c in cols:
            s = frame[c]
            if s.dtype.kind != "f":
                continue
            inf = np.isinf(s.to_numpy())
            if inf.any():
                if self.infinity == "error":
                    i = int(np.flatnonzero(inf)[0])
                    raise DataError(
                        self.path,
                        f"infinite value {float(s.iloc[i])} (infinity='error')",
                        line=first_line + i,
                        column=c,
                    )
                frame = frame.assign(**{c: s.where(~inf, np.nan)})
        ids = None if client is None else _stripped_text(df[client])
        return frame, ids

    def _parse(self, block: bytes, n_lines: int, first_line: int):
        names, client, src = self.names, self.client_column, self.path
        separate = client is not None and client not in names
        usecols = names + ([client] if separate else [])
        dtype = dict.fromkeys(names, np.float64)
        if separate:
            dtype[client] = str
        try:
            df = self._read_block(
                block,
                n_lines,
                first_line,
                usecols=usecols,
                dtype=dtype,
                skip_blank_lines=False,
                na_filter=True,
                keep_default_na=False,
                na_values=[""],
            )
        except DataError:
            raise  # a malformed row (a ValueError too): not a bad value
        except (ValueError, TypeError):
            _locate_bad_value(block, self.header, names, src, first_line)
            raise  # pragma: no cover - _locate_bad_value always raises
        X = df[names].to_numpy(dtype=np.float64)
        if not np.isfinite(X).all():
            _locate_bad_value(block, self.header, names, src, first_line)
        ids = None
        if client is not None:
            if separate:
                ids = _stripped_text(df[client])
            else:  # the client column is also a feature: its (finite) numbers as text
                ids = np.array([f"{v:.15g}" for v in df[client].tolist()], dtype=str)
        return X, ids


def _stripped_text(s: pd.Series) -> np.ndarray:
    """A column as stripped text, ``""`` for a missing value, shape (n,) of str.

    ``s.astype(object).where(s.notna(), "").astype(str).str.strip()``, computed on the
    distinct values (a client column has few) and spread by their codes.
    """
    codes, uniques = pd.factorize(s, use_na_sentinel=True)
    text = [str(u).strip() for u in uniques.tolist()] + [""]  # code -1 (missing) -> ""
    return np.asarray(text, dtype=str)[codes]


def _locate_bad_value(block: bytes, header, names, src, first_line) -> None:
    """Re-parse a block as text to name the line and column of a bad value (raises)."""
    df = pd.read_csv(
        io.BytesIO(block),
        header=None,
        names=header,
        usecols=names,
        dtype=str,
        keep_default_na=False,
        skip_blank_lines=False,
    )
    for c in names:
        s = df[c].fillna("")
        v = pd.to_numeric(s.str.strip(), errors="coerce").to_numpy(dtype=float, na_value=np.nan)
        bad = ~np.isfinite(v)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raw = s.iloc[i].strip()
            what = "missing value" if raw == "" else f"non-numeric or non-finite value {raw!r}"
            raise DataError(src, what, line=first_line + i, column=c)
    raise DataError(src, "cannot parse the feature columns", line=first_line)


_WHITESPACE = np.zeros(256, dtype=bool)
_WHITESPACE[list(b" \t\n\r\x0b\x0c")] = True  # what bytes.strip() removes


def _newlines(data: bytes) -> np.ndarray:
    """Positions of the ``\\n`` bytes of ``data``, int64."""
    return np.flatnonzero(np.frombuffer(data, np.uint8) == 10)


def _line_chunks(fh, chunk_rows: int, piece: int = 1 << 22) -> Iterator[tuple[bytes, np.ndarray]]:
    """The rest of ``fh`` in pieces of ``chunk_rows`` lines (each ended by ``\\n``; the
    last piece: what is left, possibly without a final line end), each with the
    positions of its ``\\n`` bytes (found once per byte read, not again per piece)."""
    carry = b""
    carry_nl = np.empty(0, dtype=np.int64)
    eof = False
    while not eof:
        parts, nls = [carry], [carry_nl]
        size, count = len(carry), len(carry_nl)
        while count < chunk_rows:
            more = fh.read(piece)
            if not more:
                eof = True
                break
            nl = _newlines(more)
            nl += size
            parts.append(more)
            nls.append(nl)
            size += len(more)
            count += len(nl)
        data = b"".join(parts) if len(parts) > 1 else carry
        nl = np.concatenate(nls) if len(nls) > 1 else carry_nl
        prev = first = 0
        while count - first >= chunk_rows:
            cut = int(nl[first + chunk_rows - 1]) + 1
            yield data[prev:cut], nl[first : first + chunk_rows] - prev
            prev, first = cut, first + chunk_rows
        carry, carry_nl = data[prev:], nl[first:] - prev
    if carry:
        yield carry, carry_nl


def _split_lines(data: bytes, newlines: np.ndarray | None = None):
    """(buf, starts, ends, blank) of a piece of lines: line ``i`` without its line end is
    ``buf[starts[i]:ends[i]]``; ``blank``: indices of the lines that are empty or
    whitespace only. Without ``\\r``, ``buf`` is ``data`` itself (no per-line work;
    ``newlines``, the positions of its ``\\n`` bytes, when the caller has them); with
    it, the lines are stripped of trailing ``\\r`` and re-joined by ``\\n``."""
    if b"\r" in data:
        lines = data.split(b"\n")
        if data.endswith(b"\n"):
            lines.pop()
        body = [ln.rstrip(b"\r\n") for ln in lines]
        buf = b"\n".join(body) + b"\n"
        lengths = np.fromiter(map(len, body), np.int64, len(body))
        ends = np.cumsum(lengths + 1) - 1
        starts = ends - lengths
    else:
        buf = data
        ends = _newlines(data) if newlines is None else newlines
        if not data.endswith(b"\n"):
            ends = np.append(ends, len(data))
        starts = np.empty_like(ends)
        starts[0] = 0
        starts[1:] = ends[:-1] + 1
    arr = np.frombuffer(buf, np.uint8)
    # a blank line is empty or starts with whitespace: check those few one by one
    maybe = ends == starts
    some = ~maybe
    maybe[some] = _WHITESPACE[arr[starts[some]]]
    cand = np.flatnonzero(maybe)
    blank = [i for i in cand.tolist() if not buf[starts[i] : ends[i]].strip()]
    return buf, starts, ends, np.asarray(blank, dtype=np.int64)


def _check_field_counts(buf: bytes, starts, ends, expected: int, src: Path, first_line: int):
    """Every line must have as many fields as the header (pandas' C parser does not
    check rows with extra fields when ``usecols`` is given). Lines without quotes are
    checked by counting commas (vectorised); lines with quotes by the csv module."""
    from fedep.data._lines import count_per_line  # start-up time: loads numba

    arr = np.frombuffer(buf, np.uint8)
    check = count_per_line(arr, starts, ends, 44) != expected - 1
    if b'"' in buf:
        q = np.searchsorted(ends, np.flatnonzero(arr == 34), side="right")
        check[q[q < len(ends)]] = True
    for i in np.flatnonzero(check).tolist():
        ln = buf[starts[i] : ends[i]]
        if ln.count(b'"') % 2:  # an open quote: the field goes on on the next line
            raise NotStreamable(src, "a quoted field spanning lines", line=first_line + i)
        if b'"' in ln:
            try:
                n = len(next(csv.reader([ln.decode("utf-8")])))
            except UnicodeDecodeError as exc:
                why = f"not UTF-8 text ({exc.reason})"
                raise NotStreamable(src, why, line=first_line + i) from None
            except (csv.Error, StopIteration) as exc:
                raise DataError(src, f"unreadable row ({exc})", line=first_line + i) from None
        else:
            n = ln.count(b",") + 1
        if n != expected:
            text = ln.decode("utf-8", "replace")
            snippet = text if len(text) <= 60 else text[:57] + "..."
            raise DataError(
                src,
                f"wrong number of fields: expected {expected}, found {n} ({snippet!r})",
                line=first_line + i,
            )


# ---------------------------------------------------------------------- writing
def _needs_quotes(text: str) -> bool:
    return any(ch in text for ch in ',"\r\n')


class ScoreTailFormatter:
    """Formats ``,anomaly_score,is_anomaly,anomaly_probability,top_features\\n`` per row.

    ``top_features`` is ``"name:value;name:value;..."`` (largest contribution first,
    values with 4 significant digits), quoted as a CSV field when a feature name needs
    it; empty when ``k`` is 0. Scores are written with 10 significant digits, the
    anomaly probabilities with 4.
    :meth:`block_output` writes a whole block with compiled code
    (:mod:`fedep.data._tails`); :meth:`__call__` (one ``%`` format per row) is the
    reference it is tested against and the fallback for non-finite values.

    Parameters
    ----------
    names : list of str
        Feature names, indexed by the ``idx`` passed to :meth:`__call__`.
    k : int
        Top features per row (at most ``len(names)``).
    """

    columns = ("anomaly_score", "is_anomaly", "anomaly_probability", "top_features")

    def __init__(self, names: Sequence[str], k: int) -> None:
        names = [str(n) for n in names]
        self.k = min(int(k), len(names))
        quote = any(_needs_quotes(n) for n in names)
        self.quote = quote
        self._name_bytes: list[bytes] | None = None
        self.names = np.asarray([n.replace('"', '""') if quote else n for n in names], object)
        q = '"' if quote and self.k else ""
        tops = ";".join(["%s:%.4g"] * self.k)
        self.fmt = f",%.10g,%d,%.4g,{q}{tops}{q}\n"

    def fields(self, scores, flags, probs, idx=None, vals=None) -> dict[str, list]:
        """The four appended columns as values for a DataFrame (same text as
        :meth:`__call__`; the CSV writer quotes them)."""
        score_txt = [f"{v:.10g}" for v in np.asarray(scores).tolist()]
        flag_list = np.asarray(flags).astype(int).tolist()
        prob_txt = [f"{v:.4g}" for v in np.asarray(probs).tolist()]
        if self.k == 0:
            tops = [""] * len(score_txt)
        else:
            names = [n.replace('""', '"') for n in self.names.tolist()]
            fmt = ";".join(["%s:%.4g"] * self.k)
            cols = []
            for j in range(self.k):
                cols.append([names[i] for i in idx[:, j].tolist()])
                cols.append(vals[:, j].tolist())
            tops = [fmt % row for row in zip(*cols, strict=True)]
        return dict(zip(self.columns, (score_txt, flag_list, prob_txt, tops), strict=True))

    def block_output(self, block: CsvBlock, scores, flags, probs, idx=None, vals=None) -> bytes:
        """``block.with_tails(self(scores, flags, probs, idx, vals))``, written by compiled code
        (:mod:`fedep.data._tails`: the same bytes, several times faster); the per-row
        formatting remains for non-finite values, without numba, and while the writer is
        not compiled yet (:func:`fedep.data._tails.compiled`)."""
        from fedep.data import _tails  # start-up time: loads numba

        out = None
        if _tails.compiled(_tails._write_kernel, len(block.starts)):
            if self._name_bytes is None:
                self._name_bytes = [str(n).encode() for n in self.names.tolist()]
            buf = np.frombuffer(block.buf, np.uint8)
            out = _tails.write_lines(
                buf, block.starts, block.ends, scores, flags, probs,
                None if self.k == 0 else idx[:, : self.k],
                None if self.k == 0 else vals[:, : self.k],
                self._name_bytes, self.quote and self.k > 0,
            )  # fmt: skip
        if out is None:
            out = block.with_tails(self(scores, flags, probs, idx, vals))
        return out

    def __call__(self, scores, flags, probs, idx=None, vals=None) -> list[bytes]:
        """One tail per row: ``scores`` (n,), 0/1 ``flags`` (n,), anomaly probabilities
        ``probs`` (n,), and with ``k > 0`` the
        top features' column indices ``idx`` and values ``vals``, both (n, k)."""
        cols = [np.asarray(scores).tolist(), np.asarray(flags).tolist(), np.asarray(probs).tolist()]
        for j in range(self.k):
            cols.append(self.names[idx[:, j]].tolist())
            cols.append(vals[:, j].tolist())
        fmt = self.fmt
        return [(fmt % row).encode() for row in zip(*cols, strict=True)]

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

Limitation: a quoted field spanning several lines is not supported (a block's row
count then differs from its line count, which is reported). Results do not depend on
``chunk_rows``.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import numpy as np
import pandas as pd

from fedep.data.errors import DataError
from fedep.data.tabular import parse_header_line, strip_csv_text

__all__ = [
    "CsvBlock",
    "CsvBlockReader",
    "ScoreTailFormatter",
    "iter_csv_blocks",
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
    with open(path, "rb") as fh:
        raw = strip_csv_text(fh.readline(), path)
    return parse_header_line(raw, path), raw


@dataclass
class CsvBlock:
    """Consecutive data rows of a CSV file.

    Attributes
    ----------
    X : ndarray of shape (n_rows, len(names)), float64
        The requested numeric columns, in the requested order; all finite.
    ids : ndarray of str, shape (n_rows,), or None
        The client column's text (stripped; ``""`` when empty), or None without one.
    lines : list of bytes
        The rows' original lines, without line ends.
    first_line : int
        1-based line number of the first row in the file (the header is line 1).
    frame : DataFrame or None
        The ``frame_columns`` of the reader (None without them).
    """

    X: np.ndarray
    ids: np.ndarray | None
    lines: list[bytes]
    first_line: int
    frame: pd.DataFrame | None = None

    def __len__(self) -> int:
        return len(self.lines)

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
        with open(src, "rb") as fh:
            fh.readline()
            line_no = 2  # of the next line to read
            pending_blank = 0
            while True:
                lines = list(islice(fh, self.chunk_rows))
                if not lines:
                    break
                body = [ln.rstrip(b"\r\n") for ln in lines]
                # Blank lines: fine at the end of the file, an error inside the data.
                blank = [i for i, ln in enumerate(body) if not ln.strip()]
                if blank:
                    if any(body[i].strip() for i in range(blank[0], len(body))):
                        raise DataError(src, "blank line inside the data", line=line_no + blank[0])
                    pending_blank += len(body) - blank[0]
                    body = body[: blank[0]]
                elif pending_blank:
                    raise DataError(src, "blank line inside the data", line=line_no - pending_blank)
                if body:
                    yield self._block(body, line_no)
                    self.n_rows += len(body)
                line_no += len(lines)
        if self.n_rows == 0:
            raise DataError(src, "file has a header but no data rows", line=2)

    # ------------------------------------------------------------------ parsing
    def _block(self, body: list[bytes], first_line: int) -> CsvBlock:
        _check_field_counts(body, len(self.header), self.path, first_line)
        raw = b"\n".join(body) + b"\n"
        if self.frame_columns is not None:
            frame, ids = self._parse_frame(raw, len(body), first_line)
            X = np.empty((len(body), 0))
            return CsvBlock(X=X, ids=ids, lines=body, first_line=first_line, frame=frame)
        X, ids = self._parse(raw, len(body), first_line)
        return CsvBlock(X=X, ids=ids, lines=body, first_line=first_line)

    def _read_block(self, block: bytes, n_lines: int, first_line: int, **kw) -> pd.DataFrame:
        """``pd.read_csv`` of a block; a malformed row or a row count other than
        ``n_lines`` is a DataError naming the line."""
        try:
            df = pd.read_csv(io.BytesIO(block), header=None, names=self.header, engine="c", **kw)
        except pd.errors.ParserError as exc:
            msg = " ".join(str(exc).split())
            m = re.search(r"line (\d+)", msg)
            line = first_line + int(m.group(1)) - 1 if m else None
            msg = re.sub(r"^Error tokenizing data\. C error: ", "", msg)
            msg = re.sub(r" in line \d+", "", msg)
            raise DataError(self.path, f"malformed row: {msg}", line=line) from None
        if len(df) != n_lines:
            raise DataError(
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
                        self.path, f"infinite value {s.iloc[i]!r}", line=first_line + i, column=c
                    )
                frame = frame.assign(**{c: s.where(~inf, np.nan)})
        ids = None
        if client is not None:
            ids = df[client].astype(object).where(df[client].notna(), "")
            ids = ids.astype(str).str.strip().to_numpy(dtype=str)
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
                ids = df[client].fillna("").astype(str).str.strip().to_numpy(dtype=str)
            else:  # the client column is also a feature: its (finite) numbers as text
                ids = np.array([f"{v:.15g}" for v in df[client].tolist()], dtype=str)
        return X, ids


def iter_csv_blocks(
    path, names: Sequence[str], chunk_rows: int = 100_000, client_column=None
) -> Iterator[CsvBlock]:
    """The blocks of :class:`CsvBlockReader` (header checked on the first ``next``)."""
    yield from CsvBlockReader(path, names, chunk_rows, client_column)


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


def _check_field_counts(body: list[bytes], expected: int, src: Path, first_line: int) -> None:
    """Every line must have as many fields as the header (pandas' C parser does not
    check rows with extra fields when ``usecols`` is given)."""
    commas = expected - 1
    for i, ln in enumerate(body):
        if b'"' in ln:
            try:
                n = len(next(csv.reader([ln.decode("utf-8")])))
            except (UnicodeDecodeError, csv.Error, StopIteration) as exc:
                raise DataError(src, f"unreadable row ({exc})", line=first_line + i) from None
        elif ln.count(b",") == commas:
            continue
        else:
            n = ln.count(b",") + 1
        if n != expected:
            text = ln.decode("utf-8", "replace")
            snippet = text if len(text) <= 60 else text[:57] + "..."
            raise DataError(
                src,
                f"malformed row: expected {expected} fields, found {n} ({snippet!r})",
                line=first_line + i,
            )


# ---------------------------------------------------------------------- writing
def _needs_quotes(text: str) -> bool:
    return any(ch in text for ch in ',"\r\n')


class ScoreTailFormatter:
    """Formats ``,anomaly_score,is_anomaly,top_features\\n`` for each row of a block.

    ``top_features`` is ``"name:value;name:value;..."`` (largest contribution first,
    values with 4 significant digits), quoted as a CSV field when a feature name needs
    it; empty when ``k`` is 0. Scores are written with 10 significant digits. One
    ``%`` format per row keeps this fast.

    Parameters
    ----------
    names : list of str
        Feature names, indexed by the ``idx`` passed to :meth:`__call__`.
    k : int
        Top features per row (at most ``len(names)``).
    """

    columns = ("anomaly_score", "is_anomaly", "top_features")

    def __init__(self, names: Sequence[str], k: int) -> None:
        names = [str(n) for n in names]
        self.k = min(int(k), len(names))
        quote = any(_needs_quotes(n) for n in names)
        self.names = np.asarray([n.replace('"', '""') if quote else n for n in names], object)
        q = '"' if quote and self.k else ""
        tops = ";".join(["%s:%.4g"] * self.k)
        self.fmt = f",%.10g,%d,{q}{tops}{q}\n"

    def fields(self, scores, flags, idx=None, vals=None) -> dict[str, list]:
        """The three appended columns as values for a DataFrame (same text as
        :meth:`__call__`; the CSV writer quotes them)."""
        score_txt = [f"{v:.10g}" for v in np.asarray(scores).tolist()]
        flag_list = np.asarray(flags).astype(int).tolist()
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
        return dict(zip(self.columns, (score_txt, flag_list, tops), strict=True))

    def __call__(self, scores, flags, idx=None, vals=None) -> list[bytes]:
        """One tail per row: ``scores`` (n,), 0/1 ``flags`` (n,), and with ``k > 0`` the
        top features' column indices ``idx`` and values ``vals``, both (n, k)."""
        cols = [np.asarray(scores).tolist(), np.asarray(flags).tolist()]
        for j in range(self.k):
            cols.append(self.names[idx[:, j]].tolist())
            cols.append(vals[:, j].tolist())
        fmt = self.fmt
        return [(fmt % row).encode() for row in zip(*cols, strict=True)]

"""Users' own tables: CSV and Parquet with strict, line-numbered validation.

:func:`load_csv` reads a CSV file (or a Parquet file, chosen by the ``.parquet`` / ``.pq``
extension) into a :class:`TableData`. Nothing is silently dropped or repaired:

* a UTF-8 byte-order mark and CRLF line ends are handled transparently; blank lines at the
  end of the file are ignored;
* a row with the wrong number of fields (a blank line inside the data included), a
  non-numeric, empty, NaN or infinite value in a feature column, an unknown column name,
  a duplicate header name, an empty file (no header or no data row), a missing label or
  client value, or a label outside 0/1 (when ``normal_label`` is not given) raises
  :class:`~fedep.data.errors.DataError` naming the file, the 1-based line number (the
  header is line 1; Parquet errors name the 1-based data row) and the column.

Feature columns, when ``feature_columns`` is None: every column except the label and
client columns whose non-empty values are *mostly* numbers (more than half of them parse
as numbers). Such a column with a few non-numeric values is therefore an error, not a
silently skipped column; columns that are mostly text are skipped and listed in
``TableData.skipped_columns``.

Labels: with ``normal_label`` given, a row is normal (0) when its label equals
``normal_label`` (compared as numbers when both parse as numbers, else as stripped
strings) and an attack (1) otherwise. Without it the label values must be 0 or 1. Without
a label column ``y`` is None: every row is training traffic.
"""

from __future__ import annotations

import csv
import io
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from fedep.data.errors import DataError

__all__ = ["TableData", "load_csv", "load_table"]

_BOM = b"\xef\xbb\xbf"


@dataclass
class TableData:
    """A validated user table.

    Attributes
    ----------
    X : ndarray of shape (n_rows, n_features), float64
    y : ndarray of int, shape (n_rows,), or None
        0 normal, 1 attack; None without a label column.
    groups : ndarray of int, shape (n_rows,), or None
        Client index per row (``0 .. n_clients-1``, in order of first appearance);
        None without a client column.
    feature_names : list of str
    n_dropped : int
        Always 0: no row is ever dropped.
    group_names : list of str or None
        The client column's value for each client index.
    skipped_columns : list of str
        Mostly-text columns left out when ``feature_columns`` was None.
    path : str
        The file read.
    """

    X: np.ndarray
    y: np.ndarray | None
    groups: np.ndarray | None
    feature_names: list[str]
    n_dropped: int = 0
    group_names: list[str] | None = None
    skipped_columns: list[str] = field(default_factory=list)
    path: str = ""


def parse_header_line(raw: bytes, path) -> list[str]:
    """Column names of a CSV header line (BOM and line end already removed or not).

    Raises :class:`DataError` (line 1) for an undecodable or malformed header, an
    empty column name or a duplicate one.
    """
    if raw.startswith(_BOM):
        raw = raw[len(_BOM) :]
    raw = raw.rstrip(b"\r\n")
    try:
        header = next(csv.reader(io.StringIO(raw.decode("utf-8"))))
    except (UnicodeDecodeError, StopIteration, csv.Error) as exc:
        raise DataError(path, f"unreadable header: {exc}", line=1) from None
    header = [h.strip() for h in header]
    seen: set[str] = set()
    for h in header:
        if h == "":
            raise DataError(path, "empty column name in header", line=1)
        if h in seen:
            raise DataError(path, "duplicate column name in header", line=1, column=h)
        seen.add(h)
    return header


def strip_csv_text(raw: bytes, path) -> bytes:
    """``raw`` (a CSV file, or its header line) without a UTF-8 byte-order mark and
    trailing line ends.

    Raises :class:`DataError` (line 1) when nothing but whitespace is left: an empty
    file, without a header row.
    """
    if raw.startswith(_BOM):
        raw = raw[len(_BOM) :]
    raw = raw.rstrip(b"\r\n")
    if not raw.strip():
        raise DataError(path, "empty file (no header row)", line=1)
    return raw


def _read_csv_strings(path: Path) -> pd.DataFrame:
    """Every column as stripped-of-nothing strings; index = 0-based data row."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    data = strip_csv_text(path.read_bytes(), path)
    header = parse_header_line(data.split(b"\n", 1)[0], path)
    if b"\n" not in data:
        raise DataError(path, "file has a header but no data rows", line=2)
    bad_rows: list[tuple[int | None, int, int, str]] = []

    def on_invalid(row) -> str:
        bad_rows.append((row.number, row.expected_columns, row.actual_columns, row.text))
        return "skip"

    try:
        table = pacsv.read_csv(
            io.BytesIO(data + b"\n"),
            read_options=pacsv.ReadOptions(use_threads=False, column_names=header, skip_rows=1),
            parse_options=pacsv.ParseOptions(
                invalid_row_handler=on_invalid, ignore_empty_lines=False
            ),
            convert_options=pacsv.ConvertOptions(
                column_types={h: pa.string() for h in header},
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )
    except pa.ArrowInvalid as exc:
        raise DataError(path, f"cannot parse CSV: {exc}") from exc
    if bad_rows:
        number, exp, act, text = bad_rows[0]
        # pyarrow (single-threaded) reports the physical line, header included
        line = number
        snippet = text if len(text) <= 60 else text[:57] + "..."
        raise DataError(
            path,
            f"wrong number of fields: expected {exp}, found {act} ({snippet!r})"
            + (f"; {len(bad_rows) - 1} more malformed rows" if len(bad_rows) > 1 else ""),
            line=line,
        )
    df = table.to_pandas()
    if len(df) == 0:
        raise DataError(path, "file has a header but no data rows", line=2)
    if len(header) > 1:
        blank = (df == "").all(axis=1).to_numpy()
        if blank.any():
            i = int(np.flatnonzero(blank)[0])
            raise DataError(
                path, f"blank line (expected {len(header)} fields, found 1)", line=i + 2
            )
    return df


def _read_parquet(path: Path) -> pd.DataFrame:
    try:
        df = pd.read_parquet(path)
    except Exception as exc:
        raise DataError(path, f"cannot read Parquet: {exc}") from exc
    if df.shape[1] == 0:
        raise DataError(path, "empty table (no columns)")
    if len(df) == 0:
        raise DataError(path, "table has no rows")
    df.columns = [str(c) for c in df.columns]
    return df.reset_index(drop=True)


class _Locator:
    def __init__(self, path: Path, parquet: bool) -> None:
        self.path = path
        self.parquet = parquet

    def where(self, i: int) -> dict[str, int]:
        """``{"row": n}`` (Parquet) or ``{"line": n}`` (CSV) of the 0-based data row ``i``."""
        return {"row": i + 1} if self.parquet else {"line": i + 2}

    def error(self, i: int, column: str, message: str) -> DataError:
        return DataError(self.path, message, column=column, **self.where(i))


def _numeric(s: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Parsed float values and a mask of values that did not parse (or were empty)."""
    if pd.api.types.is_bool_dtype(s.dtype):
        return s.to_numpy(dtype=np.float64), np.zeros(len(s), dtype=bool)
    if pd.api.types.is_numeric_dtype(s.dtype):
        v = s.to_numpy(dtype=np.float64, na_value=np.nan)
        return v, np.isnan(v) & s.isna().to_numpy()
    st = s.astype(str).str.strip()
    v = pd.to_numeric(st, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    lowered = st.str.lower()
    explicit_nan = lowered.isin(["nan", "+nan", "-nan"]).to_numpy()
    return v, np.isnan(v) & ~explicit_nan


def _is_mostly_numeric(s: pd.Series) -> bool:
    if pd.api.types.is_numeric_dtype(s.dtype) or pd.api.types.is_bool_dtype(s.dtype):
        return True
    st = s.astype(str).str.strip()
    nonempty = st[st != ""]
    if len(nonempty) == 0:
        return False
    ok = pd.to_numeric(nonempty, errors="coerce").notna() | nonempty.str.lower().isin(
        ["nan", "+nan", "-nan"]
    )
    return bool(ok.mean() > 0.5)


def load_csv(
    path: str | os.PathLike[str],
    *,
    label_column: str | None = None,
    normal_label: object | None = None,
    client_column: str | None = None,
    feature_columns: Sequence[str] | None = None,
) -> TableData:
    """Load and validate a user CSV (or Parquet) table.

    Parameters
    ----------
    path : str or PathLike
        ``.parquet`` / ``.pq`` files are read as Parquet, anything else as CSV with a
        header row.
    label_column : str, optional
        Column holding the label; without it every row is training traffic.
    normal_label : object, optional
        Label value of normal rows; everything else is an attack. Without it the
        labels must be 0/1.
    client_column : str, optional
        Column holding the client (device, site) id of each row.
    feature_columns : sequence of str, optional
        Feature columns, in this order. Default: the numeric columns (see module doc)
        except ``label_column`` and ``client_column``.

    Returns
    -------
    TableData

    Raises
    ------
    DataError
        Any invalid input; the message names the file, the line and the column.
    FileNotFoundError
        ``path`` does not exist.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"no such file: {str(p)!r}")
    parquet = p.suffix.lower() in (".parquet", ".pq")
    df = _read_parquet(p) if parquet else _read_csv_strings(p)
    loc = _Locator(p, parquet)
    cols = list(df.columns)
    for role, c in (("label_column", label_column), ("client_column", client_column)):
        if c is not None and c not in cols:
            raise DataError(p, f"{role} {c!r} is not a column (columns: {cols})", line=1, column=c)
    if normal_label is not None and label_column is None:
        raise ValueError("normal_label needs label_column")
    special = {c for c in (label_column, client_column) if c is not None}
    skipped: list[str] = []
    if feature_columns is None:
        feats = []
        for c in cols:
            if c in special:
                continue
            (feats if _is_mostly_numeric(df[c]) else skipped).append(c)
    else:
        feats = list(feature_columns)
        unknown = [c for c in feats if c not in cols]
        if unknown:
            raise DataError(
                p,
                f"unknown feature column(s) {unknown} (columns: {cols})",
                line=1,
                column=unknown[0],
            )
        if len(set(feats)) != len(feats):
            dup = next(c for c in feats if feats.count(c) > 1)
            raise DataError(p, "feature column listed twice", column=dup)
        clash = special & set(feats)
        if clash:
            c = sorted(clash)[0]
            raise DataError(p, "label/client column cannot also be a feature", column=c)
    if not feats:
        raise DataError(p, f"no numeric feature columns found (columns: {cols})", line=1)

    X = np.empty((len(df), len(feats)), dtype=np.float64)
    for j, c in enumerate(feats):
        v, unparsed = _numeric(df[c])
        if unparsed.any():
            i = int(np.flatnonzero(unparsed)[0])
            raw = df[c].iloc[i]
            what = (
                "missing value"
                if (pd.isna(raw) or str(raw).strip() == "")
                else (f"non-numeric value {str(raw)!r}")
            )
            raise loc.error(i, c, what)
        bad = ~np.isfinite(v)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise loc.error(i, c, f"non-finite value {df[c].iloc[i]!r} (NaN/inf not allowed)")
        X[:, j] = v

    y = None
    if label_column is not None:
        s = df[label_column]
        y = labels_from_column(
            s.astype(str).str.strip().mask(s.isna(), ""),
            normal_label,
            path=p,
            column=label_column,
            locate=loc.where,
            stacklevel=3,
        )
    groups = None
    group_names = None
    if client_column is not None:
        s = df[client_column]
        st = s.astype(str).str.strip()
        empty = (s.isna() | (st == "")).to_numpy()
        if empty.any():
            raise loc.error(int(np.flatnonzero(empty)[0]), client_column, "missing client id")
        codes, uniques = pd.factorize(st, sort=False)
        groups = codes.astype(np.int64)
        group_names = [str(u) for u in uniques]
    return TableData(
        X=X,
        y=y,
        groups=groups,
        feature_names=[str(c) for c in feats],
        n_dropped=0,
        group_names=group_names,
        skipped_columns=skipped,
        path=str(p),
    )


def labels_from_column(
    values: pd.Series,
    normal_label: object | None,
    *,
    path,
    column: str,
    locate: Callable[[int], dict[str, int]] | None = None,
    option: str = "normal_label",
    stacklevel: int = 2,
) -> np.ndarray:
    """0 (normal) / 1 (attack) labels of a label column.

    With ``normal_label`` a row is normal when its label equals it (compared as numbers
    when both parse as numbers, else as stripped strings), every other value is an
    attack; without it the labels must be 0 or 1.

    Parameters
    ----------
    values : Series of str
        The label column as stripped strings, ``""`` for a missing value.
    normal_label : object or None
        Label value of normal rows.
    path : str or Path
        The file, named in errors and in the warning.
    column : str
        The label column, named in errors and in the warning.
    locate : callable, optional
        ``locate(i)`` gives the :class:`DataError` position of the 0-based data row
        ``i`` (``{"line": n}`` or ``{"row": n}``); default ``{"row": i + 1}``.
    option : str, default "normal_label"
        How the caller names ``normal_label`` in messages (the command line passes
        ``"--normal-label"``).
    stacklevel : int, default 2
        Of the warning, as for :func:`warnings.warn` (1 is this function).

    Returns
    -------
    ndarray of int64, shape (n_rows,)

    Raises
    ------
    DataError
        A missing label, or (without ``normal_label``) a label other than 0 / 1: the
        message names the file, the row (or line) and the column.

    Warns
    -----
    UserWarning
        ``normal_label`` never occurs: every row is labelled as an attack.
    """
    if locate is None:
        locate = _by_row
    st = values
    empty = (st == "").to_numpy()
    if empty.any():
        i = int(np.flatnonzero(empty)[0])
        raise DataError(path, "missing label", column=column, **locate(i))
    num = pd.to_numeric(st, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    if normal_label is None:
        bad = ~np.isin(num, (0.0, 1.0))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise DataError(
                path,
                f"label must be 0 or 1 (or pass {option}), got {st.iloc[i]!r}",
                column=column,
                **locate(i),
            )
        return num.astype(np.int64)
    try:
        ref = float(str(normal_label).strip())
    except ValueError:
        ref = None
    if ref is not None and not np.isnan(num).any():
        y = (num != ref).astype(np.int64)
    else:
        y = (st != str(normal_label).strip()).to_numpy(dtype=np.int64)
    if y.all():
        warnings.warn(
            f"{path}: {option} {normal_label!r} never occurs in column {column!r}; "
            "every row is labelled as an attack",
            stacklevel=stacklevel,
        )
    return y


def _by_row(i: int) -> dict[str, int]:
    return {"row": i + 1}


#: Alias: :func:`load_csv` also reads Parquet.
load_table = load_csv

"""Analyst feedback files: which training records an analyst confirmed, and as what.

A feedback file is a CSV table with a header and two columns:

- the record: ``row`` (0-based row numbers of the training table) or the name of a key
  column of the training records (e.g. Zeek's ``uid``);
- ``label``: ``benign`` (a confirmed false positive) or ``attack``.

:func:`read_feedback` turns it into one label per training row (``""`` for unlabelled
rows). A malformed file, a bad label or a bad row number is one line naming the file and
its row (1-based, the header is row 1); keys that name no training record are counted
and reported (:class:`Feedback`), never dropped in silence.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedep._errors import one_line

__all__ = ["FEEDBACK_LABELS", "Feedback", "read_feedback"]

#: The labels a feedback row may give (case and surrounding spaces ignored).
FEEDBACK_LABELS = ("benign", "attack")

#: Most rows read from one feedback file (a guard against a wrong file).
MAX_ROWS = 10_000_000


@dataclass(frozen=True)
class Feedback:
    """A feedback file, matched to the training records.

    Attributes
    ----------
    labels : ndarray of object, shape (n_records,)
        ``"benign"``, ``"attack"`` or ``""`` per training record.
    n_rows : int
        Labelled rows read.
    unknown : int
        Rows whose key names no training record.
    first_unknown : str or None
        The first such key (for the report).
    conflicting : int
        Records labelled both ``benign`` and ``attack`` (taken as ``attack``).
    """

    labels: np.ndarray
    n_rows: int
    unknown: int
    first_unknown: str | None
    conflicting: int

    def describe(self, path) -> str:
        """One line: what the file said and what of it matched."""
        n_att = int((self.labels == "attack").sum())
        n_ben = int((self.labels == "benign").sum())
        line = f"feedback {path}: {self.n_rows} rows, {n_att} attack and {n_ben} benign records"
        if self.unknown:
            line += (
                f"; {self.unknown} rows name no training record (first: "
                f"{self.first_unknown!r}), not used"
            )
        if self.conflicting:
            line += f"; {self.conflicting} records labelled both ways, taken as attack"
        return line


def read_feedback(path, n_records: int, keys=None, key_column: str | None = None) -> Feedback:
    """Read a feedback file and match it to ``n_records`` training records.

    Parameters
    ----------
    path : str or Path
    n_records : int
    keys : array-like of shape (n_records,), optional
        The training records' key values (``key_column``); without them the file's
        ``row`` column gives row numbers.
    key_column : str, optional
        The key column's name in the file (default ``row`` without ``keys``, else the
        file's first column that is not ``label``).

    Raises
    ------
    ValueError
        One line naming the file (and row) for an unreadable file, a missing column, a
        bad label or a row number outside the training table.
    """
    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8") as f:
            rows = list(_rows(csv.reader(f), path))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ValueError(f"feedback {path}: {one_line(exc)}") from None
    if not rows:
        raise ValueError(f"feedback {path}: empty file (expected a header: row,label)")
    header = [h.strip() for h in rows[0]]
    if "label" not in header:
        raise ValueError(f"feedback {path}: row 1: no 'label' column (header: {header})")
    if key_column is None:
        key_column = "row" if keys is None else next((h for h in header if h != "label"), "")
    if key_column not in header:
        raise ValueError(f"feedback {path}: row 1: no {key_column!r} column (header: {header})")
    ki, li = header.index(key_column), header.index("label")
    index = None
    if keys is not None:
        index = {}
        for j, k in enumerate(np.asarray(keys, dtype=object).tolist()):
            index.setdefault(str(k), j)
    labels = np.full(n_records, "", dtype=object)
    unknown, first_unknown, conflicting = 0, None, 0
    for line, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise ValueError(
                f"feedback {path}: row {line}: {len(row)} fields, the header has {len(header)}"
            )
        label = row[li].strip().lower()
        if label not in FEEDBACK_LABELS:
            raise ValueError(
                f"feedback {path}: row {line}: label {row[li]!r} is not one of "
                f"{', '.join(FEEDBACK_LABELS)}"
            )
        key = row[ki].strip()
        if index is None:
            try:
                j = int(key)
            except ValueError:
                raise ValueError(
                    f"feedback {path}: row {line}: row {key!r} is not a number"
                ) from None
            if not 0 <= j < n_records:
                raise ValueError(
                    f"feedback {path}: row {line}: row {j} is outside the training table "
                    f"(0 to {n_records - 1})"
                )
        elif key in index:
            j = index[key]
        else:
            unknown += 1
            first_unknown = first_unknown or key
            continue
        if labels[j] and labels[j] != label:
            conflicting += 1
            label = "attack"
        labels[j] = label
    return Feedback(labels, len(rows) - 1, unknown, first_unknown, conflicting)


def _rows(reader, path):
    for i, row in enumerate(reader):
        if i > MAX_ROWS:
            raise ValueError(f"feedback {path}: more than {MAX_ROWS} rows")
        if row:
            yield row

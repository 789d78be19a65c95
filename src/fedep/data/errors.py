"""Exceptions raised by the data layer.

:class:`DataError` is a :class:`ValueError` for bad input data (malformed rows,
non-numeric values, missing or unknown columns, unexpected labels). Its message always
names the file and, where they are known, the 1-based line number (the header is line 1)
and the column. :class:`DatasetNotFoundError` is a :class:`FileNotFoundError` for an
official dataset file that is not in the data directory.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["DataError", "DatasetNotFoundError", "bad_value_error"]


class DataError(ValueError):
    """Bad input data.

    Parameters
    ----------
    path : str or Path or None
        The file the data came from.
    message : str
        What is wrong.
    line : int, optional
        1-based line number in a CSV file (the header is line 1).
    column : str, optional
        The offending column.
    row : int, optional
        1-based data-row number, for formats without lines (Parquet).

    Attributes
    ----------
    path, line, column, row, reason
        The parts of the message, for programmatic use.
    """

    def __init__(
        self,
        path: str | Path | None,
        message: str,
        *,
        line: int | None = None,
        column: str | None = None,
        row: int | None = None,
    ) -> None:
        self.path = None if path is None else str(path)
        self.line = line
        self.column = column
        self.row = row
        self.reason = message
        where = [self.path if self.path is not None else "<data>"]
        if line is not None:
            where.append(f"line {line}")
        if row is not None:
            where.append(f"row {row}")
        if column is not None:
            where.append(f"column {column!r}")
        super().__init__(f"{', '.join(where)}: {message}")


def bad_value_error(exc, path, **where) -> DataError:
    """A :class:`~fedep.features.FeatureError` about one value (its ``value`` and
    ``column`` set) as the DataError naming ``path`` and ``where`` (``row=`` or
    ``line=``): the one wording of ``fedep fit``, ``fedep score`` and the alerts."""
    msg = f"non-numeric value {exc.value!r} in a numeric feature column"
    return DataError(path, msg, column=exc.column, **where)


class DatasetNotFoundError(FileNotFoundError):
    """An official dataset file is missing from the data directory.

    Parameters
    ----------
    file : str
        File name (relative to the data directory, e.g. ``nsl-kdd/KDDTrain+.txt``).
    directory : Path
        The data directory that was searched.
    url : str
        The dataset's official download page.
    """

    def __init__(self, file: str, directory: Path, url: str) -> None:
        self.file = file
        self.directory = Path(directory)
        self.url = url
        msg = (
            f"dataset file {file!r} not found in data directory {str(self.directory)!r} "
            f"(looked for {str(self.directory / file)!r}). Download the official release from "
            f"{url} and place it there, or point --data-dir / FEDEP_DATA_DIR at your copy."
        )
        super().__init__(msg)

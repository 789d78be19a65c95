"""Label and client columns of a flow-record table, as read by every surface.

The command line (``fedep fit``, ``fedep evaluate``, ``fedep data summary``) and the
Flower gateway (:mod:`fedep.flower.gateway_data`) read a table's label column the same
way: as stripped text, 0 (normal) / 1 (attack), or every value but ``normal_label`` an
attack (:func:`fedep.data.tabular.labels_from_column`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fedep.data.tabular import labels_from_column

__all__ = ["column_text", "labels_of"]


def column_text(s: pd.Series) -> np.ndarray:
    """A column as stripped strings (missing values as ``""``).

    Parameters
    ----------
    s : Series
        The column, of any dtype.

    Returns
    -------
    ndarray of str, shape (n_rows,)
    """
    return s.astype(object).where(s.notna(), "").astype(str).str.strip().to_numpy(dtype=str)


def labels_of(s: pd.Series, normal_label, path, column: str) -> np.ndarray:
    """0 (normal) / 1 (attack) labels of a label column.

    Without ``normal_label`` the labels must be 0/1; with it, every other value is an
    attack. A missing label is an error naming the data row
    (:func:`fedep.data.tabular.labels_from_column`).

    Parameters
    ----------
    s : Series
        The label column.
    normal_label : object or None
        Label value of normal rows.
    path : str or Path
        The file, named in errors and in the warning.
    column : str
        The label column's name, named in errors and in the warning.

    Returns
    -------
    ndarray of int64, shape (n_rows,)

    Raises
    ------
    DataError
        A missing label, or (without ``normal_label``) a label other than 0 / 1.
    """
    return labels_from_column(
        pd.Series(column_text(s)),
        normal_label,
        path=path,
        column=column,
        option="--normal-label",
        stacklevel=3,
    )

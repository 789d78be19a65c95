"""What a fitted detector reads and writes, by name: the raw columns it needs, the names
of its features (the columns of ``feature_contributions``) and client ids in the dtype
of its ``clients_``.

Used by every surface that feeds a fitted model a table: ``fedep score``,
``fedep evaluate`` and the alerts of :mod:`fedep.alerts` (``fedep watch``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fedep.data.errors import DataError

__all__ = [
    "required_columns",
    "used_columns",
    "output_feature_names",
    "client_ids",
    "numeric_matrix",
]


def required_columns(det) -> list[str]:
    """Raw columns a model needs: its pipeline's used, non-optional columns, or (numeric
    path) ``feature_names_in_``."""
    pipe = getattr(det, "features_", None)
    if pipe is None:
        return [str(c) for c in getattr(det, "feature_names_in_", ())]
    return [d.name for d in pipe.decisions_ if d.used and not d.optional]


def used_columns(det) -> list[str]:
    """Raw columns a model reads (required and optional)."""
    pipe = getattr(det, "features_", None)
    if pipe is None:
        return [str(c) for c in getattr(det, "feature_names_in_", ())]
    return [d.name for d in pipe.decisions_ if d.used]


def output_feature_names(det) -> list[str]:
    """Names of the model's features (columns of ``feature_contributions``)."""
    names = getattr(det, "feature_names_out_", None)
    if names is None:
        names = getattr(det, "feature_names_in_", None)
    if names is None:
        return [f"x{j}" for j in range(det.components_.shape[1])]
    return [str(c) for c in names]


def client_ids(ids: np.ndarray, det) -> np.ndarray:
    """Client column text in the dtype of the model's client ids (integer models: a
    value that is not an integer matches no client).

    Parameters
    ----------
    ids : ndarray of shape (n_samples,)
        Client ids as read (text or numbers).
    det : BaseFederatedDetector
        A fitted detector.

    Returns
    -------
    ndarray of shape (n_samples,)
        int64 for a model with integer client ids (a non-integer value becomes
        ``-2**62``, no client), else str.
    """
    if det.clients_.dtype.kind in "iu":
        v = pd.to_numeric(pd.Series(ids), errors="coerce").to_numpy(dtype=np.float64)
        ok = np.isfinite(v) & (v == np.round(v))
        return np.where(ok, v, -(2**62)).astype(np.int64)
    return np.asarray(ids, dtype=str)


def numeric_matrix(
    df: pd.DataFrame, names, path, *, first: int = 1, where: str = "row"
) -> np.ndarray:
    """``df[names]`` as finite float64, shape (n_samples, len(names)); a non-numeric or
    missing value is a :class:`~fedep.data.DataError` naming its column and its data row
    (the numeric path of a model fitted without a pipeline).

    Parameters
    ----------
    df : DataFrame
    names : list of str
        The model's ``feature_names_in_``.
    path : str or Path
        The file named in an error.
    first : int
        Number of ``df``'s first row in the error (``where`` of it).
    where : {"row", "line"}
        Whether ``first`` counts data rows or file lines.
    """
    X = np.empty((len(df), len(names)), dtype=np.float64)
    for j, c in enumerate(names):
        s = df[c]
        v = pd.to_numeric(s, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        bad = ~np.isfinite(v)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raw = s.iloc[i]
            what = "missing value" if pd.isna(raw) else f"non-numeric or non-finite value {raw!r}"
            raise DataError(path, what, column=str(c), **{where: first + i})
        X[:, j] = v
    return X

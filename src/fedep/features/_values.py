"""Shared value handling: missing tokens, canonical category keys, column reading.

Kept in one place so that a gateway's summary and the transform read a column the same
way (the same missing tokens, the same text for a numeric category).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = [
    "BOOL_FALSE",
    "BOOL_TRUE",
    "FeatureError",
    "MISSING_TOKENS",
    "NA_CATEGORY",
    "OTHER_CATEGORY",
    "canonical_keys",
    "column_family",
]

#: Text values that mean "no value" (compared after ``strip().lower()``). Zeek writes
#: ``-`` for an unset field; CSV exports write the others. In a numeric column they are
#: missing; in a categorical column they are an ordinary category (``service = -``).
MISSING_TOKENS: frozenset[str] = frozenset({"", "-", "?", "na", "n/a", "nan", "null", "none"})
#: Text booleans (compared after ``strip().lower()``).
BOOL_TRUE: frozenset[str] = frozenset({"t", "true", "yes", "y"})
BOOL_FALSE: frozenset[str] = frozenset({"f", "false", "no", "n"})
#: The one-hot category of a null value (None / NaN) in a categorical column.
NA_CATEGORY = "<NA>"
#: The one-hot column of every value outside the vocabulary.
OTHER_CATEGORY = "<other>"


class FeatureError(ValueError):
    """Bad input to the feature pipeline (missing columns, unparsable values, bad options).

    ``column``, ``row`` (the index label of the frame the pipeline was given) and
    ``value`` (its text) are set when one value is to blame, so that a caller who knows
    where the frame's rows came from can name the file and its row.
    """

    def __init__(self, message: str, *, column: str | None = None, row=None, value=None) -> None:
        super().__init__(message)
        self.column = column
        self.row = row
        self.value = value


def column_family(s: pd.Series) -> str:
    """Storage family of a column: ``"bool"``, ``"numeric"``, ``"datetime"`` or ``"string"``.

    Object columns are classified by their non-null values (``pandas.api.types.
    infer_dtype``): all booleans -> bool, all numbers -> numeric, all datetimes ->
    datetime, anything else (text, mixtures) -> string.
    """
    dt = s.dtype
    if pd.api.types.is_bool_dtype(dt):
        return "bool"
    if pd.api.types.is_datetime64_any_dtype(dt):
        return "datetime"
    if pd.api.types.is_numeric_dtype(dt):
        return "numeric"
    textual = pd.api.types.is_string_dtype(dt) or pd.api.types.is_object_dtype(dt)
    if isinstance(dt, pd.CategoricalDtype) or textual:
        inferred = pd.api.types.infer_dtype(s, skipna=True)
        if inferred == "boolean":
            return "bool"
        if inferred in ("integer", "floating", "mixed-integer-float", "decimal"):
            return "numeric"
        if inferred in ("datetime64", "datetime"):
            return "datetime"
        return "string"
    return "string"


def numeric_values(s: pd.Series, family: str) -> np.ndarray:
    """Float64 values of a bool/numeric/datetime column (datetime as epoch seconds), NaN = null.

    A float64 column comes back as a view of the series' data (possibly read-only),
    not a copy: callers must not change it in place.
    """
    if family == "numeric" and isinstance(s.dtype, np.dtype) and s.dtype.kind in "fiu":
        # plain numpy numbers: pd.to_numeric would return them unchanged, and
        # to_numpy(na_value=...) would copy them
        return s.to_numpy(dtype=np.float64, copy=False)
    if family == "datetime":
        d = pd.to_datetime(s, errors="coerce", utc=True)
        out = np.full(len(d), np.nan)
        ok = d.notna().to_numpy()
        if ok.any():
            ns = d[ok].to_numpy(dtype="datetime64[ns]").astype(np.int64)
            out[ok] = ns / 1e9
        return out
    if family == "bool":
        if s.dtype == np.bool_:  # numpy booleans: no null to map, one cast
            return s.to_numpy(dtype=np.float64)
        return (
            pd.Series(s, dtype=object)
            .map(lambda v: np.nan if v is None or v is pd.NA or v != v else float(bool(v)))
            .to_numpy(dtype=float)
        )
    return pd.to_numeric(s, errors="coerce").to_numpy(dtype=float, na_value=np.nan)


def canonical_keys(values: np.ndarray) -> list[str]:
    """Category text of numbers: integral values as integers (``80``), others by ``repr``.

    Parameters
    ----------
    values : ndarray of shape (n,), float

    Returns
    -------
    list of str, length n
    """
    v = np.asarray(values, dtype=float).ravel()
    with np.errstate(invalid="ignore"):
        integral = (np.abs(v) < 2.0**53) & (v == np.trunc(v))  # False for NaN / inf
    out = np.empty(v.shape[0], dtype=object)
    # numpy's int64 -> str is str(int(v)), in C; repr (shortest round trip) for the rest
    out[integral] = v[integral].astype(np.int64).astype(str)
    out[~integral] = [repr(x) for x in v[~integral].tolist()]
    return out.tolist()


def string_view(s: pd.Series, family: str) -> pd.Series:
    """Object series of category keys (str) with None for null values."""
    if family == "numeric":
        vals = numeric_values(s, family)
        ok = ~np.isnan(vals)
        out = np.full(len(vals), None, dtype=object)
        if ok.any():
            uniq, inv = np.unique(vals[ok], return_inverse=True)
            keys = np.asarray(canonical_keys(uniq), dtype=object)
            out[ok] = keys[inv]
        return pd.Series(out, index=s.index, dtype=object)
    if family == "bool":
        if s.dtype == np.bool_:  # numpy booleans: no null, two keys
            keys = np.array(["False", "True"], dtype=object)[s.to_numpy().astype(np.intp)]
            return pd.Series(keys, index=s.index, dtype=object)
        return pd.Series(s, dtype=object).map(
            lambda v: None if v is None or v is pd.NA or v != v else str(bool(v))
        )
    obj = pd.Series(s, dtype=object)
    null = obj.isna().to_numpy()
    out = np.full(len(obj), None, dtype=object)
    if (~null).any():
        out[~null] = obj[~null].astype(str).to_numpy(dtype=object)
    return pd.Series(out, index=s.index, dtype=object)

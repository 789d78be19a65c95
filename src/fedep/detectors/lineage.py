"""A model's lineage: its id, its parent's, the data window and the gateways of its fit.

Every fit records ``lineage_`` (:func:`new_lineage`); a warm start (``warm_start=True``)
names the model it started from as its parent, and, when that model was loaded from a
file, the file's integrity digest (``parent_sha256``: the SHA-256 that a signature
covers), so that a chain of model files can be checked link by link. The model file
stores it (``meta["lineage"]``); ``fedep models show`` / ``fedep models diff`` read it.
"""

from __future__ import annotations

import uuid

import numpy as np

__all__ = ["TIME_COLUMNS", "data_window", "new_lineage"]

#: Column names taken as the records' time (first match, case-insensitive): Zeek's and
#: TON_IoT's ``ts``, UNSW-NB15's ``stime``.
TIME_COLUMNS = ("ts", "timestamp", "stime", "time")


def data_window(X) -> dict:
    """The data window of a training table: its row count and, when ``X`` is a
    DataFrame with a numeric time column (:data:`TIME_COLUMNS`), the column's name and
    its first and last value (``ts_first``, ``ts_last``, NaN ignored)."""
    out: dict = {"rows": int(np.shape(X)[0])}
    columns = getattr(X, "columns", None)
    if columns is None:
        return out
    by_lower = {str(c).lower(): c for c in columns}
    for name in TIME_COLUMNS:
        col = by_lower.get(name)
        if col is None:
            continue
        values = np.asarray(X[col])
        if values.dtype.kind not in "iuf":
            continue
        values = values[np.isfinite(values)] if values.dtype.kind == "f" else values
        if values.size:
            out.update(
                time_column=str(col), ts_first=float(values.min()), ts_last=float(values.max())
            )
        break
    return out


def new_lineage(
    parent: dict | None,
    labels,
    window: dict,
    *,
    parent_sha256: str | None = None,
    sizes=None,
) -> dict:
    """The lineage of a new fit.

    Parameters
    ----------
    parent : dict or None
        The ``lineage_`` of the model a warm start refitted (None: a cold fit).
    labels : sequence
        The gateways of the fit.
    window : dict
        :func:`data_window` of the training data (a caller may add ``files``).
    parent_sha256 : str, optional
        The integrity digest of the parent's model file.
    sizes : sequence of int, optional
        Each gateway's record count, in ``labels`` order.

    Returns
    -------
    dict
        ``id`` (a fresh UUID, hex), ``parent`` (its id or None), ``parent_sha256``,
        ``window`` and ``gateways`` (labels as text; ``gateway_rows`` beside them).
    """
    out = {
        "id": uuid.uuid4().hex,
        "parent": None if parent is None else parent.get("id"),
        "parent_sha256": parent_sha256,
        "window": dict(window),
        "gateways": [str(g) for g in np.asarray(labels).tolist()],
    }
    if sizes is not None:
        out["gateway_rows"] = [int(n) for n in sizes]
    return out

"""The infinity policy (``"nan"``, ``"clip"``, ``"error"``) for float columns."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from fedep.data.readers.frames import _Frames
from fedep.data.readers.source import ReadError


def _apply_infinity(
    df: pd.DataFrame,
    policy: str,
    path: Path,
    locate,
    row_offset: int = 0,
    bounds: dict[str, tuple[float, float]] | None = None,
) -> pd.DataFrame:
    """Apply the infinity policy to the float columns of ``df`` (modified in place).

    ``locate(i)`` returns ``{"line": n}`` or ``{"row": n}`` for the 0-based data row ``i``;
    ``bounds`` (clip only) maps a column to its finite (min, max) over the whole file,
    else they are taken from ``df``.
    """
    for name in df.columns:
        col = df[name]
        if not (isinstance(col.dtype, np.dtype) and col.dtype.kind == "f"):
            continue
        values = col.to_numpy()
        inf = np.isinf(values)
        if not inf.any():
            continue
        if policy == "error":
            i = int(np.flatnonzero(inf)[0])
            raise ReadError(
                path,
                f"infinite value {values[i]} (infinity='error')",
                column=str(name),
                **locate(row_offset + i),
            )
        fixed = values.copy()
        if policy == "nan":
            fixed[inf] = np.nan
        else:  # clip
            if bounds is None:
                finite = values[np.isfinite(values)]
                lo_hi = (finite.min(), finite.max()) if finite.size else None
            else:
                lo_hi = bounds.get(str(name))
            if lo_hi is None:
                raise ReadError(
                    path,
                    "infinite values but no finite value to clip them to (infinity='clip')",
                    column=str(name),
                )
            fixed[values == np.inf] = lo_hi[1]
            fixed[values == -np.inf] = lo_hi[0]
        df[name] = fixed
    return df


def _finite_bounds(frames: Iterable[pd.DataFrame]) -> dict[str, tuple[float, float]]:
    """Finite (min, max) of every float column over all frames (for ``"clip"`` in chunks)."""
    lo: dict[str, float] = {}
    hi: dict[str, float] = {}
    for df in frames:
        for name in df.columns:
            col = df[name]
            if not (isinstance(col.dtype, np.dtype) and col.dtype.kind == "f"):
                continue
            v = col.to_numpy()
            v = v[np.isfinite(v)]
            if v.size:
                lo[name] = min(lo.get(name, np.inf), float(v.min()))
                hi[name] = max(hi.get(name, -np.inf), float(v.max()))
    return {n: (lo[n], hi[n]) for n in lo}


def _with_policy(frames: _Frames, infinity, path, locate, streaming) -> Iterator[pd.DataFrame]:
    for _, fixed in _policy_pairs(frames, infinity, path, locate, streaming):
        yield fixed


def _policy_pairs(
    frames: _Frames, infinity, path, locate, streaming
) -> Iterator[tuple[pd.DataFrame, pd.DataFrame]]:
    """``(as read, policy applied)`` for each frame; the two share every column that held
    no infinite value (_apply_infinity replaces a column, never writes into it)."""
    # clip in chunks: a first pass finds each column's finite range over the whole file,
    # so that every chunk is clipped to the same values as a whole-file read
    bounds = _finite_bounds(frames()) if streaming and infinity == "clip" else None
    offset = 0
    for df in frames():
        original = df.copy(deep=False)
        yield original, _apply_infinity(df, infinity, path, locate, offset, bounds)
        offset += len(df)

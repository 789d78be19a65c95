"""Compiled per-line byte counts for the block-wise CSV reader (:mod:`fedep.data.stream`).

One pass over a block's bytes instead of NumPy temporaries the size of the block
(``np.add.reduceat`` over a cast mask cost about 1 us per 80-byte line); the NumPy
expression in :func:`count_per_line_reference` is the reference, and runs without numba,
while the kernel is not compiled yet, and for small work before numba has started in
this process (:func:`fedep.core._kernels._dispatch.use_compiled`).
"""

from __future__ import annotations

import numpy as np

from fedep.core._kernels._dispatch import requested_mode, use_compiled

try:
    import numba
except ImportError:  # pragma: no cover - numba is a declared dependency
    numba = None

__all__ = ["count_per_line"]


def _count_impl(buf, starts, ends, byte, out):  # pragma: no cover - compiled by numba
    for i in range(starts.shape[0]):
        n = 0
        for j in range(starts[i], ends[i]):
            if buf[j] == byte:
                n += 1
        out[i] = n


_count_kernel = None if numba is None else numba.njit(cache=True, nogil=True)(_count_impl)


def count_per_line(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, byte: int) -> np.ndarray:
    """How many times ``byte`` occurs in each line ``buf[starts[i]:ends[i]]``.

    Parameters
    ----------
    buf : ndarray of uint8
    starts, ends : ndarray of int64, shape (n,)
    byte : int

    Returns
    -------
    ndarray of int64, shape (n,)
    """
    if _count_kernel is None or not use_compiled(
        _count_kernel, requested_mode("auto"), starts.shape[0]
    ):
        return count_per_line_reference(buf, starts, ends, byte)
    out = np.empty(starts.shape[0], dtype=np.int64)
    _count_kernel(buf, starts.astype(np.int64), ends.astype(np.int64), np.uint8(byte), out)
    return out


def count_per_line_reference(buf, starts, ends, byte) -> np.ndarray:
    """NumPy reference of :func:`count_per_line`."""
    pos = np.flatnonzero(buf == byte)
    return np.searchsorted(pos, ends) - np.searchsorted(pos, starts)

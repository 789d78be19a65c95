"""One compiled pass over a numeric column for its summary: the counts, the extremes,
the quantile sketch's bins and the distinct-count sketch's small hashes together.

Written as NumPy expressions, a column's sketch (:meth:`LogHistogram.add
<fedep.features.sketches.LogHistogram.add>`) and its hashes
(:func:`~fedep.features.sketches.number_hashes`) cost about fifteen passes and five
temporaries the size of the column (on 2,000,000 values: 47 of a summary's 60 ms). Here
a block of :data:`BLOCK` values at a time (a buffer that stays in cache) gets
``log10(|x|)`` from NumPy -- the very function the reference calls, so every bin is
the reference's bit for bit -- and one compiled loop then bins each value, counts its
zeros, ones and non-negative values, keeps its extremes and hashes it (splitmix64,
integer arithmetic: exact), keeping only the hashes below the reference's cut
(:func:`fedep.features.sketches._smallest_distinct`).

The results equal the reference's exactly (tested, :func:`numeric_pass` against
``LogHistogram.add``, ``KMV.of_numbers`` and NumPy's counts): the sign of a zero
extreme is taken from NumPy's ``min``/``max``, and anything the pass cannot hold (a bin
outside its table, too few distinct small hashes) falls back to the reference.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedep.core._kernels._dispatch import START_ROWS, requested_mode, use_compiled
from fedep.features.sketches import (
    _SPLITMIX_GAMMA,
    _SPLITMIX_M1,
    _SPLITMIX_M2,
    KMV,
    SKETCH_ZERO,
    LogHistogram,
    _add_to,
    _smallest_distinct,
    number_hashes,
)

try:
    import numba
except ImportError:  # pragma: no cover - numba is a declared dependency
    numba = None

__all__ = ["ColumnPass", "numeric_pass"]

#: Values per block: its ``log10`` buffer (512 KiB) stays in the core's cache.
BLOCK = 1 << 16
#: The bin tables span ``|x|`` from 1e-12 to float64's largest (about 322 decades);
#: finer sketches take the reference (their table would be large).
MAX_BINS_PER_DECADE = 4096

#: Values per "row" told to the small-work rule (:func:`~fedep.core._kernels._dispatch.
#: use_compiled`): the pass saves ~21 ns a value against the NumPy path, a per-row
#: kernel some microseconds a row, so numba's start (0.15 s to load this kernel from
#: its cache) pays back over ~7 million values, :data:`START_ROWS
#: <fedep.core._kernels._dispatch.START_ROWS>` times this.
VALUES_PER_ROW = 64

_SIGN_BIT = np.uint64(1 << 63)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)


def _pass_impl(
    v, bits, logs, bpd, off, zero_cut, cut, take_all, bins, hz, hashes, counts, ext
):  # pragma: no cover
    # One block: v (float64), bits (its uint64 view), logs = log10(|v|), hz a scratch
    # of the block's length. bins: entry 2 (k + off) for a positive value of bin k,
    # 2 (k + off) + 1 for a negative one. counts: zeros, ones, non-negative,
    # |x| < zero_cut, hashes kept, values outside the bin table.
    # Compiled by numba; coverage cannot see inside.
    m = v.shape[0]
    n_zero, n_one, n_nonneg = counts[0], counts[1], counts[2]
    # First loop, without branches or stores that depend on the data (SIMD): the
    # hashes, splitmix64 of the bits of x + 0.0 (-0.0 hashes as 0.0), and the counts.
    for i in range(m):
        x = v[i]
        n_zero += x == 0.0
        n_one += x == 1.0
        n_nonneg += x >= 0.0
        z = bits[i]
        z = np.uint64(0) if z == _SIGN_BIT else z
        z = z + _SPLITMIX_GAMMA
        z = z ^ (z >> _S30)
        z = z * _SPLITMIX_M1
        z = z ^ (z >> _S27)
        z = z * _SPLITMIX_M2
        hz[i] = z ^ (z >> _S31)
    counts[0], counts[1], counts[2] = n_zero, n_one, n_nonneg
    # Second loop: extremes, sketch bins (a scatter) and the hashes below the cut.
    n_small, n_hash, n_bad = counts[3], counts[4], counts[5]
    lo, hi = ext[0], ext[1]
    size = bins.shape[0] // 2
    for i in range(m):
        x = v[i]
        lo = min(lo, x)
        hi = max(hi, x)
        if abs(x) < zero_cut:
            n_small += 1
        else:
            k = int(np.floor(logs[i] * bpd)) + off
            if 0 <= k < size:
                bins[2 * k + (x < 0.0)] += 1  # branch-free: a sign is a coin toss
            else:
                n_bad += 1
        z = hz[i]
        if take_all or z < cut:
            hashes[n_hash] = z
            n_hash += 1
    counts[3], counts[4], counts[5] = n_small, n_hash, n_bad
    ext[0], ext[1] = lo, hi


# Not fedep.core._kernels._jit's decorator: its fastmath flags would let LLVM contract or
# reorder the float steps that must equal NumPy's (``logs[i] * bpd``, the comparisons).
_pass_kernel = None if numba is None else numba.njit(cache=True, nogil=True)(_pass_impl)


@dataclass
class ColumnPass:
    """What one pass over a column's finite values found (equal to the reference's).

    Attributes
    ----------
    min, max : float
    n_zero, n_one, n_nonneg : int
        Values ``== 0``, ``== 1`` and ``>= 0``.
    distinct : KMV
        The distinct-count sketch of the values (as ``KMV.of_numbers``).
    """

    min: float
    max: float
    n_zero: int
    n_one: int
    n_nonneg: int
    distinct: KMV


def numeric_pass(
    vals: np.ndarray, sketch: LogHistogram, k: int, work: int | None = None
) -> ColumnPass | None:
    """Add finite ``vals`` to ``sketch`` and measure them in one compiled pass, or None
    (``sketch`` untouched) when the compiled kernel is not to run (see
    :func:`fedep.core._kernels._dispatch.use_compiled`: under ``"auto"``, small
    tables take the NumPy path until numba has started in this process, see
    :data:`VALUES_PER_ROW`), there are no values or the sketch is finer than
    :data:`MAX_BINS_PER_DECADE`.

    Parameters
    ----------
    vals : ndarray of shape (n,), float64, every value finite
    sketch : LogHistogram
        Receives the values, as ``sketch.add(vals)`` would.
    k : int
        The distinct-count sketch's size.
    work : int, optional
        The values the caller summarises in all (a whole table's; default ``n``): a
        table large enough to pay numba's start back runs compiled from its first
        column.

    Returns
    -------
    ColumnPass or None
    """
    n = vals.shape[0]
    bpd = int(sketch.bins_per_decade)
    # a table whose values pay numba's start back starts it at once; a smaller one's
    # columns add their own values to the other small work of this process
    rows = (n if work is None else work) // VALUES_PER_ROW
    rows = rows if rows >= START_ROWS else n // VALUES_PER_ROW
    if (
        _pass_kernel is None
        or n == 0
        or not 1 <= bpd <= MAX_BINS_PER_DECADE
        or not use_compiled(_pass_kernel, requested_mode("auto"), rows)
    ):
        return None
    v = np.ascontiguousarray(vals, dtype=np.float64)
    bits = v.view(np.uint64)
    # 10**(k/B) <= |x| for 1e-12 <= |x| <= 1.8e308: -12 B - 1 <= k <= 309 B
    off = 12 * bpd + 2
    bins = np.zeros(2 * (322 * bpd + 4), np.int64)
    take_all = n <= 8 * k  # the reference's rule (_smallest_distinct)
    cut = np.uint64(0 if take_all else min(2.0**64 * (8 * k / n), 2.0**63))
    hashes = np.empty(n, np.uint64)  # pages are touched only as far as it fills
    counts = np.zeros(6, np.int64)
    ext = np.array([np.inf, -np.inf])
    logs = np.empty(min(n, BLOCK))
    hz = np.empty(min(n, BLOCK), np.uint64)
    with np.errstate(divide="ignore"):  # log10(0) = -inf: such values are not binned
        for a in range(0, n, BLOCK):
            b = min(n, a + BLOCK)
            lg = logs[: b - a]
            np.abs(v[a:b], out=lg)
            np.log10(lg, out=lg)  # in place, as LogHistogram.add
            _pass_kernel(
                v[a:b], bits[a:b], lg, float(bpd), off, SKETCH_ZERO, cut, take_all,
                bins, hz[: b - a], hashes, counts, ext,
            )  # fmt: skip
    n_zero, n_one, n_nonneg, n_small, n_hash, n_bad = counts.tolist()
    if n_bad:  # pragma: no cover - the table spans every finite |x| >= 1e-12
        sketch.add(v)
    else:
        sketch.zero += n_small
        for table, into in ((bins[0::2], sketch.pos), (bins[1::2], sketch.neg)):
            idx = np.flatnonzero(table)
            _add_to(into, idx - off, table[idx])
    small = np.unique(hashes[:n_hash])
    if take_all or small.size >= k:
        kept = small[:k]
    else:  # heavily repeated values: the reference's own fallback
        kept = _smallest_distinct(number_hashes(v), k)
    lo, hi = float(ext[0]), float(ext[1])
    # the sign of a zero extreme is whichever NumPy's vectorised min / max gives
    lo = float(v.min()) if lo == 0.0 else lo
    hi = float(v.max()) if hi == 0.0 else hi
    return ColumnPass(lo, hi, n_zero, n_one, n_nonneg, KMV(k, [int(x) for x in kept]))

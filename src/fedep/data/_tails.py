"""Compiled writer of ``fedep score``'s output lines: each input line followed by
``,anomaly_score,is_anomaly,anomaly_probability,top_features``.

Formatting the numbers one Python ``%`` at a time costs about 1.4 us per row (five
floats), more than the whole scoring; this module writes a block's output in one pass
of compiled code. The text is the same as ``"%.10g"`` / ``"%.4g"`` (C's ``%g``: the
value correctly rounded to P significant digits, trailing zeros dropped): the digits are
found in floating point (``|x| 10^k``, a few ulps off the exact product) and every value
whose product lies within a few ulps of a rounding tie is redone exactly by Python's
``"%.{P-1}e"`` (about one value in 10,000 for P = 10), so the output is exact, not
approximately so. :class:`fedep.data.stream.ScoreTailFormatter` is the reference this is
tested against.
"""

from __future__ import annotations

import numpy as np

from fedep.core._kernels._dispatch import requested_mode, use_compiled

try:
    import numba
except ImportError:  # pragma: no cover - numba is a declared dependency
    numba = None

__all__ = [
    "HAVE_KERNEL",
    "compiled",
    "digits",
    "top_k",
    "top_k_reference",
    "write_lines",
]

HAVE_KERNEL = numba is not None

# |computed - exact| of s = |x| 10^k is below ~4 ulps of s (10^k exact up to 1e22, else
# pow's <= 1 ulp, then one rounding); 1e-14 relative is ~45 ulps: a wide safety margin
_TIE_BAND = 1e-14


def _njit(fn):
    if numba is None:  # pragma: no cover
        return None
    # no fastmath: the digit search relies on IEEE products and comparisons
    return numba.njit(cache=True, nogil=True)(fn)


def _digits_impl(x, p, m_out, e_out, bad):  # pragma: no cover - compiled by numba
    # x (n,) finite; m_out: the p significant digits as an integer in [10^(p-1), 10^p)
    # (0 for a zero), e_out: the decimal exponent of the first digit; bad[i]: too near a
    # rounding tie to trust (the caller redoes it exactly)
    lo = 10.0 ** (p - 1)
    hi = 10.0**p
    for i in range(x.shape[0]):
        a = abs(x[i])
        bad[i] = False
        if a == 0.0:
            m_out[i] = 0
            e_out[i] = 0
            continue
        e = int(np.floor(np.log10(a)))
        s = 0.0
        for _ in range(4):
            k = p - 1 - e
            if k >= 0:
                s = a * 10.0**k
            else:
                s = a / 10.0 ** (-k)
            if s < lo - 0.5:
                e -= 1
            elif s >= hi:
                e += 1
            else:
                break
        f = np.floor(s)
        if abs(s - f - 0.5) <= _TIE_BAND * s or not (lo - 0.5 <= s < hi):
            bad[i] = True
        m = np.int64(f) + (1 if s - f >= 0.5 else 0)
        if m >= np.int64(hi):
            m = np.int64(lo)
            e += 1
        m_out[i] = m
        e_out[i] = e


def _put_int(out, pos, v):  # pragma: no cover - compiled by numba
    # decimal digits of a non-negative integer
    if v == 0:
        out[pos] = 48
        return pos + 1
    n = 0
    t = v
    while t > 0:
        n += 1
        t //= 10
    for j in range(n - 1, -1, -1):
        out[pos + j] = 48 + v % 10
        v //= 10
    return pos + n


def _put_g(out, pos, neg, m, e, p, dig):  # pragma: no cover - compiled by numba
    # C's %.<p>g of (-1)^neg * m * 10^(e-p+1); dig: scratch of p bytes
    if neg:
        out[pos] = 45  # '-'
        pos += 1
    if m == 0:
        out[pos] = 48
        return pos + 1
    t = m
    for j in range(p - 1, -1, -1):
        dig[j] = 48 + t % 10
        t //= 10
    last = p - 1  # last significant (non-zero) digit
    while last > 0 and dig[last] == 48:
        last -= 1
    if -4 <= e < p:
        if e >= 0:
            for j in range(e + 1):
                out[pos] = dig[j]
                pos += 1
            if last > e:
                out[pos] = 46  # '.'
                pos += 1
                for j in range(e + 1, last + 1):
                    out[pos] = dig[j]
                    pos += 1
        else:
            out[pos] = 48
            out[pos + 1] = 46
            pos += 2
            for _ in range(-e - 1):
                out[pos] = 48
                pos += 1
            for j in range(last + 1):
                out[pos] = dig[j]
                pos += 1
        return pos
    out[pos] = dig[0]
    pos += 1
    if last > 0:
        out[pos] = 46
        pos += 1
        for j in range(1, last + 1):
            out[pos] = dig[j]
            pos += 1
    out[pos] = 101  # 'e'
    out[pos + 1] = 45 if e < 0 else 43
    pos += 2
    ae = -e if e < 0 else e
    if ae < 10:
        out[pos] = 48
        pos += 1
    return _put_int(out, pos, ae)


def _write_lines_impl(  # pragma: no cover - compiled by numba
    buf,
    starts,
    ends,
    s_neg,
    s_m,
    s_e,
    flags,
    p_neg,
    p_m,
    p_e,
    idx,
    v_neg,
    v_m,
    v_e,
    names,
    name_off,
    quote,
    out,
):
    # out: line i of buf, then ",score,flag,prob,[\"]name:val;...[\"]\n"; returns bytes used
    dig = np.empty(17, np.uint8)
    pos = 0
    k = idx.shape[1]
    for i in range(starts.shape[0]):
        n_line = ends[i] - starts[i]
        out[pos : pos + n_line] = buf[starts[i] : ends[i]]
        pos += n_line
        out[pos] = 44
        pos = _put_g(out, pos + 1, s_neg[i], s_m[i], s_e[i], 10, dig)
        out[pos] = 44
        f = flags[i]
        if f < 0:
            out[pos + 1] = 45
            pos += 1
            f = -f
        pos = _put_int(out, pos + 1, f)
        out[pos] = 44
        pos = _put_g(out, pos + 1, p_neg[i], p_m[i], p_e[i], 4, dig)
        out[pos] = 44
        pos += 1
        if k > 0 and quote:
            out[pos] = 34
            pos += 1
        for c in range(k):
            if c > 0:
                out[pos] = 59  # ';'
                pos += 1
            t = idx[i, c]
            for j in range(name_off[t], name_off[t + 1]):
                out[pos] = names[j]
                pos += 1
            out[pos] = 58  # ':'
            pos = _put_g(out, pos + 1, v_neg[i, c], v_m[i, c], v_e[i, c], 4, dig)
        if k > 0 and quote:
            out[pos] = 34
            pos += 1
        out[pos] = 10
        pos += 1
    return pos


def _top_k_impl(C, idx, vals):  # pragma: no cover - compiled by numba
    # each row's k = idx.shape[1] largest entries, largest first, ties: lower column
    # first (an insertion into the row's sorted top k; C finite)
    k = idx.shape[1]
    for i in range(C.shape[0]):
        cnt = 0
        for j in range(C.shape[1]):
            v = C[i, j]
            if cnt < k:
                p = cnt
                cnt += 1
            elif v > vals[i, k - 1]:
                p = k - 1
            else:
                continue
            while p > 0 and vals[i, p - 1] < v:
                vals[i, p] = vals[i, p - 1]
                idx[i, p] = idx[i, p - 1]
                p -= 1
            vals[i, p] = v
            idx[i, p] = j


_top_k_kernel = _njit(_top_k_impl)
_digits_kernel = _njit(_digits_impl)
_put_int = _njit(_put_int) if numba is not None else _put_int
_put_g = _njit(_put_g) if numba is not None else _put_g
_write_kernel = _njit(_write_lines_impl)


def compiled(kernel, rows: int | None = None) -> bool:
    """Whether to call the compiled ``kernel`` on a block of ``rows`` rows (the solvers'
    rule, ``FEDEP_KERNELS``): with ``auto``, only when that costs no compilation, and
    not for small work before numba has started in this process
    (:data:`~fedep.core._kernels._dispatch.START_ROWS`); otherwise the reference runs
    and, on a cold cache, a background ``fedep warmup`` (which also compiles this
    module's kernels) is started (:mod:`fedep.core._kernels._dispatch`)."""
    return kernel is not None and use_compiled(kernel, requested_mode("auto"), rows)


def top_k(contrib: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Column indices and values of each row's ``k`` largest entries, largest first;
    equal entries: the lower column first.

    Parameters
    ----------
    contrib : ndarray of shape (n_samples, n_features)
    k : int
        ``1 <= k``; at most ``n_features`` are returned.

    Returns
    -------
    idx : ndarray of int64, shape (n_samples, min(k, n_features))
    vals : ndarray of float64, same shape
        ``contrib[i, idx[i]]``.

    Compiled (one pass per row, about 20 times faster than sorting); NaN or infinite
    entries, no numba or a kernel not compiled yet (:func:`compiled`):
    :func:`top_k_reference`, the definition.
    """
    C = np.ascontiguousarray(contrib, dtype=np.float64)
    k = min(int(k), C.shape[1])
    if not compiled(_top_k_kernel, C.shape[0]) or not np.isfinite(C).all():
        return top_k_reference(C, k)
    idx = np.empty((C.shape[0], k), dtype=np.int64)
    vals = np.empty((C.shape[0], k), dtype=np.float64)
    _top_k_kernel(C, idx, vals)
    return idx, vals


def top_k_reference(contrib: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`top_k` by a stable sort of each row, largest first (NaN last)."""
    k = min(int(k), contrib.shape[1])
    idx = np.argsort(-contrib, axis=1, kind="stable")[:, :k]
    return idx.astype(np.int64), np.take_along_axis(contrib, idx, axis=1)


def digits(x: np.ndarray, p: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sign, significant digits and exponent of ``"%.<p>g" % v`` for each finite ``v``.

    Parameters
    ----------
    x : ndarray of float64, any shape
        Finite values.
    p : int
        Significant digits (1 to 15).

    Returns
    -------
    neg : ndarray of bool, shape of ``x``
    m : ndarray of int64, shape of ``x``
        The ``p`` digits as an integer in ``[10^(p-1), 10^p)``; 0 for a zero.
    e : ndarray of int64, shape of ``x``
        Decimal exponent of the first digit.
    """
    flat = np.ascontiguousarray(x, dtype=np.float64).ravel()
    m = np.empty(flat.shape, np.int64)
    e = np.empty(flat.shape, np.int64)
    bad = np.empty(flat.shape, np.bool_)
    _digits_kernel(flat, p, m, e, bad)
    for i in np.flatnonzero(bad).tolist():
        # near a tie: Python's correctly rounded conversion decides
        mant, exp = f"{abs(flat[i]):.{p - 1}e}".split("e")
        m[i] = int(mant.replace(".", ""))
        e[i] = int(exp)
    return np.signbit(flat).reshape(x.shape), m.reshape(x.shape), e.reshape(x.shape)


def write_lines(
    buf: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    scores: np.ndarray,
    flags: np.ndarray,
    probs: np.ndarray,
    idx: np.ndarray | None,
    vals: np.ndarray | None,
    names: list[bytes],
    quote: bool,
) -> bytes | None:
    """Output lines of one block, or None when a value is not finite (the caller then
    uses the reference formatter, which writes ``nan`` / ``inf`` as Python does).

    Parameters
    ----------
    buf : ndarray of uint8
        The block's bytes.
    starts, ends : ndarray of int64, shape (n,)
        Each row's line is ``buf[starts[i]:ends[i]]`` (no line end).
    scores : ndarray of shape (n,)
    flags : ndarray of int, shape (n,)
    probs : ndarray of shape (n,)
        Anomaly probabilities (written with 4 significant digits).
    idx : ndarray of int, shape (n, k), or None (k = 0)
        Top features' indices into ``names``.
    vals : ndarray of float, shape (n, k), or None
    names : list of bytes
        Feature names as written (already escaped when ``quote``).
    quote : bool
        Whether the top-features field is quoted.
    """
    n = starts.shape[0]
    if idx is None or idx.shape[1] == 0:
        idx = np.zeros((n, 0), np.int64)
        vals = np.zeros((n, 0))
    scores = np.asarray(scores, dtype=np.float64)
    vals = np.asarray(vals, dtype=np.float64)
    probs = np.asarray(probs, dtype=np.float64)
    if not (np.isfinite(scores).all() and np.isfinite(vals).all() and np.isfinite(probs).all()):
        return None
    s_neg, s_m, s_e = digits(scores, 10)
    p_neg, p_m, p_e = digits(probs, 4)
    v_neg, v_m, v_e = digits(vals, 4)
    k = idx.shape[1]
    name_off = np.zeros(len(names) + 1, np.int64)
    name_off[1:] = np.cumsum([len(b) for b in names])
    name_buf = np.frombuffer(b"".join(names) or b"\0", np.uint8)
    longest = max((len(b) for b in names), default=0)
    # sign, 10 digits, '.', 'e-308' (18) + ',' + flag (<= 20) + ',' + a 4-digit %g
    # (<= 12) + ',' + 2 quotes + k names with ':' + a 4-digit %g (<= 12) + ';' + line end
    per_row = 1 + 18 + 1 + 21 + 1 + 12 + 1 + 2 + k * (longest + 14) + 1
    used = int(np.sum(ends - starts))
    out = np.empty(used + n * per_row, np.uint8)
    pos = _write_kernel(
        buf,
        np.ascontiguousarray(starts, dtype=np.int64),
        np.ascontiguousarray(ends, dtype=np.int64),
        s_neg,
        s_m,
        s_e,
        np.ascontiguousarray(flags, dtype=np.int64),
        p_neg,
        p_m,
        p_e,
        np.ascontiguousarray(idx, dtype=np.int64),
        np.ascontiguousarray(v_neg),
        np.ascontiguousarray(v_m),
        np.ascontiguousarray(v_e),
        name_buf,
        name_off,
        bool(quote),
        out,
    )
    return out[:pos].tobytes()

"""Mergeable sketches of a column's values: a quantile sketch and a distinct-count sketch.

A gateway's column summary (:mod:`fedep.features.summaries`) carries one of each:

* :class:`LogHistogram`, a fixed log-spaced histogram of ``|x|`` by sign; sketches merge
  exactly (bin counts add) and answer quantiles within a documented relative error;
* :class:`KMV`, a K-minimum-values sketch over 64-bit hashes of category keys; merge is
  exact (union, keep the ``k`` smallest) and the count is exact below ``k`` distinct keys.

Keys are hashed so that equal values hash equally on every gateway, whether a gateway
read the column as numbers (:func:`number_hashes`) or as text (:func:`key_hashes`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from fedep.features._values import FeatureError, canonical_keys

__all__ = [
    "DEFAULT_SKETCH_SIZE",
    "KMV",
    "KMV_SIZE",
    "SKETCH_ZERO",
    "LogHistogram",
    "key_hashes",
    "number_hashes",
]

#: Default sketch resolution: histogram bins per decade of ``|x|``.
DEFAULT_SKETCH_SIZE = 32
#: Values with ``|x|`` below this fall in the sketch's zero bin.
SKETCH_ZERO = 1e-12
#: Hashes kept by the distinct-count sketch.
KMV_SIZE = 256
_FLOAT_MAX = float(np.finfo(np.float64).max)


def _key_counts(keys: np.ndarray, weights: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The distinct keys of ``keys`` (int64, non-empty) with a non-zero (weighted) count,
    and those counts (int64).

    One ``bincount`` over the keys' range (a histogram spans a few thousand bins)
    rather than sorting the values; ``np.unique`` when the range is much wider than
    the number of values (a huge ``bins_per_decade``).
    """
    lo, hi = int(keys.min()), int(keys.max())
    if hi - lo < 4 * keys.size + 4096:
        sums = np.bincount(keys - lo, weights=weights)
        idx = np.flatnonzero(sums)
        uniq, counts = idx + lo, sums[idx]
    else:
        uniq, inv = np.unique(keys, return_inverse=True)
        counts = np.bincount(inv, weights=weights)
        nz = counts != 0
        uniq, counts = uniq[nz], counts[nz]
    # float bincount sums of int64 weights are exact below 2**53 rows
    return uniq, counts.astype(np.int64)


def _add_to(target: dict[int, int], keys: np.ndarray, counts: np.ndarray) -> None:
    for kk, cc in zip(keys.tolist(), counts.tolist(), strict=True):
        target[kk] = target.get(kk, 0) + cc


@dataclass
class LogHistogram:
    """Mergeable quantile sketch: a fixed log-spaced histogram of ``|x|``, by sign.

    Bin ``k`` of each sign holds ``10**(k/B) <= |x| < 10**((k+1)/B)``, ``B =
    bins_per_decade``; ``|x| < 1e-12`` goes to the zero bin. The grid is fixed, so two
    sketches merge exactly by adding bin counts (associative, commutative) and a merged
    sketch equals the sketch of the pooled values.

    Error: :meth:`quantile` finds the bin of the rank-``q`` value exactly and returns the
    bin's harmonic midpoint, within relative error ``(g - 1) / (g + 1)``, ``g = 10**(1/B)``,
    of the true (lower) quantile: 3.6 % for ``B = 32``, 0.9 % for ``B = 128``. Values
    with ``|x| < 1e-12`` are returned as 0 (absolute error below 1e-12). Size: at most
    ``B`` non-empty bins per decade spanned by the data, per sign.

    Attributes
    ----------
    bins_per_decade : int
    zero : int
        Count of ``|x| < 1e-12``.
    pos, neg : dict of int to int
        Bin index -> count for positive / negative values.
    """

    bins_per_decade: int = DEFAULT_SKETCH_SIZE
    zero: int = 0
    pos: dict[int, int] = field(default_factory=dict)
    neg: dict[int, int] = field(default_factory=dict)

    @property
    def relative_error(self) -> float:
        """Guaranteed relative error of a returned quantile (for ``|x| >= 1e-12``)."""
        g = 10.0 ** (1.0 / self.bins_per_decade)
        return (g - 1.0) / (g + 1.0)

    @property
    def count(self) -> int:
        """Number of values in the sketch."""
        return self.zero + sum(self.pos.values()) + sum(self.neg.values())

    def add(self, values: np.ndarray, weights: np.ndarray | None = None) -> LogHistogram:
        """Add finite values (with integer weights); returns ``self``.

        Parameters
        ----------
        values : ndarray of shape (n,), finite floats
        weights : ndarray of shape (n,), int, optional
            Counts of the values; all 1 when omitted.
        """
        v = np.asarray(values, dtype=float)
        w = None if weights is None else np.asarray(weights, np.int64)
        if v.size == 0:
            return self
        a = np.abs(v)  # a fresh array: worked on in place below
        small = a < SKETCH_ZERO
        any_small = bool(small.any())
        if any_small:
            self.zero += int(np.count_nonzero(small) if w is None else w[small].sum())
            a[small] = 1.0  # log10 -> 0; these values are not binned (weight 0 below)
        # k = floor(log10(|x|) * B), computed in place (one array, not four)
        np.log10(a, out=a)
        a *= self.bins_per_decade
        np.floor(a, out=a)
        k = a.astype(np.int64)
        del a
        neg = v < 0
        if neg.any():
            # one count over both signs: key 2 k for a positive value, 2 k + 1 for a
            # negative one (instead of selecting each sign's values first)
            k <<= 1
            k += neg
        else:
            neg = None
        if any_small:  # the values of the zero bin count for no bin
            keep = ~small
            w = keep.astype(np.int64) if w is None else w * keep
        keys, counts = _key_counts(k, w)
        if neg is None:
            _add_to(self.pos, keys, counts)
            return self
        odd = (keys & 1).astype(bool)
        _add_to(self.pos, keys[~odd] >> 1, counts[~odd])
        _add_to(self.neg, keys[odd] >> 1, counts[odd])
        return self

    def merge(self, other: LogHistogram) -> LogHistogram:
        """Exact merge (a new sketch); both must have the same ``bins_per_decade``."""
        if other.bins_per_decade != self.bins_per_decade:
            raise FeatureError(
                f"cannot merge sketches of {self.bins_per_decade} and "
                f"{other.bins_per_decade} bins per decade"
            )
        out = LogHistogram(
            self.bins_per_decade, self.zero + other.zero, dict(self.pos), dict(self.neg)
        )
        for src, dst in ((other.pos, out.pos), (other.neg, out.neg)):
            for k, c in src.items():
                dst[k] = dst.get(k, 0) + c
        return out

    def _edge(self, k: int) -> float:
        """Lower edge ``10**(k/B)`` of bin ``k``, at most the largest float64.

        Only the upper edge of the last bins below ``1.8e308`` can exceed it, where
        Python's ``10.0 ** x`` raises ``OverflowError`` instead of returning ``inf``.
        """
        try:
            return min(10.0 ** (k / self.bins_per_decade), _FLOAT_MAX)
        except OverflowError:
            return _FLOAT_MAX

    def _rep(self, k: int) -> float:
        lo = self._edge(k)
        if lo < 1e150:
            hi = self._edge(k + 1)
            return 2.0 * lo * hi / (lo + hi)
        # ``lo * hi`` overflows past 1e154 (and gave inf / inf = NaN quantiles): the same
        # harmonic midpoint as a multiple of ``lo``, clipped to the largest float64
        g = 10.0 ** (1.0 / self.bins_per_decade)
        return min(lo * (2.0 * g / (1.0 + g)), _FLOAT_MAX)

    @staticmethod
    def _walk(items: list[tuple[float, int]], q: float) -> float:
        total = sum(c for _, c in items)
        if total == 0:
            return math.nan
        r = min(max(q, 0.0), 1.0) * (total - 1)
        cum = 0
        for val, c in items:
            cum += c
            if cum > r:
                return val
        return items[-1][0]

    def quantile(self, q: float) -> float:
        """Approximate lower ``q``-quantile of all values (NaN when empty)."""
        items = [(-self._rep(k), self.neg[k]) for k in sorted(self.neg, reverse=True)]
        items.append((0.0, self.zero))
        items += [(self._rep(k), self.pos[k]) for k in sorted(self.pos)]
        return self._walk(items, q)

    def magnitude_quantile(self, q: float) -> float:
        """Approximate ``q``-quantile of ``|x|`` over the non-zero values (NaN when none)."""
        both: dict[int, int] = dict(self.pos)
        for k, c in self.neg.items():
            both[k] = both.get(k, 0) + c
        return self._walk([(self._rep(k), both[k]) for k in sorted(both)], q)

    def cdf_knots(self) -> tuple[np.ndarray, np.ndarray]:
        """Knots of a piecewise-linear distribution function of the sketched values.

        Each non-empty bin ``[lo, hi)`` contributes the knots ``(lo, count below)`` and
        ``(hi, count below + its count)`` (its values spread evenly across it); the zero
        bin is an atom, one knot ``(0, count below + half its count)`` (mid-rank, so
        that the most common value of a sparse count sits at the middle of its mass).
        Between bins the function is interpolated linearly. Within a bin it is within
        the bin's count of the empirical distribution function.

        Returns
        -------
        x : ndarray of shape (n_knots,)
            Strictly increasing values.
        counts : ndarray of shape (n_knots,), int64
            Number of values at or below each knot (cumulative; the last is
            :attr:`count`, halves of the zero atom rounded down).
        """
        xs: list[float] = []
        cs: list[float] = []
        cum = 0.0
        edge = self._edge  # 10**(k/B), clipped to the largest float64 (never inf)
        for k in sorted(self.neg, reverse=True):  # most negative first
            xs += [-edge(k + 1), -edge(k)]
            cs += [cum, cum + self.neg[k]]
            cum += self.neg[k]
        if self.zero:
            xs.append(0.0)
            cs.append(cum + self.zero / 2.0)
            cum += self.zero
        for k in sorted(self.pos):
            xs += [edge(k), edge(k + 1)]
            cs += [cum, cum + self.pos[k]]
            cum += self.pos[k]
        x, c = np.asarray(xs, dtype=float), np.asarray(cs, dtype=float)
        if x.size == 0:
            return x, c.astype(np.int64)
        # adjacent bins share an edge with the same count: keep one knot per value
        keep = np.ones(x.size, dtype=bool)
        keep[1:] = x[1:] > x[:-1]
        return x[keep], np.floor(c[keep]).astype(np.int64)

    def to_dict(self) -> dict:
        """JSON-able form (bin keys as sorted int lists)."""
        ps, ns = sorted(self.pos), sorted(self.neg)
        return {
            "bins_per_decade": self.bins_per_decade,
            "zero": self.zero,
            "pos_bins": ps,
            "pos_counts": [self.pos[k] for k in ps],
            "neg_bins": ns,
            "neg_counts": [self.neg[k] for k in ns],
        }

    @classmethod
    def from_dict(cls, d: dict) -> LogHistogram:
        """Inverse of :meth:`to_dict`."""
        return cls(
            int(d["bins_per_decade"]),
            int(d["zero"]),
            {int(k): int(c) for k, c in zip(d["pos_bins"], d["pos_counts"], strict=True)},
            {int(k): int(c) for k, c in zip(d["neg_bins"], d["neg_counts"], strict=True)},
        )


@dataclass
class KMV:
    """K-minimum-values distinct-count sketch over 64-bit hashes of category keys.

    Keeps the ``k`` smallest distinct hashes (see :func:`key_hashes`: equal keys hash
    equally on every gateway, whether the gateway read the column as numbers or as
    text). Merge = union, keep the ``k`` smallest: exact and associative.
    :meth:`estimate` is exact while fewer than ``k`` distinct values were seen (up to
    hash collisions, ~n^2 / 2^65), else ``(k - 1) / (h_k / 2^64)`` with relative
    standard error about ``1 / sqrt(k - 2)`` (6 % for ``k = 256``).

    A key's identity is its canonical text (:func:`fedep.features._values.
    canonical_keys`: ``80``, ``1.5``), but numbers are hashed from their value, never
    from that text: a numeric column of millions of distinct values is sketched
    without writing one string. A text key hashes as the number ``x`` exactly when it
    is the canonical text of ``x`` (``"80"`` and ``80.0`` are one value; ``"80.0"``,
    ``"-0"``, ``" 80"`` are other values, as their texts differ from ``"80"``).
    """

    k: int = KMV_SIZE
    hashes: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, keys: Sequence[str], k: int = KMV_SIZE) -> KMV:
        """Sketch of a collection of text keys (see :func:`key_hashes`)."""
        return cls.of_hashes(key_hashes(keys), k)

    @classmethod
    def of_numbers(cls, values: np.ndarray, k: int = KMV_SIZE) -> KMV:
        """Sketch of numbers (no NaN), one key per value (see :func:`number_hashes`)."""
        return cls.of_hashes(number_hashes(values), k)

    @classmethod
    def of_hashes(cls, hashes: np.ndarray, k: int = KMV_SIZE) -> KMV:
        """Sketch of keys given by their hashes (uint64; repeats allowed)."""
        return cls(k, [int(x) for x in _smallest_distinct(np.asarray(hashes, np.uint64), k)])

    def merge(self, other: KMV) -> KMV:
        """Exact merge (a new sketch)."""
        k = min(self.k, other.k)
        return KMV(k, sorted(set(self.hashes) | set(other.hashes))[:k])

    @property
    def saturated(self) -> bool:
        """Whether the count is an estimate (``k`` or more distinct values seen)."""
        return len(self.hashes) >= self.k

    def estimate(self) -> float:
        """Estimated number of distinct values."""
        if not self.saturated:
            return float(len(self.hashes))
        return (self.k - 1) / ((self.hashes[-1] + 1) / 2.0**64)


# splitmix64's increment and finaliser (Steele, Lea & Flood 2014): a bijection of 64-bit
# words whose outputs look uniform, so distinct numbers never collide
_SPLITMIX_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_SPLITMIX_M1 = np.uint64(0xBF58476D1CE4E5B9)
_SPLITMIX_M2 = np.uint64(0x94D049BB133111EB)


def number_hashes(values: np.ndarray) -> np.ndarray:
    """64-bit hashes of numbers as category keys: equal values, equal hashes.

    The hash of ``x`` is splitmix64 of the bits of ``float64(x)``, ``-0.0`` taken as
    ``0.0`` (both are the key ``0``). Distinct values get distinct hashes (the mix is a
    bijection); the same value hashes the same on every machine (no seed, no pandas
    internals).

    Parameters
    ----------
    values : ndarray of shape (n,), float, without NaN

    Returns
    -------
    ndarray of shape (n,), uint64
    """
    # + 0.0 maps -0.0 to 0.0, and gives a fresh array to mix in place
    z = (np.asarray(values, dtype=np.float64) + 0.0).view(np.uint64)
    t = np.empty_like(z)  # the shifts' one scratch array
    z += _SPLITMIX_GAMMA  # uint64 arithmetic wraps around (mod 2**64), without warning
    z ^= np.right_shift(z, np.uint64(30), out=t)
    z *= _SPLITMIX_M1
    z ^= np.right_shift(z, np.uint64(27), out=t)
    z *= _SPLITMIX_M2
    z ^= np.right_shift(z, np.uint64(31), out=t)
    return z


def key_hashes(keys: Sequence[str], parsed: np.ndarray | None = None) -> np.ndarray:
    """64-bit hashes of text category keys, canonical numbers hashed as numbers.

    A key that is the canonical text of a number ``x`` (``canonical_keys([x])[0]``,
    ``x = float(key)``) gets :func:`number_hashes` of ``x``, so ``"80"`` on a gateway
    that read the column as text and ``80`` on one that read numbers are one value.
    Any other text gets ``pandas.util.hash_array`` (a fixed-key SipHash of its UTF-8
    bytes, the same on every gateway).

    Parameters
    ----------
    keys : sequence of str, length n
    parsed : ndarray of shape (n,), float, optional
        The keys parsed as numbers (NaN where they do not parse), if the caller has
        them; parsing ``key.strip().lower()`` instead of ``key`` gives the same hashes
        (a canonical text is already stripped and lower case).

    Returns
    -------
    ndarray of shape (n,), uint64
    """
    k = np.asarray(keys, dtype=object)
    if k.size == 0:
        return np.zeros(0, dtype=np.uint64)
    # categorize=False: the same hashes, without first factorising (keys are distinct
    # in every caller)
    h = pd.util.hash_array(k, categorize=False)
    if parsed is None:
        parsed = pd.to_numeric(pd.Series(k, dtype=object), errors="coerce")
        parsed = parsed.to_numpy(dtype=float, na_value=np.nan)
    idx = np.flatnonzero(~np.isnan(parsed))
    if idx.size == 0:
        return h
    x = np.asarray(parsed, dtype=float)[idx]
    same = np.asarray(canonical_keys(x), dtype=object) == k[idx]
    # pandas parses canonical texts exactly (tests check it); should it ever be an ulp
    # off, Python's correctly rounded float() decides the keys that did not match
    # (other spellings of numbers: "80.0", "0.50", " 80")
    retry = np.flatnonzero(~same)
    if retry.size:
        again = np.array([_python_float(t) for t in k[idx[retry]].tolist()])
        ok = ~np.isnan(again)
        ok[ok] = np.asarray(canonical_keys(again[ok]), dtype=object) == k[idx[retry[ok]]]
        x[retry[ok]], same[retry[ok]] = again[ok], True
    h[idx[same]] = number_hashes(x[same])
    return h


def _python_float(text: object) -> float:
    """``float(text)``, NaN when it does not parse."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def _smallest_distinct(h: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` smallest distinct values of ``h`` (all when fewer), sorted.

    Without sorting all of ``h``: hashes are uniform on ``[0, 2**64)``, so the ``k``
    smallest of ``n`` lie below about ``2**64 * k / n``; the values below ``8 k / n`` of
    the range (one comparison pass, ~``8 k`` of them) hold ``k`` distinct values unless
    values repeat heavily, and every hash left out is larger than all of them. Else a
    hash-based ``pandas.unique`` (no sort of ``n`` values either).
    """
    n = h.size
    if n <= 8 * k:
        return np.unique(h)[:k]
    cut = np.uint64(min(2.0**64 * (8 * k / n), 2.0**63))
    small = np.unique(h[h < cut])
    if small.size >= k:
        return small[:k]
    u = pd.unique(h)
    return np.sort(u if u.size <= k else np.partition(u, k - 1)[:k])

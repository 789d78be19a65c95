"""Per-gateway column summaries and their exact, associative merge.

A gateway calls :func:`summarize_columns` on its own records; only the resulting
:class:`ColumnSummaries` (a few hundred numbers per column, no record) leaves it. The
server merges them with :func:`merge_summaries` and decides the features from the merged
summary (:mod:`fedep.features.decide`).

What a column summary holds
---------------------------
* ``families``: storage family seen on the gateway(s): ``numeric``, ``bool``, ``string``
  or ``datetime`` (see :func:`fedep.features._values.column_family`);
* ``n_rows``, ``n_null`` (None/NaN), ``n_token`` (text in
  :data:`~fedep.features._values.MISSING_TOKENS` such as ``-``);
* a numeric view of the values (numbers as they are, booleans as 0/1, datetimes as epoch
  seconds, text parsed with :func:`pandas.to_numeric`): ``n_num`` finite values, their
  ``mean`` and ``m2`` (sum of squared deviations; merged with Chan et al.'s pairwise
  update, as :func:`fedep.core.stats.combine_moments`; computed without overflow, so
  ``m2`` is ``inf`` -- ``None`` in JSON -- only when it exceeds float64, as for values
  spread over more than ~1e154), ``min``, ``max``, exact counts of
  zeros, ones and non-negative values, of ``+inf``/``-inf`` and of ``n_junk`` text values
  that neither parse nor are missing tokens; and a quantile sketch
  (:class:`~fedep.features.sketches.LogHistogram`);
* a category view: the ``4 * max_categories`` most frequent values (as text; numbers in
  canonical form ``80``, ``3.5``) with their counts, ``other_count`` for the rest, a
  K-minimum-values distinct-count sketch (:class:`~fedep.features.sketches.KMV`, exact
  up to 256 distinct values). The sketch counts keys by their canonical text, but
  hashes a number from its value (:func:`~fedep.features.sketches.number_hashes`), and
  a text key that is the canonical text of a number as that number
  (:func:`~fedep.features.sketches.key_hashes`): ``80`` read as a number on one gateway
  and ``"80"`` read as text on another are one value, ``"80.0"`` is another, as before,
  and a numeric column is sketched without writing its values as text. Date-times count
  as their epoch seconds. The values of a numeric column are only counted and written as
  text when its top list may leave the gateway (few distinct values, or a column
  forced categorical);
* pattern counts over text values: IP/MAC addresses, uid-like tokens (UUIDs, Zeek uids,
  hex digests), ISO / ``dd/mm/yyyy`` timestamps, text booleans.

Merging is exact and associative for every count, min/max and category count (category
lists are unioned, never truncated at merge, so the merge does not depend on grouping;
they are exact as long as no gateway truncated its own list -- ``truncated`` says so);
moments merge to round-off; the sketch merges exactly (bin counts add) and answers
quantiles within its documented relative error.

Serialisation: :meth:`ColumnSummaries.to_dict` gives plain JSON types (str, int, float,
lists, dicts) -- send ``json.dumps(summary.to_dict())`` as one string in a Flower
``ConfigRecord``; :meth:`ColumnSummaries.from_dict` reads it back.
"""

from __future__ import annotations

import heapq
import math
import re
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from fedep.core._threads import worker_threads
from fedep.core.stats import value_moments
from fedep.features._column_pass import ColumnPass, numeric_pass
from fedep.features._values import (
    BOOL_FALSE,
    BOOL_TRUE,
    MISSING_TOKENS,
    FeatureError,
    canonical_keys,
    column_family,
    numeric_values,
    string_view,
)
from fedep.features.name_hints import name_hint
from fedep.features.sketches import (
    DEFAULT_SKETCH_SIZE,
    KMV,
    KMV_SIZE,
    LogHistogram,
    key_hashes,
)

__all__ = [
    "ColumnSummaries",
    "ColumnSummary",
    "merge_summaries",
    "summarize_columns",
]

#: Tables of at least this many cells summarise their columns on several threads (and
#: the feature pipeline encodes and scales them on several).
_THREADED_CELLS = 1 << 20

# 2: numbers hashed by value in the distinct-count sketch (KMV); version-1 gateways
# hashed their canonical text, so the two sketches cannot be merged
SUMMARY_VERSION = 2

_IPV4 = r"\d{1,3}(?:\.\d{1,3}){3}(?:/\d{1,2})?(?::\d{1,5})?"
_IPV6_OR_MAC = r"(?=[0-9A-Fa-f:.%\w]*(?:::|(?:[0-9A-Fa-f]{0,4}:){5}))[0-9A-Fa-f:.]+(?:%\w+)?"
_ADDRESS_RE = rf"(?:{_IPV4}|{_IPV6_OR_MAC})"
# A UUID, or one unbroken run of 10+ letters and digits mixing both (Zeek's
# "CHhAvVGS1DHFjwGM9", hashes). Underscored words are names, not uids: TLS cipher
# suites ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256") are a small vocabulary.
_UID_RE = (
    r"(?:[0-9A-Fa-f]{8}-(?:[0-9A-Fa-f]{4}-){3}[0-9A-Fa-f]{12}"
    r"|(?=[A-Za-z0-9]*\d)(?=[A-Za-z0-9]*[A-Za-z])[A-Za-z0-9]{10,})"
)
_TIME_RE = (
    r"(?:\d{4}-\d{2}-\d{2}(?:[T ]\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?"
    r"(?:Z|[+-]\d{2}:?\d{2})?)?"
    r"|\d{1,2}/\d{1,2}/\d{2,4}(?: \d{1,2}:\d{2}(?::\d{2})?(?: ?[AaPp][Mm])?)?)"
)

_ADDRESS = re.compile(_ADDRESS_RE)
_UID = re.compile(_UID_RE)
_TIME = re.compile(_TIME_RE)
# First characters a match can start with (supersets: str.isdigit() holds for every
# character \d matches): most text (names, Zeek uids) is ruled out without the regex.
_ADDRESS_FIRST = frozenset("abcdefABCDEF:.")


def _pattern_flags(texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which stripped texts fully match an address, a uid-like token and a date-time:
    ``re.fullmatch`` of :data:`_ADDRESS_RE`, :data:`_UID_RE`, :data:`_TIME_RE` (what
    ``Series.str.fullmatch`` gives, without its per-value overhead; a column of
    millions of distinct uids is common), each an ndarray of bool, shape (n,)."""
    n = len(texts)
    address, uid, time = (np.zeros(n, dtype=bool) for _ in range(3))
    addr_match, uid_match, time_match = _ADDRESS.fullmatch, _UID.fullmatch, _TIME.fullmatch
    for i, t in enumerate(texts):
        first = t[:1]
        if first.isdigit():
            address[i] = addr_match(t) is not None
            time[i] = time_match(t) is not None
        elif first in _ADDRESS_FIRST:
            address[i] = addr_match(t) is not None
        if len(t) >= 10:  # a uid-like token has at least 10 characters
            uid[i] = uid_match(t) is not None
    return address, uid, time


@dataclass
class ColumnSummary:
    """Mergeable statistics of one column (see the module docstring for every field)."""

    name: str
    families: tuple[str, ...] = ()
    n_rows: int = 0
    n_null: int = 0
    n_token: int = 0
    n_gateways: int = 1
    n_absent: int = 0  # gateways whose frame lacked the column
    # numeric view
    n_num: int = 0
    mean: float = 0.0
    m2: float = 0.0
    min: float = math.inf
    max: float = -math.inf
    n_zero: int = 0
    n_one: int = 0
    n_nonneg: int = 0
    n_posinf: int = 0
    n_neginf: int = 0
    n_junk: int = 0
    sketch: LogHistogram = field(default_factory=LogHistogram)
    # category view
    top: dict[str, int] = field(default_factory=dict)
    other_count: int = 0
    truncated: bool = False
    distinct: KMV = field(default_factory=KMV)
    # patterns over text values
    n_address: int = 0
    n_uid: int = 0
    n_time: int = 0
    n_bool_token: int = 0

    # ---------------------------------------------------------------- derived values
    @property
    def n_present(self) -> int:
        """Rows that are neither null nor a missing token."""
        return self.n_rows - self.n_null - self.n_token

    @property
    def n_nonnull(self) -> int:
        """Rows that are not null (missing tokens included)."""
        return self.n_rows - self.n_null

    @property
    def inferred_type(self) -> str:
        """``numeric``, ``bool``, ``datetime`` or ``string`` (``string`` if any saw text)."""
        fam = set(self.families)
        for f in ("string", "datetime", "bool", "numeric"):
            if f in fam:
                return f
        return "string"

    @property
    def variance(self) -> float:
        """Population variance of the finite numeric values (0 when fewer than 2)."""
        return self.m2 / self.n_num if self.n_num else 0.0

    @property
    def n_distinct(self) -> float:
        """Distinct non-null values (exact below 256, else an estimate capped at the rows)."""
        return min(self.distinct.estimate(), float(self.n_nonnull))

    def quantile(self, q: float) -> float:
        """Approximate quantile of the finite numeric values, clipped to [min, max]."""
        v = self.sketch.quantile(q)
        if math.isnan(v):
            return v
        return float(min(max(v, self.min), self.max))

    # ---------------------------------------------------------------- merge
    def merge(self, o: ColumnSummary) -> ColumnSummary:
        """Exact merge of two summaries of the same column."""
        if o.name != self.name:
            raise FeatureError(f"cannot merge summaries of {self.name!r} and {o.name!r}")
        n = self.n_num + o.n_num
        if self.n_num == 0:
            mean, m2 = o.mean, o.m2
        elif o.n_num == 0:
            mean, m2 = self.mean, self.m2
        else:
            # Chan et al.'s update with plain float products: an overflowing term is
            # inf (not OverflowError, as ``delta**2`` raises), and m2 = inf then means
            # that the pooled m2 exceeds the largest float64 (every term is >= 0).
            delta = o.mean - self.mean
            if math.isfinite(delta):
                mean = self.mean + delta * (o.n_num / n)
            else:  # means of opposite signs near 1e308: weighted average, finite
                mean = self.mean * (self.n_num / n) + o.mean * (o.n_num / n)
            m2 = self.m2 + o.m2 + delta * delta * (self.n_num * o.n_num / n)
        top = dict(self.top)
        for k, c in o.top.items():
            top[k] = top.get(k, 0) + c
        return ColumnSummary(
            name=self.name,
            families=tuple(sorted(set(self.families) | set(o.families))),
            n_rows=self.n_rows + o.n_rows,
            n_null=self.n_null + o.n_null,
            n_token=self.n_token + o.n_token,
            n_gateways=self.n_gateways + o.n_gateways,
            n_absent=self.n_absent + o.n_absent,
            n_num=n,
            mean=float(mean),
            m2=float(m2),
            min=min(self.min, o.min),
            max=max(self.max, o.max),
            n_zero=self.n_zero + o.n_zero,
            n_one=self.n_one + o.n_one,
            n_nonneg=self.n_nonneg + o.n_nonneg,
            n_posinf=self.n_posinf + o.n_posinf,
            n_neginf=self.n_neginf + o.n_neginf,
            n_junk=self.n_junk + o.n_junk,
            sketch=self.sketch.merge(o.sketch),
            top=top,
            other_count=self.other_count + o.other_count,
            truncated=self.truncated or o.truncated,
            distinct=self.distinct.merge(o.distinct),
            n_address=self.n_address + o.n_address,
            n_uid=self.n_uid + o.n_uid,
            n_time=self.n_time + o.n_time,
            n_bool_token=self.n_bool_token + o.n_bool_token,
        )

    # ---------------------------------------------------------------- serialisation
    def to_dict(self) -> dict:
        """JSON-able dict (infinite min/max of an empty view are written as None)."""
        d = {
            k: getattr(self, k)
            for k in (
                "name n_rows n_null n_token n_gateways n_absent n_num mean m2 n_zero n_one "
                "n_nonneg n_posinf n_neginf n_junk other_count truncated n_address n_uid "
                "n_time n_bool_token"
            ).split()
        }
        d["families"] = list(self.families)
        # strict JSON has no inf: None marks an m2 beyond float64 (core.stats.value_moments)
        d["m2"] = None if math.isinf(self.m2) else self.m2
        d["min"] = None if math.isinf(self.min) else self.min
        d["max"] = None if math.isinf(self.max) else self.max
        keys = sorted(self.top)
        d["top_keys"] = keys
        d["top_counts"] = [self.top[k] for k in keys]
        d["sketch"] = self.sketch.to_dict()
        d["distinct_k"] = self.distinct.k
        d["distinct_hashes"] = list(self.distinct.hashes)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> ColumnSummary:
        """Inverse of :meth:`to_dict`."""
        ints = (
            "n_rows n_null n_token n_gateways n_absent n_num n_zero n_one n_nonneg n_posinf "
            "n_neginf n_junk other_count n_address n_uid n_time n_bool_token"
        ).split()
        kw = {k: int(d[k]) for k in ints}
        return cls(
            name=str(d["name"]),
            families=tuple(d["families"]),
            mean=float(d["mean"]),
            m2=math.inf if d["m2"] is None else float(d["m2"]),
            min=math.inf if d["min"] is None else float(d["min"]),
            max=-math.inf if d["max"] is None else float(d["max"]),
            sketch=LogHistogram.from_dict(d["sketch"]),
            top={str(k): int(c) for k, c in zip(d["top_keys"], d["top_counts"], strict=True)},
            truncated=bool(d["truncated"]),
            distinct=KMV(int(d["distinct_k"]), [int(h) for h in d["distinct_hashes"]]),
            **kw,
        )


@dataclass
class ColumnSummaries:
    """Summaries of every column of one gateway (or of several gateways, merged).

    Attributes
    ----------
    n_rows : int
        Records summarised.
    n_gateways : int
        Gateways merged into this summary.
    columns : dict of str to ColumnSummary
        In first-seen column order.
    max_categories, sketch_size : int
        The settings used (merging requires equal ``sketch_size``).
    """

    n_rows: int
    columns: dict[str, ColumnSummary]
    n_gateways: int = 1
    max_categories: int = 64
    sketch_size: int = DEFAULT_SKETCH_SIZE

    def __getitem__(self, name: str) -> ColumnSummary:
        return self.columns[name]

    def to_dict(self) -> dict:
        """Versioned JSON-able dict."""
        return {
            "format": "fedep.features.ColumnSummaries",
            "version": SUMMARY_VERSION,
            "n_rows": self.n_rows,
            "n_gateways": self.n_gateways,
            "max_categories": self.max_categories,
            "sketch_size": self.sketch_size,
            "columns": [c.to_dict() for c in self.columns.values()],
        }

    @classmethod
    def from_dict(cls, d: dict) -> ColumnSummaries:
        """Inverse of :meth:`to_dict`; raises :class:`FeatureError` on another version."""
        fmt, version = d.get("format"), d.get("version")
        if fmt != "fedep.features.ColumnSummaries" or version != SUMMARY_VERSION:
            raise FeatureError(
                f"not a version-{SUMMARY_VERSION} ColumnSummaries dict "
                f"(format={d.get('format')!r}, version={d.get('version')!r})"
            )
        cols = [ColumnSummary.from_dict(c) for c in d["columns"]]
        return cls(
            n_rows=int(d["n_rows"]),
            columns={c.name: c for c in cols},
            n_gateways=int(d["n_gateways"]),
            max_categories=int(d["max_categories"]),
            sketch_size=int(d["sketch_size"]),
        )


# --------------------------------------------------------------------------- summarise
def _weighted_count(mask: np.ndarray, counts: np.ndarray | None) -> int:
    """Rows under ``mask``: the sum of their ``counts``, or how many when ``counts`` is None."""
    return int(np.count_nonzero(mask) if counts is None else counts[mask].sum())


def _all_finite(vals: np.ndarray) -> bool:
    """Whether every value is finite, in one pass without a temporary in the usual case:
    a finite sum means no NaN and no inf (a sum that overflows asks ``isfinite``)."""
    with np.errstate(over="ignore", invalid="ignore"):
        if len(vals) == 0 or np.isfinite(np.add.reduce(vals)):
            return True
    return bool(np.isfinite(vals).all())


def _numeric_view(
    cs: ColumnSummary,
    vals: np.ndarray,
    w: np.ndarray | None = None,
    finite: bool = False,
    measured: ColumnPass | None = None,
) -> None:
    """Fill the numeric view from values ``vals`` (NaN excluded by caller) with counts ``w``.

    ``w`` None: every value counts once (a numeric column's rows, not its distinct
    values), with no weight array to build or multiply by. ``finite``: the caller
    knows every value is finite. ``measured``: the compiled pass over these finite,
    unweighted values (:func:`~fedep.features._column_pass.numeric_pass`), which has
    filled the sketch already.
    """
    if measured is not None:
        cs.n_posinf = cs.n_neginf = 0
        cs.n_num = len(vals)
        cs.mean, cs.m2 = value_moments(vals)
        cs.min, cs.max = measured.min, measured.max
        cs.n_zero, cs.n_one, cs.n_nonneg = measured.n_zero, measured.n_one, measured.n_nonneg
        return
    if finite or _all_finite(vals):  # the usual case: no inf, no copy
        cs.n_posinf = cs.n_neginf = 0
        v, c = vals, w
    else:
        fin = np.isfinite(vals)
        cs.n_posinf = _weighted_count(vals == np.inf, w)
        cs.n_neginf = _weighted_count(vals == -np.inf, w)
        v, c = vals[fin], None if w is None else w[fin]
    n = len(v) if c is None else int(c.sum())
    cs.n_num = n
    if n == 0:
        return
    cs.mean, cs.m2 = value_moments(v, c)
    cs.min, cs.max = float(v.min()), float(v.max())
    cs.n_zero = _weighted_count(v == 0, c)
    cs.n_one = _weighted_count(v == 1, c)
    cs.n_nonneg = _weighted_count(v >= 0, c)
    cs.sketch.add(v, c)


def _top_keys(uniq: np.ndarray, cnt: np.ndarray, keep: int) -> list[int]:
    """Indices of the ``keep`` most frequent keys, ties by text: the first ``keep`` of
    ``sorted(range(len(uniq)), key=lambda i: (-cnt[i], uniq[i]))``, without sorting
    every distinct key (a column of mostly distinct values has millions)."""
    n = len(uniq)
    if n > keep:
        kth = np.partition(cnt, n - keep)[n - keep]  # the keep-th largest count
        sure = np.flatnonzero(cnt > kth)
        tied = np.flatnonzero(cnt == kth)
        # the (keep - len(sure)) smallest texts among the keys tied at that count
        texts = uniq[tied].tolist()
        chosen = heapq.nsmallest(keep - len(sure), range(len(tied)), key=texts.__getitem__)
        candidates = [*sure.tolist(), *tied[chosen].tolist()]
    else:
        candidates = range(n)
    return sorted(candidates, key=lambda i: (-cnt[i], uniq[i]))[:keep]


def _category_view(cs: ColumnSummary, uniq: np.ndarray, cnt: np.ndarray, keep: int) -> None:
    """Top list, ``other_count`` and ``truncated`` from distinct keys and their counts."""
    kept = _top_keys(uniq, cnt, keep)
    cs.top = {str(uniq[i]): int(cnt[i]) for i in kept}
    cs.other_count = int(cnt.sum()) - sum(cs.top.values())
    cs.truncated = len(uniq) > keep


def _summarize_numeric(
    name: str, s: pd.Series, cs: ColumnSummary, keep: int, forced: bool, work: int
) -> ColumnSummary:
    """Numeric family: numbers counted by value, keyed as text only when listed.

    A number's key (:func:`~fedep.features._values.canonical_keys`) is a function of its
    value, one to one, and never a missing token. The distinct-count sketch hashes the
    values themselves (:func:`~fedep.features.sketches.number_hashes`); the values are
    counted and their keys written only when the top list can be sent -- a column with
    more distinct values than the list keeps is withheld (:func:`_withhold_values`)
    unless forced categorical, and its millions of distinct values are then never sorted or keyed.
    """
    vals = numeric_values(s, "numeric")
    finite = _all_finite(vals)
    if not finite:
        nan = np.isnan(vals)
        if nan.any():
            vals = vals[~nan]
    cs.n_null = len(s) - len(vals)
    cs.n_token = 0
    # the usual case, finite values: one compiled pass (None: the NumPy reference)
    measured = numeric_pass(vals, cs.sketch, KMV_SIZE, work) if finite else None
    _numeric_view(cs, vals, finite=finite, measured=measured)
    cs.distinct = KMV.of_numbers(vals) if measured is None else measured.distinct
    # The list would hold min(distinct, keep) keys: exactly known below the sketch's k,
    # else at most keep. Withheld with the longest list possible -> withheld with the
    # true one (the rules only get stricter as the list shrinks): skip the counting.
    n_top = keep if cs.distinct.saturated else min(len(cs.distinct.hashes), keep)
    if not forced and _withhold_values(name, cs, "numeric", n_top):
        cs.top, cs.other_count, cs.truncated = {}, len(vals), True
        return cs
    # -0.0 -> 0.0 (one key, "0"); pandas counts by hashing, no sort of every value
    vc = pd.Series(vals + 0.0, copy=False).value_counts(sort=False)
    uniq = np.asarray(canonical_keys(vc.index.to_numpy(dtype=float)), dtype=object)
    _category_view(cs, uniq, vc.to_numpy(dtype=np.int64), keep)
    if not forced and _withhold_values(name, cs, "numeric"):
        cs.other_count += sum(cs.top.values())
        cs.top = {}
        cs.truncated = True
    return cs


def _summarize_one(
    name: str,
    s: pd.Series,
    keep: int,
    sketch_size: int,
    forced: bool = False,
    work: int | None = None,
) -> ColumnSummary:
    """One column's summary; ``work``: the values of the whole table (default the
    column's), for the compiled pass's small-work rule."""
    fam = column_family(s)
    cs = ColumnSummary(name=name, families=(fam,), n_rows=len(s))
    cs.sketch = LogHistogram(sketch_size)
    if fam == "datetime":
        vals = numeric_values(s, fam)
        ok = ~np.isnan(vals)
        vals = vals[ok]
        cs.n_null = len(s) - len(vals)
        _numeric_view(cs, vals)
        cs.other_count = len(vals)
        cs.truncated = len(vals) > 0
        # a date-time's key is its epoch seconds, hashed as the number
        cs.distinct = KMV.of_numbers(vals)
        cs.n_time = len(vals)
        return cs
    if fam == "numeric":
        return _summarize_numeric(name, s, cs, keep, forced, len(s) if work is None else work)
    if fam == "string" and isinstance(s.dtype, pd.StringDtype):
        # text already (what the readers give): count it as it is stored, and make
        # Python strings of the distinct values only (string_view would of every row)
        vc = s.value_counts(dropna=True, sort=False)
    else:
        vc = string_view(s, fam).value_counts(dropna=True, sort=False)
    cs.n_null = len(s) - int(vc.sum())
    uniq = np.asarray(vc.index.to_numpy(dtype=object), dtype=object)
    cnt = vc.to_numpy(dtype=np.int64)
    stripped = [u.strip() for u in uniq]
    low = np.asarray([t.lower() for t in stripped], dtype=object)
    token = np.isin(low, list(MISSING_TOKENS)) if len(low) else np.zeros(0, bool)
    cs.n_token = _weighted_count(token, cnt)
    parsed = None
    # numeric view
    if fam == "bool":
        vals = numeric_values(s, fam)
        _numeric_view(cs, vals[~np.isnan(vals)])
    else:
        parsed = pd.to_numeric(pd.Series(low, dtype=object), errors="coerce").to_numpy(float)
        ok = ~np.isnan(parsed) & ~token
        cs.n_junk = _weighted_count(~ok & ~token, cnt)
        _numeric_view(cs, parsed[ok], cnt[ok])
        # patterns
        address, uid, time = _pattern_flags(stripped)
        cs.n_address = _weighted_count(address, cnt)
        cs.n_uid = _weighted_count(uid & ~ok, cnt)
        cs.n_time = _weighted_count(time, cnt)
        cs.n_bool_token = _weighted_count(np.isin(low, list(BOOL_TRUE | BOOL_FALSE)), cnt)
    # category view
    _category_view(cs, uniq, cnt, keep)
    # every key is already a str; the keys parsed from their stripped, lower-case text
    # (``parsed``) decide which are canonical numbers
    cs.distinct = KMV.of_hashes(key_hashes(uniq, parsed))
    if not forced and _withhold_values(name, cs, fam):
        # What leaves the gateway must not list its addresses, uids, timestamps or
        # other identifying values: the counts and flags above decide such a column.
        cs.other_count += sum(cs.top.values())
        cs.top = {}
        cs.truncated = True
    return cs


def _withhold_values(name: str, cs: ColumnSummary, fam: str, n_top: int | None = None) -> bool:
    """Whether a column's top values stay on the gateway (identifying or not needed).

    Withheld: columns named like addresses, identifiers, ports, timestamps or labels;
    text mostly made of addresses, uid-like tokens or date-times; columns whose values
    are mostly distinct (identifiers, free text, counts); and numeric columns with more
    distinct values than a vocabulary would keep (their decision needs only the
    moments and the sketch). Low-cardinality codes and categories are sent, since a
    one-hot vocabulary is made of them.

    ``n_top``: the length of the top list (default ``len(cs.top)``), for a caller that
    decides before building the list.
    """
    if name_hint(name) in ("address", "identifier", "port", "timestamp", "label"):
        return True
    present = max(cs.n_present, 1)
    if max(cs.n_address, cs.n_uid, cs.n_time) >= 0.9 * present:
        return True
    distinct = cs.n_distinct
    if cs.n_nonnull >= 20 and distinct >= 0.5 * cs.n_nonnull:
        return True
    return fam in ("numeric", "bool") and distinct > (len(cs.top) if n_top is None else n_top)


def summarize_columns(
    df: pd.DataFrame,
    *,
    max_categories: int = 64,
    sketch_size: int = DEFAULT_SKETCH_SIZE,
    categorical: Iterable[str] = (),
) -> ColumnSummaries:
    """Summarise every column of ONE gateway's records.

    Top values of identifying columns (addresses, uids, timestamps, mostly-distinct
    values) stay on the gateway (see :func:`_withhold_values`), except for the columns
    in ``categorical``, whose vocabulary the user asked for.

    Parameters
    ----------
    df : DataFrame of shape (n_samples, n_columns)
        The gateway's records; column names are used as text.
    max_categories : int, default=64
        The category view keeps the ``4 * max_categories`` most frequent values (ties by
        text) plus an ``other_count``.
    sketch_size : int, default=32
        Quantile-sketch bins per decade (relative error 3.6 % at 32; see
        :class:`~fedep.features.sketches.LogHistogram`). Every gateway of a federation
        must use the same value.
    categorical : iterable of str, default=()
        Columns forced categorical: their top values are always sent.

    Returns
    -------
    ColumnSummaries
    """
    if not isinstance(df, pd.DataFrame):
        raise FeatureError(f"summarize_columns expects a pandas DataFrame, got {type(df).__name__}")
    names = [str(c) for c in df.columns]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise FeatureError(f"duplicate column names: {', '.join(map(repr, dup))}")
    keep = 4 * int(max_categories)
    forced = {str(c) for c in categorical}

    def one(j: int) -> ColumnSummary:
        n = names[j]
        return _summarize_one(n, df.iloc[:, j], keep, int(sketch_size), n in forced, df.size)

    # Columns are independent, and their passes run in NumPy without the GIL: a large
    # table's columns are summarised on every core this process may use (worker
    # threads block, they do not spin as a BLAS does: fedep.core._threads).
    workers = 1 if df.size < _THREADED_CELLS else min(len(names), worker_threads())
    if workers > 1:
        with ThreadPoolExecutor(workers) as pool:
            done = list(pool.map(one, range(len(names))))
    else:
        done = [one(j) for j in range(len(names))]
    cols = dict(zip(names, done, strict=True))
    return ColumnSummaries(len(df), cols, 1, int(max_categories), int(sketch_size))


def _absent(name: str, n_rows: int, sketch_size: int, n_gateways: int) -> ColumnSummary:
    return ColumnSummary(
        name=name,
        families=(),
        n_rows=n_rows,
        n_null=n_rows,
        n_gateways=n_gateways,
        n_absent=n_gateways,
        sketch=LogHistogram(sketch_size),
    )


def merge_summaries(summaries: Iterable[ColumnSummaries]) -> ColumnSummaries:
    """Merge gateway summaries into the summary of all their records.

    A column that a gateway's frame lacks counts as null in all of that gateway's rows
    (and in ``n_absent``). Column order: first seen, in list order. Associative and
    commutative up to that order and to round-off in ``mean``/``m2``.

    Parameters
    ----------
    summaries : iterable of ColumnSummaries
        At least one; all with the same ``sketch_size``.

    Returns
    -------
    ColumnSummaries
    """
    parts = list(summaries)
    if not parts:
        raise FeatureError("merge_summaries needs at least one summary")
    sizes = {p.sketch_size for p in parts}
    if len(sizes) > 1:
        raise FeatureError(f"summaries use different sketch sizes {sorted(sizes)}")
    size = sizes.pop()
    names: list[str] = []
    for p in parts:
        names += [n for n in p.columns if n not in names]
    out: dict[str, ColumnSummary] = {}
    for n in names:
        acc: ColumnSummary | None = None
        for p in parts:
            c = p.columns.get(n) or _absent(n, p.n_rows, size, p.n_gateways)
            acc = c if acc is None else acc.merge(c)
        out[n] = acc
    return ColumnSummaries(
        n_rows=sum(p.n_rows for p in parts),
        columns=out,
        n_gateways=sum(p.n_gateways for p in parts),
        max_categories=max(p.max_categories for p in parts),
        sketch_size=size,
    )


def align_summaries(summaries: Sequence[ColumnSummaries]) -> list[ColumnSummaries]:
    """The gateways' summaries over the union of their columns (first seen, in order).

    A column that a gateway's table lacks is summarised there as all missing: what a
    fit in one process sees when the gateways' tables are concatenated into one
    DataFrame (``pandas.concat`` fills them with missing values), so that a federation
    over Flower and the in-process ``fit`` make the same decisions.
    """
    names: list[str] = []
    for p in summaries:
        names += [n for n in p.columns if n not in names]
    out = []
    for p in summaries:
        cols = {
            n: p.columns.get(n)
            or ColumnSummary(
                name=n, n_rows=p.n_rows, n_null=p.n_rows, sketch=LogHistogram(p.sketch_size)
            )
            for n in names
        }
        out.append(replace(p, columns=cols))
    return out

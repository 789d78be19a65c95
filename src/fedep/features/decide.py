"""Decide, from a merged summary, what each column becomes.

Rules, in order (the first that applies wins; user overrides come before all of them):

1. **User overrides.** ``exclude`` -> drop. ``categorical`` -> one-hot. ``numeric`` ->
   numeric (keep / log1p / signed-log by the tail rule below). ``include`` -> kept even
   if a rule below would drop it (label, identifier, address, timestamp, free text,
   constant, absent at a gateway): it is re-decided without name hints and patterns,
   and high-cardinality text becomes one-hot of its top ``max_categories`` values.
   Everything else is automatic. A column in both ``categorical`` and ``numeric`` (or
   ``include`` and ``exclude``), or a name no gateway has, is a :class:`FeatureError`.
2. **Absent at a gateway.** A column missing from some gateway's frame is dropped
   (every gateway must be able to compute every feature at transform time); included
   explicitly, it is kept and a frame lacking it is read as all-missing.
3. **All missing** (no present value on any gateway) -> drop.
4. **Name hints** (:data:`~fedep.features.name_hints.NAME_HINTS`, matched on the
   lower-cased name with non alphanumerics as ``_``, so Zeek ``id.orig_h`` is
   ``id_orig_h``): labels/targets, timestamps, addresses, ports and identifiers are excluded.
5. **Value patterns** (share of present text values, :data:`PATTERN_SHARE` = 0.9):
   timestamps (ISO or ``dd/mm/yyyy``), IP/MAC addresses, uid-like tokens (UUIDs, Zeek
   uids, digests; also needs many distinct values) -> excluded. A numeric column whose
   values all lie in the epoch-seconds (or -milliseconds) range of 2000-2100 with mostly
   distinct values is a timestamp too.
6. **Numbers stored as text**: at least :data:`NUMERIC_PARSE_MIN` = 99 % of the non-null
   values parse as numbers (missing tokens such as ``-`` count against it; they become
   missing) -> numeric.
7. **Numeric**: one value (and no missing) -> constant, dropped; only 0/1 -> boolean,
   kept; otherwise the tail rule: let ``m`` be the median and ``p99`` the 99th
   percentile of the non-zero ``|x|`` (from the sketch) and ``M`` the largest ``|x|``;
   heavy-tailed if ``p99 / m >= HEAVY_RATIO`` (10) or ``M / m >= HEAVY_MAX_RATIO``
   (1000). 10 is the p99/median ratio of a lognormal with sigma = 1; an exponential
   law has 6.6, a uniform at most 2: light tails stay linear, counts spanning decades
   (bytes, packets, durations) are compressed. Heavy and non-negative -> ``log1p``;
   heavy with negative values -> ``sign(x) log1p(|x|)``; else kept as is, unless its
   float64 moments would overflow (values spread over more than ~1e154, see
   :data:`LINEAR_M2_MAX`): then log1p / signed log too, whose values stay below 710.
   Missing values are imputed with the (sketch) median and, when at least
   :data:`MISSING_INDICATOR_MIN` = 0.1 % of the rows miss, a ``<col>_missing`` 0/1
   feature is added.
8. **Booleans**: a bool column -> kept as 0/1; text booleans (``T``/``F``/``yes`` ...,
   possibly with missing tokens) -> one-hot of the values seen.
9. **Text**: one value -> constant, dropped; if the ``max_categories`` most frequent
   values (nulls as ``<NA>``) cover at least :data:`CATEGORICAL_COVERAGE` = 90 % of the
   rows and the values are not nearly all distinct -> one-hot of those values plus
   ``<other>`` (unseen or rarer values); else free text, dropped.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from fedep.features._values import NA_CATEGORY, OTHER_CATEGORY, FeatureError
from fedep.features.name_hints import name_hint
from fedep.features.summaries import ColumnSummaries, ColumnSummary

__all__ = [
    "ACTIONS",
    "KINDS",
    "ColumnDecision",
    "decide_columns",
    "format_decisions",
]

KINDS = (
    "numeric",
    "heavy-tailed",
    "signed-heavy-tailed",
    "categorical",
    "boolean",
    "identifier",
    "address",
    "timestamp",
    "free-text",
    "constant",
    "label",
    "all-missing",
)
ACTIONS = ("keep", "log1p", "signed-log", "normal-score", "one-hot", "drop")

NUMERIC_PARSE_MIN = 0.99
PATTERN_SHARE = 0.9
HEAVY_RATIO = 10.0
HEAVY_MAX_RATIO = 1000.0
CATEGORICAL_COVERAGE = 0.9
MISSING_INDICATOR_MIN = 0.001
#: A kept (linear) column whose encoded values could have a sum of squared deviations
#: beyond this is log-transformed instead (:func:`_linear_overflows`). A quarter of the
#: largest float64 leaves room for the round-off of the gateways' sums and their merge.
LINEAR_M2_MAX = float(np.finfo(np.float64).max) / 4
#: A text column with at least this many non-null rows that are nearly all distinct
#: (>= 90 %) is free text / an identifier, whatever its coverage.
UNIQUE_MIN_ROWS = 50
_EPOCH_RANGES = ((9.46e8, 4.1e9, "epoch seconds"), (9.46e11, 4.1e12, "epoch milliseconds"))


@dataclass(frozen=True)
class ColumnDecision:
    """What one input column becomes.

    Attributes
    ----------
    name : str
    kind : str
        One of :data:`KINDS`.
    action : str
        One of :data:`ACTIONS`.
    reason : str
        A human sentence.
    vocabulary : tuple of str
        One-hot categories (the ``<other>`` column is added after them).
    impute : float or None
        Value (raw scale) replacing missing entries of a numeric column: the median.
    lo, hi : float or None
        Smallest / largest finite training value; ``-inf`` / ``+inf`` become these.
    missing_indicator : bool
        Whether a ``<name>_missing`` feature follows.
    optional : bool
        A frame lacking the column is read as all-missing instead of an error (columns
        absent at some training gateway, kept on request).
    cdf_x, cdf_counts : tuple
        For ``action="normal-score"``: knots of the merged training distribution
        function (:meth:`fedep.features.LogHistogram.cdf_knots`; values and the
        cumulative counts at them).
    """

    name: str
    kind: str
    action: str
    reason: str
    vocabulary: tuple[str, ...] = ()
    impute: float | None = None
    lo: float | None = None
    hi: float | None = None
    missing_indicator: bool = False
    optional: bool = False
    cdf_x: tuple[float, ...] = ()
    cdf_counts: tuple[int, ...] = ()

    @property
    def used(self) -> bool:
        """Whether the column produces features."""
        return self.action != "drop"

    def output_names(self) -> list[str]:
        """Names of the features this column produces, in order."""
        if self.action == "drop":
            return []
        if self.action == "one-hot":
            return [f"{self.name}={v}" for v in (*self.vocabulary, OTHER_CATEGORY)]
        out = [self.name]
        if self.missing_indicator:
            out.append(f"{self.name}_missing")
        return out

    def to_dict(self) -> dict:
        """JSON-able dict."""
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["vocabulary"] = list(self.vocabulary)
        d["cdf_x"] = list(self.cdf_x)
        d["cdf_counts"] = list(self.cdf_counts)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> ColumnDecision:
        """Inverse of :meth:`to_dict`."""
        kw = dict(d)
        kw["vocabulary"] = tuple(str(v) for v in d.get("vocabulary", ()))
        kw["cdf_x"] = tuple(float(v) for v in d.get("cdf_x", ()))
        kw["cdf_counts"] = tuple(int(v) for v in d.get("cdf_counts", ()))
        if kw.get("action") == "normal-score":
            x = np.asarray(kw["cdf_x"], dtype=float)
            c = np.asarray(kw["cdf_counts"], dtype=float)
            ok = (
                x.size >= 2
                and c.shape == x.shape
                and np.isfinite(x).all()
                and bool(np.all(np.diff(x) > 0))
                and bool(np.all(np.diff(c) >= 0))
                and c[0] >= 0
                and c[-1] > 0
            )
            if not ok:
                raise FeatureError(
                    f"column {d.get('name')!r}: bad normal-score knots (need >= 2 "
                    "increasing finite values with non-decreasing counts)"
                )
        for k in ("impute", "lo", "hi"):
            kw[k] = None if d.get(k) is None else float(d[k])
        return cls(**kw)


def _fmt(x: float) -> str:
    if x == 0 or (1e-3 <= abs(x) < 1e5):
        return f"{x:.4g}"
    return f"{x:.2e}"


def _missing_count(c: ColumnSummary) -> int:
    return c.n_rows - c.n_num - c.n_posinf - c.n_neginf


def _linear_overflows(c: ColumnSummary) -> bool:
    """Whether the float64 moments of the column, kept linear, could overflow.

    The encoded column holds the ``n_num`` finite values plus ``n_rows - n_num`` values
    in ``[min, max]`` (the median for missing ones, ``min``/``max`` for infinities), so
    its sum of squared deviations is at most ``m2 + 1.25 (n_rows - n_num) (max -
    min)**2`` (Chan's update: the extra rows' own ``m2`` is at most ``k span**2 / 4`` and
    the between term at most ``k span**2``). Past :data:`LINEAR_M2_MAX` -- values spread
    over more than ~1e154 -- the gateways' moments and the federated scale cannot be
    represented in float64, whereas the log of such values is below 710.
    """
    span = c.max - c.min  # Python floats: inf on overflow, no exception
    bound = c.m2 + 1.25 * (c.n_rows - c.n_num) * span * span
    return not bound <= LINEAR_M2_MAX


def _numeric(c: ColumnSummary, prefix: str = "", allow_constant_drop: bool = True):
    """Numeric decision: constant / boolean / heavy-tailed / signed / light."""
    n = c.name
    if c.n_num == 0:
        return ColumnDecision(n, "all-missing", "drop", prefix + "no finite numeric value")
    miss = _missing_count(c)
    share = miss / c.n_rows if c.n_rows else 0.0
    med = c.quantile(0.5)
    base = dict(
        impute=float(med),
        lo=float(c.min),
        hi=float(c.max),
        missing_indicator=share >= MISSING_INDICATOR_MIN,
    )
    miss_txt = f"; {share:.1%} missing -> median {_fmt(med)}" if miss else ""
    if c.min == c.max:
        if miss == 0 and allow_constant_drop:
            return ColumnDecision(
                n,
                "constant",
                "drop",
                prefix + f"constant (one value {_fmt(c.min)} in {c.n_rows:,} rows)",
            )
        return ColumnDecision(
            n,
            "boolean" if miss else "constant",
            "keep",
            prefix + f"one value ({_fmt(c.min)}) or missing{miss_txt}: presence indicator",
            **{**base, "impute": float(c.min), "missing_indicator": bool(miss)},
        )
    if "bool" in c.families or (c.n_zero + c.n_one == c.n_num):
        return ColumnDecision(n, "boolean", "keep", prefix + f"0/1 values{miss_txt}", **base)
    m = c.sketch.magnitude_quantile(0.5)
    p99 = c.sketch.magnitude_quantile(0.99)
    big = max(abs(c.min), abs(c.max))
    ratio = p99 / m if m > 0 else math.inf
    max_ratio = big / m if m > 0 else math.inf
    heavy = ratio >= HEAVY_RATIO or max_ratio >= HEAVY_MAX_RATIO
    why = f"p99/median |x| = {_fmt(ratio)}, max/median = {_fmt(max_ratio)}"
    if heavy and c.min >= 0:
        return ColumnDecision(
            n,
            "heavy-tailed",
            "log1p",
            prefix + f"non-negative, {why}: heavy-tailed{miss_txt}",
            **base,
        )
    if heavy:
        return ColumnDecision(
            n,
            "signed-heavy-tailed",
            "signed-log",
            prefix + f"signed (min {_fmt(c.min)}), {why}: heavy-tailed{miss_txt}",
            **base,
        )
    if _linear_overflows(c):
        # A light tail at a scale float64 moments cannot hold (1e200-scale rates): the
        # log is the only transform of this rule under which the column can be scaled.
        action, signed = ("log1p", "") if c.min >= 0 else ("signed-log", "signed, ")
        return ColumnDecision(
            n,
            "numeric",
            action,
            prefix + f"{signed}{why}: light-tailed, but values up to {_fmt(big)} overflow "
            f"float64 moments: {action}{miss_txt}",
            **base,
        )
    return ColumnDecision(n, "numeric", "keep", prefix + f"{why}: light-tailed{miss_txt}", **base)


def _one_hot(c: ColumnSummary, max_categories: int, kind: str, prefix: str = ""):
    counts = dict(c.top)
    n_null = c.n_null
    if n_null:
        counts[NA_CATEGORY] = counts.get(NA_CATEGORY, 0) + n_null
    order = sorted(counts, key=lambda k: (-counts[k], k))
    vocab = tuple(order[:max_categories])
    cover = sum(counts[k] for k in vocab) / c.n_rows if c.n_rows else 0.0
    nd = c.n_distinct + (1 if n_null else 0)
    approx = "~" if c.distinct.saturated or c.truncated else ""
    reason = (
        prefix + f"{approx}{nd:,.0f} distinct values, top {len(vocab)} cover {cover:.1%} of "
        f"rows: one-hot (+ {OTHER_CATEGORY})"
    )
    return ColumnDecision(c.name, kind, "one-hot", reason, vocabulary=vocab)


def _auto(c: ColumnSummary, max_categories: int, hints: bool = True) -> ColumnDecision:
    n = c.name
    fam = c.inferred_type
    if c.n_present == 0:
        what = "no value" if c.n_token == 0 else f"only missing tokens ({c.n_token:,} rows)"
        return ColumnDecision(n, "all-missing", "drop", f"all missing: {what} in {c.n_rows:,} rows")
    hint = name_hint(n) if hints else None
    if hint == "label":
        return ColumnDecision(n, "label", "drop", "named like a label/target: excluded")
    if hint == "timestamp" or (hints and fam == "datetime"):
        why = "named like a timestamp" if hint else "datetime values"
        return ColumnDecision(n, "timestamp", "drop", f"{why}: timestamp, excluded")
    if hint == "address":
        return ColumnDecision(n, "address", "drop", "named like an address: identifier, excluded")
    if hint == "port":
        return ColumnDecision(n, "identifier", "drop", "port number: endpoint identifier, excluded")
    if hint == "identifier":
        return ColumnDecision(n, "identifier", "drop", "named like an identifier: excluded")
    text = "string" in c.families
    present = c.n_present
    if hints and text:
        if c.n_time >= PATTERN_SHARE * present:
            return ColumnDecision(
                n,
                "timestamp",
                "drop",
                f"{c.n_time / present:.0%} ISO/date-time text: timestamp, excluded",
            )
        if c.n_address >= PATTERN_SHARE * present:
            return ColumnDecision(
                n,
                "address",
                "drop",
                f"{c.n_address / present:.0%} IP/MAC addresses: identifier, excluded",
            )
        many = c.n_distinct > max_categories or c.n_distinct >= 0.5 * present
        if c.n_uid >= PATTERN_SHARE * present and many:
            return ColumnDecision(
                n,
                "identifier",
                "drop",
                f"{c.n_uid / present:.0%} uid-like tokens, ~{c.n_distinct:,.0f} distinct: "
                "identifier, excluded",
            )
    if fam == "datetime":  # only reached without hints (user include): numeric epoch seconds
        return _numeric(c, "datetime as epoch seconds; ")
    numeric_like = not text or (
        c.n_num + c.n_posinf + c.n_neginf >= NUMERIC_PARSE_MIN * c.n_nonnull
    )
    if numeric_like and c.n_num + c.n_posinf + c.n_neginf > 0:
        prefix = "" if not text else f"text parsing as numbers ({(c.n_num) / c.n_nonnull:.1%}); "
        if hints and not text and c.n_num:
            for lo, hi, unit in _EPOCH_RANGES:
                if lo <= c.min and c.max <= hi and c.n_distinct >= 0.5 * min(c.n_num, 256):
                    return ColumnDecision(
                        n,
                        "timestamp",
                        "drop",
                        f"values {_fmt(c.min)}..{_fmt(c.max)} look like {unit}: "
                        "timestamp, excluded",
                    )
        return _numeric(c, prefix)
    # text
    nkeys = len(c.top) + (1 if c.n_null else 0)
    if nkeys == 1 and not c.truncated and c.other_count == 0:
        v = next(iter(c.top), NA_CATEGORY)
        return ColumnDecision(
            n, "constant", "drop", f"constant (one value {v!r} in {c.n_rows:,} rows)"
        )
    if c.n_bool_token + c.n_token == c.n_nonnull and c.n_bool_token > 0:
        d = _one_hot(c, max_categories, "boolean", "text booleans; ")
        return d
    if hints:
        if c.n_nonnull >= UNIQUE_MIN_ROWS and c.n_distinct >= 0.9 * min(c.n_nonnull, 256):
            return ColumnDecision(
                n,
                "free-text",
                "drop",
                f"~{c.n_distinct:,.0f} distinct values in {c.n_nonnull:,} rows: "
                "free text/identifier, excluded",
            )
        d = _one_hot(c, max_categories, "categorical")
        cover = sum(c.top.get(k, 0) if k != NA_CATEGORY else c.n_null for k in d.vocabulary)
        if cover < CATEGORICAL_COVERAGE * c.n_rows:
            return ColumnDecision(
                n,
                "free-text",
                "drop",
                f"~{c.n_distinct:,.0f} distinct values, top {max_categories} cover only "
                f"{cover / c.n_rows:.1%} of rows: free text, excluded",
            )
        return d
    return _one_hot(c, max_categories, "categorical")


def _as_set(x: Iterable[str] | str | None) -> set[str]:
    if x is None:
        return set()
    if isinstance(x, str):
        return {x}
    return {str(v) for v in x}


def decide_columns(
    merged: ColumnSummaries,
    *,
    include: Sequence[str] | None = None,
    exclude: Sequence[str] | None = None,
    categorical: Sequence[str] | None = None,
    numeric: Sequence[str] | None = None,
    max_categories: int = 32,
) -> list[ColumnDecision]:
    """Decide every column of a merged summary (rules in the module docstring).

    Parameters
    ----------
    merged : ColumnSummaries
        Usually :func:`~fedep.features.merge_summaries` of the gateways' summaries.
    include, exclude, categorical, numeric : sequence of str, optional
        User overrides (they win over every automatic rule).
    max_categories : int, default=32
        One-hot vocabulary size (top values by global count; the rest -> ``<other>``).

    Returns
    -------
    list of ColumnDecision
        One per column, in the summary's column order.
    """
    inc, exc, cat, num = map(_as_set, (include, exclude, categorical, numeric))
    known = set(merged.columns)
    unknown = sorted((inc | exc | cat | num) - known)
    if unknown:
        raise FeatureError(f"override names no column of the data: {', '.join(map(repr, unknown))}")
    for a, b, an, bn in (
        (inc, exc, "include", "exclude"),
        (cat, num, "categorical", "numeric"),
        (cat, exc, "categorical", "exclude"),
        (num, exc, "numeric", "exclude"),
    ):
        both = sorted(a & b)
        if both:
            raise FeatureError(f"columns in both {an} and {bn}: {', '.join(map(repr, both))}")
    out: list[ColumnDecision] = []
    for name, c in merged.columns.items():
        forced = name in inc or name in cat or name in num
        absent = c.n_absent > 0
        if name in exc:
            auto = _auto(c, max_categories)
            out.append(
                replace(
                    auto,
                    action="drop",
                    reason=f"excluded by the user (automatic: {auto.reason})",
                    vocabulary=(),
                )
            )
            continue
        if name in cat:
            d = _one_hot(c, max_categories, "categorical", "categorical by the user; ")
        elif name in num:
            d = _numeric(c, "numeric by the user; ", allow_constant_drop=False)
            if c.n_num == 0:
                d = replace(d, reason="numeric by the user but " + d.reason + ": dropped")
        elif name in inc:
            d = _auto(c, max_categories)
            if d.action == "drop" and d.kind != "all-missing":
                d = _auto(c, max_categories, hints=False)
                if d.kind == "constant" and d.action == "drop":
                    d = (
                        _numeric(c, allow_constant_drop=False)
                        if c.n_num
                        else _one_hot(c, max_categories, "constant")
                    )
                d = replace(d, reason="included by the user; " + d.reason)
        else:
            d = _auto(c, max_categories)
        if absent and d.used:
            where = f"absent at {c.n_absent} of {c.n_gateways} gateways"
            if forced:
                d = replace(d, optional=True, reason=d.reason + f"; {where}: read as missing there")
            else:
                d = replace(
                    d,
                    action="drop",
                    vocabulary=(),
                    reason=f"{where}: dropped, every gateway must compute it "
                    f"(automatic: {d.reason})",
                )
        out.append(d)
    return out


def format_decisions(decisions: Sequence[ColumnDecision]) -> str:
    """A plain-text table: column, kind, action, reason."""
    rows = [("column", "kind", "action", "reason")] + [
        (d.name, d.kind, d.action, d.reason) for d in decisions
    ]
    w = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [f"{r[0]:<{w[0]}}  {r[1]:<{w[1]}}  {r[2]:<{w[2]}}  {r[3]}" for r in rows]
    lines.insert(1, "  ".join("-" * x for x in w) + "  " + "-" * 6)
    return "\n".join(lines)

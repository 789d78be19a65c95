"""A scikit-learn transformer whose fit never pools records across gateways.

Federated fit, two rounds (what :meth:`FeaturePipeline.fit` does with ``groups``):

1. every gateway sends ``summarize_columns(frame)``; the server calls
   :meth:`FeaturePipeline.fit_from_summaries` (merge + :func:`decide_columns`);
2. every gateway sends ``pipeline.gateway_moments(frame)`` (moments of its encoded
   features); the server calls :meth:`FeaturePipeline.fit_scaling`.

Transform policy (per row, no state):

* needed columns missing -> one :class:`FeatureError` naming all of them; columns not
  seen at fit are ignored and listed in ``last_ignored_columns_``; column order is free;
* numeric columns: null, NaN and missing tokens (``-`` ...) -> the training median
  (from the sketch, within its 3.6 % error) plus ``<col>_missing`` = 1 where the column
  has that indicator; ``+inf`` / ``-inf`` -> the training max / min (clipping, not
  missing: an infinite rate is an extreme, not an absent, value); any other text that
  does not parse as a number -> :class:`FeatureError` naming the column, the value and
  its row label; ``log1p`` is applied as ``sign(x) log1p(|x|)`` so that an unexpected
  negative value cannot produce NaN; with ``numeric_transform="quantile"`` a numeric
  (not 0/1) column becomes its normal score instead (:func:`normal_scores`);
* one-hot columns: values outside the vocabulary (unseen or rare at fit) -> ``<other>``;
  null -> ``<NA>`` if that was a category at fit, else ``<other>``.

Output: ``float64`` array of shape (n_samples, n_features_out), centred and scaled by
the federated rule (``scale_rule``; ``None`` leaves the encoded features unscaled).
:meth:`FeaturePipeline.to_dict` / :meth:`~FeaturePipeline.from_dict` give a versioned
JSON-able form (no pickle) that reproduces the transform bit for bit.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pandas as pd
from scipy.special import ndtri
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.exceptions import NotFittedError
from sklearn.utils._param_validation import Interval, InvalidParameterError, StrOptions

from fedep.core._threads import over_row_spans, worker_threads
from fedep.core.stats import Moments, client_moments, combine_moments
from fedep.features._values import (
    BOOL_FALSE,
    BOOL_TRUE,
    MISSING_TOKENS,
    NA_CATEGORY,
    FeatureError,
    column_family,
    numeric_values,
    string_view,
)
from fedep.features.decide import ColumnDecision, decide_columns
from fedep.features.scaling import SCALE_RULES, federated_scale
from fedep.features.sketches import DEFAULT_SKETCH_SIZE
from fedep.features.summaries import (
    _THREADED_CELLS,
    ColumnSummaries,
    merge_summaries,
    summarize_columns,
)

__all__ = ["NUMERIC_TRANSFORMS", "PIPELINE_VERSION", "FeaturePipeline", "normal_scores"]

#: Version 2 added the ``numeric_transform`` parameter and ``"normal-score"`` decisions
#: (their distribution-function knots); version-1 dicts still load.
PIPELINE_VERSION = 2
_READABLE_VERSIONS = (1, 2)
NUMERIC_TRANSFORMS = ("log", "quantile")
_FORMAT = "fedep.features.FeaturePipeline"


def _as_frame(X) -> pd.DataFrame:
    if isinstance(X, pd.DataFrame):
        df = X
    else:
        df = pd.DataFrame(X)
    names = [str(c) for c in df.columns]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise FeatureError(f"duplicate column names: {', '.join(map(repr, dup))}")
    if names != list(df.columns):
        df = df.set_axis(names, axis=1)
    decoded = {}
    for c in names:
        if df[c].dtype == object:
            text = _decoded_bytes(df[c], c)
            if text is not None:
                decoded[c] = text
    return df.assign(**decoded) if decoded else df


#: ``pandas.api.types.infer_dtype`` labels of object columns that hold no ``bytes``.
_NO_BYTES = frozenset(
    {"string", "empty", "integer", "floating", "mixed-integer-float", "decimal", "boolean"}
    | {"complex", "datetime", "datetime64", "date", "time", "timedelta", "timedelta64"}
    | {"period", "interval", "categorical"}
)


def _decoded_bytes(s: pd.Series, column: str) -> pd.Series | None:
    """An object column holding ``bytes`` (a binary Parquet column, a database driver's
    value) with its bytes decoded as UTF-8 text, or None when it holds none; bytes that
    are not UTF-8 are an error naming the column and row, not a guess."""
    if pd.api.types.infer_dtype(s, skipna=True) in _NO_BYTES:
        return None  # one pass in C (encode runs on every chunk): no bytes there
    values = s.to_numpy(dtype=object)
    where = [i for i, v in enumerate(values) if isinstance(v, bytes | bytearray)]
    if not where:
        return None
    out = values.copy()
    for i in where:
        try:
            out[i] = bytes(values[i]).decode("utf-8")
        except UnicodeDecodeError:
            raise FeatureError(
                f"column {column!r}, row {s.index[i]!r}: bytes that are not UTF-8 text "
                f"({bytes(values[i])[:16]!r}); decode the column first",
                column=column,
                row=s.index[i],
                value=repr(bytes(values[i])[:16]),
            ) from None
    return pd.Series(out, index=s.index, dtype=object)


def _read_numeric(s: pd.Series, d: ColumnDecision) -> np.ndarray:
    """Float values of a column for a numeric decision; NaN = missing; raises on junk text."""
    fam = column_family(s)
    if fam != "string":
        return numeric_values(s, fam)
    codes, uniq = pd.factorize(pd.Series(s, dtype=object), use_na_sentinel=True)
    text = [str(u) for u in uniq]
    low = [t.strip().lower() for t in text]
    vals = pd.to_numeric(pd.Series(low, dtype=object), errors="coerce").to_numpy(float)
    for i, t in enumerate(low):
        if math.isnan(vals[i]):
            if d.kind == "boolean" and t in BOOL_TRUE:
                vals[i] = 1.0
            elif d.kind == "boolean" and t in BOOL_FALSE:
                vals[i] = 0.0
            elif t not in MISSING_TOKENS and t != "nan":
                pos = int(np.flatnonzero(codes == i)[0])
                label = s.index[pos]
                label = label.item() if hasattr(label, "item") else label
                raise FeatureError(
                    f"column {d.name!r} is numeric but row {label!r} holds {text[i]!r}",
                    column=d.name,
                    row=label,
                    value=text[i],
                )
    out = np.full(len(s), np.nan)
    ok = codes >= 0
    out[ok] = vals[codes[ok]]
    return out


_VOCABULARY_INDEXES: dict[int, tuple[tuple, pd.Index]] = {}


def _vocabulary_index(vocabulary: tuple) -> pd.Index:
    """A vocabulary as a ``pd.Index`` whose hash table is built once per vocabulary (not
    once per scored block: a wide vocabulary scored in many blocks). Keyed by the
    tuple's identity, kept with the tuple; at most 256 entries."""
    hit = _VOCABULARY_INDEXES.get(id(vocabulary))
    if hit is not None and hit[0] is vocabulary:
        return hit[1]
    if len(_VOCABULARY_INDEXES) >= 256:
        _VOCABULARY_INDEXES.pop(next(iter(_VOCABULARY_INDEXES)))
    index = pd.Index(list(vocabulary), dtype=object)
    _VOCABULARY_INDEXES[id(vocabulary)] = (vocabulary, index)
    return index


def _one_hot_codes(s: pd.Series, d: ColumnDecision) -> np.ndarray:
    """Vocabulary index of every value of a one-hot column (``len(d.vocabulary)``: other).

    The key of a value depends on the value alone, so the distinct values are keyed
    (:func:`string_view`) and looked up once each, not once per row.
    """
    k = len(d.vocabulary)
    vocab = _vocabulary_index(d.vocabulary)
    codes, uniques = pd.factorize(s, use_na_sentinel=True)
    fam = column_family(s)
    ukeys = string_view(pd.Series(uniques, dtype=s.dtype if fam != "string" else object), fam)
    lookup = vocab.get_indexer(ukeys.fillna(NA_CATEGORY)).astype(np.int64)
    lookup[lookup < 0] = k
    na = int(vocab.get_indexer([NA_CATEGORY])[0])
    lookup = np.append(lookup, k if na < 0 else na)  # codes -1 (null) -> the last entry
    return lookup[codes]


def _slog(x: np.ndarray) -> np.ndarray:
    return np.sign(x) * np.log1p(np.abs(x))


def normal_scores(x: np.ndarray, d: ColumnDecision) -> np.ndarray:
    """Normal scores ``Phi^-1(F(x))`` of a ``"normal-score"`` column's values.

    ``F`` is the merged training distribution function of the column, known by its
    knots (``d.cdf_x``, ``d.cdf_counts``; from the gateways' quantile sketches) and
    interpolated linearly in ``sign(x) log1p(|x|)`` between them. It is clipped to
    ``[1 / (2n), 1 - 1 / (2n)]`` (``n`` the training count), so values beyond the
    training range get the most extreme score a training value could get: about
    +-4.1 for ``n = 20,000``. A monotone map of every column to a standard normal
    (of its continuous part) makes heavy tails, offsets and units irrelevant, and a
    column where one value dominates (a sparse count) a two-level one, whatever the
    size of its rare values.

    Parameters
    ----------
    x : ndarray of shape (n_samples,)
        Finite values (missing already imputed).
    d : ColumnDecision
        With ``action="normal-score"``.

    Returns
    -------
    ndarray of shape (n_samples,)
    """
    knots = np.asarray(d.cdf_x, dtype=float)
    counts = np.asarray(d.cdf_counts, dtype=float)
    n = float(counts[-1]) if counts.size else 0.0
    if n <= 0:
        return np.zeros_like(x, dtype=float)
    u = np.interp(_slog(x), _slog(knots), counts) / n
    return ndtri(np.clip(u, 0.5 / n, 1.0 - 0.5 / n))


def _encode_column(s: pd.Series, d: ColumnDecision, out: np.ndarray) -> None:
    """Write the encoded features of one column into ``out``, shape (n_samples,
    len(d.output_names()))."""
    if d.action == "one-hot":
        _one_hot(s, d, out)
        return
    for k, v in enumerate(_numeric_features(s, d)):
        out[:, k] = v


def _one_hot(s: pd.Series, d: ColumnDecision, out: np.ndarray) -> None:
    out[...] = 0.0
    out[np.arange(len(s)), _one_hot_codes(s, d)] = 1.0


def _numeric_features(s: pd.Series, d: ColumnDecision) -> list[np.ndarray]:
    """The encoded value of every row of a numeric decision's column, then its missing
    indicator when the decision has one: arrays of shape (n_samples,), the first
    possibly a read-only view of ``s`` (a kept column without missing or infinite
    values is not copied)."""
    x = _read_numeric(s, d)  # may be a view of the caller's frame: not changed in place
    with np.errstate(over="ignore", invalid="ignore"):
        # one pass without a temporary: a finite sum means no NaN and no inf (a sum that
        # overflows only sends the column down the general path)
        clean = bool(np.isfinite(np.add.reduce(x))) if len(x) else True
    if clean:
        miss = None
    else:
        miss = np.isnan(x)
        x = np.where(np.isinf(x), np.where(x > 0, d.hi, d.lo), x)
        x[miss] = d.impute
    if d.action in ("log1p", "signed-log"):
        x = _slog(x)
    elif d.action == "normal-score":
        x = normal_scores(x, d)
    if not d.missing_indicator:
        return [x]
    return [x, np.zeros(len(x)) if miss is None else miss.astype(np.float64)]


#: Rows per block when the encoded columns are interleaved into the row-major output
#: (about 280 kB at 34 features: the block stays in cache while every column is
#: written into it; one whole column at a time would stride through all the rows).
_ENCODE_BLOCK_ROWS = 1 << 10
#: Bytes of encoded columns (copies, not views of the input) held before they are
#: interleaved into the output: bounds the encoder's temporaries.
_ENCODE_PENDING_BYTES = 1 << 26


def _row_threads(out: np.ndarray) -> int:
    # the summaries' threshold: outputs of at least this many cells are written and
    # scaled on worker threads
    return worker_threads() if out.size >= _THREADED_CELLS else 1


def _interleave(out: np.ndarray, columns: list[tuple[int, np.ndarray]]) -> None:
    """``out[:, j] = v`` for every ``(j, v)`` of ``columns``, a block of rows at a time
    (spans of rows on worker threads for a large ``out``: copies, the same values)."""
    if not columns:
        return
    step = _ENCODE_BLOCK_ROWS

    def span(lo: int, hi: int) -> None:
        for start in range(lo, hi, step):
            rows = slice(start, min(start + step, hi))
            for j, v in columns:
                out[rows, j] = v[rows]

    over_row_spans(span, out.shape[0], step, _row_threads(out))


def _to_normal_score(d: ColumnDecision, merged: ColumnSummaries) -> ColumnDecision:
    """A numeric decision (not 0/1, not a presence indicator) as a normal score."""
    if d.action not in ("keep", "log1p", "signed-log") or d.kind in ("boolean", "constant"):
        return d
    x, counts = merged.columns[d.name].sketch.cdf_knots()
    if x.size < 2:
        return d
    return replace(
        d,
        action="normal-score",
        reason=d.reason + "; normal score from the merged quantile sketch",
        cdf_x=tuple(float(v) for v in x),
        cdf_counts=tuple(int(c) for c in counts),
    )


def _group_codes(groups, n: int) -> tuple[np.ndarray | None, int]:
    """Gateway code (0 .. k-1) of every row and the number of gateways ``k``."""
    if groups is None:
        return None, 1
    g = np.asarray(groups)
    if g.shape != (n,):
        raise FeatureError(f"groups must have shape ({n},), got {g.shape}")
    codes, _ = pd.factorize(g)
    return codes, int(codes.max()) + 1


def _gateway_frames(df: pd.DataFrame, codes: np.ndarray | None, k: int):
    """One gateway's rows at a time (a copy each), never all of them at once."""
    if k == 1:
        yield df
    else:
        for j in range(k):
            yield df.iloc[codes == j]


def _center_scale(Z: np.ndarray, mean: np.ndarray, scale: np.ndarray) -> None:
    """``Z -= mean; Z /= scale`` in place, a block of rows at a time (one pass over
    memory instead of two; the same operations on every value, on worker threads for a
    large ``Z``)."""
    step = 4 * _ENCODE_BLOCK_ROWS

    def span(lo: int, hi: int) -> None:
        for start in range(lo, hi, step):
            block = Z[start : min(start + step, hi)]
            block -= mean
            block /= scale

    over_row_spans(span, Z.shape[0], step, _row_threads(Z))


class FeaturePipeline(TransformerMixin, BaseEstimator):
    """Automatic feature pipeline for flow records, fitted from per-gateway summaries.

    Parameters
    ----------
    include : sequence of str, optional
        Keep these columns even if a rule would drop them. User overrides win over
        the automatic decisions (:func:`fedep.features.decide_columns`).
    exclude : sequence of str, optional
        Never use these columns.
    categorical : sequence of str, optional
        One-hot encode these columns.
    numeric : sequence of str, optional
        Treat these columns as numbers.
    max_categories : int, default=32
        One-hot vocabulary size per column.
    scale_rule : {"floor", "sd", "shrink"} or None, default="floor"
        How the encoded features are scaled after centring: sd, sd floored, or
        variance shrunk toward the typical one; none: neither centred nor scaled. See
        :func:`fedep.features.federated_scale`.
    scale_floor : float, default=0.1
        The scale rule's parameter: the floor as a fraction of the typical sd, or the
        shrinkage weight in [0, 1]. Choose it on validation data.
    sketch_size : int, default=32
        Quantile-sketch bins per decade.
    numeric_transform : {"log", "quantile"}, default="log"
        What a numeric column that is not 0/1 becomes before scaling. ``"log"``: kept,
        or ``log1p`` / signed log when heavy-tailed (the decision table's rule).
        ``"quantile"``: its normal score ``Phi^-1(F(x))``, ``F`` the merged training
        distribution function from the gateways' quantile sketches (no extra round;
        see :func:`normal_scores`). Choose it on validation data, as the scale rule.

    Attributes
    ----------
    summary_ : ColumnSummaries
        Merged training summary.
    decisions_ : list of ColumnDecision
    feature_names_in_ : ndarray of str
        Columns seen at fit (any gateway).
    mean_, scale_ : ndarray of shape (n_features_out,)
        Set by :meth:`fit_scaling` (zeros / ones when ``scale_rule`` is None).
    moments_ : Moments or None
        Pooled moments of the encoded training features.
    last_ignored_columns_ : list of str
        Columns of the last transformed frame that were not seen at fit.
    """

    # Declared once, as for the estimators: :mod:`fedep.params` derives the
    # ``fedep fit`` options and the Flower run-config keys from it.
    _parameter_constraints: dict = {
        "include": [list, tuple, str, None],
        "exclude": [list, tuple, str, None],
        "categorical": [list, tuple, str, None],
        "numeric": [list, tuple, str, None],
        "max_categories": [Interval(numbers.Integral, 1, None, closed="left")],
        "scale_rule": [StrOptions(set(SCALE_RULES)), None],
        "scale_floor": [Interval(numbers.Real, 0, None, closed="left")],
        "sketch_size": [Interval(numbers.Integral, 4, None, closed="left")],
        "numeric_transform": [StrOptions(set(NUMERIC_TRANSFORMS))],
    }
    # One plain sentence per parameter (the command line's help); the docstring above
    # is the long form.
    _parameter_summaries: dict = {
        "include": "keep these columns even if a rule would drop them",
        "exclude": "never use these columns",
        "categorical": "one-hot encode these columns",
        "numeric": "treat these columns as numbers",
        "max_categories": "one-hot vocabulary size per column",
        "scale_rule": "after centring: floor (sd, floored), sd, shrink or none",
        "scale_floor": "the floor (share of the typical sd) or shrink weight",
        "sketch_size": "quantile-sketch bins per decade",
        "numeric_transform": "numbers become log (log1p if heavy-tailed) or quantile",
    }

    def __init__(
        self,
        include: Sequence[str] | None = None,
        exclude: Sequence[str] | None = None,
        categorical: Sequence[str] | None = None,
        numeric: Sequence[str] | None = None,
        max_categories: int = 32,
        scale_rule: str | None = "floor",
        scale_floor: float = 0.1,
        sketch_size: int = DEFAULT_SKETCH_SIZE,
        numeric_transform: str = "log",
    ):
        self.include = include
        self.exclude = exclude
        self.categorical = categorical
        self.numeric = numeric
        self.max_categories = max_categories
        self.scale_rule = scale_rule
        self.scale_floor = scale_floor
        self.sketch_size = sketch_size
        self.numeric_transform = numeric_transform

    # ------------------------------------------------------------------ fitting
    @property
    def summary_categories(self) -> int:
        """The ``max_categories`` of this pipeline's column summaries (at least 64, so that
        a merged vocabulary sees more than it keeps): each column's category view holds at
        most ``4 *`` this many values."""
        return max(64, int(self.max_categories))

    def summarize(self, X: pd.DataFrame) -> ColumnSummaries:
        """Round 1 on one gateway: :func:`summarize_columns` with this pipeline's settings."""
        return summarize_columns(
            _as_frame(X),
            max_categories=self.summary_categories,
            sketch_size=int(self.sketch_size),
            categorical=[self.categorical]
            if isinstance(self.categorical, str)
            else list(self.categorical or ()),
        )

    def fit_from_summaries(self, summaries: Sequence[ColumnSummaries]) -> FeaturePipeline:
        """Server side of round 1: merge the gateways' summaries and decide the columns.

        Parameters
        ----------
        summaries : sequence of ColumnSummaries
            One per gateway (``to_dict`` / ``from_dict`` to carry them over Flower).

        Returns
        -------
        self
        """
        try:
            self._validate_params()
        except InvalidParameterError as exc:
            raise FeatureError(str(exc)) from None
        merged = merge_summaries(summaries)
        self.summary_ = merged
        self.decisions_ = decide_columns(
            merged,
            include=self.include,
            exclude=self.exclude,
            categorical=self.categorical,
            numeric=self.numeric,
            max_categories=int(self.max_categories),
        )
        if self.numeric_transform == "quantile":
            self.decisions_ = [_to_normal_score(d, merged) for d in self.decisions_]
        self.feature_names_in_ = np.asarray(list(merged.columns), dtype=object)
        self.n_features_in_ = len(self.feature_names_in_)
        names = [f for d in self.decisions_ for f in d.output_names()]
        self._names_out = np.asarray(names, dtype=object)
        self.moments_ = None
        if self.scale_rule is None:
            self.mean_, self.scale_ = np.zeros(len(names)), np.ones(len(names))
        else:
            self.mean_ = self.scale_ = None
        return self

    def gateway_moments(self, X: pd.DataFrame) -> Moments:
        """Round 2 on one gateway: moments of its encoded (unscaled) features."""
        return client_moments(self.encode(X))

    def output_moments(self, encoded: Moments) -> Moments:
        """The moments of :meth:`transform`'s output from those of :meth:`encode`'s
        (a gateway's :meth:`gateway_moments`): centring and scaling are affine, so the
        server needs no second pass over a gateway's records (equal to rounding).

        Parameters
        ----------
        encoded : Moments
            Of ``n_features_out`` encoded features.

        Returns
        -------
        Moments
            Of the same records after centring and scaling.
        """
        self._check_decided()
        mean = (encoded.mean - self.mean_) / self.scale_
        return Moments(encoded.count, mean, encoded.m2 / self.scale_**2)

    def fit_scaling(self, moments: Sequence[Moments]) -> FeaturePipeline:
        """Server side of round 2: merge the gateways' moments and apply ``scale_rule``."""
        self._check_decided()
        with np.errstate(over="ignore", invalid="ignore"):  # checked just below
            pooled = combine_moments(moments)
        self._check_moments(pooled)
        self.moments_ = pooled
        if self.scale_rule is None:
            self.mean_, self.scale_ = np.zeros(len(pooled.mean)), np.ones(len(pooled.mean))
        else:
            self.mean_, self.scale_ = federated_scale(
                pooled, self.scale_rule, float(self.scale_floor)
            )
        return self

    def _check_moments(self, pooled: Moments) -> None:
        """One :class:`FeatureError` naming the columns whose pooled moments are not finite.

        The decisions log-transform columns spread beyond ~1e154, so this is the net for
        what they could not foresee (a gateway's moments, a column kept linear on an
        older summary): a model with an infinite mean or scale could not be loaded.
        """
        ok = np.isfinite(pooled.mean) & np.isfinite(pooled.m2)
        if ok.all():
            return
        used = [d for d in self.decisions_ if d.used]
        owner = [d for d in used for _ in d.output_names()]
        if len(owner) != len(ok):
            raise FeatureError(f"got moments of {len(ok)} features, the pipeline has {len(owner)}")
        bad = list(dict.fromkeys(owner[j] for j in np.flatnonzero(~ok)))
        parts = []
        for d in bad:
            big = max(abs(v) for v in (d.lo, d.hi, 0.0) if v is not None)
            # the decision's range, when it shows the cause; else the moments alone do
            what = f"values up to {big:.1e}" if big > 1e154 else "values spread beyond ~1e154"
            parts.append(
                f"column {d.name!r}: {what} overflow float64 moments; "
                f"rescale it or exclude it (--exclude {d.name})"
            )
        raise FeatureError("; ".join(parts))

    def fit(self, X: pd.DataFrame, y=None, groups=None) -> FeaturePipeline:
        """Fit as a federation would: each group (gateway) is summarised separately.

        Parameters
        ----------
        X : DataFrame of shape (n_samples, n_columns)
        y : ignored
        groups : array-like of shape (n_samples,), optional
            Gateway id of every row; ``None``: one gateway.

        Returns
        -------
        self
        """
        self._fit_encoded(X, groups, keep=False)
        return self

    def fit_transform(self, X: pd.DataFrame, y=None, groups=None) -> np.ndarray:
        """:meth:`fit`, then :meth:`transform` of ``X``, encoding every row once.

        The same array as ``fit(X, groups=groups).transform(X)``.

        Parameters
        ----------
        X : DataFrame of shape (n_samples, n_columns)
        y : ignored
        groups : array-like of shape (n_samples,), optional
            Gateway id of every row; ``None``: one gateway.

        Returns
        -------
        ndarray of shape (n_samples, n_features_out), float64
        """
        Z = self._fit_encoded(X, groups, keep=True)
        _center_scale(Z, self.mean_, self.scale_)
        return Z

    def _fit_encoded(self, X: pd.DataFrame, groups, keep: bool) -> np.ndarray | None:
        """The two federated rounds of :meth:`fit`, encoding every row once.

        Each gateway's moments (round 2) are those of its rows of the encoded table,
        which are the rows its own frame encodes to (:meth:`gateway_moments`).

        Returns
        -------
        ndarray of shape (n_samples, n_features_out), float64, or None
            The encoded (unscaled) table; None when ``keep`` is false and no scaling
            needed it.
        """
        df = _as_frame(X)
        codes, k = _group_codes(groups, len(df))
        self.fit_from_summaries([self.summarize(f) for f in _gateway_frames(df, codes, k)])
        if self.scale_rule is None and not keep:
            return None
        Z = self.encode(df)
        del df
        if self.scale_rule is not None:
            if k == 1:
                self.fit_scaling([client_moments(Z)])
            else:
                self.fit_scaling([client_moments(Z[codes == j]) for j in range(k)])
        return Z

    # ------------------------------------------------------------------ transform
    def _check_decided(self) -> None:
        if not hasattr(self, "decisions_"):
            raise NotFittedError("FeaturePipeline is not fitted: call fit or fit_from_summaries")

    def encode(self, X: pd.DataFrame) -> np.ndarray:
        """Encoded features before centring/scaling.

        Parameters
        ----------
        X : DataFrame of shape (n_samples, n_columns)

        Returns
        -------
        ndarray of shape (n_samples, n_features_out), float64
        """
        self._check_decided()
        df = _as_frame(X)
        present = set(df.columns)
        missing = [
            d.name for d in self.decisions_ if d.used and not d.optional and d.name not in present
        ]
        if missing:
            raise FeatureError(
                f"missing {len(missing)} column(s) needed by the fitted FeaturePipeline: "
                + ", ".join(map(repr, missing))
            )
        seen = set(self.feature_names_in_.tolist())
        self.last_ignored_columns_ = [c for c in df.columns if c not in seen]
        used = [d for d in self.decisions_ if d.used]
        widths = [len(d.output_names()) for d in used]
        # one output array; the numeric features are interleaved into it a block of
        # rows at a time, the one-hot columns written directly
        out = np.empty((len(df), sum(widths)), dtype=np.float64)
        pending: list[tuple[int, np.ndarray]] = []
        held = 0
        j = 0
        for d, w in zip(used, widths, strict=True):
            if d.name in present:
                s = df[d.name]
            else:
                s = pd.Series(np.full(len(df), np.nan), index=df.index, dtype=float)
            if d.action == "one-hot":
                _one_hot(s, d, out[:, j : j + w])
            else:
                for k, v in enumerate(_numeric_features(s, d)):
                    pending.append((j + k, v))
                    held += 0 if v.base is not None else v.nbytes
                if held > _ENCODE_PENDING_BYTES:
                    _interleave(out, pending)
                    pending, held = [], 0
            j += w
        _interleave(out, pending)
        return out

    def transform(self, X: pd.DataFrame) -> np.ndarray:
        """Encode, centre and scale.

        Parameters
        ----------
        X : DataFrame of shape (n_samples, n_columns)
            Any column order; extra columns ignored (see ``last_ignored_columns_``).

        Returns
        -------
        ndarray of shape (n_samples, n_features_out), float64
        """
        if getattr(self, "mean_", None) is None:
            self._check_decided()
            raise NotFittedError("FeaturePipeline scaling is not fitted: call fit_scaling")
        Z = self.encode(X)
        _center_scale(Z, self.mean_, self.scale_)  # in place: Z is a fresh array
        return Z

    def get_feature_names_out(self, input_features=None) -> np.ndarray:
        """Output feature names: ``col``, ``col_missing``, ``col=value``, ``col=<other>``."""
        self._check_decided()
        return self._names_out.copy()

    # ------------------------------------------------------------------ persistence
    def to_dict(self) -> dict:
        """Versioned JSON-able form of the fitted pipeline (no pickle)."""
        self._check_decided()

        def lst(v):
            return None if v is None else ([v] if isinstance(v, str) else [str(x) for x in v])

        params = self.get_params()
        for k in ("include", "exclude", "categorical", "numeric"):
            params[k] = lst(params[k])
        scaling = None
        if self.mean_ is not None:
            scaling = {"mean": self.mean_.tolist(), "scale": self.scale_.tolist()}
            if self.moments_ is not None:
                scaling["moments"] = {
                    "count": int(self.moments_.count),
                    "mean": self.moments_.mean.tolist(),
                    "m2": self.moments_.m2.tolist(),
                }
        return {
            "format": _FORMAT,
            "version": PIPELINE_VERSION,
            "params": params,
            "columns_in": self.feature_names_in_.tolist(),
            "decisions": [d.to_dict() for d in self.decisions_],
            "scaling": scaling,
        }

    @classmethod
    def from_dict(cls, data: dict) -> FeaturePipeline:
        """Inverse of :meth:`to_dict` (the merged summary is not stored: ``summary_`` is None)."""
        if data.get("format") != _FORMAT or data.get("version") not in _READABLE_VERSIONS:
            raise FeatureError(
                "not a FeaturePipeline dict of version "
                f"{' or '.join(map(str, _READABLE_VERSIONS))} "
                f"(format={data.get('format')!r}, version={data.get('version')!r})"
            )
        self = cls(**data["params"])
        self.summary_ = None
        self.decisions_ = [ColumnDecision.from_dict(d) for d in data["decisions"]]
        self.feature_names_in_ = np.asarray(data["columns_in"], dtype=object)
        self.n_features_in_ = len(self.feature_names_in_)
        self._names_out = np.asarray(
            [f for d in self.decisions_ for f in d.output_names()], dtype=object
        )
        sc = data.get("scaling")
        self.moments_ = None
        if sc is None:
            self.mean_ = self.scale_ = None
        else:
            self.mean_ = np.asarray(sc["mean"], dtype=float)
            self.scale_ = np.asarray(sc["scale"], dtype=float)
            if "moments" in sc:
                m = sc["moments"]
                self.moments_ = Moments(
                    int(m["count"]), np.asarray(m["mean"], float), np.asarray(m["m2"], float)
                )
        return self

"""Federated automatic feature pipeline for flow records.

Gateways summarise their own records (:func:`summarize_columns`); the server merges the
summaries (:func:`merge_summaries`), decides what each column becomes
(:func:`decide_columns`: log1p for heavy-tailed counts, one-hot for small-vocabulary
text, identifiers/addresses/timestamps/labels excluded, ...; optionally normal scores
of the numeric columns from the merged quantile sketches, :func:`normal_scores`) and
fits a centring and scaling from merged moments (:func:`federated_scale`).
:class:`FeaturePipeline` wraps it all as a scikit-learn transformer whose
``fit(X, groups=...)`` never pools rows.
"""

from fedep.features._values import MISSING_TOKENS, FeatureError
from fedep.features.decide import ColumnDecision, decide_columns, format_decisions
from fedep.features.name_hints import NAME_HINTS
from fedep.features.pipeline import NUMERIC_TRANSFORMS, FeaturePipeline, normal_scores
from fedep.features.scaling import SCALE_RULES, federated_scale
from fedep.features.sketches import KMV, LogHistogram
from fedep.features.summaries import (
    ColumnSummaries,
    ColumnSummary,
    merge_summaries,
    summarize_columns,
)

__all__ = [
    "KMV",
    "MISSING_TOKENS",
    "NAME_HINTS",
    "NUMERIC_TRANSFORMS",
    "SCALE_RULES",
    "ColumnDecision",
    "ColumnSummaries",
    "ColumnSummary",
    "FeatureError",
    "FeaturePipeline",
    "LogHistogram",
    "decide_columns",
    "federated_scale",
    "format_decisions",
    "merge_summaries",
    "normal_scores",
    "summarize_columns",
]

"""Columns of huge but finite values (1e200 .. 1.8e308): no float64 overflow anywhere.

Such a column used to give NaN sketch quantiles (a "nan" ratio in the decision table),
an ``inf`` sum of squares, an infinite scale and a model file that cannot be loaded.
Every test turns RuntimeWarnings into errors, so that no "overflow encountered" escapes.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest

import fedep
from fedep.core.stats import Moments
from fedep.detectors import FedEP
from fedep.features import (
    FeatureError,
    FeaturePipeline,
    LogHistogram,
    format_decisions,
    merge_summaries,
    summarize_columns,
)

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

FMAX = float(np.finfo(np.float64).max)


def _table(n: int = 240, seed: int = 0, rate_scale: float = 1e200) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "duration": rng.exponential(1.0, n),
            "src_bytes": rng.integers(0, 10000, n),
            "rate": rng.exponential(1.0, n) * rate_scale,
            "proto": rng.choice(["tcp", "udp"], n),
        }
    )


def _decision(pipe: FeaturePipeline, name: str):
    return next(d for d in pipe.decisions_ if d.name == name)


def test_sketch_is_finite_up_to_the_largest_float():
    v = np.array([1e200, 3e250, 1e300, 1.7e308, FMAX, -FMAX, -1e300])
    h = LogHistogram().add(v)
    for q in (0.0, 0.25, 0.5, 0.99, 1.0):
        assert np.isfinite(h.quantile(q)) and np.isfinite(h.magnitude_quantile(q))
    x, counts = h.cdf_knots()
    assert np.isfinite(x).all() and (np.diff(x) > 0).all() and counts[-1] == len(v)
    # the documented relative error holds at 1e200 as it does at 1
    big = LogHistogram().add(np.array([1.234e200])).quantile(0.5)
    assert abs(big / 1.234e200 - 1) <= LogHistogram().relative_error


def test_summary_moments_do_not_overflow():
    n = 300
    # the sum of the values overflows, the deviations are 0: mean exact, m2 = 0
    (c,) = summarize_columns(pd.DataFrame({"x": np.full(n, 1e307)})).columns.values()
    assert c.mean == 1e307 and c.m2 == 0.0
    # spread 1e200: the true m2 (~1e402) exceeds float64 -> inf, the mean stays exact
    v = np.random.default_rng(1).exponential(1.0, n) * 1e200
    (c,) = summarize_columns(pd.DataFrame({"x": v})).columns.values()
    assert c.mean == pytest.approx(float(np.mean(v / 1e200)) * 1e200, rel=1e-12)
    assert c.m2 == np.inf
    # strict JSON (no Infinity) round trip
    s = summarize_columns(pd.DataFrame({"x": v}))
    back = type(s).from_dict(json.loads(json.dumps(s.to_dict(), allow_nan=False)))
    assert back["x"].m2 == np.inf and back["x"].mean == c.mean


def test_merge_of_opposite_huge_means_is_finite():
    a = summarize_columns(pd.DataFrame({"x": [1e308, 1.5e308]}))
    b = summarize_columns(pd.DataFrame({"x": [-1e308, -1.5e308]}))
    m = merge_summaries([a, b])["x"]  # delta = -2.5e308 used to raise OverflowError
    assert m.mean == pytest.approx(0.0, abs=1e293) and m.m2 == np.inf
    assert (m.min, m.max, m.n_num) == (-1.5e308, 1.5e308, 4)


def test_huge_nonnegative_column_is_log1p_and_the_table_has_no_nan():
    df = _table()
    groups = np.arange(len(df)) % 3
    pipe = FeaturePipeline().fit(df, groups=groups)
    d = _decision(pipe, "rate")
    assert d.action == "log1p" and "overflow float64 moments" in d.reason
    table = format_decisions(pipe.decisions_)
    assert "nan" not in table.lower() and "max/median = 0" not in table
    # ordinary columns are decided as before
    assert _decision(pipe, "duration").action == "keep"
    Z = pipe.transform(df)
    assert np.isfinite(Z).all() and np.isfinite(pipe.scale_).all() and (pipe.scale_ > 0).all()
    j = list(pipe.get_feature_names_out()).index("rate")
    assert abs(Z[:, j].mean()) < 1e-9 and 0.1 < Z[:, j].std() < 10


def test_moderate_scale_column_stays_linear():
    # 1e100-scale values: moments fit in float64, the light-tailed column is kept
    pipe = FeaturePipeline().fit(_table(rate_scale=1e100))
    assert _decision(pipe, "rate").action == "keep"
    assert np.isfinite(pipe.transform(_table(rate_scale=1e100))).all()


def test_constant_huge_column_with_missing_values():
    # kept as a presence indicator: every encoded value is 1e307, whose sum overflows
    df = _table(300)
    df["big"] = np.where(np.arange(300) % 7 == 0, np.nan, 1e307)
    pipe = FeaturePipeline().fit(df, groups=np.arange(300) % 2)
    assert _decision(pipe, "big").used
    assert np.isfinite(pipe.mean_).all() and np.isfinite(pipe.transform(df)).all()


def test_huge_column_model_round_trips_and_scores(tmp_path):
    df = _table()
    groups = np.arange(len(df)) % 3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the round cap's ConvergenceWarning
        det = FedEP(n_rounds=3, random_state=0).fit(df, groups=groups)
    assert np.isfinite(det.features_.scale_).all()
    assert np.isfinite(det.threshold_) and det.threshold_ > 0
    path = tmp_path / "huge.fedep"
    fedep.save(det, path)
    back = fedep.load(path)
    s0, s1 = det.decision_function(df), back.decision_function(df)
    assert np.isfinite(s1).all()
    np.testing.assert_array_equal(s0, s1)


def test_signed_huge_column_is_signed_log():
    rng = np.random.default_rng(3)
    df = _table()
    df["drift"] = rng.normal(0.0, 1.0, len(df)) * 1e300  # values around +-1e300
    pipe = FeaturePipeline().fit(df, groups=np.arange(len(df)) % 2)
    d = _decision(pipe, "drift")
    assert d.action == "signed-log" and "nan" not in d.reason
    Z = pipe.transform(df)
    assert np.isfinite(Z).all() and np.isfinite(pipe.scale_).all()


def test_unrepresentable_moments_are_refused_naming_the_column():
    # Decided on ordinary values, then sent moments of 1e200-scale ones (what the
    # decisions could not foresee): one FeatureError line naming the column.
    pipe = FeaturePipeline().fit_from_summaries([summarize_columns(_table(rate_scale=1.0))])
    assert _decision(pipe, "rate").action == "keep"
    moments = [pipe.gateway_moments(_table(seed=s)) for s in (1, 2)]
    assert all(np.isfinite(m.mean).all() for m in moments)  # the means never overflow
    with pytest.raises(FeatureError, match=r"column 'rate': .*overflow float64 moments") as e:
        pipe.fit_scaling(moments)
    msg = str(e.value)
    assert "\n" not in msg and "--exclude rate" in msg
    assert "duration" not in msg and "proto" not in msg


def test_refusal_names_the_decided_range():
    pipe = FeaturePipeline().fit_from_summaries([summarize_columns(_table(rate_scale=1.0))])
    names = list(pipe.get_feature_names_out())
    j = names.index("rate")
    m2 = np.zeros(len(names))
    m2[j] = np.inf
    mom = Moments(10, np.zeros(len(names)), m2)
    with pytest.raises(FeatureError, match=r"^column 'rate': values spread beyond ~1e154"):
        pipe.fit_scaling([mom])

"""FeaturePipeline: federated fit, transform policy, persistence, scaling, end to end."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score

from fedep.core.stats import Moments, client_moments, combine_moments
from fedep.features import (
    FeatureError,
    FeaturePipeline,
    federated_scale,
    summarize_columns,
)

from .conftest import flow_table


@pytest.fixture(scope="module")
def fitted():
    df, _ = flow_table(1500, seed=1)
    groups = np.random.default_rng(2).integers(0, 4, len(df))
    return FeaturePipeline().fit(df, groups=groups), df, groups


def test_output_shape_names_and_centring(fitted):
    pipe, df, _ = fitted
    Z = pipe.transform(df)
    names = pipe.get_feature_names_out()
    assert Z.dtype == np.float64 and Z.shape == (len(df), len(names))
    assert "conn_state=<other>" in names and "orig_bytes" in names
    assert not any(n.startswith(("ts", "uid", "id.")) for n in names)
    used = [n for n in names if n != "conn_state=<other>" and not n.endswith("=<other>")]
    assert np.allclose(Z.mean(axis=0), 0, atol=1e-9)
    assert np.all(np.isfinite(Z)) and len(used) > 5


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 1000), k=st.integers(2, 5))
def test_per_gateway_fit_equals_pooled_fit(seed, k):
    df, _ = flow_table(300, seed=seed)
    groups = np.random.default_rng(seed).integers(0, k, len(df))
    fed = FeaturePipeline().fit(df, groups=groups)
    pooled = FeaturePipeline().fit(df)
    assert [d.to_dict() for d in fed.decisions_] == [d.to_dict() for d in pooled.decisions_]
    np.testing.assert_allclose(fed.mean_, pooled.mean_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(fed.scale_, pooled.scale_, rtol=1e-9)


def test_fit_from_summaries_two_rounds(fitted):
    pipe, df, groups = fitted
    frames = [df[groups == g] for g in range(4)]
    server = FeaturePipeline()
    server.fit_from_summaries([server.summarize(f) for f in frames])
    server.fit_scaling([server.gateway_moments(f) for f in frames])
    np.testing.assert_allclose(server.transform(df), pipe.transform(df), rtol=1e-12, atol=1e-12)


def test_output_moments_are_the_transformed_records_moments(fitted):
    pipe, df, groups = fitted
    for g in range(4):
        frame = df[groups == g]
        got = pipe.output_moments(pipe.gateway_moments(frame))
        want = client_moments(pipe.transform(frame))
        assert got.count == want.count == len(frame)
        np.testing.assert_allclose(got.mean, want.mean, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(got.m2, want.m2, rtol=1e-10, atol=1e-9)


def test_unseen_category_goes_to_other(fitted):
    pipe, df, _ = fitted
    x = df.iloc[:3].copy()
    x["conn_state"] = ["SF", "NEVER_SEEN", None]
    Z = pipe.encode(x)
    names = list(pipe.get_feature_names_out())
    other = names.index("conn_state=<other>")
    assert Z[:, other].tolist() == [0.0, 1.0, 1.0]
    assert Z[0, names.index("conn_state=SF")] == 1.0


def test_missing_columns_named_in_one_error(fitted):
    pipe, df, _ = fitted
    with pytest.raises(FeatureError, match=r"missing 2 column\(s\).*'proto'.*'orig_bytes'"):
        pipe.transform(df.drop(columns=["proto", "orig_bytes", "uid"]))


def test_extra_columns_ignored_and_reordered_identical(fitted):
    pipe, df, _ = fitted
    base = pipe.transform(df)
    x = df[df.columns[::-1]].assign(extra=1, other_extra="z")
    np.testing.assert_array_equal(pipe.transform(x), base)
    assert pipe.last_ignored_columns_ == ["extra", "other_extra"]


def test_bad_text_in_numeric_column_names_column_and_row(fitted):
    pipe, df, _ = fitted
    x = df.iloc[:5].copy()
    x["orig_bytes"] = ["1", "2", "-", "oops", "5"]
    x.index = [10, 11, 12, 13, 14]
    with pytest.raises(FeatureError, match=r"'orig_bytes'.*row 13.*'oops'"):
        pipe.transform(x)


def test_missing_and_infinite_values(fitted):
    pipe, df, _ = fitted
    d = {x.name: x for x in pipe.decisions_}["duration"]
    x = df.iloc[:4].copy()
    x["duration"] = [np.nan, np.inf, -np.inf, "-"]
    Z = pipe.encode(x)
    col = list(pipe.get_feature_names_out()).index("duration")
    expect = np.log1p([d.impute, d.hi, d.lo, d.impute])
    np.testing.assert_allclose(Z[:, col], expect)
    assert np.all(np.isfinite(pipe.transform(x)))


def test_dict_round_trip_identical_transform(fitted):
    pipe, df, _ = fitted
    blob = json.dumps(pipe.to_dict())
    back = FeaturePipeline.from_dict(json.loads(blob))
    np.testing.assert_array_equal(back.transform(df), pipe.transform(df))
    assert list(back.get_feature_names_out()) == list(pipe.get_feature_names_out())
    assert back.get_params() == {**pipe.get_params()}
    with pytest.raises(FeatureError, match="version"):
        FeaturePipeline.from_dict({**pipe.to_dict(), "version": 3})
    # a version-1 dict (no numeric_transform, no distribution knots) still loads
    old = json.loads(blob)
    old["version"] = 1
    del old["params"]["numeric_transform"]
    for d in old["decisions"]:
        del d["cdf_x"], d["cdf_counts"]
    np.testing.assert_array_equal(FeaturePipeline.from_dict(old).transform(df), pipe.transform(df))


def test_gateway_lacking_a_column():
    df, _ = flow_table(600, seed=5)
    groups = np.repeat([0, 1, 2], 200)
    frames = [df[groups == g] for g in range(3)]
    frames[2] = frames[2].drop(columns=["resp_bytes"])
    auto = FeaturePipeline()
    auto.fit_from_summaries([summarize_columns(f, max_categories=64) for f in frames])
    assert "resp_bytes" not in auto.get_feature_names_out()
    auto.fit_scaling([auto.gateway_moments(f) for f in frames])  # every gateway can encode
    kept = FeaturePipeline(include=["resp_bytes"])
    kept.fit_from_summaries([kept.summarize(f) for f in frames])
    kept.fit_scaling([kept.gateway_moments(f) for f in frames])
    Z = kept.transform(frames[2])
    names = list(kept.get_feature_names_out())
    assert Z[:, names.index("resp_bytes_missing")].min() > 0  # all missing there


def test_federated_scale_rules():
    X = np.column_stack(
        [np.arange(10.0), np.full(10, 2.0), 0.01 * np.arange(10.0), np.arange(10) * 3.0]
    )
    m = combine_moments([client_moments(X[:4]), client_moments(X[4:])])
    sd = X.std(axis=0)
    mean, s = federated_scale(m, "sd")
    np.testing.assert_allclose(mean, X.mean(axis=0))
    np.testing.assert_allclose(s, [sd[0], 1.0, sd[2], sd[3]])
    typical = np.median(sd[[0, 2, 3]])
    _, f = federated_scale(m, "floor", 0.1)
    np.testing.assert_allclose(f, np.maximum([sd[0], 0, sd[2], sd[3]], 0.1 * typical))
    _, k = federated_scale(m, "shrink", 0.5)
    med_var = np.median(sd[[0, 2, 3]] ** 2)
    np.testing.assert_allclose(
        k, np.sqrt(0.5 * np.array([sd[0], 0, sd[2], sd[3]]) ** 2 + 0.5 * med_var)
    )
    with pytest.raises(FeatureError):
        federated_scale(m, "nope")
    assert isinstance(m, Moments)


def _pca_residual(train: np.ndarray, test: np.ndarray, rank: int) -> np.ndarray:
    mu = train.mean(axis=0)
    _, _, vt = np.linalg.svd(train - mu, full_matrices=False)
    v = vt[:rank].T
    z = test - mu
    return ((z - z @ v @ v.T) ** 2).sum(axis=1)


def test_end_to_end_pipeline_beats_raw_zscores():
    train, _ = flow_table(3000, seed=11)
    test, y = flow_table(2000, seed=12, attack_share=0.1)
    groups = np.arange(len(train)) % 5
    pipe = FeaturePipeline().fit(train, groups=groups)
    auc_pipe = roc_auc_score(y, _pca_residual(pipe.transform(train), pipe.transform(test), 3))
    num = [c for c in train.columns if pd.api.types.is_numeric_dtype(train[c])]
    a, b = train[num].to_numpy(float), test[num].to_numpy(float)
    mu, sd = a.mean(axis=0), a.std(axis=0)
    auc_raw = roc_auc_score(y, _pca_residual((a - mu) / sd, (b - mu) / sd, 3))
    assert auc_pipe > 0.9
    assert auc_pipe > auc_raw + 0.02, (auc_pipe, auc_raw)


def _one_hot_reference(s: pd.Series, d) -> np.ndarray:
    """The per-row one-hot rule: every value keyed, then looked up in the vocabulary."""
    from fedep.features._values import NA_CATEGORY, column_family, string_view

    keys = string_view(s, column_family(s)).fillna(NA_CATEGORY)
    codes = pd.Index(list(d.vocabulary), dtype=object).get_indexer(keys).astype(np.int64)
    codes[codes < 0] = len(d.vocabulary)
    out = np.zeros((len(s), len(d.vocabulary) + 1))
    out[np.arange(len(s)), codes] = 1.0
    return out


@pytest.mark.parametrize(
    "values",
    [
        ["tcp", "udp", None, "icmp", "tcp", np.nan, " tcp", "TCP"],  # text, nulls, unseen
        [80, 443, 80, 8080, 53, 22, 80, 443],  # numbers as categories
        [80.0, 443.0, np.nan, 80.5, 1e20, -0.0, np.inf, 443.0],
        [True, False, None, True, False, True, None, False],
        ["80", 443, None, "x", 80.0, "443", True, "-"],  # mixed object column
    ],
)
def test_one_hot_by_distinct_values_equals_per_row_reference(values):
    from fedep.features.decide import ColumnDecision
    from fedep.features.pipeline import _encode_column

    s = pd.Series(values, index=np.arange(10, 18))
    fit_on = pd.Series(values[:5] * 3)
    pipe = FeaturePipeline(categorical=["c"], scale_rule=None).fit(pd.DataFrame({"c": fit_on}))
    (d,) = [d for d in pipe.decisions_ if d.name == "c"]
    assert isinstance(d, ColumnDecision) and d.action == "one-hot"
    for col in (s, s.astype("string"), s.astype(object)):
        if col.dtype != object and col.map(type).nunique() > 1:
            continue
        out = np.full((len(col), len(d.output_names())), np.nan)
        _encode_column(col, d, out)
        np.testing.assert_array_equal(out, _one_hot_reference(col, d))


def test_transform_leaves_the_input_frame_unchanged(fitted):
    pipe, df, _ = fitted
    messy = df.copy()
    messy.loc[messy.index[:5], "duration"] = [np.inf, -np.inf, np.nan, 1.0, 2.0]
    before = messy.copy()
    Z = pipe.transform(messy)
    pd.testing.assert_frame_equal(messy, before)
    assert np.isfinite(Z).all()


# --------------------------------------------------------------------------- normal scores
def _quantile_table(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "bytes": np.round(rng.lognormal(5, 2, n)),  # heavy-tailed counts
            "x": rng.normal(3, 2, n),  # signed, light-tailed
            "dur": rng.exponential(1.0, n) * (rng.uniform(size=n) < 0.6),  # 40 % zeros
            "flag": rng.integers(0, 2, n),
        }
    )


@pytest.fixture(scope="module")
def quantile_fitted():
    df = _quantile_table(6000, seed=3)
    groups = np.random.default_rng(4).integers(0, 3, len(df))
    pipe = FeaturePipeline(numeric_transform="quantile", scale_rule=None)
    return pipe.fit(df, groups=groups), df, groups


def test_normal_scores_match_sklearn_quantile_transformer(quantile_fitted):
    """Independent reference: sklearn's QuantileTransformer on the pooled rows. Our
    distribution function is exact at the sketch's bin edges and linear inside a bin,
    so it is within the largest bin's share of rows (plus one row) of the empirical one."""
    from scipy.special import ndtr
    from sklearn.preprocessing import QuantileTransformer

    pipe, df, _ = quantile_fitted
    names = list(pipe.get_feature_names_out())
    E = pipe.encode(df)
    for col in ("bytes", "x"):
        d = next(d for d in pipe.decisions_ if d.name == col)
        assert d.action == "normal-score"
        n = d.cdf_counts[-1]
        assert n == len(df)
        sk = pipe.summary_.columns[col].sketch
        biggest = max([*sk.pos.values(), *sk.neg.values()]) / n
        qt = QuantileTransformer(n_quantiles=len(df), output_distribution="normal")
        ref = qt.fit_transform(df[[col]].to_numpy(float))[:, 0]
        err = np.abs(ndtr(E[:, names.index(col)]) - ndtr(ref))
        assert err.max() <= biggest + 1.0 / n, (col, err.max(), biggest)
        assert biggest < 0.1  # the bound says something
    # the zero atom sits at its mid-rank: Phi^-1(share of zeros / 2)
    zero = df["dur"].to_numpy() == 0
    z0 = E[zero, names.index("dur")]
    np.testing.assert_allclose(z0, ndtri_(zero.mean() / 2), atol=0.01)
    # 0/1 columns stay 0/1
    assert next(d for d in pipe.decisions_ if d.name == "flag").action == "keep"
    assert set(np.unique(E[:, names.index("flag")])) == {0.0, 1.0}


def ndtri_(p):
    from scipy.special import ndtri

    return ndtri(p)


def test_normal_scores_monotone_bounded_and_federated(quantile_fitted):
    pipe, df, groups = quantile_fitted
    pooled = FeaturePipeline(numeric_transform="quantile", scale_rule=None).fit(df)
    assert [d.to_dict() for d in pipe.decisions_] == [d.to_dict() for d in pooled.decisions_]
    probe = df.iloc[:5].copy()
    probe["bytes"] = [-1.0, 0.0, 10.0, 1e12, np.inf]
    probe["x"] = [-1e9, -5.0, 0.0, 5.0, 1e9]
    E = pipe.encode(probe)
    names = list(pipe.get_feature_names_out())
    for col in ("bytes", "x"):
        z = E[:, names.index(col)]
        assert np.all(np.isfinite(z)) and np.all(np.diff(z) >= 0), (col, z)
        bound = ndtri_(1 - 0.5 / len(df))
        assert np.abs(z).max() <= bound + 1e-12
    # beyond the training range: the most extreme score
    assert E[3, names.index("bytes")] == pytest.approx(ndtri_(1 - 0.5 / len(df)))
    # the knots travel in the dict (as over Flower and in model files): same transform
    back = FeaturePipeline.from_dict(json.loads(json.dumps(pipe.to_dict())))
    np.testing.assert_array_equal(back.encode(df), pipe.encode(df))


def test_normal_scores_scaled_pipeline_end_to_end():
    df = _quantile_table(3000, seed=8)
    pipe = FeaturePipeline(numeric_transform="quantile").fit(df)
    Z = pipe.transform(df)
    names = list(pipe.get_feature_names_out())
    j = names.index("bytes")
    # a continuous column's normal score is close to standard normal already
    assert abs(Z[:, j].std() - 1.0) < 0.05 and abs(Z[:, j].mean()) < 1e-9
    with pytest.raises(FeatureError, match="numeric_transform"):
        FeaturePipeline(numeric_transform="rank").fit(df)


def test_bytes_columns_are_decoded_or_named():
    # a binary column (a Parquet BYTE_ARRAY, a database driver's value) is UTF-8 text;
    # bytes that are not raise one error naming the column and row, never a traceback
    rng = np.random.default_rng(0)
    text = pd.DataFrame(
        {"a": rng.normal(size=60), "proto": np.where(np.arange(60) % 3, "tcp", "udp")}
    )
    raw = text.assign(proto=[v.encode() for v in text["proto"]])
    want = FeaturePipeline().fit(text)
    got = FeaturePipeline().fit(raw)
    assert got.get_feature_names_out().tolist() == want.get_feature_names_out().tolist()
    np.testing.assert_array_equal(got.transform(raw), want.transform(text))
    bad = raw.copy()
    bad.loc[41, "proto"] = b"\xff\xfe"
    with pytest.raises(
        FeatureError, match=r"column 'proto', row 41: bytes that are not UTF-8"
    ) as e:
        FeaturePipeline().fit(bad)
    assert (e.value.column, e.value.row) == ("proto", 41)
    with pytest.raises(FeatureError, match="row 41"):
        want.transform(bad)

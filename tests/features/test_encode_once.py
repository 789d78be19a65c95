"""The fit's single encoding pass (``FeaturePipeline.fit_transform``), the encoder's
blocked interleaving and the blocked moments: the same numbers as the direct forms."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fedep.core import stats
from fedep.core.stats import client_moments
from fedep.features import FeaturePipeline
from fedep.features import pipeline as pipeline_mod

from .conftest import flow_table


def _messy(n: int, seed: int) -> pd.DataFrame:
    df, _ = flow_table(n, seed=seed)
    rng = np.random.default_rng(seed)
    rows = rng.choice(n, 12, replace=False)
    df.loc[rows[:4], "duration"] = np.nan  # a missing indicator
    df.loc[rows[4:6], "orig_bytes"] = np.inf  # clipped
    df.loc[rows[6:8], "resp_bytes"] = -np.inf
    return df


@pytest.mark.parametrize("groups_k", [None, 1, 3])
@pytest.mark.parametrize("kw", [{}, {"scale_rule": None}, {"numeric_transform": "quantile"}])
def test_fit_transform_equals_fit_then_transform(groups_k, kw, monkeypatch):
    # blocks much smaller than the table: the interleaving crosses many block edges
    monkeypatch.setattr(pipeline_mod, "_ENCODE_BLOCK_ROWS", 7)
    monkeypatch.setattr(pipeline_mod, "_ENCODE_PENDING_BYTES", 1000)
    df = _messy(400, seed=5)
    groups = None if groups_k is None else np.random.default_rng(1).integers(0, groups_k, 400)
    before = df.copy()
    a = FeaturePipeline(**kw)
    Z = a.fit_transform(df, groups=groups)
    b = FeaturePipeline(**kw).fit(df, groups=groups)
    np.testing.assert_array_equal(Z, b.transform(df))
    np.testing.assert_array_equal(a.mean_, b.mean_)
    np.testing.assert_array_equal(a.scale_, b.scale_)
    assert [d.to_dict() for d in a.decisions_] == [d.to_dict() for d in b.decisions_]
    pd.testing.assert_frame_equal(df, before)  # the caller's frame is not changed
    assert Z.flags.c_contiguous and np.isfinite(Z).all()


def test_encoded_columns_match_a_per_column_reference(monkeypatch):
    monkeypatch.setattr(pipeline_mod, "_ENCODE_BLOCK_ROWS", 64)
    df = _messy(300, seed=2)
    pipe = FeaturePipeline(scale_rule=None).fit(df)
    Z = pipe.encode(df)
    j = 0
    for d in (d for d in pipe.decisions_ if d.used):
        w = len(d.output_names())
        if d.action != "one-hot":
            x = pd.to_numeric(df[d.name], errors="coerce").to_numpy(float)
            miss = np.isnan(x)
            x = np.where(x == np.inf, d.hi, np.where(x == -np.inf, d.lo, x))
            x[miss] = d.impute
            if d.action in ("log1p", "signed-log"):
                x = np.sign(x) * np.log1p(np.abs(x))
            np.testing.assert_array_equal(Z[:, j], x)
            if d.missing_indicator:
                np.testing.assert_array_equal(Z[:, j + 1], miss.astype(float))
        j += w
    assert j == Z.shape[1]


@pytest.mark.parametrize("n, k", [(8, 3), (8193, 5), (30_001, 34), (20_000, 1)])
def test_blocked_moments_equal_the_direct_formula(n, k, monkeypatch):
    monkeypatch.setattr(stats, "MOMENT_BLOCK_ROWS", 1000)
    rng = np.random.default_rng(n)
    X = rng.standard_normal((n, k)) * 10 ** rng.uniform(-3, 3, k) + rng.uniform(-9, 9, k)
    m = client_moments(X)
    mean = X.mean(axis=0)
    np.testing.assert_array_equal(m.mean, mean)
    np.testing.assert_array_equal(m.m2, np.square(X - mean).sum(axis=0))  # bit for bit
    np.testing.assert_allclose(m.m2, X.var(axis=0) * n, rtol=1e-10)


@pytest.mark.parametrize("threads", [2, 3])
def test_encoding_on_worker_threads_equals_one_thread(threads, monkeypatch):
    df = _messy(1000, seed=7)
    monkeypatch.setattr(pipeline_mod, "_ENCODE_BLOCK_ROWS", 16)  # spans of several blocks
    one = FeaturePipeline().fit_transform(df)
    monkeypatch.setattr(pipeline_mod, "_THREADED_CELLS", 0)
    monkeypatch.setattr(pipeline_mod, "worker_threads", lambda: threads)
    spans = []
    real = pipeline_mod.over_row_spans

    def spy(fn, n, step, workers):
        spans.append(workers)
        real(fn, n, step, workers)

    monkeypatch.setattr(pipeline_mod, "over_row_spans", spy)
    many = FeaturePipeline().fit_transform(df)
    assert spans and set(spans) == {threads}  # the threaded path ran
    np.testing.assert_array_equal(many, one)

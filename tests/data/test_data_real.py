"""Real-data checks of the official loaders (row/class counts per the data README)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pytest

from fedep.core.stats import client_moments, combine_moments, standardization_from_moments
from fedep.data import (
    FEATURE_SETS,
    FEATURE_SPECS,
    FORBIDDEN_COLUMNS,
    load_dataset,
    make_client_split,
    partition_sorted,
    verify_data_dir,
)
from fedep.data.feature_sets import FeatureTransformer

pytestmark = pytest.mark.realdata

DATASETS = ("nsl-kdd", "unsw-nb15", "ton-iot")
N_FEATURES = {
    ("nsl-kdd", "paper"): 34,
    ("unsw-nb15", "paper"): 39,
    ("ton-iot", "paper"): 14,
    ("nsl-kdd", "rich"): 84,
    ("unsw-nb15", "rich"): 91,
    ("ton-iot", "rich"): 119,
}


def test_verify_real_files(real_data_dir):
    recs = verify_data_dir(real_data_dir)
    status = {r.file: r.status for r in recs}
    for rel in [r.file for r in recs if r.required]:
        assert status[rel] == "present", rel
    assert all(r.sha256 == r.expected for r in recs if r.status == "present" and r.expected)


def test_nsl_kdd_counts(real_dataset):
    d = real_dataset("nsl-kdd")
    assert len(d.y_train) == 125_973 and np.bincount(d.y_train).tolist() == [67_343, 58_630]
    assert len(d.y_test) == 22_544 and np.bincount(d.y_test).tolist() == [9_711, 12_833]
    assert d.info["unknown_attack_names"] == []
    assert Counter(d.category_train) == {
        "normal": 67_343,
        "DoS": 45_927,
        "Probe": 11_656,
        "R2L": 995,
        "U2R": 52,
    }
    assert Counter(d.category_test) == {
        "normal": 9_711,
        "DoS": 7_458,
        "Probe": 2_421,
        "R2L": 2_754,
        "U2R": 200,
    }
    assert d.info["dropped_rows"] == 0


def test_nsl_kdd_20percent(real_dataset):
    d = real_dataset("nsl-kdd", variant="20percent")
    assert np.bincount(d.y_train).tolist() == [13_449, 11_743]
    assert len(d.y_test) == 22_544
    assert d.info["files"][0].endswith("KDDTrain+_20Percent.txt")


def test_unsw_counts_and_stratified_split(real_dataset):
    d = real_dataset("unsw-nb15")
    assert len(d.y_train) + len(d.y_test) == 82_332
    assert (np.bincount(d.y_train) + np.bincount(d.y_test)).tolist() == [37_000, 45_332]
    assert d.info["split"] == "stratified" and d.info["test_size"] == 0.3
    all_cat = Counter(d.category_train) + Counter(d.category_test)
    assert len(all_cat) == 10 and all_cat["normal"] == 37_000
    for c, n in all_cat.items():
        assert abs(Counter(d.category_test)[c] - 0.3 * n) <= 1, c
    # train and test rows are disjoint and cover the file
    idx = np.concatenate([d.raw_train.index, d.raw_test.index])
    assert np.array_equal(np.sort(idx), np.arange(82_332))
    assert "dst_bytes" in d.raw_train and (d.raw_train["dst_bytes"] == d.raw_train["dbytes"]).all()


def test_ton_iot_counts_and_split(real_dataset):
    d = real_dataset("ton-iot")
    assert len(d.y_train) + len(d.y_test) == 211_043
    assert (np.bincount(d.y_train) + np.bincount(d.y_test)).tolist() == [50_000, 161_043]
    all_cat = Counter(d.category_train) + Counter(d.category_test)
    assert all_cat["mitm"] == 1_043
    # the README's "20,000 each" holds for the attack classes; normal has 50,000 rows
    assert all_cat["normal"] == 50_000 and len(all_cat) == 10
    assert all(all_cat[c] == 20_000 for c in all_cat if c not in ("mitm", "normal"))
    for c, n in all_cat.items():
        assert abs(Counter(d.category_test)[c] - 0.3 * n) <= 1, c


def test_split_is_seeded(real_data_dir):
    a = load_dataset("ton-iot", real_data_dir, random_state=1)
    b = load_dataset("ton-iot", real_data_dir, random_state=1)
    c = load_dataset("ton-iot", real_data_dir, random_state=2)
    assert np.array_equal(a.raw_test.index, b.raw_test.index)
    assert not np.array_equal(a.raw_test.index, c.raw_test.index)


@pytest.mark.parametrize("name", DATASETS)
@pytest.mark.parametrize("feature_set", FEATURE_SETS)
def test_features_and_no_forbidden_column(real_dataset, name, feature_set):
    d = real_dataset(name, feature_set)
    assert d.X_train.shape[1] == d.X_test.shape[1] == len(d.feature_names)
    assert d.X_train.shape[1] == N_FEATURES[(name, feature_set)]
    assert d.X_train.dtype == np.float64 and np.isfinite(d.X_train).all()
    assert np.isfinite(d.X_test).all()
    forbidden = FORBIDDEN_COLUMNS[name]
    assert not set(d.info["feature_sources"]) & forbidden
    for f in d.feature_names:
        base = f.removeprefix("log1p(").split("=")[0].rstrip(")").removesuffix("_missing")
        assert base not in forbidden, f
    # labels agree with categories
    assert np.array_equal(d.y_train == 0, d.category_train == "normal")
    assert np.array_equal(d.y_test == 0, d.category_test == "normal")
    # scrambling every forbidden column leaves the features unchanged
    tf = FeatureTransformer(FEATURE_SPECS[name][feature_set]).fit(d.raw_train)
    raw = d.raw_test.copy()
    rng = np.random.default_rng(0)
    for c in forbidden & set(raw.columns):
        raw[c] = rng.permutation(raw[c].to_numpy())
    np.testing.assert_array_equal(tf.transform(raw), d.X_test)


@pytest.mark.parametrize("name", DATASETS)
def test_partition_and_federated_stats(real_dataset, name):
    d = real_dataset(name)
    key = d.raw_train["dst_bytes"].to_numpy()
    g = partition_sorted(key, 20)
    sizes = np.bincount(g, minlength=20)
    assert sizes.sum() == len(key) and sizes.max() - sizes.min() <= 1
    maxes = pd.Series(key).groupby(g).max().to_numpy()
    mins = pd.Series(key).groupby(g).min().to_numpy()
    assert (maxes[:-1] <= mins[1:]).all()
    moments = combine_moments(client_moments(d.X_train[g == c]) for c in np.unique(g))
    mean, scale, const = standardization_from_moments(moments)
    # pooled reference over contiguous columns (pairwise summation; numpy's axis-0
    # reduction of a C-ordered array accumulates naively and is itself off by ~1e-12)
    cols = np.ascontiguousarray(d.X_train.T)
    np.testing.assert_allclose(mean, cols.mean(axis=1), rtol=1e-12, atol=1e-12)
    std = cols.std(axis=1)
    np.testing.assert_allclose(scale[~const], std[~const], rtol=1e-12)
    assert np.array_equal(const, std <= 1e-12 * (1 + np.abs(mean)))
    if name == "nsl-kdd":
        assert const[d.feature_names.index("num_outbound_cmds")]  # always 0 in NSL-KDD


def test_client_split_on_real_data(real_dataset):
    d = real_dataset("nsl-kdd")
    s = make_client_split(d, 10, protocol="clean", random_state=0)
    tr, va = s.info["train_row_index"], s.info["val_row_index"]
    assert not np.intersect1d(tr, va).size
    assert (d.y_train[tr] == 0).all() and set(np.unique(s.y_val)) == {0, 1}
    assert s.X_test is d.X_test and len(s.groups_test) == len(d.y_test)
    assert set(np.unique(s.groups_train)) == set(range(10))

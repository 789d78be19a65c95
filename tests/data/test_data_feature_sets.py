"""Feature specs and transforms on small synthetic raw frames."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fedep.data import FEATURE_SETS, FEATURE_SPECS, FORBIDDEN_COLUMNS, DataError
from fedep.data.feature_sets import (
    NSL_KDD_COLUMNS,
    TON_IOT_COLUMNS,
    UNSW_NB15_COLUMNS,
    FeatureSpec,
    FeatureTransformer,
)

COLUMNS = {"nsl-kdd": NSL_KDD_COLUMNS, "unsw-nb15": UNSW_NB15_COLUMNS, "ton-iot": TON_IOT_COLUMNS}


@pytest.mark.parametrize("name", sorted(FEATURE_SPECS))
@pytest.mark.parametrize("feature_set", FEATURE_SETS)
def test_specs_use_known_allowed_columns(name, feature_set):
    spec = FEATURE_SPECS[name][feature_set]
    assert set(spec.columns) <= set(COLUMNS[name])
    assert not set(spec.columns) & FORBIDDEN_COLUMNS[name]
    assert len(set(spec.columns)) == len(spec.columns)


def test_paper_counts():
    assert len(FEATURE_SPECS["nsl-kdd"]["paper"].columns) == 34
    assert len(FEATURE_SPECS["unsw-nb15"]["paper"].columns) == 39
    assert len(FEATURE_SPECS["ton-iot"]["paper"].columns) == 14


def test_forbidden_covers_targets_and_identifiers():
    assert {"attack_type", "difficulty_level"} <= FORBIDDEN_COLUMNS["nsl-kdd"]
    assert {"id", "label", "attack_cat"} <= FORBIDDEN_COLUMNS["unsw-nb15"]
    assert {
        "src_ip",
        "dst_ip",
        "dns_query",
        "ssl_subject",
        "ssl_issuer",
        "http_uri",
        "http_user_agent",
        "label",
        "type",
    } <= FORBIDDEN_COLUMNS["ton-iot"]


def _spec():
    return FeatureSpec(
        numeric=("a", "b"), log1p=("b",), flags=("f",), dash_numeric=("d",), categorical=("c",)
    )


def _frame(c, f=("T", "F", "-"), d=("1", "-", "3")):
    return pd.DataFrame(
        {
            "a": [1.0, 2.0, 3.0],
            "b": [0.0, np.e - 1, -1.0],
            "f": list(f),
            "d": list(d),
            "c": list(c),
            "target": [0, 1, 0],
        }
    )


def test_transform_encodings_and_train_only_categories():
    tf = FeatureTransformer(_spec()).fit(_frame(["x", "y", "x"]))
    assert tf.feature_names_ == ["a", "log1p(b)", "f", "f_missing", "d", "d_missing", "c=x", "c=y"]
    X = tf.transform(_frame(["y", "z", "x"]))  # z unseen in training -> all zeros
    np.testing.assert_allclose(X[:, 1], [0.0, 1.0, -np.log(2.0)])
    assert X[:, 2:4].tolist() == [[1, 0], [0, 0], [0, 1]]
    assert X[:, 4:6].tolist() == [[1, 0], [0, 1], [3, 0]]
    assert X[:, 6:].tolist() == [[0, 1], [0, 0], [1, 0]]
    assert "target" not in tf.feature_sources_


def test_max_categories_keeps_most_frequent():
    tf = FeatureTransformer(FeatureSpec(numeric=(), categorical=("c",)), max_categories=2)
    tf.fit(pd.DataFrame({"c": list("aabbbc")}))
    assert tf.categories_["c"] == ["a", "b"]
    assert tf.transform(pd.DataFrame({"c": ["c"]})).tolist() == [[0, 0]]


def test_bad_values_name_column_and_line():
    tf = FeatureTransformer(_spec(), source="f.csv").fit(_frame(["x", "y", "x"]))
    with pytest.raises(DataError, match=r"f.csv, line 3, column 'f'"):
        tf.transform(_frame(["x", "y", "x"], f=("T", "maybe", "F")))
    bad = _frame(["x", "y", "x"])
    bad.loc[2, "a"] = np.nan
    with pytest.raises(DataError, match=r"line 4, column 'a'"):
        tf.transform(bad)
    with pytest.raises(DataError, match="missing columns"):
        tf.transform(bad.drop(columns="c"))

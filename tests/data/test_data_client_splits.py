"""make_client_split on a small fabricated Dataset."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fedep.data import Dataset, make_client_split


def _dataset(n=600, n_test=100, seed=0, attack_share=0.4):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < attack_share).astype(np.int64)
    yt = (rng.random(n_test) < 0.5).astype(np.int64)
    key = rng.integers(0, 50, n)
    return Dataset(
        name="toy",
        X_train=rng.normal(size=(n, 4)),
        X_test=rng.normal(size=(n_test, 4)),
        y_train=y,
        y_test=yt,
        category_train=np.where(y == 1, "dos", "normal").astype(object),
        category_test=np.where(yt == 1, "dos", "normal").astype(object),
        feature_names=["a", "b", "c", "d"],
        raw_train=pd.DataFrame({"dst_bytes": key}),
        raw_test=pd.DataFrame({"dst_bytes": rng.integers(0, 60, n_test)}),
    )


@pytest.mark.parametrize("partition", ["sorted", "dirichlet", "iid"])
@pytest.mark.parametrize("protocol", ["clean", "contaminated"])
def test_split_invariants(partition, protocol):
    d = _dataset()
    s = make_client_split(
        d, 5, partition=partition, protocol=protocol, validation_size=0.2, concentration=5.0
    )
    tr, va = s.info["train_row_index"], s.info["val_row_index"]
    assert not np.intersect1d(tr, va).size
    np.testing.assert_array_equal(s.X_train, d.X_train[tr])
    np.testing.assert_array_equal(s.X_val, d.X_train[va])
    np.testing.assert_array_equal(s.y_val, d.y_train[va])
    assert s.X_test is d.X_test and s.y_test is d.y_test
    if protocol == "clean":
        assert (d.y_train[tr] == 0).all()
        assert len(tr) + len(va) == (d.y_train == 0).sum() + (d.y_train[va] == 1).sum()
    else:
        assert np.array_equal(np.sort(np.concatenate([tr, va])), np.arange(len(d.y_train)))
    assert set(np.unique(s.groups_train)) == set(range(5))
    # every client holds validation rows; stratified: both classes where the client has both
    for k in range(5):
        assert (s.groups_val == k).sum() > 0
        if partition != "dirichlet":
            assert set(np.unique(s.y_val[s.groups_val == k])) == {0, 1}
    assert abs(len(va) - 0.2 * len(d.y_train)) <= 10
    if partition == "sorted":
        assert s.groups_test is not None and s.groups_test.max() < 5
    else:
        assert s.groups_test is None


def test_seeded():
    d = _dataset()
    a = make_client_split(d, 4, partition="iid", random_state=3)
    b = make_client_split(d, 4, partition="iid", random_state=3)
    c = make_client_split(d, 4, partition="iid", random_state=4)
    assert np.array_equal(a.info["val_row_index"], b.info["val_row_index"])
    assert not np.array_equal(a.info["val_row_index"], c.info["val_row_index"])


def test_too_few_rows_names_client():
    d = _dataset(n=100, attack_share=0.0)
    d.y_train[:34] = 1  # sorted by row index, client 0 holds rows 0..33: attacks only
    d.raw_train["dst_bytes"] = np.arange(100)
    with pytest.raises(ValueError, match=r"client 0 has only 0 training rows"):
        make_client_split(d, 3, partition="sorted", protocol="clean")
    s = make_client_split(d, 3, partition="sorted", protocol="contaminated")
    assert (np.bincount(s.groups_train) >= 10).all()


def test_bad_parameters():
    d = _dataset()
    with pytest.raises(ValueError, match="partition"):
        make_client_split(d, 3, partition="random")
    with pytest.raises(ValueError, match="protocol"):
        make_client_split(d, 3, protocol="dirty")
    with pytest.raises(ValueError, match="partition_key"):
        make_client_split(d, 3, partition_key="sbytes")
    with pytest.raises(ValueError, match="validation_size"):
        make_client_split(d, 3, validation_size=1.0)
    with pytest.raises(ValueError, match="n_clients"):
        make_client_split(d, 0)

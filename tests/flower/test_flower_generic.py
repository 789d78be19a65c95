"""Official-dataset partitions over Flower with ``feature-set='generic'`` (the default):
each gateway holds its partition's raw table, as a user's gateway holds its own file,
and the federation fits the feature pipeline; the same as the in-process estimator on
the same tables, and the same rows as the numeric feature sets."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("flwr")

from fedep.core.stiefel import projector_distance  # noqa: E402
from fedep.data import load_dataset  # noqa: E402
from fedep.detectors import FedEP  # noqa: E402
from fedep.features import FeaturePipeline  # noqa: E402
from fedep.flower import run_local  # noqa: E402
from fedep.flower.gateway_data import load_gateway_data, load_gateway_table  # noqa: E402

pytestmark = pytest.mark.realdata

D, MAX_ROWS = 3, 900


@pytest.fixture(autouse=True)
def _flower_env(monkeypatch, tmp_path):
    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "flwr-home"))


def _nodes(data_dir, tmp_path=None, **extra):
    nodes = []
    for i in range(D):
        c = {
            "partition-id": i,
            "num-partitions": D,
            "dataset": "nsl-kdd",
            "max-rows": MAX_ROWS,
            "seed": 3,
            "data-dir": str(data_dir),
            **extra,
        }
        if tmp_path is not None:
            c["model-path"] = str(tmp_path / f"gw{i}.fedep")
        nodes.append(c)
    return nodes


def test_generic_partition_holds_the_raw_rows_of_the_numeric_partition(real_data_dir):
    ds = load_dataset("nsl-kdd", real_data_dir, feature_set="rich")
    raw = ds.raw_inputs()[0]
    # the partition rule written out: normal training rows, shuffled with the seed,
    # cut to max-rows, split in contiguous parts, file order within a part
    normal = np.flatnonzero(ds.y_train == 0)
    order = np.random.default_rng(3).permutation(normal.size)[:MAX_ROWS]
    seen = []
    for cfg, part in zip(_nodes(real_data_dir), np.array_split(order, D), strict=True):
        rows = normal[np.sort(part)]
        df, label = load_gateway_table(cfg)
        assert label == str(cfg["partition-id"])
        assert "label" not in df.columns and "attack" not in df.columns
        pd.testing.assert_frame_equal(df, raw.iloc[rows].reset_index(drop=True))
        X, _, names = load_gateway_data({**cfg, "feature-set": "rich"})
        np.testing.assert_array_equal(X, ds.X_train[rows])
        assert names == list(ds.feature_names)
        seen.append(rows)
    assert sum(len(r) for r in seen) == MAX_ROWS
    assert len(np.unique(np.concatenate(seen))) == MAX_ROWS  # disjoint


def test_generic_partitions_over_flower_equal_the_in_process_fit(real_data_dir, tmp_path):
    nodes = _nodes(real_data_dir, tmp_path)
    run = {"n-components": 3, "n-rounds": 3, "tol": 0.0, "random-state": 0}
    res, _ = run_local(nodes, run)
    assert not res.failed and res.finalized == ["0", "1", "2"]
    frames = [load_gateway_table(c)[0] for c in nodes]
    groups = np.repeat(np.arange(D), [len(f) for f in frames])
    det = FedEP(n_components=3, n_rounds=3, tol=0.0, random_state=0).fit(
        pd.concat(frames, ignore_index=True), groups=groups
    )
    fl = FeaturePipeline.from_dict(res.features)
    assert [d.to_dict() for d in fl.decisions_] == [d.to_dict() for d in det.features_.decisions_]
    # the text columns of the raw table are encoded, as for a user's file
    kinds = {d.name: d.action for d in fl.decisions_}
    assert kinds["protocol_type"] == kinds["service"] == kinds["flag"] == "one-hot"
    assert projector_distance(res.components.T, det.components_.T) <= 1e-8

"""A warm start over Flower: each gateway gets its own carried state, and the run equals
the in-process warm start."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("flwr")

import fedep  # noqa: E402
from fedep import FedEP  # noqa: E402
from fedep.flower import run_local  # noqa: E402
from fedep.flower.gateway_data import load_gateway_data  # noqa: E402
from fedep.flower.messages import arrays_of  # noqa: E402
from fedep.modelfile import ModelFileError  # noqa: E402

RC = {"n-components": 2, "random-state": 0, "method": "fedep"}


@pytest.fixture(autouse=True)
def _flower_env(monkeypatch, tmp_path):
    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "flwr-home"))


def test_flower_warm_start_carries_each_gateway_its_own_state(tmp_path):
    cfgs = [
        {"partition-id": i, "synthetic-seed": 2, "model-path": str(tmp_path / f"g{i}.fedep")}
        for i in range(3)
    ]
    data = [load_gateway_data(c) for c in cfgs]
    X = np.concatenate([x for x, _, _ in data])
    groups = np.concatenate([[lab] * len(x) for x, lab, _ in data])
    # the previous model knows gateways 0 and 1; gateway 2 is new
    old = np.isin(groups, [data[0][1], data[1][1]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = FedEP(n_components=2, random_state=0).fit(X[old], groups=groups[old])
    path = tmp_path / "model.fedep"
    fedep.save(model, path, sign_key="hmac:" + "k" * 32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        local = fedep.load(path).set_params(warm_start=True).fit(X, groups=groups)
    rc = {**RC, "warm-start": str(path), "warm-start-verify-key": "hmac:" + "k" * 32}
    res, grid = run_local(cfgs, rc)
    assert res.n_rounds == local.n_iter_
    assert res.stop_reason == local.stop_reason_ == "lagrangian_stationary"
    np.testing.assert_allclose(res.components, local.components_, atol=1e-8)
    # each gateway's setup left it its own state only; the new gateway none
    for ctx in grid.contexts.values():
        label = ctx.state["fedep.meta"]["json"]
        label = next(lab for _, lab, _ in data if f'"label": "{lab}"' in label)
        if label == data[2][1]:
            assert "fedep.start" not in ctx.state.array_records
            continue
        i = model.clients_.tolist().index(label)
        got = arrays_of(ctx.state["fedep.start"])
        np.testing.assert_array_equal(got["W"], model.client_components_[i].T)
        np.testing.assert_array_equal(got["dual"], model.client_duals_[i].T)
    # every gateway's file records the run's lineage (the model as parent) and its state
    g0 = fedep.load(tmp_path / "g0.fedep")
    assert g0.lineage_["parent"] == model.lineage_["id"]
    assert g0.lineage_["parent_sha256"] == fedep.load(path).file_sha256_
    assert g0.lineage_["gateways"] == ["0", "1", "2"]
    assert g0.lineage_ == fedep.load(tmp_path / "g2.fedep").lineage_
    assert g0.lineage_["window"]["rows"] == len(X)
    assert g0.client_duals_.shape == (1, 2, X.shape[1])


def test_flower_warm_start_refuses_another_key_or_rank(tmp_path):
    cfgs = [{"partition-id": i, "synthetic-seed": 2} for i in range(2)]
    data = [load_gateway_data(c) for c in cfgs]
    X = np.concatenate([x for x, _, _ in data])
    groups = np.concatenate([[lab] * len(x) for x, lab, _ in data])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = FedEP(n_components=2, random_state=0, n_rounds=5).fit(X, groups=groups)
    path = tmp_path / "model.fedep"
    fedep.save(model, path)
    with pytest.raises(ValueError, match="n_components=3 but the model has rank 2"):
        run_local(cfgs, {**RC, "n-components": 3, "warm-start": str(path)})
    with pytest.raises(ModelFileError, match="not signed"):
        run_local(
            cfgs, {**RC, "warm-start": str(path), "warm-start-verify-key": "hmac:" + "x" * 32}
        )

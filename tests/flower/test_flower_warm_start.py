"""A warm start over Flower: each gateway gets its own carried state, and the run equals
the in-process warm start."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("flwr")

import fedep  # noqa: E402
from fedep import FedEP  # noqa: E402
from fedep._procs import stop_group  # noqa: E402
from fedep.cli import main  # noqa: E402
from fedep.core.stiefel import projector_distance  # noqa: E402
from fedep.data.synthetic import make_federated_data  # noqa: E402
from fedep.federation.rounds import STOP_WINDOW  # noqa: E402
from fedep.flower import run_local  # noqa: E402
from fedep.flower.gateway_data import load_gateway_data  # noqa: E402
from fedep.flower.messages import arrays_of  # noqa: E402
from fedep.modelfile import ModelFileError  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
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
    assert res.stop_reason == local.stop_reason_ == "stationary"
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


def test_flower_warm_start_with_secure_aggregation_equals_the_plain_one(tmp_path):
    cfgs = [{"partition-id": i, "synthetic-seed": 3} for i in range(4)]
    data = [load_gateway_data(c) for c in cfgs]
    X = np.concatenate([x for x, _, _ in data])
    groups = np.concatenate([[lab] * len(x) for x, lab, _ in data])
    first = np.concatenate([np.arange(len(x)) < len(x) // 2 for x, _, _ in data])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = FedEP(n_components=3, random_state=0).fit(X[first], groups=groups[first])
    path = tmp_path / "model.fedep"
    fedep.save(model, path)
    rc = {**RC, "n-components": 3, "warm-start": str(path)}
    plain, _ = run_local(cfgs, rc)
    secure, grid = run_local(cfgs, {**rc, "secure-aggregation": True})
    # the same rounds to the same stopping test, within SecAgg+'s quantisation error
    assert secure.n_rounds == plain.n_rounds and secure.stop_reason == plain.stop_reason
    assert secure.stop_reason == "stationary"
    # the data moved: the drift test re-merged, the sketches summed securely too
    assert [h.get("remerged") for h in secure.history] == [h.get("remerged") for h in plain.history]
    assert any(h.get("remerged") for h in secure.history)
    assert projector_distance(secure.components.T, plain.components.T) <= 1e-6
    np.testing.assert_array_equal(secure.mean, model.mean_)  # the model's scaling kept
    for a, b in zip(plain.history, secure.history, strict=True):
        assert b["augmented_lagrangian"] == pytest.approx(a["augmented_lagrangian"], rel=1e-5)
    # the server sent each gateway its own state; no reply carried a basis or a dual
    for _, reply in grid.sent:
        assert not {"local", "sketch"} & set(reply.content.array_records)


def _stop_run(proc: subprocess.Popen, out: Path) -> None:
    """Stop ``fedep federate``'s group (SIGTERM: it stops its deployment; SIGKILL after
    30 s), then SIGKILL every process left with a Flower home under ``out`` (the
    deployment's processes lead sessions of their own)."""
    stop_group(proc)
    needle = f"FLWR_HOME={out}".encode()
    for e in os.listdir("/proc"):
        if not e.isdigit() or int(e) == os.getpid():
            continue
        try:
            with open(f"/proc/{e}/environ", "rb") as fh:
                if any(v.startswith(needle) for v in fh.read().split(b"\0")):
                    os.kill(int(e), signal.SIGKILL)
        except OSError:
            continue


@pytest.mark.slow
def test_fedep_federate_warm_start_as_processes_equals_fedep_fit(tmp_path, capsys):
    # two days of two gateways (files gw0.csv, gw1.csv: the gateways' labels in both)
    fd = make_federated_data(
        n_clients=2, n_features=6, n_components=2, n_samples=2000, random_state=0
    )
    for c in range(2):
        X = fd.X_train[fd.groups_train == c]
        for day, part in ((1, X[: len(X) // 2]), (2, X[len(X) // 2 :])):
            (tmp_path / f"day{day}").mkdir(exist_ok=True)
            cols = [f"f{j}" for j in range(6)]
            pd.DataFrame(part, columns=cols).to_csv(tmp_path / f"day{day}/gw{c}.csv", index=False)
    key = "hmac:" + "k" * 32
    day2 = [str(tmp_path / f"day2/gw{c}.csv") for c in range(2)]
    a, b = tmp_path / "a.fedep", tmp_path / "b.fedep"
    day1 = [str(tmp_path / f"day1/gw{c}.csv") for c in range(2)]
    args = ["--n-components", "2", "--quiet", "--sign-key", key]
    assert main(["fit", "--train", *day1, "--out", str(a), *args]) == 0
    warm = ["--warm-start", str(a), "--verify-key", key]
    assert main(["fit", "--train", *day2, "--out", str(b), *warm, *args]) == 0
    capsys.readouterr()
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "FEDEP_DATA_DIR"}
    env.update(FLWR_TELEMETRY_ENABLED="0", PYTHONPATH=str(ROOT / "src"))
    argv = [sys.executable, "-m", "fedep", "federate", "--train", *day2, *warm, "--out", str(out)]
    proc = subprocess.Popen(
        argv, cwd=tmp_path, env=env, text=True, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        stdout, stderr = proc.communicate(timeout=240)
    finally:
        _stop_run(proc, out)
    assert proc.returncode == 0, stdout + stderr
    res = json.loads((out / "result.json").read_text())
    local = fedep.load(b, verify_key=key)
    # the same fit as `fedep fit --warm-start`: each gateway from its own state, the
    # same stopping test on its own rounds (more than its window), the same basis
    assert res["clients"] == ["gw0", "gw1"] == local.clients_.tolist()
    assert res["n_rounds"] == local.n_iter_ > STOP_WINDOW
    assert res["stop_reason"] == local.stop_reason_ == "stationary"
    V = np.asarray(res["components"]).T
    assert projector_distance(V, local.components_.T) <= 1e-6
    g0 = fedep.load(out / "gateway-0.fedep")
    np.testing.assert_allclose(g0.client_components_[0], local.client_components_[0], atol=1e-6)
    assert g0.lineage_["parent"] == fedep.load(a).lineage_["id"]
    assert g0.lineage_["parent_sha256"] == fedep.load(a).file_sha256_

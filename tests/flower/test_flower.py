"""Flower apps driven in-process: parity with the in-process runner, privacy, faults."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("flwr")

from fedep import load  # noqa: E402
from fedep.core.stats import client_moments, combine_moments, standardization_from_moments  # noqa: E402
from fedep.core.stiefel import projector_distance  # noqa: E402
from fedep.detectors import FedEP, FedPG  # noqa: E402
from fedep.flower import FaultPlan, run_local  # noqa: E402
from fedep.flower.gateway_data import load_gateway_data  # noqa: E402

R = 3
KEYS = ("objective", "augmented_lagrangian", "consensus_residual", "data_residual", "v_change")


@pytest.fixture(autouse=True)
def _flower_env(monkeypatch, tmp_path):
    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "flwr-home"))


def _gateways(d=3, seed=3, tmp_path=None):
    cfgs = [{"partition-id": i, "synthetic-seed": seed} for i in range(d)]
    if tmp_path is not None:
        for i, c in enumerate(cfgs):
            c["model-path"] = str(tmp_path / f"gw-{i}.fedep")
    return cfgs


def _pooled(cfgs):
    Xs = [load_gateway_data(c)[0] for c in cfgs]
    X = np.vstack(Xs)
    groups = np.concatenate(
        [np.full(len(x), int(c["partition-id"])) for x, c in zip(Xs, cfgs, strict=True)]
    )
    return Xs, X, groups


def _rel(a, b):
    return abs(a - b) / max(abs(a), 1e-6)  # residuals of held rounds are round-off (~1e-16)


@pytest.mark.parametrize("fraction", [1.0, 2 / 3])
def test_fedep_parity_with_inprocess(tmp_path, fraction):
    # Shuffle the gateways: the server must still aggregate in client-label order.
    cfgs = _gateways(tmp_path=tmp_path)[::-1]
    rc = {"n-components": R, "n-rounds": 6, "tol": 0.0, "random-state": 7}
    rc["client-fraction"] = fraction
    res, grid = run_local(cfgs, rc)
    _, X, groups = _pooled(cfgs)
    det = FedEP(n_components=R, n_rounds=6, tol=0.0, random_state=7, client_fraction=fraction).fit(
        X, groups=groups
    )
    assert res.n_rounds == det.n_iter_ == 6
    assert projector_distance(res.components.T, det.components_.T) <= 1e-8
    for a, b in zip(det.history_, res.history, strict=True):
        for k in KEYS:
            assert _rel(a[k], b[k]) <= 1e-8, (k, a[k], b[k])
        assert a["n_clients"] == len(b["participants"])
    np.testing.assert_allclose(res.mean, det.mean_, rtol=1e-12)
    # Every gateway wrote a loadable personalised model equal to its in-process basis.
    assert res.finalized == ["0", "1", "2"]
    for i in range(3):
        m = load(tmp_path / f"gw-{i}.fedep")
        assert m.clients_.tolist() == [i]
        Wi = m.client_components_[0].T
        assert projector_distance(Wi, det.client_components_[i].T) <= 1e-8
        assert projector_distance(m.components_.T, det.components_.T) <= 1e-8
        Xi = load_gateway_data(cfgs[2 - i])[0]
        np.testing.assert_allclose(
            m.decision_function(Xi, groups=np.full(len(Xi), i)),
            det.decision_function(Xi, groups=np.full(len(Xi), i)),
            rtol=1e-6,
            atol=1e-9,
        )


def test_fedpg_and_oneshot_parity():
    cfgs = _gateways()
    _, X, groups = _pooled(cfgs)
    res, _ = run_local(
        cfgs, {"method": "fedpg", "n-components": R, "n-rounds": 4, "tol": 0.0, "random-state": 1}
    )
    det = FedPG(n_components=R, n_rounds=4, tol=0.0, random_state=1).fit(X, groups=groups)
    assert projector_distance(res.components.T, det.components_.T) <= 1e-8
    res, _ = run_local(
        cfgs, {"n-components": R, "n-rounds": 3, "tol": 0.0, "init": "oneshot", "random-state": 2}
    )
    det = FedEP(n_components=R, n_rounds=3, tol=0.0, init="oneshot", random_state=2)
    det.fit(X, groups=groups)
    assert projector_distance(res.components.T, det.components_.T) <= 1e-8
    assert _rel(res.history[-1]["objective"], det.history_[-1]["objective"]) <= 1e-8


def test_stops_on_convergence_like_inprocess():
    cfgs = _gateways()
    _, X, groups = _pooled(cfgs)
    res, _ = run_local(cfgs, {"n-components": R, "n-rounds": 300, "tol": 1e-4, "random-state": 0})
    det = FedEP(n_components=R, n_rounds=300, tol=1e-4, random_state=0).fit(X, groups=groups)
    assert res.stop_reason == det.stop_reason_ == "stationary"
    assert res.n_rounds == det.n_iter_ < 300


def test_gateways_send_no_records():
    cfgs = _gateways()
    res, grid = run_local(cfgs, {"n-components": R, "n-rounds": 3, "tol": 0.0})
    Xs = [load_gateway_data(c)[0] for c in cfgs]
    pooled = combine_moments(client_moments(x) for x in Xs)
    mean, scale, _ = standardization_from_moments(pooled)
    n = Xs[0].shape[1]
    assert len({x.shape[0] for x in Xs} | {n, R}) == 5  # sizes distinguishable from n and r
    node_rows = {nid: Xs[i] for i, nid in enumerate(grid.node_ids)}
    kinds = set()
    assert len(grid.sent) == 3 * (2 + 3 + 1)  # moments, setup, 3 rounds, finalize
    for nid, msg in grid.sent:
        assert not msg.has_error()
        X = node_rows[nid]
        rows = np.vstack([X, (X - mean) / scale])
        kinds.add(msg.metadata.message_type)
        for rec in msg.content.array_records.values():
            for name, arr in rec.items():
                a = arr.numpy()
                assert X.shape[0] not in a.shape, (name, a.shape)
                # bases and duals (n x r each), or a consensus step's Gram factor (n x n)
                assert a.size <= max(2 * n * R + n, n * n), (name, a.shape)
                if a.shape[-1:] == (n,) or a.ndim == 1:
                    flat = a.reshape(-1, a.shape[-1])
                    if flat.shape[-1] == n:
                        d = np.abs(flat[:, None, :] - rows[None]).max(axis=2)
                        assert d.min() > 1e-9, name  # no record, raw or standardised
        for rec in list(msg.content.metric_records.values()):
            assert all(np.ndim(v) == 0 for v in rec.values())
        for rec in msg.content.config_records.values():
            assert all(isinstance(v, str) and len(v) < 64 for v in rec.values())
    assert kinds == {"query.moments", "train.setup", "train", "evaluate.finalize"}


def test_communication_accounting():
    res, _ = run_local(_gateways(), {"n-components": R, "n-rounds": 2, "tol": 0.0})
    n = res.V.shape[0]
    for rec in res.history:
        assert set(rec["bytes_sent"]) == set(rec["bytes_received"]) == {"0", "1", "2"}
        for b in rec["bytes_sent"].values():
            assert n * R * 8 < b < 20 * n * R * 8  # V, and little else
        for b in rec["bytes_received"].values():
            assert 2 * n * R * 8 < b < 20 * n * R * 8  # W and Pi
    assert res.history[0]["bytes_sent"]["0"] > res.history[1]["bytes_sent"]["0"]  # + V0
    assert set(res.setup_bytes["1"]) >= {"moments_sent", "moments_received", "setup_sent"}


def test_faulty_gateways_do_not_abort_the_run(tmp_path):
    cfgs = _gateways(d=4, tmp_path=tmp_path)
    faults = FaultPlan(error={1: 2}, vanish={3: 3})
    res, grid = run_local(
        cfgs, {"n-components": R, "n-rounds": 5, "tol": 0.0, "round-timeout-s": 0.2}, faults=faults
    )
    assert res.n_rounds == 5 and res.stop_reason == "max_rounds"
    parts = [rec["participants"] for rec in res.history]
    assert parts[0] == ["0", "1", "2", "3"]
    assert parts[1] == ["0", "2", "3"] and "injected failure" in res.history[1]["failed"]["1"]
    assert parts[2] == ["0", "2"] and "no reply" in res.history[2]["failed"]["3"]
    assert parts[3] == parts[4] == ["0", "2"]
    assert res.history[2]["n_clients"] == 2
    assert res.finalized == ["0", "2"]
    assert (tmp_path / "gw-0.fedep").exists() and not (tmp_path / "gw-1.fedep").exists()
    assert np.isfinite(res.components).all()
    np.testing.assert_allclose(res.components @ res.components.T, np.eye(R), atol=1e-10)


def test_min_clients_stops_the_run():
    faults = FaultPlan(error={0: 2, 1: 2})
    res, _ = run_local(
        _gateways(), {"n-components": R, "n-rounds": 5, "tol": 0.0, "min-clients": 2}, faults=faults
    )
    assert res.stop_reason == "too_few_clients"
    assert res.n_rounds == 1


@pytest.mark.parametrize(
    "method, cls, extra",
    [("fedep", FedEP, {"init": "oneshot"}), ("fedpg", FedPG, {})],
)
def test_automatic_rank_parity_with_inprocess(tmp_path, method, cls, extra):
    # n-components unset: the estimators' default "auto". The server chooses the rank
    # from the gateways' Gram matrices as the in-process fit does from the blocks.
    cfgs = _gateways(d=4, seed=5, tmp_path=tmp_path)[::-1]
    rc = {"method": method, "n-rounds": 3, "tol": 0.0, "random-state": 2}
    rc.update({k.replace("_", "-"): v for k, v in extra.items()})
    res, grid = run_local(cfgs, rc)
    _, X, groups = _pooled(cfgs)
    det = cls(n_rounds=3, tol=0.0, random_state=2, **extra).fit(X, groups=groups)
    assert det.n_components == "auto"
    assert res.rank_reason == det.rank_reason_
    assert res.components.shape == det.components_.shape == (det.n_components_, 12)
    assert projector_distance(res.components.T, det.components_.T) <= 1e-8
    for i in range(4):
        m = load(tmp_path / f"gw-{i}.fedep")
        assert m.n_components == "auto"
        assert (m.n_components_, m.rank_reason_) == (det.n_components_, det.rank_reason_)
    # The rank phase sends second moments only: one (n, n) matrix and a count per gateway.
    grams = [msg for _, msg in grid.sent if "gram" in msg.content.array_records]
    assert len(grams) == 4
    rows = {x.shape[0] for x in _pooled(cfgs)[0]}
    for msg in grams:
        arrays = {
            k: a.numpy() for rec in msg.content.array_records.values() for k, a in rec.items()
        }
        assert list(arrays) == ["G"] and arrays["G"].shape == (12, 12)
        assert not rows & set(arrays["G"].shape)

"""Secure aggregation (SecAgg+) over the in-process Flower grid: parity with the plain
run within the stated quantisation error, dropouts, what the server sees, refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import ConfigRecord, Error, Message, RecordDict  # noqa: E402
from flwr.common.secure_aggregation.secaggplus_constants import (  # noqa: E402
    RECORD_KEY_CONFIGS,
    Key,
    Stage,
)
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from fedep.core.fedep import RoundReport  # noqa: E402
from fedep.core.stiefel import polar, projector_distance  # noqa: E402
from fedep.federation.server import REQUIRED_METRICS, round_sums, server_round  # noqa: E402
from fedep.flower import FaultPlan, LocalGrid, run_local  # noqa: E402
from fedep.flower.client_app import app as client_app  # noqa: E402
from fedep.flower.gateway_data import load_gateway_data  # noqa: E402
from fedep.flower.messages import to_array_record  # noqa: E402
from fedep.flower.secagg import (  # noqa: E402
    SECSUM,
    quantisation_bound,
    quantization_range,
    reconstruction_threshold,
    secure_sum,
)
from fedep.flower.transport import Roster  # noqa: E402

RC = {"n-components": 3, "n-rounds": 5, "tol": 0.0, "random-state": 7}


@pytest.fixture(autouse=True)
def _flower_env(monkeypatch, tmp_path):
    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "flwr-home"))


def _gateways(d=4, seed=3):
    return [{"partition-id": i, "synthetic-seed": seed} for i in range(d)]


def _report(k=5, n=7, r=3, seed=0):
    rng = np.random.default_rng(seed)
    W = np.stack([polar(rng.normal(size=(n, r))) for _ in range(k)])
    metrics = {m: rng.uniform(0.1, 2.0, k) for m in REQUIRED_METRICS}
    return RoundReport(W=W, Pi=rng.normal(size=(k, n, r)), nu=rng.uniform(1, 3, k), metrics=metrics)


@pytest.mark.parametrize("method", ["fedep", "fedpg"])
def test_server_round_from_sums_equals_server_round(method):
    rep = _report()
    V_prev = polar(np.random.default_rng(1).normal(size=(7, 3)))
    V1, r1 = server_round(method, rep, V_prev)
    # sums are additive: the sum of each client's round_sums is that of the stack
    parts = [round_sums(RoundReport(rep.W[i : i + 1], rep.Pi[i : i + 1], rep.nu[i : i + 1],
                                    {m: v[i : i + 1] for m, v in rep.metrics.items()}))
             for i in range(5)]  # fmt: skip
    summed = {k: sum(p[k] for p in parts) for k in parts[0]}
    empty = np.zeros((0, 7, 3))
    V2, r2 = server_round(method, RoundReport(empty, empty, np.zeros(0), sums=summed), V_prev)
    np.testing.assert_allclose(V2, V1, rtol=0, atol=1e-12)
    assert set(r1) == set(r2)
    for key, v in r1.items():
        if isinstance(v, float):
            assert r2[key] == pytest.approx(v, rel=1e-9, abs=1e-9), key
    with pytest.raises(ValueError, match="needs each client's proposal"):
        server_round(method, RoundReport(empty, empty, np.zeros(0), sums=summed), V_prev, "median")


def test_secure_sum_within_stated_bound(monkeypatch):
    for attr, v in (("_task_id", 1), ("_run_id", 1), ("_node_id", 0)):  # as run_local does
        monkeypatch.setattr(TaskIdentity, attr, v)
    cfgs = _gateways(5)
    grid = LocalGrid(client_app, cfgs)
    labels = [str(i) for i in range(5)]
    roster = Roster(
        order=labels,
        node_of=dict(zip(labels, grid.node_ids, strict=True)),
        label_of=dict(zip(grid.node_ids, labels, strict=True)),
    )
    raw = [load_gateway_data(c)[0] for c in cfgs]
    mags = 10.0 ** np.linspace(-4, 6, raw[0].shape[1])  # features of unlike magnitudes
    X = [x * mags for x in raw]
    for nid, x in zip(grid.node_ids, X, strict=True):
        grid.contexts[nid].state["fedep.data"] = to_array_record(X=x)
        grid.contexts[nid].state["fedep.meta"] = ConfigRecord(
            {"json": json.dumps({"label": str(nid - 1001), "feature_names": None})}
        )
    n = X[0].shape[1]
    content = RecordDict({SECSUM: ConfigRecord({"json": '{"what": "moments"}'})})
    out = secure_sum(grid, roster, content, {"n": (1,), "sum": (n,)}, phase="t", timeout=30,
                     min_clients=1)  # fmt: skip
    exact = np.sum([x.sum(axis=0) for x in X], axis=0)
    err = np.abs(out.sums["sum"] - exact)
    assert (err <= out.bound["sum"]).all()
    # the bound: one quantisation step per gateway, of each feature's own scale (the
    # largest gateway's |sum| < 2**E <= 2 * it): relative to each feature, not the largest
    top = np.max([np.abs(x.sum(axis=0)) for x in X], axis=0)
    assert (out.bound["sum"] <= 5 * 2 / quantization_range(5) * 2 * top).all()
    assert (err <= 1e-6 * np.abs(exact)).all()
    assert out.sums["n"][0] == pytest.approx(sum(len(x) for x in X), abs=1e-3)
    assert out.labels == labels and out.failed == {}
    # the server saw masked integer vectors and keys, no value of a gateway
    for _, reply in grid.sent:
        for name, rec in reply.content.array_records.items():  # the mod empties its own
            assert name == "fedep.exponents" or len(rec) == 0, name
    assert quantisation_bound(20, 1.0) == pytest.approx(20 * 2 / 2**26)
    assert reconstruction_threshold(3) == 2 and reconstruction_threshold(20) == 11


def test_secure_fedep_parity_with_plain_run():
    cfgs = _gateways(4)
    rc = {**RC, "n-components": "auto"}  # the rank from the securely summed Gram
    plain, _ = run_local(cfgs, rc)
    secure, grid = run_local(cfgs, {**rc, "secure-aggregation": True})
    assert secure.components.shape == plain.components.shape
    assert secure.rank_reason == plain.rank_reason
    # quantisation errors ~ k * 2**-28 of each sum's scale: far below these tolerances
    np.testing.assert_allclose(secure.mean, plain.mean, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(secure.scale, plain.scale, rtol=1e-6)
    assert projector_distance(secure.components.T, plain.components.T) <= 1e-6
    for a, b in zip(plain.history, secure.history, strict=True):
        for key in ("objective", "augmented_lagrangian"):
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-6), key
        # the residuals are square roots of differences of quantised sums: compare
        # their squares (a held round's consensus residual is round-off, ~0)
        for key in ("consensus_residual", "data_residual"):
            assert b[key] ** 2 == pytest.approx(a[key] ** 2, rel=1e-5, abs=1e-6), key
        assert b["participants"] == a["participants"]
    assert secure.finalized == plain.finalized == ["0", "1", "2", "3"]
    # no reply carried a basis, a dual, moments, a Gram matrix, a sketch or a threshold
    for _, reply in grid.sent:
        assert not {"local", "moments", "gram", "sketch"} & set(reply.content.array_records)
        metrics = reply.content.metric_records.get("metrics")
        assert metrics is None or "threshold" not in metrics


def _fail_at(stage: str, round_: str):
    def hostile(msg: Message, reply: Message):
        cfg = msg.content.config_records.get(RECORD_KEY_CONFIGS)
        if cfg is not None and msg.metadata.group_id == round_ and cfg.get(Key.STAGE) == stage:
            return Message(Error(code=1, reason="injected crash"), reply_to=msg)
        return None

    return hostile


def test_dropout_mid_protocol_survived():
    # gateway 1 crashes after sharing its keys in round 2: its masks are rebuilt from
    # the others' shares (3 of 4 left >= threshold 3) and the round sums the rest
    faults = FaultPlan(tamper={1: _fail_at(Stage.COLLECT_MASKED_VECTORS, "2")})
    plain, _ = run_local(_gateways(4), {**RC, "max-misses": 2}, faults=FaultPlan(error={1: 2}))
    secure, _ = run_local(_gateways(4), {**RC, "max-misses": 2, "secure-aggregation": True},
                          faults=faults)  # fmt: skip
    assert plain.n_rounds == secure.n_rounds == 5
    assert secure.history[1]["participants"] == ["0", "2", "3"]
    assert secure.history[2]["participants"] == ["0", "1", "2", "3"]
    assert "collect masked vectors" in secure.failed["1"]
    # the plain run whose gateway 1 misses round 2 (its local round not run, where the
    # secure one ran it before crashing): close, not equal
    assert projector_distance(secure.components.T, plain.components.T) <= 0.05
    # two of four crash in the same stage: 2 < threshold 3, the fit stops, named
    faults = FaultPlan(tamper={i: _fail_at(Stage.COLLECT_MASKED_VECTORS, "2") for i in (1, 2)})
    two, _ = run_local(_gateways(4), {**RC, "secure-aggregation": True}, faults=faults)
    assert two.stop_reason == "too_few_clients" and two.n_rounds == 1


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ({"aggregation": "median"}, "aggregation='median' needs each one"),
        ({"aggregation": "trimmed"}, "aggregation='trimmed' needs each one"),
        ({"trim-steps": 1}, "cannot run record trimming"),
        ({"dp-epsilon": 1.0, "dp-clip": 5.0, "tol": 1e-4}, "differential privacy needs tol=0"),
    ],
)
def test_refused_combinations(extra, match):
    with pytest.raises(ValueError, match=match) as exc:
        run_local(_gateways(3), {**RC, **extra, "secure-aggregation": True})
    assert "\n" not in str(exc.value)


def test_refused_with_two_gateways_and_raw_tables(tmp_path):
    with pytest.raises(RuntimeError, match="needs at least 3 gateways") as exc:
        run_local(_gateways(2), {**RC, "secure-aggregation": True})
    assert "\n" not in str(exc.value)
    rng = np.random.default_rng(0)
    cfgs = []
    for i in range(3):
        path = tmp_path / f"g{i}.csv"
        rows = ["proto,bytes,dur"] + [
            f"{rng.choice(['tcp', 'udp'])},{rng.integers(1, 999)},{rng.random():.3f}"
            for _ in range(40)
        ]
        path.write_text("\n".join(rows) + "\n")
        cfgs.append({"data-path": str(path), "label": f"g{i}"})
    with pytest.raises(RuntimeError, match="cannot be summed securely") as exc:
        run_local(cfgs, {**RC, "features": "auto", "secure-aggregation": True})
    assert "\n" not in str(exc.value)


def test_secure_run_with_signed_messages():
    # every stage's message is signed like any other; gateways that verify accept them
    secret = "hmac:" + "s" * 32
    cfgs = [{**c, "verify-key": secret} for c in _gateways(3)]
    plain, _ = run_local(cfgs, {**RC, "n-rounds": 2, "sign-key": secret})
    res, _ = run_local(cfgs, {**RC, "n-rounds": 2, "sign-key": secret, "secure-aggregation": True})
    assert res.failed == {} and res.n_rounds == 2
    assert projector_distance(res.components.T, plain.components.T) <= 1e-6

"""Differential privacy over Flower: the noise is added in each gateway's ClientApp by
the in-process code (same seeds, same noise: parity with the in-process fit), the
server only accounts; with SecAgg+ each gateway noises before masking; refusals."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

pytest.importorskip("flwr")
pytest.importorskip("dp_accounting")

from flwr.app import Context, RecordDict  # noqa: E402

from fedep import load  # noqa: E402
from fedep.core.privacy import epsilon_spent  # noqa: E402
from fedep.core.stiefel import projector_distance  # noqa: E402
from fedep.detectors import FedEP  # noqa: E402
from fedep.federation.privacy import gateway_seeds  # noqa: E402
from fedep.flower import FaultPlan, gateway_privacy, run_local  # noqa: E402
from fedep.flower.gateway_data import load_gateway_data  # noqa: E402
from fedep.flower.messages import arrays_of, to_array_record  # noqa: E402

SEED, D = 7, 3
DP = {"dp-epsilon": 4.0, "dp-clip": 8.0}
RC = {"n-components": 2, "n-rounds": 4, "tol": 0.0, "random-state": SEED, **DP}


@pytest.fixture(autouse=True)
def _flower_env(monkeypatch, tmp_path):
    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "flwr-home"))


def _gateways(tmp_path=None, d=D):
    seeds = gateway_seeds(SEED, d)  # the in-process fit's noise seeds, one per gateway
    cfgs = [{"partition-id": i, "synthetic-seed": 3, "dp-seed": seeds[i]} for i in range(d)]
    if tmp_path is not None:
        for i, c in enumerate(cfgs):
            c["model-path"] = str(tmp_path / f"gw-{i}.fedep")
    return cfgs


def _inprocess(cfgs):
    Xs = [load_gateway_data(c)[0] for c in cfgs]
    groups = np.concatenate([np.full(len(x), i) for i, x in enumerate(Xs)])
    det = FedEP(n_components=2, n_rounds=4, tol=0.0, random_state=SEED, dp_epsilon=4.0,
                dp_clip=8.0)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return det.fit(np.vstack(Xs), groups=groups), Xs


def test_flower_dp_fit_equals_the_inprocess_dp_fit(tmp_path):
    cfgs = _gateways(tmp_path)
    res, grid = run_local(cfgs, RC)
    det, Xs = _inprocess(cfgs)
    # the same noise, drawn at each gateway from its own seed: the same fit
    assert projector_distance(res.components.T, det.components_.T) <= 1e-8
    np.testing.assert_allclose(res.mean, det.mean_, rtol=1e-10)
    np.testing.assert_allclose(res.scale, det.scale_, rtol=1e-10)
    # the server accounted the releases the in-process fit made: moments, one-shot
    # Gram, 4 rounds
    p = res.privacy
    assert p["releases"] == 6 and p["delta"] == det.dp_delta_
    assert p["epsilon"] == pytest.approx(det.dp_epsilon_, rel=1e-12)
    assert p["epsilon"] == pytest.approx(epsilon_spent(det.dp_noise_multiplier_, 6, 1e-5))
    assert 0.99 * 4.0 <= p["epsilon"] <= 4.0
    assert p["noise_multiplier"] == pytest.approx(det.dp_noise_multiplier_)
    # each gateway's model states the privacy it spent; its basis is the in-process one
    for i in range(D):
        m = load(tmp_path / f"gw-{i}.fedep")
        assert m.dp_epsilon_ == pytest.approx(p["epsilon"]) and m.dp_delta_ == 1e-5
        assert m.dp_noise_multiplier_ == pytest.approx(p["noise_multiplier"])
        W = m.client_components_[0].T
        assert projector_distance(W, det.client_components_[i].T) <= 1e-8
    # what left each gateway: noised moments (not the clipped records' own), proposals
    # W = V + step + noise (not orthonormal), Pi = 0, nu = 1, no metric, no threshold
    first = [rep for _, rep in grid.sent if "moments" in rep.content.array_records]
    for i, rep in enumerate(sorted(first, key=lambda r: r.content["client"]["label"])):
        Xc = Xs[i] * np.minimum(1.0, 8.0 / np.linalg.norm(Xs[i], axis=1, keepdims=True))
        mean = arrays_of(rep.content["moments"])["mean"]
        assert not np.allclose(mean, Xc.mean(axis=0), rtol=1e-3)
    rounds = [rep for _, rep in grid.sent if "local" in rep.content.array_records]
    assert len(rounds) == 4 * D
    for rep in rounds:
        a = arrays_of(rep.content["local"])
        assert not np.all(a["Pi"]) and np.all(a["nu"] == 1.0)
        assert np.abs(a["W"][0].T @ a["W"][0] - np.eye(2)).max() > 1e-6
        assert not any(rep.content["metrics"].values())
    fin = [rep.content["metrics"] for _, rep in grid.sent if "metrics" in rep.content]
    assert not any("threshold" in m for m in fin)


def test_dp_with_secure_aggregation_noises_before_masking():
    # enough records that no gateway's noised m2 is clipped at 0 (the in-process fit
    # clips each gateway's; a secure sum can clip only the pooled one)
    cfgs = [{**c, "n-rows": 3000, "n-features": 6} for c in _gateways()]
    res, grid = run_local(cfgs, {**RC, "secure-aggregation": True})
    det, _ = _inprocess(cfgs)
    # the same noise, summed by SecAgg+ (quantisation ~1e-8 of each sum's scale)
    assert projector_distance(res.components.T, det.components_.T) <= 1e-5
    np.testing.assert_allclose(res.mean, det.mean_, rtol=1e-5, atol=1e-6)
    assert res.privacy["releases"] == 6
    assert res.privacy["epsilon"] == pytest.approx(det.dp_epsilon_, rel=1e-12)
    for _, reply in grid.sent:  # masked vectors only
        assert not {"local", "moments", "gram", "sketch"} & set(reply.content.array_records)


def _far(msg, reply):
    if "local" in reply.content.array_records:
        a = arrays_of(reply.content["local"])
        a["W"] = a["W"] * 50.0  # well formed, far beyond the clip and the noise
        reply.content["local"] = to_array_record(**a)
    return None


def test_a_proposal_beyond_its_noise_is_refused_naming_the_gateway():
    res, _ = run_local(_gateways(d=4), RC, faults=FaultPlan(tamper={2: _far}))
    assert "beyond its noise" in res.failed["2"] and "\n" not in res.failed["2"]
    assert res.history[0]["participants"] == ["0", "1", "3"]


def test_the_gateway_enforces_its_budget_and_its_epsilon(tmp_path):
    # a gateway taking private runs only refuses a plain run, and a larger epsilon
    cfgs = _gateways()
    strict = [{**c, "dp-max-epsilon": 2.0} for c in cfgs]
    with pytest.raises(RuntimeError) as exc:
        run_local(strict, {k: v for k, v in RC.items() if k not in DP})
    assert "takes private runs only" in str(exc.value)
    with pytest.raises(RuntimeError, match="exceeds this gateway's dp-max-epsilon"):
        run_local(strict, RC)
    res, _ = run_local(strict, {**RC, "dp-epsilon": 2.0})
    assert res.privacy["epsilon"] <= 2.0 and res.failed == {}


def test_the_gateway_refuses_a_release_beyond_the_budget():
    # the budget is the run's: a server that sends the first contact again continues
    # counting against it, and cannot set another one
    ctx = Context(run_id=1, node_id=1, node_config={"dp-seed": 3}, state=RecordDict(),
                  run_config={})  # fmt: skip
    q = {"epsilon": 4.0, "delta": 1e-5, "clip": 8.0, "releases": 2}
    X = np.ones((5, 3))
    for _ in range(2):
        noise = gateway_privacy.start(ctx, q)
        noise.moment_sums(X)
        gateway_privacy.save_noise(ctx, noise)
    noise = gateway_privacy.start(ctx, q)
    assert noise.released == 2
    with pytest.raises(ValueError, match="would be release 3; the run's budget accounts for 2"):
        noise.moment_sums(X)
    for other in ({**q, "releases": 50}, None):
        with pytest.raises(ValueError, match="another \\(or none\\) is refused"):
            gateway_privacy.start(ctx, other)
    fields = gateway_privacy.private_model_fields(ctx)
    assert fields["dp_epsilon_"] == pytest.approx(epsilon_spent(noise.z, 2, 1e-5))
    assert math.isfinite(fields["dp_epsilon_"]) and fields["dp_delta_"] == 1e-5


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ({"n-components": "auto"}, "integer n_components"),
        ({"tol": 1e-4}, "needs tol=0"),
        ({"aggregation": "median"}, "aggregation='median'"),
    ],
)
def test_refused_combinations(extra, match):
    with pytest.raises(ValueError, match=match) as exc:
        run_local(_gateways(), {**RC, **extra})
    assert "\n" not in str(exc.value)


def test_reference_and_raw_tables_are_refused(tmp_path):
    cfgs = _gateways()
    ref = tmp_path / "ref.csv"
    ref.write_text("a\n1\n")
    cfgs[1]["reference-path"] = str(ref)
    with pytest.raises(RuntimeError, match="gateways 1 hold a trusted reference") as exc:
        run_local(cfgs, RC)
    assert "\n" not in str(exc.value)
    rng = np.random.default_rng(0)
    tables = []
    for i in range(3):
        path = tmp_path / f"g{i}.csv"
        rows = ["bytes,dur"] + [f"{rng.integers(1, 999)},{rng.random():.3f}" for _ in range(30)]
        path.write_text("\n".join(rows) + "\n")
        tables.append({"data-path": str(path), "label": f"g{i}"})
    with pytest.raises(RuntimeError, match="column summaries are not noised"):
        run_local(tables, {**RC, "features": "auto"})

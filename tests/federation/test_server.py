"""The server step and what it accepts: malformed and non-finite payloads never reach it."""

from __future__ import annotations

import numpy as np
import pytest

from fedep.core.fedep import RoundReport, aggregate_consensus
from fedep.federation.server import merge_reports, server_round, validate_report

pytest.importorskip("flwr")

from fedep.flower import FaultPlan, run_local  # noqa: E402

N, R = 6, 2


def _report(k=2, seed=0, **over):
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(k, N, R))
    keys = ("fit", "l1", "l21", "projection", "lam_terms", "data_residual", "manpg_iter")
    m = {key: rng.random(k) for key in keys}
    m.update(ssn_iter=np.zeros(k), x_norm2=np.ones(k), grad_scale=np.ones(k))
    rep = RoundReport(W=W, Pi=0.1 * rng.normal(size=W.shape), nu=rng.random(k) + 0.5, metrics=m)
    for k_, v in over.items():
        setattr(rep, k_, v)
    return rep


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("W", np.zeros((2, N, R + 1)), "W has shape"),
        ("W", np.zeros((N, R)), "W has shape"),
        ("Pi", np.full((2, N, R), np.nan), "Pi holds NaN"),
        ("W", np.full((2, N, R), np.inf), "W holds NaN or inf"),
        ("nu", np.array([1.0, -1.0]), "nu must be finite and positive"),
        ("nu", np.array([1.0, np.nan]), "nu must be finite and positive"),
    ],
)
def test_validate_report_rejects(field, value, match):
    with pytest.raises(ValueError, match=match):
        validate_report(_report(**{field: value}), N, R)


def test_server_round_is_the_exact_v_minimiser_and_merge_is_concatenation():
    a, b = _report(2, 1), _report(3, 2)
    rep = merge_reports([a, b])
    assert rep.W.shape == (5, N, R) and rep.metrics["fit"].shape == (5,)
    V, rec = server_round("fedep", rep, np.zeros((N, R)))
    np.testing.assert_allclose(V, aggregate_consensus(rep.W, rep.Pi, rep.nu))
    # The V-step minimises sum_i <Pi_i, W_i - V> + nu_i/2 ||W_i - V||^2: zero gradient.
    grad = -rep.Pi.sum(0) - np.tensordot(rep.nu, rep.W - V, axes=1)
    np.testing.assert_allclose(grad, 0.0, atol=1e-12)
    assert rec["n_clients"] == 5
    np.testing.assert_allclose(rec["objective"], np.sum(rep.metrics["fit"] + rep.metrics["l1"]
                               + rep.metrics["l21"]))  # fmt: skip
    # FedPG: the reports' nu are its server weights (N_i, or ones for the plain mean).
    Vpg, _ = server_round("fedpg", rep, np.zeros((N, R)))
    np.testing.assert_allclose(Vpg, np.tensordot(rep.nu / rep.nu.sum(), rep.W, axes=1))
    rep.nu = np.ones(5)
    Vpg, _ = server_round("fedpg", rep, np.zeros((N, R)))
    np.testing.assert_array_equal(Vpg, rep.W.mean(0))


@pytest.fixture(autouse=True)
def _flower_env(monkeypatch, tmp_path):
    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "flwr-home"))


@pytest.mark.parametrize(
    "kind, why", [("nan", "holds NaN"), ("shape", "has shape"), ("missing", "invalid reply")]
)
def test_malformed_payload_is_dropped_named_and_the_run_goes_on(kind, why):
    cfgs = [{"partition-id": i, "synthetic-seed": 3} for i in range(3)]
    rc = {"n-components": 3, "n-rounds": 3, "tol": 0.0, "random-state": 0, "max-misses": 5}
    res, _ = run_local(cfgs, rc, faults=FaultPlan(corrupt={1: (2, kind)}))
    assert res.n_rounds == 3
    assert res.history[1]["participants"] == ["0", "2"]
    assert res.history[1]["n_clients"] == 2
    assert why in res.history[1]["failed"]["1"] and "invalid reply" in res.failed["1"]
    assert res.history[2]["participants"] == ["0", "1", "2"]
    assert np.isfinite(res.V).all()

"""Hostile gateways: one gateway of several tampers with its replies (FaultPlan.tamper)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("flwr")


@pytest.fixture(autouse=True)
def _flower_env(monkeypatch, tmp_path):
    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "flwr-home"))


@pytest.fixture
def numeric_gateways():
    """Five gateways holding numeric records (labels "0" .. "4")."""
    return [{"partition-id": i, "synthetic-seed": 3} for i in range(5)]


@pytest.fixture
def table_gateways(tmp_path):
    """Four gateways holding CSV tables (labels "t0" .. "t3"): numbers and a category."""
    cfgs = []
    for i in range(4):
        rng = np.random.default_rng(i)
        n = 120 + 10 * i
        df = pd.DataFrame(
            {
                "bytes": rng.lognormal(6.0, 1.5, n).round(1),
                "packets": rng.poisson(20, n) + 1,
                "duration": rng.exponential(2.0, n).round(4),
                "proto": rng.choice(["tcp", "udp", "icmp"], n, p=[0.6, 0.3, 0.1]),
            }
        )
        path = tmp_path / f"t{i}.csv"
        df.to_csv(path, index=False)
        cfgs.append({"data-path": str(path), "client-label": f"t{i}"})
    return cfgs

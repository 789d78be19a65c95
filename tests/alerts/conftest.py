"""Fixtures of the alert tests: a small Zeek-like table and models fitted on it, saved
and loaded (so that they carry a model file's digest)."""

from __future__ import annotations

import types

import numpy as np
import pandas as pd
import pytest

import fedep
from fedep.data import make_federated_data

N_FEATURES = 5
FEATURES = [f"f{j}" for j in range(N_FEATURES)]


def conn_frame(X: np.ndarray, gateways: np.ndarray, start: int = 0) -> pd.DataFrame:
    """Records with Zeek conn.log identifying fields around the numeric features ``X``."""
    n = len(X)
    i = np.arange(start, start + n)
    df = pd.DataFrame(X, columns=FEATURES)
    df.insert(0, "ts", 1.7e9 + i * 0.25)
    df.insert(1, "uid", [f"C{k:06d}" for k in i])
    df.insert(2, "id.orig_h", [f"10.0.{k % 3}.{k % 11}" for k in i])
    df.insert(3, "id.orig_p", (1024 + i * 7) % 65000)
    df.insert(4, "id.resp_h", "192.168.1.1")
    df.insert(5, "id.resp_p", np.where(i % 2 == 0, 23, 80))
    df.insert(6, "proto", "tcp")
    df.insert(7, "service", np.where(i % 2 == 0, None, "http"))
    df["host"] = gateways
    return df


@pytest.fixture(scope="session")
def fed_data():
    fed = make_federated_data(
        n_clients=2, n_features=N_FEATURES, n_components=2, n_samples=120,
        corruption_rate=0.0, n_test_per_client=60, anomaly_rate=0.2, anomaly_scale=3.0,
        random_state=3,
    )  # fmt: skip
    gw = np.array(["gw0", "gw1"])
    train = conn_frame(fed.X_train, gw[fed.groups_train])
    test = conn_frame(fed.X_test, gw[fed.groups_test], start=10_000)
    return types.SimpleNamespace(train=train, test=test, y_test=fed.y_test)


def _fit_save_load(tmp_path_factory, X: pd.DataFrame, groups, name: str, **params):
    det = fedep.FedEP(n_components=2, n_rounds=60, tol=1e-3, random_state=0, **params)
    det.fit(X, groups=groups)
    path = tmp_path_factory.mktemp("models") / f"{name}.fedep"
    fedep.save(det, path)
    return types.SimpleNamespace(det=fedep.load(path), path=path)


@pytest.fixture(scope="session")
def numeric_model(tmp_path_factory, fed_data):
    """A model of the numeric features as they are (no pipeline): scores recomputable
    with NumPy from its arrays alone."""
    groups = fed_data.train["host"].to_numpy()
    return _fit_save_load(
        tmp_path_factory, fed_data.train[FEATURES], groups, "numeric", features="numeric"
    )


@pytest.fixture(scope="session")
def pipeline_model(tmp_path_factory, fed_data):
    """A model with the feature pipeline (reads columns by name, ignores the others)."""
    groups = fed_data.train["host"].to_numpy()
    return _fit_save_load(tmp_path_factory, fed_data.train.drop(columns="host"), groups, "pipe")

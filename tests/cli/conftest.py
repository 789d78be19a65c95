"""Fixtures of the command-line tests: small synthetic CSV files and a fitted model."""

from __future__ import annotations

import types

import numpy as np
import pandas as pd
import pytest

from fedep.cli import main
from fedep.data import make_federated_data

from ._helpers import N_FEATURES, frame


@pytest.fixture(scope="session")
def files(tmp_path_factory):
    """Train/test CSVs (clients in column ``host``) and a model fitted by the CLI."""
    d = tmp_path_factory.mktemp("cli")
    fed = make_federated_data(
        n_clients=3,
        n_features=N_FEATURES,
        n_components=2,
        n_samples=50,
        corruption_rate=0.0,
        n_test_per_client=20,
        anomaly_rate=0.3,
        anomaly_scale=3.0,
        random_state=1,
    )
    train = frame(fed.X_train, fed.groups_train, 0)
    # a few training attacks, dropped by the clean protocol
    att = frame(fed.X_test[fed.y_test == 1][:5], fed.groups_test[fed.y_test == 1][:5], 1)
    pd.concat([train, att]).to_csv(d / "train.csv", index=False)
    labels = np.where(
        fed.y_test == 1, np.where(np.arange(fed.y_test.size) % 2, "scan", "dos"), "normal"
    )
    frame(fed.X_test, fed.groups_test, labels).to_csv(d / "test.csv", index=False)
    model = d / "model.fedep"
    rc = main(
        [
            "fit", "--train", str(d / "train.csv"), "--label-column", "label",
            "--client-column", "host", "--n-components", "2", "--n-rounds", "15",
            "--random-state", "0", "--quiet", "--out", str(model),
        ]
    )  # fmt: skip
    assert rc == 0
    return types.SimpleNamespace(dir=d, train=d / "train.csv", test=d / "test.csv", model=model)

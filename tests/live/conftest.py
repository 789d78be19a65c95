"""Fixtures of the watcher's tests: a small model fitted on a synthetic Zeek conn.log."""

from __future__ import annotations

import pytest

from _zeek import flows, write_zeek
from fedep.cli import main


def fit_model(directory, *, seed: int = 10, name: str = "model.fedep", extra=()) -> object:
    """A small model fitted (``fedep fit``, PCA) on a synthetic Zeek conn.log written here."""
    train = directory / f"train{seed}.conn.log"
    write_zeek(flows(2000, seed=seed), train)
    out = directory / name
    rc = main(
        [
            "fit",
            "--train",
            str(train),
            "--method",
            "pca",
            "--n-components",
            "3",
            "--quiet",
            "--out",
            str(out),
            *extra,
        ]
    )
    assert rc == 0
    return out


@pytest.fixture(scope="session")
def model(tmp_path_factory):
    return fit_model(tmp_path_factory.mktemp("watch-model"))

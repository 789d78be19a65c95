"""Until ``fedep.alerts`` is on this branch, its tests' stand-in takes its place."""

from __future__ import annotations

import sys

try:
    import fedep.alerts  # noqa: F401
except ImportError:  # pragma: no cover - until the alerts unit lands
    from . import _alerts_standin

    sys.modules["fedep.alerts"] = _alerts_standin


import pytest  # noqa: E402

from _zeek import flows, write_zeek  # noqa: E402
from fedep.cli import main  # noqa: E402


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

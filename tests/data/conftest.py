"""Fixtures for the data tests: the real data directory and cached real datasets.

Real-data tests are marked ``realdata``. When the data directory (see
:func:`fedep.data.resolve_data_dir`) lacks the official files they are skipped -- unless
the environment variable ``CI`` is set, in which case they fail: on CI the data must be
there.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

import pytest

from fedep.data import Dataset, load_dataset, resolve_data_dir
from fedep.data.files import KNOWN_FILES


def _missing_files(root: Path) -> list[str]:
    return [
        rel for rel, (_, required) in KNOWN_FILES.items() if required and not (root / rel).is_file()
    ]


def require_real_data() -> Path:
    """Return the data directory, or skip (fail when ``CI`` is set) if files are missing."""
    root = resolve_data_dir()
    missing = _missing_files(root)
    if missing:
        msg = f"real datasets missing in {root}: {missing} (set FEDEP_DATA_DIR)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return root


@cache
def _load(name: str, feature_set: str, variant: str | None = None) -> Dataset:
    return load_dataset(name, resolve_data_dir(), feature_set=feature_set, variant=variant)


@pytest.fixture(scope="session")
def real_data_dir() -> Path:
    """The data directory holding the official files."""
    return require_real_data()


@pytest.fixture(scope="session")
def real_dataset(real_data_dir):
    """``real_dataset(name, feature_set="paper", variant=None)``, loaded once per session."""

    def get(name: str, feature_set: str = "paper", variant: str | None = None) -> Dataset:
        return _load(name, feature_set, variant)

    return get

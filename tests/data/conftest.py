"""Fixtures for the data tests: the real data directory and cached real datasets.

The skip-or-fail rule for real data lives in ``tests/conftest.py`` (``real_data_dir``).
"""

from __future__ import annotations

from functools import cache

import pytest

from fedep.data import Dataset, load_dataset, resolve_data_dir


@cache
def _load(name: str, feature_set: str, variant: str | None = None) -> Dataset:
    return load_dataset(name, resolve_data_dir(), feature_set=feature_set, variant=variant)


@pytest.fixture(scope="session")
def real_dataset(real_data_dir):
    """``real_dataset(name, feature_set="paper", variant=None)``, loaded once per session."""

    def get(name: str, feature_set: str = "paper", variant: str | None = None) -> Dataset:
        return _load(name, feature_set, variant)

    return get

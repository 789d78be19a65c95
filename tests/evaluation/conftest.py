"""Fixtures for the evaluation tests.

Real-data tests are marked ``realdata``: skipped when the data directory lacks the
official files, FAILED instead when the environment variable ``CI`` is set (same rule
as ``tests/data/conftest.py``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fedep.data import resolve_data_dir
from fedep.data.files import KNOWN_FILES


def _missing_files(root: Path) -> list[str]:
    return [
        rel for rel, (_, required) in KNOWN_FILES.items() if required and not (root / rel).is_file()
    ]


@pytest.fixture(scope="session")
def real_data_dir() -> Path:
    """The data directory holding the official files (skip, or fail on CI, if absent)."""
    root = resolve_data_dir()
    missing = _missing_files(root)
    if missing:
        msg = f"real datasets missing in {root}: {missing} (set FEDEP_DATA_DIR)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return root

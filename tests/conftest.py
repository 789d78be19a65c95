"""Shared fixtures: the real-data rule for every test package, and hypothesis' profile.

Real-data tests are marked ``realdata``. When the data directory (see
:func:`fedep.data.resolve_data_dir`) lacks the official files they are skipped, unless
the environment variable ``CI`` is set: then they fail, because on CI the data must be
there.

With ``CI`` set, hypothesis runs derandomised (the same examples on every run), so a
submission's check does not depend on the draw; run without ``CI`` to explore new
examples.

The suite runs fedep's compiled kernels, compiling them in the test process when
numba's cache is cold (``FEDEP_KERNELS=numba``, inherited by the commands tests start):
``"auto"`` would run NumPy and start a background compile in every test process. Tests
of the ``"auto"`` choice set the variable themselves (tests/core/test_kernel_dispatch.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

from fedep.data import resolve_data_dir
from fedep.data.dataset_files import KNOWN_FILES

os.environ.setdefault("FEDEP_KERNELS", "numba")

settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


def require_real_data() -> Path:
    """Return the data directory, or skip (fail when ``CI`` is set) if files are missing."""
    root = resolve_data_dir()
    missing = [r for r, (_, req) in KNOWN_FILES.items() if req and not (root / r).is_file()]
    if missing:
        msg = f"real datasets missing in {root}: {missing} (set FEDEP_DATA_DIR)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return root


@pytest.fixture(scope="session")
def real_data_dir() -> Path:
    """The data directory holding the official files."""
    return require_real_data()

"""What the ``fedep`` command sets for its own process: NumPy's huge-page hint off
(docs/performance.md, "Large files"), unless the environment says otherwise."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import fedep
from fedep.cli import main

SRC = str(Path(fedep.__file__).resolve().parents[1])

CHILD = """
import os, sys
from fedep.cli import main
rc = main(["--version"])
import numpy
print("RESULT", os.environ.get("NUMPY_MADVISE_HUGEPAGE"))
"""


def _child(**env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    res = subprocess.run(
        [sys.executable, "-c", CHILD],
        env={**base, "PYTHONPATH": SRC, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return [ln for ln in res.stdout.splitlines() if ln.startswith("RESULT")][-1].split()[1]


def test_the_command_turns_the_huge_page_hint_off_before_numpy_loads():
    assert _child() == "0"


def test_the_users_setting_wins():
    assert _child(NUMPY_MADVISE_HUGEPAGE="1") == "1"


def test_main_called_from_python_leaves_the_environment_alone(monkeypatch):
    # NumPy is loaded here: the setting could not take effect, so it is not made
    monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE", raising=False)
    assert main(["--version"]) == 0
    assert "NUMPY_MADVISE_HUGEPAGE" not in os.environ

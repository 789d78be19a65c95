"""What ``fedep score`` loads: no Flower, no evaluation, no scikit-learn models, and on
a small file under ``kernel="auto"`` no compiled kernel (numba's start costs more than
the kernels save there; docs/performance.md). Checked in a child process's
``sys.modules``, not timed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import fedep
from fedep.cli import main

SRC = str(Path(fedep.__file__).resolve().parents[1])

# Modules the scoring command has no use for.
NOT_FOR_SCORING = (
    "flwr",
    "grpc",
    "fedep.flower",
    "fedep.evaluation",
    "fedep.cli.fit",
    "fedep.cli.federate",
    "sklearn.decomposition",
    "sklearn.metrics",
    "sklearn.linear_model",
    "sklearn.model_selection",
)

CHILD = """
import json, sys
from fedep.core._kernels import _dispatch
started = []
_dispatch.compile_in_background = lambda kernel, *a, **k: started.append(repr(kernel))
from fedep.cli import main
rc = main(sys.argv[1:])
from fedep.data import _lines, _tails
kernels = {"writer": _tails._write_kernel, "top_k": _tails._top_k_kernel,
           "field_count": _lines._count_kernel}
print("RESULT", json.dumps({
    "rc": rc,
    "loaded": sorted(m for m in NOT_FOR_SCORING if m in sys.modules),
    "compiled": sorted(k for k, f in kernels.items() if getattr(f, "overloads", None)),
    "background": started,
}))
"""


def test_score_loads_what_scoring_needs_and_no_kernel_for_a_small_file(files, tmp_path):
    argv = ["score", "--model", str(files.model), "--input", str(files.test),
            "--client-column", "host", "--top-features", "2", "--quiet"]  # fmt: skip
    # the suite's compiled kernels (FEDEP_KERNELS=numba): the reference output
    assert main([*argv, "--output", str(tmp_path / "compiled.csv")]) == 0
    env = dict(os.environ, FEDEP_KERNELS="auto", PYTHONPATH=SRC)
    code = f"NOT_FOR_SCORING = {NOT_FOR_SCORING!r}\n{CHILD}"
    res = subprocess.run(
        [sys.executable, "-c", code, *argv, "--output", str(tmp_path / "auto.csv")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    line = next((ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line is not None, res.stdout + res.stderr
    out = json.loads(line[len("RESULT ") :])
    assert out["rc"] == 0, res.stderr
    assert out["loaded"] == [], out
    # 60 rows: the NumPy references write the lines, numba's kernels stay unloaded, and
    # nothing is compiled behind the command
    assert out["compiled"] == [] and out["background"] == [], out
    assert (tmp_path / "auto.csv").read_bytes() == (tmp_path / "compiled.csv").read_bytes()

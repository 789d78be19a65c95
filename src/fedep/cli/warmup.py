"""``fedep warmup``: compile the numerical kernels now instead of in the first fit."""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from fedep.cli import main
from fedep.cli._common import PROG, UsageError, command_parser
from fedep.core._kernels._dispatch import ENV
from fedep.core.warmup import warm_up


def register(sub) -> None:
    p = command_parser(
        sub,
        "warmup",
        description="Compile fedep's numerical kernels (numba) and keep them in numba's "
        "on-disk cache, so that the first fit and the first score do not pay the "
        "compilation (about 35-55 CPU-seconds, once per machine and fedep version). "
        "Run it after installing, e.g. when building a container image. Without it, a "
        "fit on a cold cache runs the NumPy kernels and starts this command in the "
        "background (docs/performance.md). The cache is NUMBA_CACHE_DIR when set, else "
        "beside the installed package, else ~/.cache/numba.",
    )
    p.add_argument("--quiet", action="store_true", help="print nothing")
    p.set_defaults(func=cmd_warmup)


@contextlib.contextmanager
def _compiling_kernels():
    """``FEDEP_KERNELS=numba`` for the block: the tiny run's per-row kernels compile
    (under ``auto`` a run this small stays on NumPy, and a cold kernel would only start
    a background compile)."""
    before = os.environ.get(ENV)
    os.environ[ENV] = "numba"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = before


def _fit_and_score() -> None:
    """A tiny ``fedep fit`` and ``fedep score`` in a temporary directory: the feature
    pipeline and the scoring command's compiled line writer take the paths of a real
    run (the solvers' kernels are :func:`~fedep.core.warmup.warm_up`'s).

    The model is signed with a throw-away secret and verified with it, so neither a
    signing setting in the environment nor an unsigned-model warning reaches the user;
    what the two commands print is kept, and shown only if one of them fails.

    Raises
    ------
    UsageError
        The fit or the score failed (its one-line error).
    """
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 3)) @ rng.standard_normal((3, 6))
    with tempfile.TemporaryDirectory(prefix="fedep-warmup-") as tmp:
        data = Path(tmp) / "records.csv"
        rows = [",".join(f"{v:.6g}" for v in x) + f",g{i % 3}" for i, x in enumerate(X)]
        data.write_text("f0,f1,f2,f3,f4,f5,gateway\n" + "\n".join(rows) + "\n")
        secret = Path(tmp) / "secret"
        secret.write_text(os.urandom(16).hex())
        key = f"@{secret}"
        model, scored = str(Path(tmp) / "m.fedep"), str(Path(tmp) / "scored.csv")
        fit = ["fit", "--train", str(data), "--client-column", "gateway", "--n-rounds", "2"]
        score = ["score", "--model", model, "--input", str(data), "--output", scored]
        printed = io.StringIO()
        with (
            warnings.catch_warnings(),
            contextlib.redirect_stdout(printed),
            contextlib.redirect_stderr(printed),
            _compiling_kernels(),
        ):
            warnings.simplefilter("ignore")
            rc = main([*fit, "--out", model, "--sign-key", key, "--quiet"])
            if rc == 0:
                rc = main([*score, "--client-column", "gateway", "--verify-key", key, "--quiet"])
        if rc != 0:
            lines = printed.getvalue().strip().splitlines() or ["(no message)"]
            last = lines[-1].removeprefix(f"{PROG}: error: ")
            raise UsageError(f"the warm-up fit and score failed: {last}")


def cmd_warmup(args) -> int:
    seconds = warm_up()
    if not seconds:
        if not args.quiet:
            print("numba is not installed: fedep runs its NumPy kernels, nothing to compile")
        return 0
    t0 = time.perf_counter()
    _fit_and_score()
    seconds["fit and score"] = time.perf_counter() - t0
    if not args.quiet:
        done = ", ".join(f"{name} {s:.1f} s" for name, s in seconds.items())
        print(f"kernels ready ({done})")
    return 0

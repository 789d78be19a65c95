"""Compile every numba kernel a fit uses, ahead of the first fit.

numba compiles a kernel on its first call and keeps the machine code in its on-disk
cache (``cache=True``): the next process loads it in milliseconds. The first fit on a
fresh install therefore pays the compilation (about 35-50 CPU-seconds, most of it the
ManPG W-step); :func:`warm_up` pays it earlier — at image build, in an installer, or by
``fedep warmup`` — on a tiny federation that takes the same code paths, so the kernels
compile with the very signatures a fit calls (one each).

Where the cache lives is numba's rule: ``NUMBA_CACHE_DIR`` when set, else a
``__pycache__`` beside the module, else (a read-only install) numba's per-user cache
directory (``~/.cache/numba`` on Linux). The cache is per machine (it records the CPU
it was compiled for and the source files' timestamps), so it cannot ship in a wheel.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from fedep.core._kernels import HAVE_NUMBA
from fedep.core.fedep import FedEPCohort, FedEPSettings
from fedep.core.fedpg import FedPGCohort, FedPGSettings

__all__ = ["warm_up"]


def _blocks(rng: np.random.Generator) -> tuple[list[np.ndarray], np.ndarray]:
    blocks = [rng.standard_normal((40, 6)) for _ in range(3)]
    V0 = np.linalg.qr(rng.standard_normal((6, 2)))[0]
    return blocks, V0


def warm_up() -> dict[str, float]:
    """Compile (or load from numba's cache) the FedPG and FedEP kernels.

    Returns
    -------
    dict
        Seconds spent per method (``{"fedpg": s, "fedep": s}``); empty without numba.
    """
    if not HAVE_NUMBA:
        return {}
    rng = np.random.default_rng(0)
    blocks, V0 = _blocks(rng)
    seconds = {}
    # FedPG first: its one small kernel is cached within seconds, FedEP's W-step
    # takes most of the compilation.
    t0 = time.perf_counter()
    for manifold in ("stiefel", "grassmann"):
        fedpg = FedPGSettings(
            lr=None,
            rho=0.01,
            local_epochs=2,
            consensus_weights="uniform",
            penalty_scaling="paper",
            manifold=manifold,
            kernel="numba",
        )
        FedPGCohort(blocks, V0, fedpg).local_round(V0)
    seconds["fedpg"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    fedep = FedEPSettings(
        alpha=1.0,
        mu=1.0,
        use_sparse=True,
        inner_max_iter=2,
        penalty_scaling="relative",
        consensus_weights="auto",
        kernel="numba",
    )
    FedEPCohort(blocks, V0, 0.01, 1.0, fedep).local_round(V0)
    # clients of many rows keep no dual array: their per-element kernels (two rounds:
    # the first starts from A = 0, the second recomputes A)
    large = FedEPCohort(blocks, V0, 0.01, 1.0, replace(fedep, dual_rows=1))
    for _ in range(2):
        large.local_round(V0)
    seconds["fedep"] = time.perf_counter() - t0
    return seconds

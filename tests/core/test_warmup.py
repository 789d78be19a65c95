"""`fedep.core.warmup.warm_up` compiles what a fit calls, with the signatures it calls."""

from __future__ import annotations

import numpy as np
import pytest

from fedep import FedEP, FedPG
from fedep.core import _kernels
from fedep.core.warmup import warm_up

KERNELS = (
    "fused_data_step",
    "s_step_rows",
    "u_step_rows",
    "dual_step",
    "gram_terms",
    "manpg_clients",
    "fedpg_clients",
)


@pytest.mark.skipif(not _kernels.HAVE_NUMBA, reason="numba not installed")
def test_a_fit_after_warm_up_compiles_nothing_new():
    seconds = warm_up()
    assert set(seconds) == {"fedep", "fedpg"}
    compiled = {name: set(getattr(_kernels, name).signatures) for name in KERNELS}
    assert all(compiled.values()), compiled
    rng = np.random.default_rng(1)
    X = rng.standard_normal((600, 5)) @ rng.standard_normal((5, 9))
    clients = np.repeat(np.arange(3), 200)
    FedEP(n_components=2, n_rounds=3).fit(X, groups=clients)
    # a client of many rows: its duals are recomputed (fedep.core.large_clients)
    FedEP(n_components=2, n_rounds=3).fit(rng.standard_normal((5000, 9)))
    FedPG(n_components=2, n_rounds=3).fit(X, groups=clients)
    after = {name: set(getattr(_kernels, name).signatures) for name in KERNELS}
    assert after == compiled

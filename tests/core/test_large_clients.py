"""The data step of a client with many records: blocks on threads, against NumPy."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from fedep.core import _kernels, large_clients
from fedep.core.fedep import FedEPCohort, FedEPSettings
from fedep.core.large_clients import data_step_rows, step_threads
from fedep.core.stiefel import random_stiefel
from fedep.federation.server import server_round

_KERNELS = (_kernels.pick("numba", "s_step_rows"), _kernels.pick("numba", "u_step_rows"))
needs_numba = pytest.mark.skipif(_KERNELS[0] is None, reason="numba not installed")


def _reference(X, U, B, scale, W, alpha, mu):
    """The step written from its formulas (dense NumPy, no chunks)."""
    A = scale * (U - U @ B @ B.T)
    M = X - U + A
    S = M - np.clip(M, -alpha / mu, alpha / mu)
    Z = X - S
    Y = Z + A
    A_new = 2.0 / (mu + 2.0) * (Y - Y @ W @ W.T)
    U_new = Y - A_new
    R = A_new - A
    fit = np.sum((Z - Z @ W @ W.T) ** 2)
    r2 = np.sum(R * R)
    sums = [fit, alpha * np.abs(S).sum(), mu * np.sum(A_new * R) + 0.5 * mu * r2, r2]
    return U_new, U_new.T @ U_new, np.array(sums)


def _inputs(rows, n=9, r=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((rows, n)) @ rng.standard_normal((n, n))
    X[::97, 2] += 40.0  # outliers: the S-step is not all zero
    U = X + 0.1 * rng.standard_normal(X.shape)
    return X, U, random_stiefel(n, r, rng), random_stiefel(n, r, rng)


@needs_numba
@pytest.mark.parametrize("scale", [0.0, 2.0 / 1.3])
def test_blocks_on_threads_match_the_formulas_and_each_other(scale):
    # 64-row chunks, 4 per block: 5,000 rows are 20 blocks, the last one short.
    X, U0, B, W = _inputs(5000)
    U_ref, G_ref, sums_ref = _reference(X, U0, B, scale, W, 0.9, 1.3)
    runs = []
    for threads in (1, 2, 3):
        U, G = U0.copy(), np.empty((9, 9))
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(large_clients, "BLOCK_CHUNKS", 4)
            sums = data_step_rows(X, U, B, scale, W, 0.9, 1.3, G, *_KERNELS, 64, threads)
        runs.append((U, G, sums))
        assert np.allclose(U, U_ref, rtol=1e-12, atol=1e-12)
        assert np.allclose(G, G_ref, rtol=1e-12)
        assert np.allclose(sums, sums_ref, rtol=1e-10)
    for U, G, sums in runs[1:]:  # the same blocks added in the same order: bit for bit
        assert np.array_equal(U, runs[0][0])
        assert np.array_equal(G, runs[0][1])
        assert np.array_equal(sums, runs[0][2])


def test_step_threads_follow_the_thread_rule(monkeypatch):
    block = large_clients.BLOCK_CHUNKS * large_clients.CHUNK_ROWS
    monkeypatch.setenv("FEDEP_THREADS", "2")
    assert step_threads(2 * block - 1, 34, 10) == 1  # one block and a bit: one thread
    monkeypatch.setattr(large_clients, "choose_threads", lambda flops: 2)
    assert step_threads(2 * block, 34, 10) == 2
    monkeypatch.setattr(large_clients, "choose_threads", lambda flops: 1)  # a busy machine
    assert step_threads(10**7, 34, 10) == 1


@needs_numba
def test_cohort_rounds_do_not_depend_on_the_threads(monkeypatch):
    # A gateway of 6,000 rows in blocks of 2 chunks (2,048 rows): three blocks.
    rng = np.random.default_rng(3)
    blocks = [rng.standard_normal((6000, 8)) @ rng.standard_normal((8, 8)), rng.random((50, 8))]
    V0 = random_stiefel(8, 3, rng)
    monkeypatch.setattr(large_clients, "BLOCK_CHUNKS", 2)
    pools = []  # the worker counts of the pools the data steps started

    class Pool(ThreadPoolExecutor):
        def __init__(self, workers):
            pools.append(workers)
            super().__init__(workers)

    monkeypatch.setattr(large_clients, "ThreadPoolExecutor", Pool)
    runs = []
    for threads in (1, 2):
        monkeypatch.setattr(large_clients, "choose_threads", lambda flops, t=threads: t)
        s = FedEPSettings(
            alpha=0.8, mu=1.5, use_sparse=True, inner_max_iter=2, penalty_scaling="relative",
            consensus_weights="auto", kernel="numba", dual_rows=4096, max_group_rows=1,
        )  # fmt: skip
        coh = FedEPCohort(blocks, V0, 1e-3, 1.0, s)
        assert [g.A is None for g in coh.groups] == [True, False]
        V, metrics = V0, []
        for _ in range(4):
            rep = coh.local_round(V)
            metrics.append(rep.metrics)
            V, _ = server_round("fedep", rep, V)
        runs.append((V, coh.W.copy(), coh.G.copy(), metrics))
    assert pools == [2] * 4  # one pool a round with two threads, none with one
    (V1, W1, G1, m1), (V2, W2, G2, m2) = runs
    assert np.array_equal(V1, V2) and np.array_equal(W1, W2) and np.array_equal(G1, G2)
    for a, b in zip(m1, m2, strict=True):
        for key in ("fit", "l1", "lam_terms", "data_residual"):
            assert np.array_equal(a[key], b[key]), key

"""Client thresholds reuse the training scores where a client's basis is the global one
(pooled PCA, one client): the same numbers as scoring each client's block again."""

from __future__ import annotations

import numpy as np
import pytest

from fedep import FedEP, PooledPCA
from fedep.core.scoring import residual_energy
from fedep.detectors.blocks import client_thresholds, training_scores


@pytest.mark.parametrize(
    "make", [lambda: PooledPCA(n_components=3), lambda: FedEP(n_components=3, n_rounds=3)]
)
@pytest.mark.parametrize("k", [1, 3])
def test_client_thresholds_equal_rescoring_each_block(make, k):
    rng = np.random.default_rng(k)
    X = rng.standard_normal((600, 8)) @ rng.standard_normal((8, 8))
    groups = np.repeat(np.arange(k), 600 // k)
    est = make().fit(X, groups=groups)
    Z = (X - est.mean_) / est.scale_
    level = 1.0 - est.contamination_
    want = [
        np.quantile(residual_energy(Z[groups == g], est.client_components_[i].T), level)
        for i, g in enumerate(est.clients_)
    ]
    np.testing.assert_allclose(est.client_thresholds_, want, rtol=1e-10)


def test_reused_scores_only_for_a_basis_equal_to_the_global_one():
    rng = np.random.default_rng(0)
    blocks = [rng.standard_normal((50, 4)) for _ in range(2)]
    V = np.linalg.qr(rng.standard_normal((4, 2)))[0].T  # (2, 4), orthonormal rows
    W = np.linalg.qr(rng.standard_normal((4, 2)))[0].T
    fake = [np.full(50, 7.0), np.full(50, 9.0)]  # "global scores", recognisable
    got = client_thresholds(blocks, np.stack([V, W]), [0.5, 0.5], fake, V)
    assert got[0] == 7.0  # client 0's basis is V: its global scores are reused
    assert got[1] == np.quantile(residual_energy(blocks[1], W.T), 0.5)  # rescored


def test_training_scores_are_each_basis_scored_alone():
    # one pass over a block for the global and the client's basis: the very numbers of
    # scoring it under each alone; a client with the global basis gets one array
    rng = np.random.default_rng(1)
    blocks = [rng.standard_normal((70, 5)) for _ in range(2)]
    V = np.linalg.qr(rng.standard_normal((5, 2)))[0].T
    W = np.linalg.qr(rng.standard_normal((5, 2)))[0].T
    glob, own = training_scores(blocks, V, np.stack([V, W]))
    for b, g in zip(blocks, glob, strict=True):
        assert np.array_equal(g, residual_energy(b, V.T))
    assert np.shares_memory(own[0], glob[0])  # scored once
    assert np.array_equal(own[1], residual_energy(blocks[1], W.T))

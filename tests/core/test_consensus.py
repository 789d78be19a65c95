"""The exact consensus step (fedep.core.consensus) against independent references."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize

from fedep.core.consensus import aligned, consensus_objective, consensus_v_step, pooled_gram
from fedep.core.fedep import gram_sketch
from fedep.core.stiefel import polar, projector_distance, random_stiefel


def _gram(seed: int, n: int = 8, N: int = 200) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, n)) * np.linspace(3.0, 0.5, n)
    return X.T @ X


def test_without_l21_it_is_the_top_eigenspace():
    G = _gram(0)
    V0 = random_stiefel(8, 3, np.random.default_rng(1))
    step = consensus_v_step(G, V0, 0.0)
    top = np.linalg.eigh(G)[1][:, ::-1][:, :3]
    assert projector_distance(step.V, top) < 1e-10
    assert step.value == pytest.approx(-np.linalg.eigvalsh(G)[::-1][:3].sum(), rel=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_with_l21_it_matches_a_general_solver_on_the_manifold(seed):
    # Independent reference: BFGS on V = polar(A) (an unconstrained parametrisation of
    # St(n, r)) from many starts; the MM step from the top eigenspace must reach the
    # best of them, and never rise above its start.
    G, r = _gram(seed), 3
    beta = 0.3 * np.linalg.eigvalsh(G)[-1]

    def f(a):
        return consensus_objective(G, polar(a.reshape(8, r)), beta)

    rng = np.random.default_rng(seed)
    best = min(
        minimize(f, rng.standard_normal(8 * r), method="BFGS", options={"gtol": 1e-10}).fun
        for _ in range(12)
    )
    V0 = np.linalg.eigh(G)[1][:, ::-1][:, :r]
    step = consensus_v_step(G, V0, beta, max_iter=500)
    assert step.value <= consensus_objective(G, V0, beta)
    assert step.value == pytest.approx(best, rel=1e-6)
    assert np.allclose(step.V.T @ step.V, np.eye(r), atol=1e-10)


def test_every_mm_step_lowers_the_objective():
    G, r = _gram(3), 4
    beta = 0.5 * np.linalg.eigvalsh(G)[-1]
    V = random_stiefel(8, r, np.random.default_rng(0))
    values = [consensus_objective(G, V, beta)]
    for _ in range(20):
        V = consensus_v_step(G, V, beta, max_iter=1).V
        values.append(consensus_objective(G, V, beta))
    assert all(b <= a + 1e-9 * abs(a) for a, b in zip(values, values[1:], strict=False))
    assert values[-1] < values[0]


def test_the_pooled_gram_of_full_sketches_is_the_sum_of_the_grams():
    rng = np.random.default_rng(4)
    blocks = [rng.standard_normal((m, 6)) for m in (30, 4, 50)]  # one of fewer rows than n
    grams = np.stack([b.T @ b for b in blocks])
    assert np.allclose(pooled_gram(gram_sketch(grams, 6)), grams.sum(0), atol=1e-9)


def test_aligned_keeps_the_span_and_is_closest():
    rng = np.random.default_rng(5)
    ref = random_stiefel(7, 3, rng)
    Q = np.linalg.qr(rng.standard_normal((3, 3)))[0]
    V = ref @ Q
    out = aligned(V, ref)
    assert projector_distance(out, V) < 1e-12
    assert np.allclose(out, ref, atol=1e-10)  # the same span: the rotation undone

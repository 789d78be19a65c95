"""Differential privacy: the accountant, the noise as calibrated, clipping, and DP-FedEP
(in-process): epsilon reported, inf = the plain fit, refusals."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

pytest.importorskip("dp_accounting")

from fedep import load, save  # noqa: E402
from fedep.core.fedep import RoundReport  # noqa: E402
from fedep.core.privacy import (  # noqa: E402
    UPDATE_CLIP,
    analyze_gauss,
    clip_norm,
    clip_rows,
    epsilon_spent,
    noise_multiplier_for,
)
from fedep.core.stiefel import polar, projector_distance  # noqa: E402
from fedep.detectors import FedEP  # noqa: E402
from fedep.federation.privacy import PrivateGateways, _PrivateRounds  # noqa: E402
from fedep.federation.server import REQUIRED_METRICS  # noqa: E402

DELTA = 1e-5


def _mironov(z: float, T: int, delta: float) -> float:
    """Mironov's (2017) RDP -> (eps, delta) conversion of T Gaussian mechanisms,
    optimised over real orders: an independent upper bound of the accountant's."""
    alphas = np.linspace(1.01, 500, 200000)
    return float(np.min(T * alphas / (2 * z**2) + math.log(1 / delta) / (alphas - 1)))


@pytest.mark.parametrize(("z", "T"), [(1.0, 1), (2.0, 10), (5.0, 50)])
def test_accountant_against_the_rdp_formula(z, T):
    eps = epsilon_spent(z, T, DELTA)
    bound = _mironov(z, T, DELTA)
    # the accountant's conversion is tighter than Mironov's, by a bounded margin
    assert 0.7 * bound <= eps <= bound * (1 + 1e-6)


def test_epsilon_monotone_and_calibration():
    zs = [0.5, 1.0, 2.0, 4.0]
    eps_z = [epsilon_spent(z, 10, DELTA) for z in zs]
    assert all(a > b for a, b in zip(eps_z, eps_z[1:], strict=False))  # more noise: less
    eps_t = [epsilon_spent(2.0, t, DELTA) for t in (1, 5, 20, 80)]
    assert all(a < b for a, b in zip(eps_t, eps_t[1:], strict=False))  # more rounds: more
    assert epsilon_spent(2.0, 0, DELTA) == 0.0 and epsilon_spent(0.0, 3, DELTA) == math.inf
    for target, T in ((0.5, 7), (2.0, 7), (8.0, 30)):
        z = noise_multiplier_for(target, T, DELTA)
        assert target * 0.99 <= epsilon_spent(z, T, DELTA) <= target
    assert noise_multiplier_for(math.inf, 7, DELTA) == 0.0


def _blocks(k=4, N=300, n=6, seed=0):
    rng = np.random.default_rng(seed)
    B = rng.normal(size=(n, 2))
    return [rng.normal(size=(N, 2)) @ B.T + 0.2 * rng.normal(size=(N, n)) for _ in range(k)]


def test_moment_noise_has_the_stated_std():
    blocks = _blocks()
    gw = PrivateGateways(
        list(range(4)), blocks, epsilon=2.0, delta=DELTA, clip=3.0, releases=5,
        method="fedep", rng=np.random.default_rng(1),
    )  # fmt: skip
    clipped = gw.blocks[0]
    assert np.linalg.norm(clipped, axis=1).max() <= 3.0 + 1e-12
    draws = np.array([gw.moments()[0].sum - clipped.sum(axis=0) for _ in range(600)])
    stated = gw.z * math.sqrt(2.0) * 3.0  # z times the release's sensitivity
    assert np.std(draws) == pytest.approx(stated, rel=0.05)
    assert abs(np.mean(draws)) < 4 * stated / math.sqrt(draws.size)
    # every release counts: 600 moments released
    assert gw.released == 600 and gw.epsilon_spent() == epsilon_spent(gw.z, 600, DELTA)


def test_clipping_bounds_a_gateways_influence():
    rng = np.random.default_rng(2)
    V = polar(rng.normal(size=(6, 2)))
    huge = RoundReport(
        W=1e6 * rng.normal(size=(1, 6, 2)), Pi=1e9 * rng.normal(size=(1, 6, 2)), nu=np.ones(1),
        metrics={m: np.ones(1) for m in REQUIRED_METRICS},
    )  # fmt: skip

    class Liar:
        d = 1

        def local_round(self, V, clients=None, **kw):
            return huge

    gw = PrivateGateways(
        [0], _blocks(1), epsilon=1e6, delta=DELTA, clip=3.0, releases=2, method="fedep",
        rng=np.random.default_rng(0),
    )  # fmt: skip
    rep = _PrivateRounds(Liar(), gw, "fedep").local_round(V)
    step = rep.W[0] - V
    noise = gw.z * 2 * UPDATE_CLIP * math.sqrt(2) * 6 * 2  # generous: 6 sd over 12 entries
    assert np.linalg.norm(step) <= UPDATE_CLIP * math.sqrt(2) + noise
    assert not any(rep.metrics[m].any() for m in REQUIRED_METRICS)  # no metric leaves
    big = 1e8 * np.ones((3, 6))
    assert np.linalg.norm(clip_rows(big, 2.0), axis=1) == pytest.approx(2.0)
    assert np.linalg.norm(clip_norm(big, 5.0)) == pytest.approx(5.0)


def _fit(**kw):
    blocks = _blocks(k=5, N=400, n=8, seed=3)
    X, g = np.vstack(blocks), np.repeat(np.arange(5), 400)
    base = {"n_components": 2, "n_rounds": 6, "tol": 0.0, "random_state": 0, "remerge": False}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return FedEP(**{**base, **kw}).fit(X, groups=g), X


def test_epsilon_inf_is_the_plain_fit_exactly():
    plain, X = _fit()
    inf, _ = _fit(dp_epsilon=math.inf, dp_clip=0.01)  # a clip that would bite: unused
    np.testing.assert_array_equal(inf.components_, plain.components_)
    np.testing.assert_array_equal(inf.decision_function(X), plain.decision_function(X))
    assert inf.dp_epsilon_ == math.inf and inf.dp_noise_multiplier_ == 0.0


def test_private_fit_reports_epsilon_and_keeps_a_subspace(tmp_path):
    plain, _ = _fit()
    det, X = _fit(dp_epsilon=8.0, dp_clip=8.0)
    assert det.dp_epsilon_ <= 8.0 and det.dp_epsilon_ >= 0.99 * 8.0  # 6 rounds + 2
    assert det.dp_noise_multiplier_ == pytest.approx(noise_multiplier_for(8.0, 8, DELTA))
    assert projector_distance(det.components_.T, plain.components_.T) < 0.5
    path = tmp_path / "dp.fedep"
    save(det, path)
    back = load(path)
    assert back.dp_epsilon_ == pytest.approx(det.dp_epsilon_) and back.dp_delta_ == DELTA
    small, _ = _fit(dp_epsilon=8.0, dp_clip=8.0, n_rounds=2)  # same budget, fewer releases
    assert small.dp_noise_multiplier_ < det.dp_noise_multiplier_


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({}, "needs dp_clip"),
        ({"dp_clip": 1.0, "n_components": "auto"}, "integer n_components"),
        ({"dp_clip": 1.0, "tol": 1e-4}, "needs tol=0"),
        ({"dp_clip": 1.0, "trim_steps": 1}, "record trimming"),
        ({"dp_clip": 1.0, "aggregation": "median"}, "aggregation='median'"),
    ],
)
def test_refused_combinations(kw, match):
    with pytest.raises(ValueError, match=match) as exc:
        _fit(dp_epsilon=1.0, **kw)
    assert "\n" not in str(exc.value)


def test_analyze_gauss_reference():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(2000, 5)) * np.array([3.0, 2.0, 1.0, 0.5, 0.2])
    exact = analyze_gauss(X, 2, math.inf, DELTA, 100.0, rng)
    assert projector_distance(exact, np.eye(5)[:, :2]) < 0.1
    noisy = analyze_gauss(X, 2, 1.0, DELTA, 1.0, np.random.default_rng(0))
    assert noisy.shape == (5, 2) and np.allclose(noisy.T @ noisy, np.eye(2))

"""The label-free rules of ``benchmarks/bench_labelfree.py`` against independent
references: they are computed from merged scatter matrices only, the references from
the records themselves."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import multivariate_normal
from sklearn.decomposition import PCA, FactorAnalysis

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_labelfree.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_labelfree", _PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def records():
    rng = np.random.default_rng(0)
    mix = rng.standard_normal((3, 10))
    noise = rng.uniform(0.2, 2.0, 10)  # heteroscedastic
    X = rng.standard_normal((1500, 3)) @ mix + rng.standard_normal((1500, 10)) * noise
    Xh = rng.standard_normal((300, 3)) @ mix + rng.standard_normal((300, 10)) * noise
    return X, Xh


def test_heldout_ppca_ll_is_the_gaussian_density(bench, records):
    X, Xh = records
    m = X.mean(0)
    C = (X - m).T @ (X - m) / len(X)
    lam, V = np.linalg.eigh(C)
    lam, V = lam[::-1], V[:, ::-1]
    ll = bench.heldout_ppca_ll(lam, V, (Xh - m).T @ (Xh - m), len(Xh), [1, 3, 6])
    for r in (1, 3, 6):
        s2 = lam[r:].mean()
        model = V[:, :r] @ np.diag(lam[:r] - s2) @ V[:, :r].T + s2 * np.eye(10)
        ref = multivariate_normal(m, model).logpdf(Xh).mean()
        assert ll[r] == pytest.approx(ref, rel=1e-10)


def test_bicv_errors_match_the_truncated_svd_on_records(bench, records):
    X, Xh = records
    m = X.mean(0)
    C = (X - m).T @ (X - m) / len(X)
    S = (Xh - m).T @ (Xh - m)
    err = bench.bicv_errors(C, S[None], 4, np.random.default_rng(1), repeats=1)[0]
    perm = np.random.default_rng(1).permutation(np.arange(10))
    ref = np.zeros(5)
    for K, H in ((perm[:5], perm[5:]), (perm[5:], perm[:5])):
        D, Cc = (X - m)[:, K], (X - m)[:, H]
        B, A = (Xh - m)[:, K], (Xh - m)[:, H]
        U, sv, Vt = np.linalg.svd(D, full_matrices=False)
        for k in range(5):
            pinv = Vt[:k].T @ np.diag(1 / sv[:k]) @ U[:, :k].T  # (D_k)^+
            ref[k] += ((A - B @ pinv @ Cc) ** 2).sum()
    np.testing.assert_allclose(err, ref, rtol=1e-9)
    # heteroscedastic noise: the regression on more components of the kept half keeps
    # improving, so bi-cross-validation over-counts the planted rank 3 (as measured)
    assert int(np.argmin(err)) > 3


def test_fa_ranks_find_the_planted_rank_under_heteroscedastic_noise(bench, records):
    X, Xh = records
    m = X.mean(0)
    S, Sh = (X - m).T @ (X - m), (Xh - m).T @ (Xh - m)
    got = bench.fa_rank_rules(S, Sh, len(X), len(Xh), np.ones(10, dtype=bool))
    assert got["fa-bic"] == 3
    assert abs(got["fa-heldout"] - 3) <= 1  # 300 held-out records: noisier


def test_fa_on_the_covariance_matches_sklearn_on_records(bench, records):
    X, _ = records
    C = np.cov(X.T, bias=True)
    W, psi, ll = bench.fa_fit_cov(C, 3, tol=1e-10)
    fa = FactorAnalysis(3, tol=1e-8, max_iter=5000).fit(X)
    assert ll == pytest.approx(fa.score(X), abs=1e-6)
    np.testing.assert_allclose(psi, fa.noise_variance_, rtol=1e-2)
    np.testing.assert_allclose(W @ W.T, fa.components_.T @ fa.components_, atol=1e-2)


def test_minka_rank_is_sklearns_mle(bench, records):
    X, _ = records
    lam = np.linalg.eigvalsh(np.cov(X.T))[::-1]
    assert bench.minka_rank(lam, len(X)) == PCA(n_components="mle").fit(X).n_components_

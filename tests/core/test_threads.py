"""The BLAS thread rule of :mod:`fedep.core._threads`."""

from __future__ import annotations

import numpy as np
import pytest

from fedep.core import _threads
from fedep.core._threads import SMALL_FLOPS, THREADS_ENV, blas_threads, choose_threads
from fedep.core.baselines import client_sketch
from fedep.core.scoring import residual_energy

BIG = 100 * SMALL_FLOPS


@pytest.fixture(autouse=True)
def _no_override(monkeypatch):
    monkeypatch.delenv(THREADS_ENV, raising=False)


def test_small_products_get_one_thread():
    assert choose_threads(SMALL_FLOPS / 2, cores=16, load=0.0) == 1


@pytest.mark.parametrize(
    ("cores", "load", "expected"),
    [(2, 0.0, 2), (2, 1.0, 2), (2, 2.0, 1), (2, 12.0, 1), (8, 3.0, 6), (8, 1.4, 8), (1, 0.0, 1)],
)
def test_large_products_get_the_idle_cores(cores, load, expected):
    # The load average counts this process's own thread, which is taken out.
    assert choose_threads(BIG, cores=cores, load=load) == expected


@pytest.mark.parametrize(("value", "expected"), [("1", 1), ("3", 3), ("64", 4)])
def test_the_environment_fixes_the_threads_up_to_the_cores(monkeypatch, value, expected):
    monkeypatch.setenv(THREADS_ENV, value)
    assert choose_threads(SMALL_FLOPS / 2, cores=4, load=9.0) == expected
    assert choose_threads(BIG, cores=4, load=9.0) == expected


@pytest.mark.parametrize("value", ["0", "-2", "two", "", "1.5"])
def test_a_bad_override_is_ignored(monkeypatch, value):
    monkeypatch.setenv(THREADS_ENV, value)
    assert choose_threads(BIG, cores=4, load=1.0) == 4
    assert choose_threads(SMALL_FLOPS / 2, cores=4, load=1.0) == 1


def test_the_limit_is_applied_inside_and_lifted_after(monkeypatch):
    monkeypatch.setenv(THREADS_ENV, "1")
    ctl = _threads._controller()
    before = [p["num_threads"] for p in ctl.info() if p["user_api"] == "blas"]
    with blas_threads(BIG) as n:
        assert n == 1
        inside = [p["num_threads"] for p in ctl.info() if p["user_api"] == "blas"]
        assert inside and all(t == 1 for t in inside)
    after = [p["num_threads"] for p in ctl.info() if p["user_api"] == "blas"]
    assert after == before


def test_results_do_not_depend_on_the_threads(monkeypatch):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((3000, 12))
    B = np.linalg.qr(rng.standard_normal((12, 3)))[0]
    monkeypatch.setenv(THREADS_ENV, "1")
    one = residual_energy(X, B), client_sketch(X, 4)
    monkeypatch.setenv(THREADS_ENV, "2")
    two = residual_energy(X, B), client_sketch(X, 4)
    R = X - X @ B @ B.T
    np.testing.assert_allclose(one[0], np.einsum("ij,ij->i", R, R), rtol=1e-12)
    np.testing.assert_allclose(one[0], two[0], rtol=1e-12)
    np.testing.assert_allclose(np.abs(one[1]), np.abs(two[1]), rtol=1e-9, atol=1e-9)

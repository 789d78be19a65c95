"""The BLAS thread rule of :mod:`fedep.core._threads`."""

from __future__ import annotations

import threading

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
    assert choose_threads(SMALL_FLOPS / 2, cores=16, busy=0.0) == 1


@pytest.mark.parametrize(
    ("cores", "busy", "expected"),
    [(2, 0.0, 2), (2, 1.0, 1), (2, 11.0, 1), (8, 2.0, 6), (8, 0.4, 8), (1, 0.0, 1)],
)
def test_large_products_get_the_idle_cores(cores, busy, expected):
    assert choose_threads(BIG, cores=cores, busy=busy) == expected


@pytest.mark.parametrize(
    ("load", "runnable", "busy"),
    [(0.2, 1, 0.0), (1.0, 1, 0.0), (3.0, 1, 2.0), (0.3, 5, 4.0), (6.5, 3, 5.5), (0.0, 0, 0.0)],
)
def test_busy_threads_take_the_busier_of_the_load_average_and_runnable_now(
    monkeypatch, load, runnable, busy
):
    # a machine that has just become busy (runnable now, load average still low) counts
    # at once; this process's own thread is taken out of either figure
    monkeypatch.setattr(_threads.os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(_threads, "_runnable_now", lambda: runnable)
    monkeypatch.setattr(_threads._own_load, "update", lambda now, cpu: 0.0)
    monkeypatch.setattr(_threads, "_own_runnable_now", lambda: 1)
    assert _threads.busy_threads() == pytest.approx(busy)
    monkeypatch.setattr(_threads, "available_cores", lambda: 2)
    assert choose_threads(BIG) == max(1, min(2, round(2 - busy)))


def test_the_process_own_threads_are_not_counted_as_other_work(monkeypatch):
    # a fit whose two worker threads kept both cores busy for a minute: the load
    # average reads 2, all of it this process's; the machine is idle for it
    own = _threads._OwnLoad()
    own.update(0.0, 0.0)
    for t in range(1, 121):
        own.update(float(t), 2.0 * t)
    assert own.load == pytest.approx(2.0 * (1 - np.exp(-2.0)), rel=1e-9)
    monkeypatch.setattr(_threads, "_own_load", own)
    monkeypatch.setattr(own, "update", lambda now, cpu: 2.0 * (1 - np.exp(-2.0)))
    monkeypatch.setattr(_threads.os, "getloadavg", lambda: (1.73, 1.0, 1.0))
    monkeypatch.setattr(_threads, "_runnable_now", lambda: 1)
    monkeypatch.setattr(_threads, "_own_runnable_now", lambda: 1)
    assert _threads.busy_threads() == pytest.approx(0.0, abs=1e-2)
    assert choose_threads(BIG, cores=2) == 2
    # the same load average from another process: one core left
    monkeypatch.setattr(own, "update", lambda now, cpu: 0.0)
    assert choose_threads(BIG, cores=2) == 1
    # and threads running now are other work only beyond this process's own
    monkeypatch.setattr(_threads.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    monkeypatch.setattr(_threads, "_runnable_now", lambda: 3)
    monkeypatch.setattr(_threads, "_own_runnable_now", lambda: 2)
    assert _threads.busy_threads() == pytest.approx(1.0)


def test_own_load_is_the_load_average_decay_of_the_cpu_rate():
    own = _threads._OwnLoad()
    assert own.update(10.0, 5.0) == 0.0  # the first sample only starts the clock
    # one CPU-second per second for 60 s in one step: 1 - 1/e of a thread
    assert own.update(70.0, 65.0) == pytest.approx(1 - np.exp(-1.0))
    # idle for 60 s more: decays by 1/e; a clock that did not move changes nothing
    assert own.update(130.0, 65.0) == pytest.approx((1 - np.exp(-1.0)) * np.exp(-1.0))
    assert own.update(130.0, 99.0) == pytest.approx((1 - np.exp(-1.0)) * np.exp(-1.0))


def test_own_runnable_now_counts_at_least_the_calling_thread():
    assert _threads._own_runnable_now() >= 1


def test_runnable_now_reads_the_machine():
    # this test's own thread is running while it reads /proc/loadavg (Linux)
    n = _threads._runnable_now()
    assert n >= 1 or not __import__("os").path.exists("/proc/loadavg")


@pytest.mark.parametrize(
    ("cpu_max", "affinity", "expected"),
    [("max 100000", 8, 8), ("200000 100000", 8, 2), ("150000 100000", 8, 2), ("50000 100000", 8, 1),
     ("400000 100000", 2, 2), (None, 4, 4)],
)  # fmt: skip
def test_available_cores_are_capped_by_the_cgroup_quota(monkeypatch, cpu_max, affinity, expected):
    real_open = open

    def fake_open(path, *a, **k):
        if str(path).startswith("/sys/fs/cgroup/"):
            if cpu_max is None or not str(path).endswith("cpu.max"):
                raise FileNotFoundError(path)
            import io

            return io.StringIO(cpu_max + "\n")
        return real_open(path, *a, **k)

    monkeypatch.setattr("builtins.open", fake_open)
    monkeypatch.setattr(_threads.os, "sched_getaffinity", lambda pid: set(range(affinity)))
    assert _threads.available_cores() == expected


@pytest.mark.parametrize(("value", "expected"), [("1", 1), ("3", 3), ("64", 4)])
def test_the_environment_fixes_the_threads_up_to_the_cores(monkeypatch, value, expected):
    monkeypatch.setenv(THREADS_ENV, value)
    assert choose_threads(SMALL_FLOPS / 2, cores=4, busy=8.0) == expected
    assert choose_threads(BIG, cores=4, busy=8.0) == expected


@pytest.mark.parametrize("value", ["0", "-2", "two", "", "1.5"])
def test_a_bad_override_is_ignored(monkeypatch, value):
    monkeypatch.setenv(THREADS_ENV, value)
    assert choose_threads(BIG, cores=4, busy=0.0) == 4
    assert choose_threads(SMALL_FLOPS / 2, cores=4, busy=0.0) == 1


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


def test_a_whole_fit_runs_under_the_thread_limit(monkeypatch):
    # a product that no call limits (here: whatever runs in a driver phase) gets the
    # threads of a large product, not the BLAS library's default of every core
    from fedep import FedEP
    from fedep.data import make_federated_data
    from fedep.federation.gateways import LocalGateways

    seen = []
    moments = LocalGateways.moments

    def observed(self):
        ctl = _threads._controller()
        seen.extend(p["num_threads"] for p in ctl.info() if p["user_api"] == "blas")
        return moments(self)

    monkeypatch.setattr(LocalGateways, "moments", observed)
    monkeypatch.setattr(_threads, "available_cores", lambda: 4)
    monkeypatch.setattr(_threads, "busy_threads", lambda: 3.0)  # one core free
    fed = make_federated_data(n_clients=3, n_features=6, n_components=2, n_samples=40,
                              random_state=0)  # fmt: skip
    FedEP(n_components=2, n_rounds=3, random_state=0).fit(fed.X_train, groups=fed.groups_train)
    assert seen and all(t == 1 for t in seen), seen


def test_worker_threads_take_every_core_however_busy(monkeypatch):
    # read and summary threads block instead of spinning: the load does not cut them
    monkeypatch.delenv(THREADS_ENV, raising=False)
    monkeypatch.setattr(_threads, "available_cores", lambda: 4)
    monkeypatch.setattr(_threads, "busy_threads", lambda: 50.0)
    assert _threads.worker_threads() == 4
    assert choose_threads(1e12) == 1  # the BLAS rule, same machine: one thread
    monkeypatch.setenv(THREADS_ENV, "2")
    assert _threads.worker_threads() == 2
    monkeypatch.setenv(THREADS_ENV, "16")
    assert _threads.worker_threads() == 4  # capped by the cores
    monkeypatch.setattr(_threads, "available_cores", lambda: 64)
    assert _threads.worker_threads() == 16  # the setting wins up to the cores
    monkeypatch.delenv(THREADS_ENV)
    assert _threads.worker_threads() == _threads.MAX_WORKERS  # default cap


@pytest.mark.parametrize("n", [0, 1, 7, 64, 1000, 1001])
@pytest.mark.parametrize(("step", "threads"), [(1, 1), (16, 2), (16, 3), (100, 8)])
def test_row_spans_cover_every_row_once(n, step, threads):
    seen = np.zeros(n, int)
    lock = threading.Lock()
    spans = []

    def fn(lo, hi):
        with lock:
            spans.append((lo, hi))
            seen[lo:hi] += 1

    _threads.over_row_spans(fn, n, step, threads)
    assert (seen == 1).all()
    assert len(spans) <= threads
    assert all((hi - lo) % step == 0 for lo, hi in spans if hi != n)


def test_row_spans_raise_what_a_span_raises():
    def fn(lo, hi):
        if lo > 0:
            raise ValueError(f"span {lo}")

    with pytest.raises(ValueError, match="span"):
        _threads.over_row_spans(fn, 100, 10, 2)

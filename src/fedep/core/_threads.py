"""How many BLAS threads a product gets: never more than the machine can give it.

A threaded BLAS (OpenBLAS, MKL) starts as many threads as the machine has cores and
spins them through every product. On a machine whose cores are busy that is slower
than one thread, often by orders of magnitude (measured on a loaded 2-core machine: a
4096 x 34 Gram matrix 400x slower with two OpenBLAS threads, the one-shot start's
``X^T X`` of 2,000,000 x 34 records 21.3 s against 0.5-0.6 s). The rule of
:func:`choose_threads`, in order:

1. ``FEDEP_THREADS`` (environment), when set to a positive integer: that many threads
   for every product (``1`` turns BLAS threading off; larger values are capped by the
   cores this process may run on). A value that is not a positive integer is ignored.
2. A product under :data:`SMALL_FLOPS` floating-point operations gets one thread: the
   hand-off costs more than it saves.
3. Otherwise the cores this process may use (:func:`available_cores`: its CPU affinity,
   capped by a cgroup CPU quota) less the busy ones (:func:`busy_threads`: the larger
   of the 1-minute load average and the threads runnable right now, each less this
   process's own part), rounded to the nearest core, at least one.

The load average alone lags: a machine that has just become busy looks idle to it for
most of a minute, so the count of runnable threads now (Linux ``/proc/loadavg``) is
taken as well; whichever says busier wins, so a wrong guess costs a core's worth of
speed on an idle machine, never an oversubscribed BLAS on a busy one.

The per-round products of the federated solvers always take one thread (their clients'
blocks are small; :func:`single_threaded_blas`), and a whole fit
(:func:`fedep.detectors.driver.fit_gateways`) runs under the limit of a large product,
so a product not wrapped here does not take more threads than the free cores either.
"""

from __future__ import annotations

import functools
import math
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from threadpoolctl import ThreadpoolController

__all__ = [
    "SMALL_FLOPS",
    "MAX_WORKERS",
    "THREADS_ENV",
    "available_cores",
    "blas_threads",
    "busy_threads",
    "choose_threads",
    "over_row_spans",
    "single_threaded_blas",
    "single_threaded_blas_block",
    "worker_threads",
]

#: Environment variable that fixes the BLAS threads of every product.
THREADS_ENV = "FEDEP_THREADS"

#: Worker threads by default (:func:`worker_threads`): the passes they share are
#: bound by memory more than by cores beyond a few, and each may hold a block (the
#: residual energies: one single-threaded BLAS product each).
MAX_WORKERS = 8

#: Products of fewer floating-point operations run on one thread (2^27: a Gram
#: matrix of about 58,000 x 34 records, ~30 ms on one core).
SMALL_FLOPS = float(1 << 27)


@functools.cache
def _controller() -> ThreadpoolController:
    # Built once: inspecting the loaded libraries costs ~0.3 ms, which a limit per
    # product would pay every time. SciPy's BLAS is loaded first so that the
    # controller sees it as well as NumPy's.
    import scipy.linalg  # noqa: F401

    return ThreadpoolController()


def _cgroup_cores() -> float | None:
    """The CPU quota of this process's cgroup, in cores (``cpu.max`` of cgroup v2,
    ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` of v1); None when there is none."""
    try:
        with open("/sys/fs/cgroup/cpu.max") as fh:
            quota, period = fh.read().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        with open("/sys/fs/cgroup/cpu/cpu.cfs_quota_us") as fh:
            quota = int(fh.read())
        with open("/sys/fs/cgroup/cpu/cpu.cfs_period_us") as fh:
            period = int(fh.read())
        return None if quota <= 0 or period <= 0 else quota / period
    except (OSError, ValueError):
        return None


def available_cores() -> int:
    """Cores this process may run on: its CPU affinity where the OS has one, capped by
    its cgroup's CPU quota (a container limited to 2 CPUs on a 64-core host: 2)."""
    try:
        cores = max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - macOS, Windows
        cores = max(1, os.cpu_count() or 1)
    quota = _cgroup_cores()
    if quota is not None:
        cores = min(cores, max(1, math.ceil(quota)))
    return cores


def _env_threads() -> int | None:
    value = os.environ.get(THREADS_ENV, "").strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    return None


def worker_threads() -> int:
    """Threads for parallel work that does not spin: the byte ranges of a CSV read, the
    column summaries (pandas' parser and NumPy's loops release the GIL and block, they
    do not busy-wait).

    ``FEDEP_THREADS`` when set, else every core this process may use
    (:func:`available_cores`) up to :data:`MAX_WORKERS`, as pandas' own parallel reader
    takes them (up to 6). The BLAS rule
    of :func:`choose_threads` leaves busy cores alone because a spinning BLAS thread
    that waits for a descheduled one stalls every product; a worker thread that waits
    for a core only waits its turn, so on a busy machine it gets its share of the
    cores instead of one core's worth (measured: docs/performance.md, "Large files").
    """
    fixed = _env_threads()
    cores = available_cores()
    return min(cores, MAX_WORKERS) if fixed is None else min(fixed, cores)


def over_row_spans(fn: Callable[[int, int], None], n: int, step: int, threads: int) -> None:
    """``fn(lo, hi)`` over contiguous spans of rows covering ``range(n)``, one span per
    thread (at most ``threads``), each span a multiple of ``step`` rows long but the
    last; on the calling thread alone when one span. For per-row work whose threads
    block rather than spin (NumPy's loops): every row gets the same operations as in
    one pass, so the result does not depend on ``threads``. An exception in ``fn`` is
    raised here once every span has ended.
    """
    per = -(-max(n, 1) // max(1, threads))
    per = -(-per // step) * step
    spans = [(lo, min(n, lo + per)) for lo in range(0, n, per)]
    if len(spans) <= 1:
        for lo, hi in spans:
            fn(lo, hi)
        return
    with ThreadPoolExecutor(len(spans)) as pool:
        jobs = [pool.submit(fn, lo, hi) for lo, hi in spans]
    for job in jobs:
        job.result()


def _runnable_now() -> int:
    """Threads runnable on the machine right now, this one included (Linux's
    ``/proc/loadavg``, its fourth field ``running/total``); 0 where unknown."""
    try:
        with open("/proc/loadavg") as fh:
            return int(fh.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return 0


#: Time constant of Linux's 1-minute load average, seconds.
_LOAD_TAU = 60.0


class _OwnLoad:
    """This process's share of the 1-minute load average, estimated from its own CPU
    time: the kernel averages the runnable threads with a 60 s exponential decay, so
    the same average of this process's CPU use (all its threads, ``os.times``) is
    what its own threads added. CPU use is at most the threads it had runnable, so
    the estimate errs low: the rule then sees the machine busier, never idler.

    Without it a fit whose own worker threads kept both cores busy read a load of 2
    and talked itself down to one thread on an idle machine.
    """

    def __init__(self) -> None:
        self.when: float | None = None
        self.cpu = 0.0
        self.load = 0.0

    def update(self, now: float, cpu: float) -> float:
        """Fold the CPU seconds used since the last call into the average; returns it.

        Parameters
        ----------
        now : float
            Monotonic time, seconds.
        cpu : float
            This process's CPU seconds so far (user + system, all threads).
        """
        if self.when is not None and now > self.when:
            dt = now - self.when
            rate = max(0.0, cpu - self.cpu) / dt
            decay = math.exp(-dt / _LOAD_TAU)
            self.load = self.load * decay + rate * (1.0 - decay)
        if self.when is None or now > self.when:
            self.when, self.cpu = now, cpu
        return self.load


_own_load = _OwnLoad()
# The average starts from the process's first CPU second, not from the first call: a
# process busy for a while before it asks has added to the load average already.
_own_load.update(time.monotonic() - sum(os.times()[:2]), 0.0)


def _own_runnable_now() -> int:
    """This process's threads running or runnable now (Linux ``/proc/self/task``),
    at least the calling one."""
    count = 0
    try:
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/stat") as fh:
                    state = fh.read().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            count += state == "R"
    except OSError:
        pass
    return max(1, count)


def busy_threads() -> float:
    """Threads of other work wanting a core: the larger of the 1-minute load average
    and the count of runnable threads now, each less this process's own part (its
    average CPU use over the last minute, :class:`_OwnLoad`; its runnable threads)."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # pragma: no cover - Windows
        load = 0.0
    own = max(1.0, _own_load.update(time.monotonic(), sum(os.times()[:2])))
    others_now = float(_runnable_now() - _own_runnable_now())
    return max(0.0, load - own, others_now)


def choose_threads(flops: float, *, cores: int | None = None, busy: float | None = None) -> int:
    """BLAS threads for a product of ``flops`` floating-point operations.

    Parameters
    ----------
    flops : float
        Work of the product (``2 N n^2`` for an ``N x n`` Gram matrix).
    cores, busy : optional
        The cores this process may use and the threads of other work wanting one
        (default: :func:`available_cores`, :func:`busy_threads`; given in tests).

    Returns
    -------
    int
        At least 1, at most ``cores``; the rule is the module docstring's.
    """
    cores = available_cores() if cores is None else max(1, int(cores))
    fixed = _env_threads()
    if fixed is not None:
        return min(fixed, cores)
    if flops < SMALL_FLOPS:
        return 1
    busy = busy_threads() if busy is None else max(0.0, float(busy))
    return int(max(1, min(cores, round(cores - busy))))


@contextmanager
def blas_threads(flops: float) -> Iterator[int]:
    """Run the block with :func:`choose_threads` ``(flops)`` BLAS threads; yields it."""
    n = choose_threads(flops)
    with _controller().limit(limits=n, user_api="blas"):
        yield n


@contextmanager
def single_threaded_blas_block() -> Iterator[None]:
    """Run the block with one BLAS thread (whatever ``FEDEP_THREADS`` says): for code
    that runs its own threads, each calling BLAS on a small block."""
    with _controller().limit(limits=1, user_api="blas"):
        yield


def single_threaded_blas(fn):
    """Run ``fn`` with one BLAS thread (the per-round client computations).

    The per-client products are small (a few thousand rows by tens of columns); a
    threaded BLAS gains nothing on them and, on a machine whose cores are busy, stalls
    in its thread hand-offs.
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with _controller().limit(limits=1, user_api="blas"):
            return fn(*args, **kwargs)

    return wrapper

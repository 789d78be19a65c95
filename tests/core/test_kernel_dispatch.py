"""``kernel="auto"``: NumPy while numba's cache is cold, a background compile fills it.

The choice (:mod:`fedep.core._kernels._dispatch`) is tested on a tiny numba function
in a temporary cache (readiness from numba's on-disk index, the lock, the detached
process), and end to end in child processes with a fresh ``NUMBA_CACHE_DIR``: the
first fit runs the NumPy references and gives the compiled fit's model, the real
``fedep warmup`` started behind it fills the cache, and the next fit loads the
compiled kernel. Every process a test starts is in a process group that the test
kills on every path.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import fedep
from fedep import FedEP, FedPG
from fedep._procs import signal_group, stop_group
from fedep.core import _kernels
from fedep.core._kernels import _dispatch
from fedep.core.warmup import warm_up
from fedep.data import _tails
from fedep.features import _column_pass

pytestmark = pytest.mark.skipif(
    not _kernels.HAVE_NUMBA or os.name != "posix", reason="needs numba and POSIX"
)

SRC = str(Path(fedep.__file__).resolve().parents[1])
TINY = "import numba\n\n\n@numba.njit(cache=True)\ndef plus_one(x):\n    return x + 1.0\n"


def _tiny(folder: Path, name: str = "tiny_kernel"):
    """A fresh module object (a new dispatcher) for ``folder/tiny_kernel.py``."""
    spec = importlib.util.spec_from_file_location(name, folder / "tiny_kernel.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.plus_one


@pytest.fixture
def tiny_cache(tmp_path, monkeypatch):
    """The tiny kernel's source folder, its numba cache in ``tmp_path/cache``."""
    (tmp_path / "tiny_kernel.py").write_text(TINY)
    cache = tmp_path / "cache"
    monkeypatch.setattr(_kernels.numba.config, "CACHE_DIR", str(cache))
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(cache))
    monkeypatch.setattr(_dispatch, "_background_tried", False)
    return tmp_path


def _kill_group(pgid: int | None, expect: str) -> None:
    """Terminate, then kill, the detached process group ``pgid`` while one of its
    members' command line contains ``expect`` (a group whose processes all ended may
    have its number reused by someone else's)."""

    def alive() -> bool:
        members = (p for p in Path("/proc").glob("[0-9]*") if _pgid(p) == pgid)
        return any(expect in _cmdline(p) for p in members)

    if pgid is None or not Path("/proc/self/stat").is_file():
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not alive():
            return
        signal_group(pgid, sig)
        _wait_for(lambda: not alive(), 10)


def _wait_for(check, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return check()


def test_requested_mode_reads_the_environment(monkeypatch):
    monkeypatch.delenv(_dispatch.ENV, raising=False)
    assert _dispatch.requested_mode("auto") == "auto"
    monkeypatch.setenv(_dispatch.ENV, " NumPy ")
    assert _dispatch.requested_mode("auto") == "numpy"
    assert _dispatch.requested_mode("numba") == "numba"  # code's explicit choice wins
    monkeypatch.setenv(_dispatch.ENV, "")
    assert _dispatch.requested_mode("auto") == "auto"
    monkeypatch.setenv(_dispatch.ENV, "fast")
    with pytest.raises(ValueError, match="FEDEP_KERNELS must be"):
        _dispatch.requested_mode("auto")
    with pytest.raises(ValueError, match="kernel must be"):
        _dispatch.requested_mode("cuda")


def test_small_work_runs_numpy_until_numba_has_started(monkeypatch):
    # a warm cache, no compiled kernel run in this process yet
    started = []
    monkeypatch.setattr(_dispatch, "ready", lambda kernel: True)
    monkeypatch.setattr(_dispatch, "compile_in_background", started.append)
    monkeypatch.setattr(_dispatch, "_numba_started", False)
    monkeypatch.setattr(_dispatch, "_small_rows", 0)
    quarter = _dispatch.START_ROWS // 4
    assert not _dispatch.use_compiled(plus, "auto", rows=quarter)
    assert not _dispatch.use_compiled(plus, "auto", rows=quarter)
    assert not _dispatch.use_compiled(plus, "numpy", rows=10 * _dispatch.START_ROWS)
    # the rows of small calls add up: the call that reaches START_ROWS starts numba ...
    assert _dispatch.use_compiled(plus, "auto", rows=2 * quarter)
    # ... and from then on every call, however small, runs compiled
    assert _dispatch.use_compiled(plus, "auto", rows=1)
    assert started == []
    # one large call starts numba at once; numba mode and calls without rows (the
    # solvers') are not affected by the rule
    monkeypatch.setattr(_dispatch, "_numba_started", False)
    monkeypatch.setattr(_dispatch, "_small_rows", 0)
    assert _dispatch.use_compiled(plus, "auto", rows=_dispatch.START_ROWS)
    for mode, rows in (("numba", 1), ("auto", None)):
        monkeypatch.setattr(_dispatch, "_numba_started", False)
        assert _dispatch.use_compiled(plus, mode, rows=rows)
    # a cold cache: NumPy and the background compile, as before
    monkeypatch.setattr(_dispatch, "ready", lambda kernel: False)
    monkeypatch.setattr(_dispatch, "_numba_started", False)
    assert not _dispatch.use_compiled(plus, "auto", rows=10 * _dispatch.START_ROWS)
    assert started == [plus]


def plus(x):  # stands for a dispatcher in the tests that patch ``ready``
    return x + 1.0


def test_ready_follows_numbas_on_disk_index(tiny_cache):
    fn = _tiny(tiny_cache)
    assert not _dispatch.ready(fn)  # nothing compiled, nothing cached
    assert fn(1.0) == 2.0
    assert _dispatch.ready(fn)  # compiled in this process (and saved)
    again = _tiny(tiny_cache)
    assert not again.overloads and _dispatch.ready(again)  # from the on-disk index
    # numba keys its cache on the source file: an edited file is cold again.
    (tiny_cache / "tiny_kernel.py").write_text(TINY + "\n# edited\n")
    assert not _dispatch.ready(_tiny(tiny_cache))
    # The index without its data file (numba writes the index first) is not ready.
    (tiny_cache / "tiny_kernel.py").write_text(TINY)
    os.utime(tiny_cache / "tiny_kernel.py", ns=(0, 0))
    fn = _tiny(tiny_cache)
    fn(1.0)
    for data in Path(fn._cache.cache_path).glob("*.nbc"):
        data.unlink()
    assert not _dispatch.ready(_tiny(tiny_cache))


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads /proc (Linux)")
def test_background_compile_is_detached_locked_and_fills_the_cache(tiny_cache):
    fn = _tiny(tiny_cache)
    go = tiny_cache / "go"
    # The stand-in compile waits for ``go``, then compiles the tiny kernel into the cache.
    script = (
        "import importlib.util, os, sys, time\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.05)\n"
        f"path = {str(tiny_cache / 'tiny_kernel.py')!r}\n"
        "spec = importlib.util.spec_from_file_location('t', path)\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "assert os.environ['FEDEP_KERNELS'] == 'numba'\n"
        "m.plus_one(1.0)\n"
    )
    pgid = None
    try:
        pgid = _dispatch.compile_in_background(fn, [sys.executable, "-c", script])
        assert pgid is not None
        lock = _dispatch.compile_lock_path(fn)
        assert lock.read_text().strip() == str(pgid)
        # Once per process; and another process finds the lock held.
        assert _dispatch.compile_in_background(fn) is None
        probe = "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR)\n"
        probe += "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        probe += "except OSError:\n    sys.exit(3)\n"
        held = subprocess.run([sys.executable, "-c", probe, str(lock)], timeout=60)
        assert held.returncode == 3
        # The shell was reaped here, and the compile is not this process's child.
        with pytest.raises(ChildProcessError):
            os.waitpid(pgid, os.WNOHANG)
        members = [p for p in Path("/proc").glob("[0-9]*") if _pgid(p) == pgid]
        assert members and all(_ppid(p) != os.getpid() for p in members)
        assert not _dispatch.ready(_tiny(tiny_cache))
        go.write_text("")
        assert _wait_for(lambda: _dispatch.ready(_tiny(tiny_cache)), 120)
        assert _wait_for(
            lambda: subprocess.run([sys.executable, "-c", probe, str(lock)]).returncode == 0, 60
        )
    finally:
        go.write_text("")
        _kill_group(pgid, expect=str(go))


def _pgid(proc: Path) -> int | None:
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[2])
    except (OSError, IndexError, ValueError):
        return None


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _ppid(proc: Path) -> int | None:
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def test_no_background_compile_without_a_writable_cache(tiny_cache):
    fn = _tiny(tiny_cache)
    folder = Path(fn._cache.cache_path)
    if folder.is_dir():
        folder.rmdir()
    folder.parent.mkdir(parents=True, exist_ok=True)
    folder.write_text("not a folder")  # numba cannot make its cache here
    assert _dispatch.compile_lock_path(fn) is None
    assert (
        _dispatch.compile_in_background(fn, [sys.executable, "-c", "raise SystemExit(1)"]) is None
    )


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_auto_after_warm_up_runs_compiled_and_starts_nothing(monkeypatch):
    warm_up()  # compiled in this process, or loaded from numba's cache
    monkeypatch.setenv(_dispatch.ENV, "auto")
    started = []
    monkeypatch.setattr(_dispatch, "compile_in_background", lambda *a: started.append(a))
    names = ("fused_data_step", "dual_step", "gram_terms", "manpg_clients", "fedpg_clients")
    assert all(_kernels.pick("auto", name) is getattr(_kernels, name) for name in names)
    rng = np.random.default_rng(3)
    X = rng.standard_normal((300, 6))
    groups = np.repeat(np.arange(3), 100)
    FedEP(n_components=2, n_rounds=3).fit(X, groups=groups)
    FedPG(n_components=2, n_rounds=3).fit(X, groups=groups)
    assert started == []


FIT = """
import json, os, sys
import numpy as np
from fedep import FedEP, FedPG
from fedep.core import _kernels
from fedep.core._kernels import _dispatch

rng = np.random.default_rng(7)
X = rng.standard_normal((600, 4)) @ rng.standard_normal((4, 8))
X += 0.1 * rng.standard_normal((600, 8))
groups = np.repeat(np.arange(3), 200)
out = {}
for name, cls in (("fedpg", FedPG), ("fedep", FedEP))[: int(sys.argv[1])]:
    model = cls(n_components=2, n_rounds=8, random_state=0).fit(X, groups=groups)
    out[name] = model.components_.tolist()
names = ("fused_data_step", "dual_step", "gram_terms", "manpg_clients", "fedpg_clients")
out["signatures"] = {n: len(getattr(_kernels, n).signatures) for n in names}
stats = _kernels.fedpg_clients.stats
out["fedpg_hits"] = sum(stats.cache_hits.values())
out["fedpg_misses"] = sum(stats.cache_misses.values())
lock = _dispatch.compile_lock_path(_kernels.manpg_clients)
out["pgid"] = int(lock.read_text()) if lock.is_file() and lock.read_text().strip() else None
try:
    os.waitpid(-1, os.WNOHANG)
    out["children"] = True
except ChildProcessError:
    out["children"] = False
print(json.dumps(out))
"""


def _fit_child(cache: Path, methods: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k != _dispatch.ENV}
    env.update(NUMBA_CACHE_DIR=str(cache), PYTHONPATH=SRC)
    proc = subprocess.Popen(
        [sys.executable, "-c", FIT, str(methods)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=300)
    except BaseException:  # a timeout or an interrupt: stop the child's whole group
        stop_group(proc, grace=10)
        raise
    assert proc.returncode == 0, err[-2000:]
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_first_fit_runs_numpy_and_the_background_compile_serves_the_next(tmp_path, monkeypatch):
    cache = tmp_path / "numba-cache"
    pgid = None
    try:
        first = _fit_child(cache, methods=2)
        pgid = first["pgid"]
        assert pgid is not None  # the background compile was started ...
        assert not first["children"]  # ... and left no child to reap
        assert not any(first["signatures"].values())  # nothing compiled in the fit
        # The first (NumPy) fit's model is the compiled fit's model.
        monkeypatch.setenv(_dispatch.ENV, "numba")
        rng = np.random.default_rng(7)
        X = rng.standard_normal((600, 4)) @ rng.standard_normal((4, 8))
        X += 0.1 * rng.standard_normal((600, 8))
        groups = np.repeat(np.arange(3), 200)
        compiled = FedEP(n_components=2, n_rounds=8, random_state=0).fit(X, groups=groups)
        np.testing.assert_allclose(first["fedep"], compiled.components_, atol=1e-8)

        # The real ``fedep warmup`` compiles FedPG's kernel first; once it is cached,
        # the next fit loads it (a cache hit, no compilation) and agrees with the first.
        def fedpg_cached() -> bool:
            return any(cache.glob("*/fedpg._fedpg-*.nbc"))

        assert _wait_for(fedpg_cached, 240), "the background compile cached nothing"
        second = _fit_child(cache, methods=1)
        assert second["signatures"]["fedpg_clients"] == 1
        assert second["fedpg_hits"] >= 1 and second["fedpg_misses"] == 0
        np.testing.assert_allclose(second["fedpg"], first["fedpg"], atol=1e-8)
        assert second["pgid"] == pgid  # no second background compile was started
    finally:  # whatever failed: stop the background compile if one was started
        locks = list(cache.glob("*/fedep-compile.lock")) if cache.is_dir() else []
        text = locks[0].read_text().strip() if locks else ""
        _kill_group(int(text) if text.isdigit() else pgid, expect="warmup")


def test_every_kernel_module_shares_one_compile_lock():
    # the solvers' kernels, the summaries' column pass and the scoring line writer are
    # cached in three folders; a fit then a score on a cold cache must find one lock
    kernels = [_kernels.manpg_clients, _column_pass._pass_kernel, _tails._write_kernel]
    folders = {Path(k._cache.cache_path) for k in kernels}
    locks = {_dispatch.compile_lock_path(k) for k in kernels}
    assert len(folders) == 3
    assert len(locks) == 1 and None not in locks
    assert locks.pop().name == _dispatch.LOCK_NAME

"""Compiled or NumPy: which implementation a kernel call runs, and compiling behind it.

numba compiles a kernel on its first call (35-50 CPU-seconds for a fit's kernels, most
of it the W-step) and keeps the machine code in its on-disk cache. With
``kernel="auto"`` (the estimators' setting) a kernel runs compiled only when that costs
no compilation: its machine code is in this process already, or numba's cache holds an
entry for this machine and these source files. Otherwise the call takes the kernel's
NumPy reference (the same steps, parity-tested to rounding) and, once per process, a
detached background process (``python -m fedep warmup``, at low priority) fills
numba's cache, so that later fits, and later rounds of a long fit, run compiled.

``FEDEP_KERNELS`` (environment) overrides ``"auto"``: ``numba`` compiles in the
calling process when the cache is cold (fedep's behaviour before this choice existed),
``numpy`` never compiles, ``auto`` (or unset) is the rule above. A setting other than
``"auto"`` passed in code wins over the environment.

The background compile runs only on POSIX systems, when numba's cache directory is
writable and no other background compile holds the lock file (``fedep-compile.lock``,
one for the package, :func:`compile_lock_path`: a ``flock`` taken by the launching
process and inherited by the compiling one, so it is released when that process ends,
however it ends). It is
started through ``/bin/sh`` in a new session, and the shell exits at once: the compiling
process is re-parented to init, so no fedep process is left with a zombie to reap. The
lock file records the new process group's id (for tests and for a user who wants to
stop it: ``kill -- -PGID``). numba writes each cache entry atomically (a temporary file,
then a rename), so a compile that is stopped half-way leaves no torn entry.

Small work: the first compiled kernel a process runs, even from a warm cache, pays for
numba's start (its CPU target and typing tables, ~0.15-0.6 s with the kernel's load),
which the per-row kernels of ``fedep score`` and ``fedep watch`` (the CSV field count,
the top features, the line writer: a few microseconds a row faster than their NumPy
references) earn back only over about :data:`START_ROWS` rows. A caller that says how
many rows a call covers (``use_compiled(..., rows=n)``) therefore gets NumPy, under
``"auto"``, until a compiled kernel has run in this process or the rows of such calls
reach :data:`START_ROWS` (summed over the process); a larger call starts numba at once.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no background compile
    fcntl = None

__all__ = [
    "ENV",
    "KERNEL_MODES",
    "LOCK_NAME",
    "START_ROWS",
    "compile_in_background",
    "compile_lock_path",
    "ready",
    "requested_mode",
    "use_compiled",
]

ENV = "FEDEP_KERNELS"
KERNEL_MODES = ("auto", "numba", "numpy")
LOCK_NAME = "fedep-compile.lock"

#: Rows (summed over the calls that give ``rows``) a process runs on the NumPy
#: references before its first compiled kernel: about what numba's start costs, at
#: the per-row kernels' few microseconds a row (docs/performance.md).
START_ROWS = 100_000

# Started (or tried and skipped) in this process: at most one attempt per process.
_background_tried = False
# A compiled kernel was chosen in this process (numba's start is paid), and the rows
# run on NumPy by small calls before that.
_numba_started = False
_small_rows = 0


def requested_mode(kernel: str) -> str:
    """The kernel mode in force: ``kernel``, or ``FEDEP_KERNELS`` when it is ``"auto"``.

    Raises ValueError for an unknown ``kernel`` or an unknown ``FEDEP_KERNELS`` value.
    """
    if kernel not in KERNEL_MODES:
        raise ValueError(f"kernel must be 'auto', 'numba' or 'numpy', got {kernel!r}")
    if kernel != "auto":
        return kernel
    env = os.environ.get(ENV, "").strip().lower() or "auto"
    if env not in KERNEL_MODES:
        raise ValueError(f"{ENV} must be 'auto', 'numba' or 'numpy', got {env!r}")
    return env


def ready(dispatcher) -> bool:
    """Whether calling ``dispatcher`` costs no compilation.

    True when it holds compiled code in this process, or numba's on-disk index for it
    has an entry, with its data file, for this machine (numba's CPU and target
    tuple), this numba version, and the current source file and bytecode (numba's own
    key, without the argument types: every fedep kernel is called with one signature,
    see ``manpg_w_step``).
    Something that is not a caching numba dispatcher (``NUMBA_DISABLE_JIT``, or an
    internal numba API this code does not know) counts as ready: it is called as before.
    """
    overloads = getattr(dispatcher, "overloads", None)
    if overloads is None:
        return True
    if overloads:
        return True
    try:
        cache = dispatcher._cache
        files = cache._cache_file
        index = files._load_index()
        if not index:
            return False
        tail = cache._index_key(None, dispatcher.targetctx.codegen())[1:]
        # numba writes the index before the data file: both must be there.
        return any(
            key[1:] == tail and os.path.isfile(files._data_path(name))
            for key, name in index.items()
        )
    except AttributeError:  # pragma: no cover - a numba whose cache API differs
        return True
    except Exception:  # an unreadable index: numba itself would recompile
        return False


def use_compiled(dispatcher, mode: str, rows: int | None = None) -> bool:
    """Whether to call ``dispatcher`` under ``mode`` (from :func:`requested_mode`).

    ``numpy``: never; ``numba``: always (compiled now if the cache lacks it); ``auto``:
    when :func:`ready`, else False and the background compile is started (once per
    process). Every compiled kernel, the solvers' and ``fedep score``'s, asks this.

    ``rows`` (the call's rows, for the per-row kernels): under ``auto``, a ready kernel
    still runs on NumPy while no compiled kernel has run in this process and the rows
    of such calls, this one included, stay under :data:`START_ROWS` (module
    docstring).
    """
    global _numba_started, _small_rows
    if mode == "numpy":
        return False
    if mode == "numba" or ready(dispatcher):
        if mode == "auto" and rows is not None and not _numba_started:
            _small_rows += int(rows)
            if _small_rows < START_ROWS:
                return False
        _numba_started = True
        return True
    compile_in_background(dispatcher)
    return False


#: The fedep package's ``__init__.py``: numba's cache folder for this file is where
#: the background compile's one lock lives, whichever kernel's module asked.
_PACKAGE_FILE = Path(__file__).resolve().parents[2] / "__init__.py"


def compile_lock_path(dispatcher) -> Path | None:
    """The background compile's lock file, or None when ``dispatcher``'s numba cache
    directory cannot be written (or there is no on-disk cache).

    One lock for every kernel of the package: it lives in the folder numba's cache
    would use for the package's own ``__init__.py``, by the same rule (the locator
    class numba chose for ``dispatcher``: ``NUMBA_CACHE_DIR``, ``__pycache__`` beside
    the package or the per-user cache). Per kernel module, as before, the solvers'
    kernels, the summaries' column pass and the scoring line writer each had a lock of
    their own, and a fit followed by a score on a cold cache started two compiles of
    everything side by side.
    """
    try:
        cache = dispatcher._cache
        cache._impl.locator.ensure_cache_path()  # numba's own check: mkdir + a temp file
        if not os.access(cache.cache_path, os.W_OK):
            return None
        shared = type(cache._impl.locator).from_function(dispatcher.py_func, str(_PACKAGE_FILE))
    except (AttributeError, OSError):
        return None
    if shared is None:  # not writable there
        return None
    return Path(shared.get_cache_path()) / LOCK_NAME


def _site_folders() -> set[str]:
    """The interpreter's site-packages folders (already on a child's import path)."""
    folders = [*site.getsitepackages(), site.getusersitepackages()]
    return {str(Path(f).resolve()) for f in folders if f}


def _command() -> list[str]:
    """``python -m fedep warmup --quiet``, at low priority when ``nice`` exists."""
    cmd = [sys.executable, "-m", "fedep", "warmup", "--quiet"]
    nice = shutil.which("nice")
    return [nice, "-n", "10", *cmd] if nice else cmd


def compile_in_background(dispatcher, command: list[str] | None = None) -> int | None:
    """Start the detached background compile, once per process; its process group id.

    None when it was not started: not the first attempt in this process, not POSIX,
    no interpreter path, the cache directory not writable, or another background
    compile holding the lock. ``command`` replaces ``python -m fedep warmup --quiet``
    (tests run a smaller compile); it runs with ``FEDEP_KERNELS=numba`` and this
    process's import path for fedep.
    """
    global _background_tried
    if _background_tried:
        return None
    _background_tried = True
    if fcntl is None or os.name != "posix" or not sys.executable:
        return None
    lock = compile_lock_path(dispatcher)
    if lock is None:
        return None
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return None  # another background compile is running
        env = dict(os.environ, **{ENV: "numba"})
        src = str(Path(__file__).resolve().parents[3])  # the folder that holds fedep/
        if src not in _site_folders():  # a source checkout: the child must find it too
            env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
        # The shell starts the compile in the background and exits: the compile is
        # re-parented to init (no zombie here) and inherits the locked descriptor.
        shell = subprocess.Popen(
            ["/bin/sh", "-c", '"$@" </dev/null >/dev/null 2>&1 &', "sh", *(command or _command())],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(fd,),
            start_new_session=True,
            env=env,
        )
        shell.wait()
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{shell.pid}\n".encode(), 0)
        return shell.pid
    except OSError:
        return None
    finally:
        os.close(fd)

"""numba, when installed, and the one decorator every compiled kernel uses."""

from __future__ import annotations

try:
    import numba
except ImportError:  # pragma: no cover - numba is a declared dependency
    numba = None

HAVE_NUMBA = numba is not None

# Reassociation lets LLVM vectorise the per-record dot products; no flag assumes
# finite values, so a NaN would still propagate (inputs are validated upstream).
FASTMATH = {"reassoc", "contract", "nsz"}


def jit(fn):
    """``fn`` compiled (cached on disk, GIL released), or None without numba.

    Without numba the Python function is kept under a private name by its module
    and the public name is None, so :func:`fedep.core._kernels.pick` falls back to
    the NumPy reference.
    """
    if numba is None:  # pragma: no cover
        return None
    return numba.njit(cache=True, nogil=True, fastmath=FASTMATH, error_model="numpy")(fn)


def jit_inline(fn):
    """``fn`` compiled into each kernel that calls it (numba's ``inline="always"``).

    For a helper a kernel calls once per client: no call, and the helper's loops are
    optimised with the caller's. Each call still updates the reference counts of the
    arrays passed (atomic operations), so inner loops are written out in the kernel
    instead (:mod:`fedep.core._kernels.fedpg`). Not cached on its own (the calling
    kernel's cache holds it); None without numba, as :func:`jit`.
    """
    if numba is None:  # pragma: no cover
        return None
    return numba.njit(inline="always", nogil=True, fastmath=FASTMATH, error_model="numpy")(fn)

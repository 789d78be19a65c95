"""Compiled (numba) hot loops, each beside the NumPy reference it is tested against.

- :mod:`~fedep.core._kernels.data`: FedEP's fused per-record S-, U- and dual steps
  (and their per-element halves for clients that keep no dual array), the dual step
  and the per-client Gram terms;
- :mod:`~fedep.core._kernels.wstep`: the per-client ManPG W-step (SSN, line search),
  with its polar and QR retractions in :mod:`~fedep.core._kernels.retraction`;
- :mod:`~fedep.core._kernels.fedpg`: FedPG's local epochs.

The solvers ask :func:`pick` for a compiled function by name; ``None`` selects the
NumPy path. With ``"auto"`` a kernel whose machine code is not yet in numba's cache
runs on NumPy while a background process compiles it
(:mod:`~fedep.core._kernels._dispatch`).
"""

from __future__ import annotations

from fedep.core._kernels import _dispatch
from fedep.core._kernels._dispatch import requested_mode
from fedep.core._kernels._jit import HAVE_NUMBA, numba
from fedep.core._kernels.data import (
    dual_step,
    fused_data_step,
    gram_terms,
    s_step_rows,
    u_step_rows,
)
from fedep.core._kernels.fedpg import fedpg_clients

# Private compiled pieces, re-exported (``as`` the same name) for the kernel tests.
from fedep.core._kernels.retraction import _inv_sqrt_spd as _inv_sqrt_spd
from fedep.core._kernels.retraction import _retract as _retract
from fedep.core._kernels.wstep import _cholesky_solve as _cholesky_solve
from fedep.core._kernels.wstep import _expand_search as _expand_search
from fedep.core._kernels.wstep import _lu_solve as _lu_solve
from fedep.core._kernels.wstep import _newton_cg as _newton_cg
from fedep.core._kernels.wstep import _ssn as _ssn
from fedep.core._kernels.wstep import _ssn_workspace as _ssn_workspace
from fedep.core._kernels.wstep import manpg_clients, vech_maps

__all__ = [
    "HAVE_NUMBA",
    "dual_step",
    "fused_data_step",
    "fedpg_clients",
    "gram_terms",
    "manpg_clients",
    "numba",
    "pick",
    "requested_mode",
    "s_step_rows",
    "u_step_rows",
    "vech_maps",
]

_PUBLIC = {
    "dual_step": dual_step,
    "fused_data_step": fused_data_step,
    "fedpg_clients": fedpg_clients,
    "gram_terms": gram_terms,
    "manpg_clients": manpg_clients,
    "s_step_rows": s_step_rows,
    "u_step_rows": u_step_rows,
}


def pick(kernel: str, name: str):
    """The compiled function ``name``, or None for the NumPy path.

    ``kernel`` is a settings value: ``"numpy"`` (always None), ``"numba"`` (the
    compiled function, compiled now if numba's cache lacks it; ImportError without
    numba) or ``"auto"``: ``FEDEP_KERNELS`` when set, else the compiled function when
    that costs no compilation (:func:`~fedep.core._kernels._dispatch.ready`), else None
    and a background compile is started (once per process).
    """
    mode = _dispatch.requested_mode(kernel)
    if mode == "numpy":
        return None
    if not HAVE_NUMBA:
        if mode == "numba":
            raise ImportError("kernel='numba' needs numba: pip install numba")
        return None
    fn = _PUBLIC[name]
    return fn if _dispatch.use_compiled(fn, mode) else None

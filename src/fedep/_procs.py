"""Stopping a child process and the process group it leads.

Every process fedep (or its tests and benchmarks) starts with ``start_new_session=True``
leads a group of its own; :func:`stop_group` stops the whole group: SIGTERM, a grace
period to exit cleanly, then SIGKILL, and the child reaped.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess

__all__ = ["signal_group", "stop_group"]


def signal_group(pid: int, sig: int) -> None:
    """Send ``sig`` to the process group ``pid`` leads (gone already: nothing)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def stop_group(proc: subprocess.Popen, grace: float = 30.0) -> tuple[str | None, str | None]:
    """Stop ``proc``'s process group: SIGTERM, then SIGKILL after ``grace`` seconds.

    Parameters
    ----------
    proc : subprocess.Popen
        Started with ``start_new_session=True`` (it leads its group).
    grace : float
        Seconds to wait after SIGTERM.

    Returns
    -------
    (stdout, stderr)
        What was left on the child's pipes (``None`` for a stream not piped).
    """
    if proc.poll() is not None:
        return proc.communicate()
    signal_group(proc.pid, signal.SIGTERM)
    try:
        return proc.communicate(timeout=grace)
    except subprocess.TimeoutExpired:
        signal_group(proc.pid, signal.SIGKILL)
        return proc.communicate()

"""The cells of a reproduction and their on-disk cache, with progress and time left.

A *cell* (:class:`Cell`) is one experiment result (a fit and its metrics, a
selection, a split's sizes), named up front by the plan and stored by :class:`Cells`
as ``cells/<mode>-<hash>__<key>.json``; the hash covers the mode's settings except
the seeds (which are part of each key). A run with the same settings and output
directory reuses every stored cell, so an interrupted run resumes.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedep._atomic import atomic_write
from fedep._json import jsonable

__all__ = ["Cell", "Values", "Cells", "kernels_compiled", "format_duration"]

#: The values of the cells computed so far, by key (what a cell's ``compute`` reads).
Values = dict[str, Any]


@dataclass(frozen=True)
class Cell:
    """One cached experiment result: ``compute(values)`` runs when it is not stored."""

    key: str
    section: str
    compute: Callable[[Values], Any]


def kernels_compiled() -> bool:
    """Whether this process already holds the compiled numba kernels (the first
    FedEP/FedPG fit of a process loads them, and compiles them on the very first run
    of an installation: tens of seconds)."""
    try:
        # a probe, not a dependency: importing the kernels at module level would load
        # numba in every process that reads the reproduction's cache
        from fedep.core import _kernels
    except ImportError:  # pragma: no cover
        return True
    fn = getattr(_kernels, "fused_data_step", None)
    sigs = getattr(fn, "signatures", None)
    return sigs is None or len(sigs) > 0


def format_duration(seconds: float) -> str:
    """``"42 s"``, ``"3 min 5 s"``, ``"1 h 2 min"``."""
    s = int(round(max(0.0, seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {(s % 3600) // 60} min"


def _is_federated(key: str) -> bool:
    return "FedEP" in key or "FedPG" in key or "ablation" in key or "rounds" in key


class Cells:
    """JSON cache of experiment cells under ``root/cells``.

    ``total`` (the number of cells of the plan) and :meth:`plan` enable the progress
    lines ``[done/total] [seconds] key (about T left)``; the estimate is the mean time
    of the cells computed so far times the number still to compute, leaving out the
    first federated fit while it loads/compiles the numba kernels.
    """

    def __init__(self, root: Path, mode: str, cfg: dict, log: Callable[[str], None]):
        self.root = Path(root) / "cells"
        self.root.mkdir(parents=True, exist_ok=True)
        # Cells are only reused under the same settings (seeds are part of each key).
        h = {k: v for k, v in cfg.items() if k != "seeds"}
        digest = hashlib.sha1(json.dumps(h, sort_keys=True, default=str).encode()).hexdigest()
        self.mode = f"{mode}-{digest[:8]}"
        self.log = log
        self.computed = 0
        self.cached = 0
        self.total = 0
        self.to_compute = 0
        self._seconds: list[float] = []
        self._clock = time.perf_counter

    def path(self, key: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "-_.=" else "_" for c in key)
        if len(safe) > 120:
            safe = safe[:100] + "-" + hashlib.sha1(key.encode()).hexdigest()[:12]
        return self.root / f"{self.mode}__{safe}.json"

    def plan(self, keys: list[str]) -> None:
        """Announce the plan's cell keys: sets ``total`` and how many are not stored."""
        self.total = len(keys)
        self.to_compute = sum(not self.path(k).is_file() for k in keys)
        stored = self.total - self.to_compute
        self.log(
            f"{self.total} cells: {self.to_compute} to compute, {stored} stored in {self.root}"
        )

    def done(self) -> int:
        return self.computed + self.cached

    def eta(self) -> str:
        """Estimated time left, as text."""
        left = max(0, self.to_compute - self.computed)
        if left == 0:
            return "done"
        if not self._seconds:
            return "estimating time left"
        return f"about {format_duration(left * sum(self._seconds) / len(self._seconds))} left"

    def get(self, key: str, fn: Callable[[], Any]) -> Any:
        p = self.path(key)
        if p.is_file():
            try:
                data = json.loads(p.read_text())
                self.cached += 1
                return data["value"]
            except (json.JSONDecodeError, KeyError):
                pass
        compiling = _is_federated(key) and not kernels_compiled()
        if compiling:
            self.log(
                f"  [{self.done() + 1:>4}/{self.total}] {key}: loading/compiling the numba "
                "kernels (first fit of a run; compiled once per installation, then "
                "cached), this fit takes longer"
            )
        t0 = self._clock()
        value = jsonable(fn())
        dt = self._clock() - t0
        with atomic_write(p, "w") as fh:
            fh.write(json.dumps({"key": key, "seconds": dt, "value": value}))
        self.computed += 1
        if not compiling:
            self._seconds.append(dt)
        self.log(f"  [{self.done():>4}/{self.total}] [{dt:6.1f}s] {key} ({self.eta()})")
        return value

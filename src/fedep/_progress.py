"""Per-round progress display for the command line.

:class:`RoundProgress` is a detector callback, ``callback(round, V, record)`` (and the
former ``callback(round, record)``): on a terminal it draws a tqdm bar (one tick per
communication round, with the residuals in the postfix); otherwise (a pipe, a log
file, CI) it prints at most :data:`MAX_LINES` plain lines per fit (round 1, every
``ceil(n_rounds / (MAX_LINES - 1))``-th round, and the last round), so logs stay
readable. Output goes to ``stream`` (stderr by default), never to stdout, so that
command output can be piped.
"""

from __future__ import annotations

import math
import sys
from typing import TextIO

__all__ = ["RoundProgress", "MAX_LINES"]

#: Most plain lines printed per fit when the stream is not a terminal.
MAX_LINES = 10

#: Record keys shown, in this order, with short labels.
_SHOWN = (
    ("objective", "obj"),
    ("consensus_residual_rel", "cons"),
    ("data_residual_rel", "data"),
    # FedEP's stopping measure (from its 11th round): see federation.rounds.converged.
    ("lagrangian_change", "dL"),
    ("objective_change", "dObj"),  # FedPG's
    ("dual_residual_rel", "dual"),
    ("v_change", "dV"),
)


def _fields(record: dict) -> dict[str, str]:
    out = {}
    for key, label in _SHOWN:
        v = record.get(key)
        if isinstance(v, (int, float)):
            out[label] = f"{v:.3g}"
    return out


class RoundProgress:
    """Callable progress reporter for ``n_rounds`` rounds.

    Parameters
    ----------
    n_rounds : int
        Round cap (the bar's total; the fit may stop earlier on convergence).
    label : str
        Shown before the bar / at the start of each line.
    stream : file-like, optional
        Where to write; default ``sys.stderr``.
    tty : bool, optional
        Force the bar (True) or plain lines (False); default: ``stream.isatty()``.
    enabled : bool, default=True
        False shows nothing (``--quiet``).
    """

    def __init__(
        self,
        n_rounds: int,
        label: str = "fit",
        *,
        stream: TextIO | None = None,
        tty: bool | None = None,
        enabled: bool = True,
    ) -> None:
        self.n_rounds = int(n_rounds)
        self.label = label
        self.stream = sys.stderr if stream is None else stream
        if tty is None:
            isatty = getattr(self.stream, "isatty", None)
            tty = bool(isatty()) if callable(isatty) else False
        self.tty = tty
        self.enabled = enabled
        self.rounds_seen = 0
        self._bar = None
        self._pending: tuple[int, dict] | None = None
        self._last_printed = 0

    @property
    def stride(self) -> int:
        """Print every ``stride``-th round in plain-line mode (round 1 and the last
        round always)."""
        return max(1, math.ceil(self.n_rounds / (MAX_LINES - 1)))

    def __call__(self, rnd: int, *args) -> None:
        """``(round, V, record)`` or ``(round, record)``."""
        if len(args) == 2:
            record = args[1]
        elif len(args) == 1:
            record = args[0]
        else:
            raise TypeError("RoundProgress expects (round, V, record) or (round, record)")
        self.rounds_seen = int(rnd)
        if not self.enabled:
            return
        if self.tty:
            if self._bar is None:
                from tqdm.auto import tqdm

                self._bar = tqdm(
                    total=self.n_rounds, desc=self.label, unit="round", file=self.stream
                )
            self._bar.set_postfix(_fields(record), refresh=False)
            self._bar.update(1)
            return
        rnd = int(rnd)
        if rnd == 1 or rnd % self.stride == 0 or rnd >= self.n_rounds:
            self._line(rnd, record)
        else:
            self._pending = (rnd, record)

    def _line(self, rnd: int, record: dict) -> None:
        self._pending = None
        self._last_printed = rnd
        parts = " ".join(f"{k}={v}" for k, v in _fields(record).items())
        t = record.get("time_s")
        tail = f" ({t:.3f} s)" if isinstance(t, (int, float)) else ""
        print(
            f"{self.label}: round {rnd}/{self.n_rounds} {parts}{tail}".rstrip(),
            file=self.stream,
            flush=True,
        )

    def close(self) -> None:
        """Finish the bar; in plain-line mode print the last round if it was skipped
        (a fit that converged between two printed rounds)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if self._pending is not None and self.enabled:
            self._line(*self._pending)

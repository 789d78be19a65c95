"""Per-round progress display for the command line.

:class:`RoundProgress` is a detector ``callback(round, record)``: on a terminal it draws
a tqdm bar (one tick per communication round, with the residuals in the postfix);
otherwise (a pipe, a log file, CI) it prints one plain line per round, so logs stay
readable. Output goes to ``stream`` (stderr by default), never to stdout, so that
command output can be piped.
"""

from __future__ import annotations

import sys
from typing import TextIO

__all__ = ["RoundProgress"]

#: Record keys shown, in this order, with short labels.
_SHOWN = (
    ("objective", "obj"),
    ("consensus_residual_rel", "cons"),
    ("data_residual_rel", "data"),
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

    def __call__(self, rnd: int, record: dict) -> None:
        self.rounds_seen = int(rnd)
        if not self.enabled:
            return
        fields = _fields(record)
        if self.tty:
            if self._bar is None:
                from tqdm.auto import tqdm

                self._bar = tqdm(
                    total=self.n_rounds, desc=self.label, unit="round", file=self.stream
                )
            self._bar.set_postfix(fields, refresh=False)
            self._bar.update(1)
            return
        parts = " ".join(f"{k}={v}" for k, v in fields.items())
        t = record.get("time_s")
        tail = f" ({t:.3f} s)" if isinstance(t, (int, float)) else ""
        print(
            f"{self.label}: round {rnd}/{self.n_rounds} {parts}{tail}".rstrip(),
            file=self.stream,
            flush=True,
        )

    def close(self) -> None:
        """Finish the bar (no-op in plain-line mode)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

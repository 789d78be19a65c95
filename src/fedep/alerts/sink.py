"""Where alerts go: JSON lines to a file rotated by size, to stdout, or both.

One record per line (UTF-8 JSON, no NaN, keys in the record's order), the format
Filebeat's ``filestream`` input with the ``ndjson`` parser, Fluent Bit's ``tail`` input
with a JSON parser, and Vector's ``file`` source read. Rotation renames ``alerts.jsonl``
to ``alerts.jsonl.1`` (``.1`` to ``.2`` ... up to ``backups``; the oldest is removed),
only between records, so that a shipper following the file by inode reads every record
once; a record is never split across files.

Durability: :meth:`AlertSink.write` keeps records in memory (up to
:data:`MAX_PENDING_BYTES`, then writes them through); :meth:`AlertSink.flush` writes
them, flushes and ``fsync``\\ s the file (and its directory after a rotation): when it
returns, every record written so far survives a crash or power loss. A caller that
saves its own position (``fedep watch``) saves it after ``flush``. A file whose last
line was cut by a crash (no newline at its end) is cut back to its last complete
record when the sink opens it (:attr:`AlertSink.repaired_bytes`).

Exactly once across a crash: a crash after ``flush`` but before the caller saved its
position leaves alerts on disk that the restarted caller makes again. To take them back,
save :meth:`AlertSink.state` with the position and open the sink with ``resume=`` that
state: the file is cut back to it (and files rotated after it are removed, the saved one
renamed back), so the file holds each alert once. Lines already read by a shipper cannot
be taken back; alerts carry no wall-clock time, so a repeat is identical (same
``log.file`` and ``line``, same model digest) and deduplicates.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path

from fedep._atomic import fsync_dir
from fedep._json import jsonable

__all__ = ["AlertSink", "encode_record", "MAX_PENDING_BYTES"]

#: Records :meth:`AlertSink.write` keeps before writing them through (flush or not).
MAX_PENDING_BYTES = 4 << 20


def _default(obj):
    v = jsonable(obj)
    if v is None and obj is not None:
        raise TypeError(f"an alert field of type {type(obj).__name__} cannot be written")
    return v


def encode_record(record: dict) -> bytes:
    """One record as a JSON line (UTF-8, compact, ending in ``\\n``); NumPy values are
    written as Python's; NaN or infinity is refused (JSON has neither)."""
    text = json.dumps(
        record, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_default
    )
    return text.encode("utf-8") + b"\n"


class AlertSink:
    """JSON lines to a file (rotated by size) and/or stdout.

    Parameters
    ----------
    path : str or os.PathLike or None
        The file, appended to (created if absent); None: stdout only.
    stdout : bool, default False
        Also write every record to stdout (flushed by :meth:`flush`).
    max_bytes : int, optional
        Rotate before a record would take the file over this size (a file holds at
        least one record, however long). None: never rotate.
    backups : int, default 5
        Rotated files kept (``path.1`` newest ... ``path.<backups>``); at least 1 with
        ``max_bytes``.
    resume : dict, optional
        A :meth:`state` saved earlier: cut back what was written after it.

    Attributes
    ----------
    n_written : int
        Records written.
    rotations : int
        Rotations done.
    repaired_bytes : int
        Bytes of a cut last line removed when the file was opened.
    rolled_back_bytes : int
        Bytes written after the ``resume`` state, removed when the file was opened.
    """

    def __init__(
        self,
        path: str | os.PathLike | None,
        *,
        stdout: bool = False,
        max_bytes: int | None = None,
        backups: int = 5,
        resume: dict | None = None,
    ) -> None:
        if path is None and not stdout:
            raise ValueError("an AlertSink needs a path, stdout=True, or both")
        if max_bytes is not None and (isinstance(max_bytes, bool) or int(max_bytes) < 1):
            raise ValueError(f"max_bytes must be a positive integer, not {max_bytes!r}")
        if isinstance(backups, bool) or int(backups) < (1 if max_bytes is not None else 0):
            raise ValueError(f"backups must be an integer >= 1 with max_bytes, not {backups!r}")
        self.path = None if path is None else Path(path)
        self.stdout = bool(stdout)
        self.max_bytes = None if max_bytes is None else int(max_bytes)
        self.backups = int(backups)
        self.n_written = 0
        self.rotations = 0
        self.repaired_bytes = 0
        self.rolled_back_bytes = 0
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._rotated = False
        self._fh = None
        self._size = 0
        self._committed = 0
        if self.path is not None:
            if self.path.is_dir():
                raise IsADirectoryError(f"alert file {str(self.path)!r} is a directory")
            if resume is not None:
                self._resume(resume)
            self._open()

    # ------------------------------------------------------------------ file
    def _open(self) -> None:
        fh = open(self.path, "ab")  # noqa: SIM115 - held until close()
        size = fh.seek(0, os.SEEK_END)
        if size > 0:
            with open(self.path, "rb") as r:
                r.seek(max(0, size - 1))
                last = r.read(1)
                if last != b"\n":
                    cut = self._last_newline(r, size)
                    fh.truncate(cut)
                    self.repaired_bytes += size - cut
                    size = cut
        self._fh = fh
        self._size = size
        self._committed = size

    @staticmethod
    def _last_newline(r, size: int) -> int:
        """Length of the file up to and including its last newline (0 if none)."""
        pos = size
        while pos > 0:
            start = max(0, pos - (1 << 16))
            r.seek(start)
            chunk = r.read(pos - start)
            k = chunk.rfind(b"\n")
            if k >= 0:
                return start + k + 1
            pos = start
        return 0

    def _resume(self, state: dict) -> None:
        """Cut the files back to ``state`` (see the module docstring)."""
        try:
            dev, ino, size = (int(state[k]) for k in ("device", "inode", "size"))
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"resume must be a state() of an AlertSink, not {state!r}") from None
        base = str(self.path)
        names = [base] + [f"{base}.{i}" for i in range(1, self.backups + 1)]
        found = None
        for j, name in enumerate(names):
            try:
                st = os.stat(name)
            except FileNotFoundError:
                continue
            if (st.st_dev, st.st_ino) == (dev, ino):
                found = j
                break
        if found is None:
            return  # the saved file is gone (rotated out): nothing left to take back
        for name in names[:found]:  # rotated after the state: only later alerts
            if os.path.exists(name):
                self.rolled_back_bytes += os.path.getsize(name)
                os.remove(name)
        now = os.path.getsize(names[found])
        if now > size:
            with open(names[found], "r+b") as fh:
                fh.truncate(size)
                fh.flush()
                os.fsync(fh.fileno())
            self.rolled_back_bytes += now - size
        for i, name in enumerate(names[found:]):  # close the gap: the saved one is current
            if found and os.path.exists(name):
                os.replace(name, names[i])
        fsync_dir(self.path.parent)

    def state(self) -> dict | None:
        """Flush, and where the file stands then: ``{"path", "device", "inode",
        "size"}`` (JSON-ready), for ``resume=``; None without a file."""
        if self._fh is None:
            return None
        self.flush()
        st = os.fstat(self._fh.fileno())
        return {
            "path": str(self.path),
            "device": st.st_dev,
            "inode": st.st_ino,
            "size": self._committed,
        }

    def _rotate(self) -> None:
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()
        base = str(self.path)
        for i in range(self.backups - 1, 0, -1):
            if os.path.exists(f"{base}.{i}"):
                os.replace(f"{base}.{i}", f"{base}.{i + 1}")
        os.replace(base, f"{base}.1")
        self._fh = open(self.path, "ab")  # noqa: SIM115 - held until close()
        self._size = 0
        self._committed = 0
        self.rotations += 1
        self._rotated = True

    def _drain(self) -> None:
        lines, self._pending, self._pending_bytes = self._pending, [], 0
        if not lines:
            return
        if self._fh is not None:
            for line in lines:
                if self.max_bytes is not None and self._size > 0:
                    if self._size + len(line) > self.max_bytes:
                        self._rotate()
                self._fh.write(line)
                self._size += len(line)
        if self.stdout:
            out = getattr(sys.stdout, "buffer", None)
            data = b"".join(lines)
            if out is not None:
                sys.stdout.flush()  # text written before stays before
                out.write(data)
            else:
                sys.stdout.write(data.decode("utf-8"))

    # ------------------------------------------------------------------ API
    def write(self, records: Iterable[dict]) -> None:
        """Add records (JSON-ready dicts), one line each, in order.

        Raises
        ------
        ValueError
            If a record holds NaN or infinity; TypeError for a value JSON cannot hold.
            Nothing of that call is written then.
        """
        if self._fh is None and self.path is not None:
            raise ValueError("write to a closed AlertSink")
        lines = [encode_record(r) for r in records]
        self._pending.extend(lines)
        self._pending_bytes += sum(map(len, lines))
        self.n_written += len(lines)
        if self._pending_bytes > MAX_PENDING_BYTES:
            self._drain()

    def flush(self) -> None:
        """Write what is pending, flush and ``fsync``: every record written so far is
        durable when this returns."""
        self._drain()
        if self._fh is not None:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            if self._rotated:
                fsync_dir(self.path.parent)
                self._rotated = False
            self._committed = self._size
        if self.stdout:
            sys.stdout.flush()

    def close(self) -> None:
        """Flush and close the file (a second call does nothing)."""
        if self._fh is None and not self._pending:
            return
        self.flush()
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def __enter__(self) -> AlertSink:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

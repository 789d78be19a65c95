"""The watcher's position file, and what makes its alerts exactly once across crashes.

The position file (JSON, replaced atomically with :func:`fedep._atomic.atomic_write`)
holds every followed file's identity and position (:meth:`fedep.data.follow.Follower.positions`),
the model's digest and current threshold, and, while a batch is being written, the
batch itself.

Writing one batch (:meth:`Positions.write_batch`)
-------------------------------------------------
1. the position file is saved with ``pending``: the batch's output records, the positions
   after the batch, and the mark of the alert file before it (device, inode, size);
2. the records are written to the alert sink and flushed (``fsync``);
3. the position file is saved with the positions after the batch and no ``pending``.

A crash (``kill -9``, power loss) leaves one of three states. Before 1 completes, the old
position file stands and nothing of the batch was written: its lines are read again.
After 3, the batch is done. Between 1 and 3, the alert file holds ``k`` of the batch's
``n`` records (``0 <= k <= n``, whole lines, perhaps a torn part of the next): on restart
:func:`recover` cuts a torn last line off, counts ``k`` (the complete lines after the
mark, across a size rotation of the alert file), writes the batch's records ``k..n-1``
from the position file, flushes, and commits the batch's positions. So every record is
in the alert file once: no alert is lost, none is repeated, and no line of a log is
scored twice.

Without an alert file (``--stdout`` only) the batch is not kept: what was printed before a
crash may be printed again (at least once).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from fedep._atomic import atomic_write
from fedep.data.errors import DataError

__all__ = ["FORMAT", "Positions", "alert_file_mark", "complete_lines_after", "recover"]

FORMAT = "fedep-watch-positions"
VERSION = 1


def alert_file_mark(path: str | os.PathLike | None) -> dict | None:
    """Device, inode and size of the alert file now (``None`` without one; zeros when it
    does not exist yet)."""
    if path is None:
        return None
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return {"dev": 0, "ino": 0, "size": 0}
    return {"dev": st.st_dev, "ino": st.st_ino, "size": st.st_size}


def _cut_torn_line(path: Path) -> int:
    """Cut a last line without its newline (a write torn by a crash) off ``path``;
    returns the bytes removed."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return 0
    try:
        size = os.fstat(fd).st_size
        pos, keep = size, None
        while pos > 0 and keep is None:
            step = min(1 << 16, pos)
            data = os.pread(fd, step, pos - step)
            nl = data.rfind(b"\n")
            if nl >= 0:
                keep = pos - step + nl + 1
            pos -= step
        keep = keep or 0
        if keep < size:
            os.ftruncate(fd, keep)
            os.fsync(fd)
        return size - keep
    finally:
        os.close(fd)


def _count_lines(path: Path, start: int) -> int:
    n = 0
    with open(path, "rb") as fh:
        fh.seek(start)
        while chunk := fh.read(1 << 22):
            n += chunk.count(b"\n")
    return n


def complete_lines_after(path: str | os.PathLike, mark: dict, backups: int) -> int | None:
    """Complete lines written to the alert file since ``mark``
    (:func:`alert_file_mark`), across its size rotation (``path.1`` ... ``path.N``, the
    highest the oldest). ``None`` when the marked file is found nowhere (rotated past
    ``backups`` or removed)."""
    path = Path(path)
    files = [path] + [Path(f"{path}.{i}") for i in range(1, backups + 1)]
    if not mark["ino"]:  # no alert file before the batch: everything there now is new
        return sum(_count_lines(f, 0) for f in files if f.exists())
    total = 0
    for f in files:  # newest first
        try:
            st = os.stat(f)
        except FileNotFoundError:
            continue
        if (st.st_dev, st.st_ino) == (mark["dev"], mark["ino"]):
            return total + _count_lines(f, mark["size"])
        total += _count_lines(f, 0)
    return None


_FILE_FIELDS = {"path": str, "dev": int, "ino": int, "offset": int, "line": int}


def _check_files(path, files, what: str) -> None:
    """One line naming the problem unless ``files`` is a list of file positions."""
    if not isinstance(files, list):
        raise DataError(path, f"position file: {what!r} is not a list")
    for i, f in enumerate(files):
        bad = not isinstance(f, dict) or any(
            not isinstance(f.get(k), t) or isinstance(f.get(k), bool)
            for k, t in _FILE_FIELDS.items()
        )
        if bad or f["offset"] < 0 or f["line"] < 0:
            raise DataError(path, f"position file: entry {i} of {what!r} is not a file position")


class Positions:
    """The position file (see the module docstring).

    Parameters
    ----------
    path : str or Path or None
        The file; ``None``: positions kept in memory only (nothing survives a restart).
    """

    def __init__(self, path: str | os.PathLike | None) -> None:
        self.path = None if path is None else Path(path)
        self.state: dict = {"format": FORMAT, "version": VERSION, "files": [], "pending": None}

    def load(self) -> dict:
        """The saved state (an empty one when there is no file yet)."""
        if self.path is None or not self.path.exists():
            return self.state
        try:
            raw = self.path.read_bytes()
            if len(raw) > 1 << 30:
                raise ValueError("larger than 1 GiB")
            state = json.loads(raw)
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            raise DataError(self.path, f"unreadable position file ({exc})") from None
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            raise DataError(self.path, f"not a fedep watch position file (no {FORMAT!r} format)")
        if state.get("version") != VERSION:
            raise DataError(
                self.path, f"position file version {state.get('version')!r}, expected {VERSION}"
            )
        _check_files(self.path, state.get("files"), "files")
        pending = state.get("pending")
        if pending is not None:
            if not isinstance(pending, dict) or not isinstance(pending.get("records"), list):
                raise DataError(self.path, "position file: 'pending' holds no list of records")
            if not all(isinstance(r, dict) for r in pending["records"]):
                raise DataError(self.path, "position file: a pending record is not an object")
            _check_files(self.path, pending.get("files"), "pending files")
            mark = pending.get("mark")
            if not isinstance(mark, dict) or not all(
                isinstance(mark.get(k), int) for k in ("dev", "ino", "size")
            ):
                raise DataError(self.path, "position file: 'pending' without the alert file's mark")
        self.state = state
        return state

    def save(self, **changes) -> None:
        self.state.update(changes)
        if self.path is None:
            return
        # json.dumps, not json.dump: the one-shot encoder is the compiled one
        data = json.dumps(self.state, separators=(",", ":"), allow_nan=False).encode()
        with atomic_write(self.path) as fh:
            fh.write(data)

    def write_batch(
        self, sink, alert_path, records: list[dict], files: list[dict], **extra
    ) -> None:
        """Write ``records`` to ``sink`` exactly once and commit ``files`` (the positions
        after the batch) and ``extra`` (threshold, model), in the order of the module
        docstring."""
        if records and alert_path is not None and self.path is not None:
            mark = alert_file_mark(alert_path)
            self.save(pending={"records": records, "files": files, "mark": mark, **extra})
        if records:
            sink.write(records)
            sink.flush()
        self.save(files=files, pending=None, **extra)


def recover(positions: Positions, alert_path, backups: int, make_sink) -> tuple[int, str | None]:
    """Finish a batch a crash interrupted (see the module docstring).

    Parameters
    ----------
    positions : Positions
        Loaded.
    alert_path : path or None
        The alert file.
    backups : int
        Its rotated copies kept.
    make_sink : callable
        ``make_sink()`` opens the alert sink (called after a torn line is cut off).

    Returns
    -------
    written : int
        Records of the interrupted batch written now.
    note : str or None
        What was done, for the operator (``None`` when there was nothing to finish).
    """
    pending = positions.state.get("pending")
    if not pending or alert_path is None:
        return 0, None
    records = pending["records"]
    cut = _cut_torn_line(Path(alert_path))
    done = complete_lines_after(alert_path, pending["mark"], backups)
    if done is None:
        note = (
            f"{alert_path}: the alert file of an interrupted batch was rotated away; "
            f"its {len(records)} records are written again (some may repeat)"
        )
        done = 0
    else:
        done = min(done, len(records))
        note = (
            f"finished a batch interrupted by a crash: {done} of its {len(records)} "
            "records had been written"
            + (f" (a torn last line of {cut} bytes was cut)" if cut else "")
        )
    rest = records[done:]
    sink = make_sink()
    if rest:
        sink.write(rest)
        sink.flush()
    extra = {k: v for k, v in pending.items() if k not in ("records", "mark", "files")}
    positions.save(files=pending["files"], pending=None, **extra)
    return len(rest), note

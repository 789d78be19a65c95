"""Follow growing log files: complete lines as they are written, across rotation.

:class:`Follower` watches files, globs and directories (Zeek's log directory: the
current ``conn.log`` and its rotated, compressed archives ``conn.HH:MM:SS-HH:MM:SS.log.gz``
under dated folders) and hands out :class:`Chunk`\\ s: runs of complete lines (each ends
with a newline) of one file, with the file's header (a Zeek log's ``#`` lines, a CSV's
header line) and the file line number of the first. It is pure I/O: no parsing beyond
lines and headers, no model.

Identity and positions
----------------------
A file is known by its identity, device + inode, plus a fingerprint (SHA-256 of its first
:data:`FINGERPRINT_BYTES` bytes, decompressed), and its position is the offset of the
first byte not yet handed out (the end of the last complete line) and the lines before
it. :meth:`Follower.positions` gives them as JSON-ready dicts and :meth:`Follower.restore`
takes them back: a restarted follower resumes each file where it stopped, also when the
file was renamed (same inode) or renamed and compressed (same fingerprint) meanwhile.

What happens to a file
----------------------
* it grows: the new complete lines are handed out; a last line without its newline
  waits for it (not handed out, the offset stays before it);
* it is renamed away (rotation) or removed: what is left of it is read to its end
  through the open descriptor (a last line without a newline is then complete), and a
  new file at the same path is a new file, read from its start;
* it is truncated (smaller than the offset, or its first bytes changed): noted and read
  again from its start;
* it appears later (a new file matching the target): read from its start;
* a compressed copy of a file already read (``gzip`` after rotation) is recognised by its
  fingerprint and not read again;
* a file known from :meth:`~Follower.restore` that is nowhere any more: noted (the
  records after its position are lost).

Every such event is a :class:`Note` (file and what happened), for the caller to report.
"""

from __future__ import annotations

import fnmatch
import glob
import hashlib
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from fedep.data.readers.source import _COMPRESSION_MAGIC, _Source

__all__ = ["FINGERPRINT_BYTES", "Chunk", "FileState", "Follower", "Note"]

#: Bytes of a file's start its fingerprint covers.
FINGERPRINT_BYTES = 1024
#: The most bytes read from one file in one poll.
READ_BYTES = 8 << 20
#: Longest header (Zeek ``#`` lines, a CSV header line) taken, in bytes.
MAX_HEADER_BYTES = 1 << 20
#: Files known but no longer anywhere, kept (to recognise a late compressed copy).
MAX_DETACHED = 1000


@dataclass
class FileState:
    """One followed file: identity and position (JSON-ready with :func:`asdict`).

    ``offset`` and ``line`` count the decompressed bytes and the lines handed out
    (the header included); ``done`` is set when the file is read to its end and will not
    grow (rotated away, removed, a compressed archive).
    """

    path: str
    dev: int
    ino: int
    compressed: str | None
    fingerprint: str = ""
    fp_len: int = 0
    offset: int = 0
    line: int = 0
    done: bool = False
    fmt: str = ""  # "zeek", "json" or "csv"; "" until the first bytes are seen
    header: bytes = field(default=b"", repr=False)
    header_line: int = 0  # lines of the header

    def to_json(self) -> dict:
        d = asdict(self)
        # a finished file is never parsed again: its header is not kept
        d["header"] = "" if self.done else self.header.decode("utf-8", "replace")
        return d

    @classmethod
    def from_json(cls, d: dict) -> FileState:
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        known["header"] = str(known.get("header", "")).encode()
        return cls(**known)


@dataclass
class Chunk:
    """Complete lines of one file.

    Attributes
    ----------
    path : Path
        The file (where it was when read).
    key : str
        The file's identity key (``"dev:ino"``; stable across renames).
    fmt : str
        ``"zeek"`` (TSV with ``#`` header), ``"json"`` (JSON lines) or ``"csv"``.
    header : bytes
        The file's header lines (Zeek) or header line (CSV); empty for JSON.
    data : bytes
        Whole lines, each ending with ``\\n`` (the last line of a finished file may lack it).
    first_line : int
        The 1-based file line number of the first line of ``data``.
    start, end : int
        Decompressed byte offsets of ``data`` in the file.
    """

    path: Path
    key: str
    fmt: str
    header: bytes
    data: bytes
    first_line: int
    start: int
    end: int


@dataclass(frozen=True)
class Note:
    """Something that happened to a followed file (``kind``: ``"new"``, ``"rotated"``,
    ``"truncated"``, ``"gone"``, ``"duplicate"``), in words in ``text``."""

    kind: str
    path: str
    text: str


def _key(dev: int, ino: int) -> str:
    return f"{dev}:{ino}"


def _compression(head: bytes) -> str | None:
    return next((c for m, c in _COMPRESSION_MAGIC if head.startswith(m)), None)


def _format_of(head: bytes) -> str:
    text = head.lstrip(b"\xef\xbb\xbf").lstrip()
    if text.startswith(b"#"):
        return "zeek"
    if text.startswith(b"{"):
        return "json"
    return "csv"


class _Reader:
    """An open file: plain (positional reads on a descriptor) or compressed (a stream)."""

    def __init__(self, path: str, compressed: str | None, offset: int) -> None:
        self.compressed = compressed
        self.fd: int | None = None
        self.stream = None
        if compressed is None:
            self.fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            self.pos = offset
        else:
            self.stream = _Source(Path(path), compressed).open()
            self.pos = 0
            self.pending = b""
            while self.pos < offset:  # skip what was handed out (decompressing it)
                got = bytes(self.stream.read(min(READ_BYTES, offset - self.pos)))
                if not got:
                    break
                self.pos += len(got)

    def size(self) -> int | None:
        return os.fstat(self.fd).st_size if self.fd is not None else None

    def read(self, offset: int, n: int) -> bytes:
        """Up to ``n`` bytes from ``offset`` (a compressed stream reads on from where it is)."""
        if self.fd is not None:
            return os.pread(self.fd, n, offset)
        got = bytes(self.stream.read(n))
        self.pos += len(got)
        return got

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.stream is not None:
            self.stream.close()
            self.stream = None


def _complete_lines(path: str, size: int, piece: int = 1 << 22) -> tuple[int, int]:
    """Offset just after the last newline within the first ``size`` bytes, and the
    number of lines before it."""
    offset = lines = 0
    with open(path, "rb") as fh:
        pos = 0
        while pos < size:
            data = fh.read(min(piece, size - pos))
            if not data:
                break
            nl = data.rfind(b"\n")
            if nl >= 0:
                offset = pos + nl + 1
                lines += data.count(b"\n")
            pos += len(data)
    return offset, lines


def _fingerprint(path: str, compressed: str | None, n: int = FINGERPRINT_BYTES) -> tuple[str, int]:
    if compressed is None:
        with open(path, "rb") as fh:
            head = fh.read(n)
    else:
        fh = _Source(Path(path), compressed).open()
        try:
            head = bytes(fh.read(n))
        finally:
            fh.close()
    return hashlib.sha256(head).hexdigest(), len(head)


class Follower:
    """Follow files, globs and directories; hand out complete lines.

    Parameters
    ----------
    targets : iterable of str or Path
        Files, glob patterns (``**`` recursive) and directories (every file below,
        recursively, whose name matches ``pattern``; names starting with ``.`` are skipped).
    pattern : str
        ``fnmatch`` pattern of the file names taken from a directory (default: all).
    from_end : bool
        Files present at the first scan and unknown to :meth:`restore` start at their
        end (only lines written later are handed out) instead of their start.
    read_bytes : int
        The most bytes read from one file per :meth:`poll`.
    scan_interval : float
        Seconds between two scans for new files (``poll(now=...)``).
    """

    def __init__(
        self,
        targets: Iterable[str | os.PathLike],
        *,
        pattern: str = "*",
        from_end: bool = False,
        read_bytes: int = READ_BYTES,
        scan_interval: float = 1.0,
    ) -> None:
        self.targets = [os.fspath(t) for t in targets]
        self.pattern = pattern
        self.from_end = from_end
        self.read_bytes = int(read_bytes)
        self.scan_interval = scan_interval
        self.states: dict[str, FileState] = {}
        self._readers: dict[str, _Reader] = {}
        self._aliases: set[tuple[int, int, int, int]] = set()  # (dev, ino, size, mtime)
        self._vanished: dict[str, int] = {}  # removed files: scans left to find a copy
        self._copied: set[str] = set()  # files a compressed copy of was seen
        self._order: list[str] = []  # keys in the order files were found
        self._last_scan = float("-inf")
        self._first_scan = True
        self.notes: list[Note] = []

    # ------------------------------------------------------------------ positions
    def positions(self) -> list[dict]:
        """Every known file's identity and position, JSON-ready (see :meth:`restore`)."""
        return [self.states[k].to_json() for k in self._order if k in self.states]

    def restore(self, saved: Iterable[dict]) -> None:
        """Resume from :meth:`positions` of an earlier run (before the first :meth:`poll`)."""
        for d in saved:
            st = FileState.from_json(d)
            k = _key(st.dev, st.ino)
            self.states[k] = st
            self._order.append(k)
        self._first_scan = False if self.states else self._first_scan

    # ------------------------------------------------------------------ scanning
    def _candidates(self) -> Iterator[str]:
        for t in self.targets:
            if os.path.isdir(t):
                for root, dirs, files in os.walk(t):
                    dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                    for f in sorted(files):
                        if not f.startswith(".") and fnmatch.fnmatch(f, self.pattern):
                            yield os.path.join(root, f)
            elif glob.has_magic(t):
                for p in sorted(glob.glob(t, recursive=True)):
                    if os.path.isfile(p) and not os.path.basename(p).startswith("."):
                        yield p
            elif os.path.isfile(t):
                yield t

    def known_paths(self) -> set[str]:
        return {s.path for s in self.states.values()}

    def scan(self) -> None:
        """Find new files (and renamed known ones, and compressed copies)."""
        found: list[tuple[float, str, os.stat_result]] = []
        for p in self._candidates():
            try:
                st = os.stat(p)
            except OSError:
                continue
            found.append((st.st_mtime, p, st))
        found.sort(key=lambda t: (t[0], t[1]))  # oldest first: archives before the live log
        for _, p, st in found:
            self._consider(p, st)
        if self._first_scan:
            self._first_scan = False
        self._detach_missing()
        for k in list(self._vanished):
            self._vanished[k] -= 1
            if self._vanished[k] <= 0:
                del self._vanished[k]
                s = self.states.get(k)
                if s is not None:
                    self.notes.append(
                        Note(
                            "gone",
                            s.path,
                            f"{s.path}: removed (no copy of it found); "
                            f"read to its end ({s.line} lines)",
                        )  # fmt: skip
                    )

    def _consider(self, path: str, st: os.stat_result) -> None:
        k = _key(st.st_dev, st.st_ino)
        state = self.states.get(k)
        if state is not None and (state.fp_len == 0 or self._same_start(state, path)):
            state.path = path  # the same file, maybe renamed
            return
        if state is not None and not state.done and state.compressed is None:
            state.path = path  # the same inode with other first bytes: rewritten
            self._truncated(state)
            return
        sig = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if sig in self._aliases or st.st_size == 0:
            return
        try:
            with open(path, "rb") as fh:
                magic = fh.read(8)
            compressed = _compression(magic)
            fp, n = _fingerprint(path, compressed)
        except (OSError, EOFError, ValueError):
            return  # gone meanwhile, unreadable or still being compressed: next scan
        if n == FINGERPRINT_BYTES:
            same = [x for x in self.states.values() if x.fp_len == n and x.fingerprint == fp]
            # a known file moved (and maybe compressed) while we were not looking
            moved = next((x for x in same if not x.done and self._detached(x)), None)
            if moved is not None:
                self._rekey(moved, st, path, compressed)
                return
            if compressed is not None and same:
                # a compressed copy of a file read or being read; a plain file with the
                # same start and another inode is another file (logs written alike)
                for x in same:
                    self._copied.add(_key(x.dev, x.ino))
                    self._vanished.pop(_key(x.dev, x.ino), None)
                self._aliases.add(sig)
                return
        if state is not None:  # inode reused by a new file
            self._forget(k)
        new = FileState(path, st.st_dev, st.st_ino, compressed, fp, n)
        if self._first_scan and self.from_end and compressed is None:
            # only lines written from now on (the header is read when the reader opens)
            new.offset, new.line = _complete_lines(path, st.st_size)
        self.states[k] = new
        self._order.append(k)
        self.notes.append(Note("new", path, f"{path}: following"))

    def _detached(self, s: FileState) -> bool:
        """Known, not open, and no longer at its path (moved while we were not looking)."""
        k = _key(s.dev, s.ino)
        if k in self._readers:
            return False
        try:
            st = os.stat(s.path)
        except OSError:
            return True
        return _key(st.st_dev, st.st_ino) != k

    def _same_start(self, state: FileState, path: str) -> bool:
        try:
            fp, n = _fingerprint(path, state.compressed, state.fp_len)
        except (OSError, EOFError, ValueError):
            return True
        return n == state.fp_len and fp == state.fingerprint

    def _rekey(self, state: FileState, st: os.stat_result, path: str, compressed) -> None:
        old = _key(state.dev, state.ino)
        self.states.pop(old, None)
        state.path, state.dev, state.ino, state.compressed = path, st.st_dev, st.st_ino, compressed
        k = _key(st.st_dev, st.st_ino)
        self.states[k] = state
        self._order = [k if x == old else x for x in self._order]

    def _forget(self, k: str) -> None:
        r = self._readers.pop(k, None)
        if r is not None:
            r.close()
        self.states.pop(k, None)
        self._order = [x for x in self._order if x != k]

    def _detach_missing(self) -> None:
        """Restored files that are nowhere: noted once; kept (bounded) in case a copy shows."""
        detached = []
        for k in list(self._order):
            s = self.states.get(k)
            if s is None or k in self._readers:
                continue
            try:
                st = os.stat(s.path)
                there = _key(st.st_dev, st.st_ino) == k
            except OSError:
                there = False
            if not there:
                detached.append(k)
                if not s.done:
                    self.notes.append(
                        Note(
                            "gone",
                            s.path,
                            f"{s.path}: gone since it was last read; "
                            f"records after line {s.line} were not read",
                        )
                    )
                    s.done = True
        for k in detached[:-MAX_DETACHED] if len(detached) > MAX_DETACHED else []:
            self._forget(k)

    # ------------------------------------------------------------------ reading
    def poll(self, now: float | None = None, *, max_bytes: int | None = None) -> list[Chunk]:
        """Complete lines written since the last poll, file by file (oldest file first).

        Parameters
        ----------
        now : float, optional
            A clock (seconds); files are scanned for when ``scan_interval`` has passed
            since the last scan (always when ``None``).
        max_bytes : int, optional
            The most bytes handed out in all (default: ``read_bytes`` per file).

        Returns
        -------
        list of Chunk
        """
        if now is None or now - self._last_scan >= self.scan_interval:
            self.scan()
            self._last_scan = float("-inf") if now is None else now
        budget = max_bytes if max_bytes is not None else float("inf")
        out: list[Chunk] = []
        for k in list(self._order):
            s = self.states.get(k)
            if s is None or s.done or budget <= 0:
                continue
            # at least a useful read per file (a header, whole lines), within read_bytes
            chunk = self._read(k, s, int(min(self.read_bytes, max(budget, 1 << 16))))
            if chunk is not None:
                out.append(chunk)
                budget -= len(chunk.data)
        return out

    def _open(self, k: str, s: FileState) -> _Reader | None:
        r = self._readers.get(k)
        if r is not None:
            return r
        try:
            st = os.stat(s.path)
            if _key(st.st_dev, st.st_ino) != k:
                return None
            r = _Reader(s.path, s.compressed, s.offset)
        except (OSError, EOFError, ValueError):
            return None
        self._readers[k] = r
        return r

    def _read(self, k: str, s: FileState, n: int) -> Chunk | None:
        r = self._open(k, s)
        if r is None:
            return None
        if r.compressed is None:
            size = r.size()
            moved = self._moved(k, s)
            if size < s.offset or (s.fp_len and size and not self._same_start_fd(r, s)):
                self._truncated(s)
            data = r.read(s.offset, n) if size > s.offset else b""
            # renamed away or removed: it will not grow; read to its end
            finished = moved and len(data) < n
        else:
            got = r.read(s.offset, n)
            data, r.pending = r.pending + got, b""
            finished = not got  # the end of the archive
        if s.fp_len < FINGERPRINT_BYTES and s.offset + len(data) > s.fp_len:
            self._refingerprint(s, r, data)
        if not s.fmt:
            head = data if s.offset == 0 else self._head(s)
            if not head:
                return self._wait(k, s, r, data, finished)
            s.fmt = _format_of(head[:64])
        if s.fmt in ("zeek", "csv") and not s.header:
            if s.offset == 0:
                taken = self._take_header(s, data, finished)
                if taken is None:
                    return self._wait(k, s, r, data, finished)
                data = data[taken:]
            else:
                self._reread_header(s)
        start = s.offset
        cut = len(data) if finished else data.rfind(b"\n") + 1
        if r.compressed is not None:
            r.pending = data[cut:]  # the rest of a line: with the next read
        body = data[:cut]
        if finished:
            self._finish(k, s)
        if not body:
            return None
        first = s.line + 1
        s.offset += len(body)
        s.line += body.count(b"\n") + (0 if body.endswith(b"\n") else 1)
        return Chunk(Path(s.path), k, s.fmt, s.header, body, first, start, s.offset)

    def _wait(self, k: str, s: FileState, r: _Reader, data: bytes, finished: bool) -> None:
        """Nothing to hand out yet (a header not complete): keep what a stream read."""
        if finished:
            self._finish(k, s)
        elif r.compressed is not None:
            r.pending = data
        return None

    def _head(self, s: FileState, n: int = 1 << 16) -> bytes:
        """The first ``n`` (decompressed) bytes of the file."""
        try:
            if s.compressed is None:
                with open(s.path, "rb") as fh:
                    return fh.read(n)
            fh = _Source(Path(s.path), s.compressed).open()
            try:
                return bytes(fh.read(n))
            finally:
                fh.close()
        except (OSError, EOFError, ValueError):
            return b""

    def _moved(self, k: str, s: FileState) -> bool:
        """Whether the file is no longer at its path (renamed away or removed)."""
        try:
            st = os.stat(s.path)
        except OSError:
            return True
        return _key(st.st_dev, st.st_ino) != k

    def _same_start_fd(self, r: _Reader, s: FileState) -> bool:
        head = os.pread(r.fd, s.fp_len, 0)
        return len(head) == s.fp_len and hashlib.sha256(head).hexdigest() == s.fingerprint

    def _truncated(self, s: FileState) -> None:
        self.notes.append(
            Note(
                "truncated",
                s.path,
                f"{s.path}: truncated (or rewritten); read again from its start",
            )
        )
        s.offset = s.line = s.header_line = s.fp_len = 0
        s.fingerprint = ""
        s.header = b""
        s.fmt = ""

    def _refingerprint(self, s: FileState, r: _Reader, data: bytes) -> None:
        if r.compressed is None:
            head = os.pread(r.fd, FINGERPRINT_BYTES, 0)
        elif s.offset == 0:
            head = data[:FINGERPRINT_BYTES]
        else:
            return
        s.fingerprint, s.fp_len = hashlib.sha256(head).hexdigest(), len(head)

    def _take_header(self, s: FileState, data: bytes, finished: bool) -> int | None:
        """Split the header off the file's first bytes; ``None``: not complete yet."""
        if s.fmt == "csv":
            nl = data.find(b"\n")
            if nl < 0:
                return None
            s.header, s.header_line = data[: nl + 1], 1
        else:
            pos, n = 0, 0
            while pos < len(data) and data[pos : pos + 1] == b"#":
                nl = data.find(b"\n", pos)
                if nl < 0:
                    return None
                line = data[pos:nl]
                pos, n = nl + 1, n + 1
                if line.startswith(b"#types"):
                    break
            if pos == len(data) and not finished and b"#types" not in data[:pos]:
                return None  # maybe more header lines to come
            s.header, s.header_line = data[:pos], n
        if len(s.header) > MAX_HEADER_BYTES:
            s.header = s.header[:MAX_HEADER_BYTES]
        s.offset, s.line = len(s.header), s.header_line
        return len(s.header)

    def _reread_header(self, s: FileState) -> None:
        saved = (s.offset, s.line)
        self._take_header(s, self._head(s, MAX_HEADER_BYTES), True)
        s.offset, s.line = saved

    def _finish(self, k: str, s: FileState) -> None:
        s.done = True
        r = self._readers.pop(k, None)
        removed = False
        if r is not None:
            if r.fd is not None:
                try:
                    removed = os.fstat(r.fd).st_nlink == 0  # no name left: deleted
                except OSError:
                    pass
            r.close()
        if s.compressed is None:
            self.notes.append(
                Note(
                    "rotated",
                    s.path,
                    f"{s.path}: renamed away or removed; read to its end ({s.line} lines)",
                )  # fmt: skip
            )
            if removed and k not in self._copied:  # gone, unless a copy shows in two scans
                self._vanished[k] = 2

    def lag_bytes(self) -> int:
        """Bytes written to the open plain files and not yet handed out."""
        total = 0
        for k, r in self._readers.items():
            s = self.states.get(k)
            if s is not None and r.fd is not None:
                try:
                    total += max(0, r.size() - s.offset)
                except OSError:
                    pass
        return total

    def close(self) -> None:
        for r in self._readers.values():
            r.close()
        self._readers.clear()

    def take_notes(self) -> list[Note]:
        out, self.notes = self.notes, []
        return out

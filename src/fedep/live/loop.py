"""The watcher: follow logs, score every complete record, write alerts exactly once.

:class:`Watcher` ties the pieces together, one batch at a time:

1. the :class:`~fedep.data.follow.Follower` hands out the complete lines written since
   the last batch (at most ``batch_bytes``), file by file;
2. :func:`~fedep.data.readers.lines.parse_lines` reads them with each file's own header
   (a malformed line is counted, reported with its file and line, and left out; with
   ``on_error="stop"`` it stops the watcher);
3. the current model's :class:`~fedep.alerts.AlertFactory` scores them (per gateway: the
   file's, from a path pattern, or each record's, from a client column);
4. the alerts go through the optional :class:`~fedep.alerts.AlertGrouper`, window
   summaries (:class:`~fedep.alerts.WindowStats`) and threshold recalibration events are
   added;
5. :meth:`fedep.live.positions.Positions.write_batch` writes them to the
   :class:`~fedep.alerts.AlertSink` and commits the positions, exactly once;
6. between batches, a replaced model file is swapped in (:class:`~fedep.live.models.ModelSlot`).
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from fedep.alerts import AlertFactory, AlertGrouper, AlertSink, WindowStats
from fedep.data.errors import DataError
from fedep.data.follow import Chunk, Follower
from fedep.data.readers.lines import ParsedLines, header_columns, parse_lines
from fedep.live.models import ModelSlot, missing_columns
from fedep.live.positions import Positions, recover

__all__ = ["WatchConfig", "Watcher", "WatchStopped"]

ON_ERROR = ("skip", "stop")


class WatchStopped(DataError):
    """A malformed record with ``on_error="stop"``."""


@dataclass
class WatchConfig:
    """What :class:`Watcher` follows and how (the ``fedep watch`` options)."""

    targets: list[str]
    model: str
    verify_key: str | None = None
    alerts: str | None = None
    stdout: bool = False
    max_bytes: int | None = None
    backups: int = 5
    position_file: str | None = None
    pattern: str = "*"
    from_end: bool = False
    ecs: bool = False
    top_k: int = 3
    client_column: str | None = None
    gateway_pattern: str | None = None
    group_by: str | None = None
    group_window: float = 60.0
    group_cap: int = 10
    summary_window: float | None = None
    recalibrate_rate: float | None = None
    recalibrate_window: int = 100_000
    on_error: str = "skip"
    once: bool = False
    status_interval: float = 60.0
    poll_interval: float = 0.1
    batch_bytes: int = 8 << 20
    model_check: float = 1.0
    verbose: bool = False


@dataclass
class _Read:
    """A batch as read: chunks, their rows (or the error), the follower's notes, the
    positions after it (what its commit saves) and the bytes left unread."""

    chunks: list[Chunk]
    parsed: list
    columns: list[str]
    notes: list
    positions: list[dict]
    lag_bytes: int


@dataclass
class Counters:
    """What the watcher did (the status line's figures)."""

    records: int = 0
    alerts: int = 0
    written: int = 0
    bad: int = 0
    batches: int = 0
    last_ts: float | None = None


def _runs(lines: np.ndarray) -> list[tuple[int, int]]:
    """``[start, stop)`` row ranges of consecutive file lines."""
    if lines.size == 0:
        return []
    cuts = np.flatnonzero(np.diff(lines) != 1) + 1
    bounds = np.concatenate(([0], cuts, [lines.size]))
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


class Watcher:
    """Follow logs and write alerts (see the module docstring).

    Parameters
    ----------
    cfg : WatchConfig
    log : callable, optional
        ``log(line)``: one line for the operator (default: ``fedep watch: line`` on stderr).
    clock : callable, optional
        Wall-clock seconds (default :func:`time.time`).
    load_model : callable, optional
        ``load_model(path) -> detector`` for the model file and its replacements
        (default: verified with ``cfg.verify_key`` when one is given).
    """

    def __init__(
        self,
        cfg: WatchConfig,
        *,
        log: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.time,
        load_model: Callable[[Path], object] | None = None,
    ) -> None:
        if cfg.on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {ON_ERROR}, not {cfg.on_error!r}")
        self.cfg = cfg
        self.log = log or (lambda s: print(f"fedep watch: {s}", file=sys.stderr, flush=True))
        self.clock = clock
        self.stopping = False
        self.counters = Counters()
        self.gateway_re = None if cfg.gateway_pattern is None else re.compile(cfg.gateway_pattern)
        self.positions = Positions(cfg.position_file)
        saved = self.positions.load()
        self._saved_threshold = saved.get("threshold")
        self._saved_digest = saved.get("digest")
        self.slot = ModelSlot(cfg.model, cfg.verify_key, self._make_factory, load=load_model)
        self.follower = Follower(
            cfg.targets,
            pattern=cfg.pattern,
            from_end=cfg.from_end and not saved["files"],
            read_bytes=cfg.batch_bytes,
        )
        self.sink: AlertSink | None = None
        written, note = recover(self.positions, cfg.alerts, cfg.backups, self._open_sink)
        if note:
            self.log(note)
        if self.sink is None:
            self._open_sink()
        self.follower.restore(self.positions.state["files"])
        self.grouper = (
            None
            if cfg.group_by is None
            else AlertGrouper(cfg.group_by, cfg.group_window, cfg.group_cap, ecs=cfg.ecs)
        )
        self.stats = (
            None if cfg.summary_window is None else WindowStats(cfg.summary_window, ecs=cfg.ecs)
        )
        self._recent = np.empty(0)
        self._since_recal = 0
        self._held: list[dict] = []
        self._columns: dict[tuple, list[str]] = {}
        self._refused: set[str] = set()
        self._started = False
        self._pool: ThreadPoolExecutor | None = None
        self._ahead: Future | None = None
        self._positions: list[dict] = self.follower.positions()
        self._lag_bytes = 0
        self._last_model_check = float("-inf")

    # ------------------------------------------------------------------ pieces
    def _make_factory(self, det, model_id: str, digest: str) -> AlertFactory:
        thr = None
        if self._saved_threshold is not None and self._saved_digest == digest:
            thr = float(self._saved_threshold)  # a recalibrated threshold survives a restart
        return AlertFactory(
            det,
            model_id=model_id,
            model_digest=digest,
            top_k=self.cfg.top_k,
            ecs=self.cfg.ecs,
            threshold=thr,
            client_column=self.cfg.client_column,
        )

    def _open_sink(self) -> AlertSink:
        cfg = self.cfg
        self.sink = AlertSink(
            cfg.alerts, stdout=cfg.stdout, max_bytes=cfg.max_bytes, backups=cfg.backups
        )
        return self.sink

    @property
    def factory(self) -> AlertFactory:
        return self.slot.factory

    def _read_columns(self) -> list[str]:
        f = self.factory
        cols = list(dict.fromkeys([*f.needed_columns, *f.passthrough_columns]))
        return cols

    def _file_columns(self, chunk: Chunk) -> list[str]:
        key = (chunk.fmt, chunk.header) if chunk.fmt != "json" else ("json", chunk.key)
        cols = self._columns.get(key)
        if cols is None:
            if chunk.fmt == "json":
                parsed = parse_lines(
                    "json", b"", chunk.data, path=chunk.path, first_line=chunk.first_line
                )
                cols = list(parsed.frame.columns)
            else:
                cols = header_columns(chunk.fmt, chunk.header, chunk.path)
            self._columns[key] = cols
        return cols

    def known_columns(self) -> set[str] | None:
        """The columns every followed log has (for a swapped-in model)."""
        sets = [set(c) for c in self._columns.values()]
        return set.intersection(*sets) if sets else None

    def _gateway_of(self, path: Path) -> str | None:
        if self.gateway_re is None:
            return None
        m = self.gateway_re.search(str(path))
        if m is None:
            return None
        return m.groupdict().get("gateway") or (m.group(1) if m.groups() else m.group(0))

    def _bad(self, path, line: int | None, why: str) -> None:
        self.counters.bad += 1
        where = f"{path}, line {line}" if line is not None else str(path)
        if self.cfg.on_error == "stop":
            raise WatchStopped(path, f"{why} (--on-error stop)", line=line)
        self.log(f"{where}: {why}; skipped")

    def _skip_file(self, chunk: Chunk, why: str) -> None:
        """Count a file's lines as bad (reported once per file): it cannot be scored."""
        n = chunk.data.count(b"\n")
        if chunk.key not in self._refused:
            self._refused.add(chunk.key)
            self._bad(chunk.path, chunk.first_line, f"{why}; its records are not scored")
            n -= 1
        self.counters.bad += max(n, 0)

    # ------------------------------------------------------------------ one chunk
    def _parse(self, chunk: Chunk, columns: list[str] | None = None) -> ParsedLines | DataError:
        """The chunk's rows (``columns``; default: the current model's), or the error."""
        try:
            return parse_lines(
                chunk.fmt, chunk.header, chunk.data, path=chunk.path,
                first_line=chunk.first_line, columns=columns or self._read_columns(),
            )  # fmt: skip
        except DataError as exc:
            return exc

    def _read(self) -> _Read:
        """Poll the follower and parse what it hands out (run ahead by a worker thread
        while the previous batch is scored: reading and parsing overlap scoring)."""
        chunks = self.follower.poll(self.clock(), max_bytes=self.cfg.batch_bytes)
        columns = self._read_columns()
        parsed = [self._parse(c, columns) for c in chunks]
        return _Read(
            chunks, parsed, columns, self.follower.take_notes(), self.follower.positions(),
            self.follower.lag_bytes(),
        )  # fmt: skip

    def _score_chunk(self, chunk: Chunk, parsed, read_with, now: float, alerts: list[dict]) -> None:
        try:
            cols = self._file_columns(chunk)
        except DataError as exc:  # an unreadable header: that file is not scored
            self._skip_file(chunk, exc.reason)
            return
        lacking = missing_columns(self.factory, cols)
        if lacking:
            shown = ", ".join(map(repr, lacking))
            if not self._started:
                raise DataError(
                    chunk.path, f"lacks column(s) needed by the model: {shown}", column=lacking[0]
                )
            self._skip_file(chunk, f"lacks column(s) needed by the model: {shown}")
            return
        if read_with != self._read_columns():
            parsed = self._parse(chunk)  # read ahead for the model swapped in since
        if isinstance(parsed, DataError):
            self._skip_file(chunk, parsed.reason)
            return
        for line, why in parsed.bad:
            self._bad(chunk.path, line, why)
        frame, lines = parsed.frame, parsed.lines
        if chunk.fmt == "json":  # a key absent from every line of the block: missing values
            for c in self.factory.needed_columns:
                if c not in frame.columns:
                    frame[c] = pd.Series(np.nan, index=frame.index, dtype="float64")
        if len(frame) == 0:
            return
        if "ts" in frame.columns and frame["ts"].dtype.kind == "f":
            ts = frame["ts"].to_numpy()
            if np.isfinite(ts).any():
                self.counters.last_ts = float(np.nanmax(ts))
        # a client column: the factory reads each record's gateway from it
        gateway = None if self.cfg.client_column is not None else self._gateway_of(chunk.path)
        for a, b in _runs(lines):
            self._score_run(chunk, gateway, frame.iloc[a:b], lines[a:b], now, alerts)

    def _score_run(self, chunk, gateway, frame, lines, now, alerts) -> None:
        """Score consecutive lines; a value the model cannot read is reported with its
        line and that record left out (the lines around it are scored)."""
        queue = [(frame, lines)]
        while queue:
            f, ln = queue.pop(0)
            if len(f) == 0:
                continue
            try:
                batch = self.factory.score(
                    f.reset_index(drop=True),
                    gateway=gateway,
                    source=str(chunk.path),
                    first_line=int(ln[0]),
                )
            except DataError as exc:
                at = np.flatnonzero(ln == exc.line) if exc.line is not None else []
                if len(at) == 0:
                    raise
                col = f" (column {exc.column!r})" if exc.column else ""
                self._bad(chunk.path, exc.line, exc.reason + col)
                i = int(at[0])
                queue[0:0] = [(f.iloc[:i], ln[:i]), (f.iloc[i + 1 :], ln[i + 1 :])]
                continue
            self._count(batch, gateway, now)
            alerts.extend(batch.alerts)
            self._held.extend(batch.suppressed)  # suppressed alerts: audit records

    def _count(self, batch, gateway, now: float) -> None:
        self.counters.records += batch.n_records
        self.counters.alerts += len(batch.alerts)
        if self.stats is not None:
            self.stats.add(gateway, batch, now)
        if self.cfg.recalibrate_rate is not None:
            w = self.cfg.recalibrate_window
            self._recent = np.concatenate([self._recent, batch.scores])[-w:]
            self._since_recal += batch.n_records

    # ------------------------------------------------------------------ one batch
    def step(self) -> int:
        """Read, score and write one batch; returns the lines read."""
        now = self.clock()
        note = self.slot.check(self.known_columns()) if self._model_due(now) else None
        if note:
            self.log(note)
        if self._ahead is not None:
            read, self._ahead = self._ahead.result(), None
        else:
            read = self._read()
        if read.chunks and self._pool is not None and not self.stopping:
            self._ahead = self._pool.submit(self._read)
        self._lag_bytes = read.lag_bytes
        for n in read.notes:
            if n.kind in ("truncated", "gone") or self.cfg.verbose:
                self.log(n.text)
        alerts: list[dict] = []
        self._held = []  # this step's suppressed alerts (written with its alerts)
        for chunk, parsed in zip(read.chunks, read.parsed, strict=True):
            self._score_chunk(chunk, parsed, read.columns, now, alerts)
        self._started = True
        out = self._volume(alerts, now) + self._held  # never grouped nor capped
        self._held = []
        self._write(out, read.positions if read.chunks else None)
        return sum(len(c.data) for c in read.chunks)

    def _model_due(self, now: float) -> bool:
        if now - self._last_model_check < self.cfg.model_check:
            return False
        self._last_model_check = now
        return True

    def _volume(self, alerts: list[dict], now: float, final: bool = False) -> list[dict]:
        out = list(alerts) if self.grouper is None else self.grouper.add(alerts, now)
        if self.grouper is not None:
            out += self.grouper.flush(now, final=final)
        if (
            self.cfg.recalibrate_rate is not None
            and self._since_recal >= self.cfg.recalibrate_window
            and self._recent.size >= self.cfg.recalibrate_window
        ):
            out.append(self.factory.recalibrate(self._recent, self.cfg.recalibrate_rate))
            self._since_recal = 0
        if self.stats is not None:
            out += self.stats.due(now, final=final)
        return out

    def _write(self, records: list[dict], positions: list[dict] | None) -> None:
        """Write ``records`` and commit ``positions`` (those after the batch read;
        ``None``: unchanged)."""
        if positions is not None:
            self._positions = positions
        elif not records:
            return
        thr = self.factory.threshold if self.cfg.recalibrate_rate is not None else None
        self.positions.write_batch(
            self.sink,
            self.cfg.alerts,
            records,
            self._positions,
            threshold=thr,
            digest=self.slot.digest,
        )
        self.counters.written += len(records)
        self.counters.batches += 1

    # ------------------------------------------------------------------ running
    def status_line(self, elapsed: float, before: int) -> str:
        c = self.counters
        rate = (c.records - before) / elapsed if elapsed > 0 else 0.0
        lag = ""
        if c.last_ts is not None:
            lag = f", lag {max(0.0, self.clock() - c.last_ts):.1f} s"
        return (
            f"{c.records:,} records (+{c.records - before:,}, {rate:,.0f}/s), "
            f"{c.alerts:,} alerts, {c.written:,} lines written, {c.bad:,} bad lines"
            f"{lag}, {self._lag_bytes:,} bytes unread, "
            f"{len(self.follower.states)} files"
        )

    def run(self) -> int:
        """Follow until :attr:`stopping` is set (a signal) or, with ``once``, until
        everything there is read; then write what is held and save the positions."""
        cfg = self.cfg
        last_status, at_status = self.clock(), 0
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fedep-watch-read")
        try:
            while not self.stopping:
                n = self.step()
                now = self.clock()
                if cfg.status_interval > 0 and now - last_status >= cfg.status_interval:
                    self.log(self.status_line(now - last_status, at_status))
                    last_status, at_status = now, self.counters.records
                if n == 0:
                    if cfg.once:
                        break
                    time.sleep(cfg.poll_interval)
            while self._ahead is not None:  # a batch read ahead: scored before stopping
                self.step()
            now = self.clock()
            final = []
            if self.grouper is not None:
                final += self.grouper.flush(now, final=True)
            if self.stats is not None:
                final += self.stats.due(now, final=True)
            self._write(final, None)
        finally:
            if self._ahead is not None:
                self._ahead.cancel()
            self._pool.shutdown(wait=True)
            self._pool, self._ahead = None, None
            self.follower.close()
            if self.sink is not None:
                self.sink.close()
        return 0

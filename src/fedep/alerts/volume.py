"""Alert volume under control: grouping with a per-window cap, and a summary per gateway
and window so that drift is visible.

Windows are tumbling and aligned: window ``w`` covers ``[w * window_s, (w + 1) *
window_s)`` of the clock the caller passes as ``now`` (``fedep watch``: wall-clock
seconds). A window closes when ``now`` reaches its end (or at ``final``).

:class:`AlertGrouper` lets the first ``cap`` alerts of each value of a column (a
source host, a gateway ...) through per window, and at the window's end writes one
``alert_group`` record for each value that had more: how many, first and last seen,
the highest score and the ``top`` highest-scored alerts. ``cap=0`` groups every alert.
Memory is bounded: at most ``max_groups`` values per window, the rest are counted in
one group of value ``null`` marked ``"overflow": true``.

:class:`WindowStats` counts each gateway's records and alerts (before grouping) per
window and writes one ``window_summary`` record per gateway and window.
"""

from __future__ import annotations

import heapq
import math
from datetime import datetime
from typing import Any

import numpy as np

from fedep.alerts.ecs import to_ecs
from fedep.alerts.fields import ECS_NAMES

__all__ = ["AlertGrouper", "WindowStats", "field_of"]


def _path(record: dict, name: str) -> Any:
    if name in record:
        return record[name]
    node: Any = record
    for part in name.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _aliases(name: str) -> list[str]:
    """The other names of a field: its ECS name (``id.orig_h`` -> ``source.ip``), or the
    identifying fields an ECS name comes from (``source.ip`` -> ``id.orig_h``,
    ``src_ip`` ...); ``gateway`` <-> ``observer.name``."""
    if name == "gateway":
        return ["observer.name"]
    if name == "observer.name":
        return ["gateway"]
    if name in ECS_NAMES:
        return [ECS_NAMES[name]]
    return [k for k, v in ECS_NAMES.items() if v == name]


def field_of(record: dict, name: str) -> Any:
    """``record[name]``, or the nested ``record[a][b]`` for ``name = "a.b"``, or the same
    field under its other name (default or ECS: ``id.orig_h`` finds an ECS alert's
    ``source.ip`` and the reverse); None when absent."""
    v = _path(record, name)
    if v is None:
        for alias in _aliases(name):
            v = _path(record, alias)
            if v is not None:
                break
    return v


def _score(alert: dict) -> float:
    s = alert.get("score")
    if not isinstance(s, (int, float)):
        s = field_of(alert, "fedep.score")
    return float(s) if isinstance(s, (int, float)) else -math.inf


def _record_time(alert: dict, now: float) -> float:
    """The record's time: ``ts`` (epoch seconds), or an ECS alert's ``@timestamp``;
    else ``now``."""
    t = alert.get("ts")
    if isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t):
        return float(t)
    stamp = alert.get("@timestamp")
    if isinstance(stamp, str):
        try:
            return datetime.fromisoformat(stamp).timestamp()
        except ValueError:
            pass
    return float(now)


def _check_window(window_s: float) -> float:
    w = float(window_s)
    if not math.isfinite(w) or w <= 0:
        raise ValueError(f"window_s must be a positive number of seconds, not {window_s!r}")
    return w


class _Group:
    __slots__ = (
        "count", "emitted", "first", "last", "max_score", "top", "seq", "gateways", "model",
    )  # fmt: skip

    def __init__(self) -> None:
        self.count = 0
        self.emitted = 0
        self.first = math.inf
        self.last = -math.inf
        self.max_score = -math.inf
        self.top: list[tuple[float, int, dict]] = []  # min-heap of the k highest
        self.seq = 0
        self.gateways: set = set()
        self.model = None


class AlertGrouper:
    """Groups alerts by a column within a time window, with a per-window cap.

    Parameters
    ----------
    by : str
        The alert field to group by: an identifying field (``id.orig_h``,
        ``src_ip``), ``gateway``, or a dotted ECS name (``source.ip``).
    window_s : float
        Window length, seconds.
    cap : int
        Alerts of one value let through per window (0: group them all).
    top : int, default 3
        Highest-scored alerts kept in a group record.
    max_groups : int, default 10000
        Distinct values tracked per window (memory bound).
    ecs : bool, default False
        Group records under ECS names.
    """

    def __init__(
        self,
        by: str,
        window_s: float,
        cap: int,
        *,
        top: int = 3,
        max_groups: int = 10_000,
        ecs: bool = False,
    ) -> None:
        if not isinstance(by, str) or not by:
            raise ValueError("by must name an alert field")
        for name, v, low in (("cap", cap, 0), ("top", top, 0), ("max_groups", max_groups, 1)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
                raise ValueError(f"{name} must be an integer >= {low}, not {v!r}")
        self.by = by
        self.window_s = _check_window(window_s)
        self.cap = int(cap)
        self.k = int(top)
        self.max_groups = int(max_groups)
        self.ecs = bool(ecs)
        self._windows: dict[int, dict[Any, _Group]] = {}
        self.n_suppressed = 0

    def _window(self, now: float) -> int:
        if not math.isfinite(float(now)):
            raise ValueError(f"now must be a finite time in seconds, not {now!r}")
        return math.floor(float(now) / self.window_s)

    def add(self, alerts: list[dict], now: float) -> list[dict]:
        """Take alerts seen at ``now``; returns the records to write now: the group
        records of windows that have ended, then the alerts under the cap."""
        out = self.flush(now)
        w = self._window(now)
        groups = self._windows.setdefault(w, {})
        for a in alerts:
            value = field_of(a, self.by)
            if isinstance(value, (dict, list)):
                value = str(value)
            overflow = value not in groups and len(groups) >= self.max_groups
            key = ("overflow",) if overflow else value
            g = groups.get(key)
            if g is None:
                g = groups[key] = _Group()
            g.count += 1
            t = _record_time(a, now)
            g.first = min(g.first, t)
            g.last = max(g.last, t)
            s = _score(a)
            g.max_score = max(g.max_score, s)
            gw = a.get("gateway", field_of(a, "fedep.gateway"))
            if len(g.gateways) < 2:
                g.gateways.add(gw)
            g.model = a.get("model", field_of(a, "fedep.model"))
            if self.k > 0:
                item = (s, -g.seq, a)
                g.seq += 1
                if len(g.top) < self.k:
                    heapq.heappush(g.top, item)
                elif item[:2] > g.top[0][:2]:
                    heapq.heapreplace(g.top, item)
            if g.emitted < self.cap and not overflow:
                g.emitted += 1
                out.append(a)
            else:
                self.n_suppressed += 1
        return out

    def flush(self, now: float, final: bool = False) -> list[dict]:
        """Close the windows that ended by ``now`` (every window with ``final``): one
        ``alert_group`` record per value that had alerts over the cap, in order of
        window, then of first alert."""
        out = []
        for w in sorted(self._windows):
            end = (w + 1) * self.window_s
            if not final and end > float(now):
                continue
            for key, g in self._windows.pop(w).items():
                if g.count > g.emitted:
                    out.append(self._record(key, g, w))
        return out

    def _record(self, key, g: _Group, w: int) -> dict:
        overflow = key == ("overflow",)
        top = [a for _, _, a in sorted(g.top, key=lambda t: (-t[0], -t[1]))]
        rec: dict[str, Any] = {
            "event": "alert_group",
            "by": self.by,
            "value": None if overflow else key,
            "start": w * self.window_s,
            "end": (w + 1) * self.window_s,
            "count": g.count,
            "first_seen": g.first,
            "last_seen": g.last,
            "max_score": g.max_score if math.isfinite(g.max_score) else None,
            "top": top,
            "suppressed": g.count - g.emitted,
        }
        if overflow:
            rec["overflow"] = True
        if len(g.gateways) == 1:
            rec["gateway"] = next(iter(g.gateways))
        if g.model is not None:
            rec["model"] = g.model
        return to_ecs(rec) if self.ecs else rec


class _Tally:
    __slots__ = ("records", "alerts", "score_sum", "max_score", "model")

    def __init__(self) -> None:
        self.records = 0
        self.alerts = 0
        self.score_sum = 0.0
        self.max_score = -math.inf
        self.model = None


class WindowStats:
    """Per-gateway end-of-window summaries: records, alerts, share above threshold.

    Parameters
    ----------
    window_s : float
        Window length, seconds.
    ecs : bool, default False
        Summaries under ECS names (``event.kind: "metric"``).
    """

    def __init__(self, window_s: float, *, ecs: bool = False) -> None:
        self.window_s = _check_window(window_s)
        self.ecs = bool(ecs)
        self._windows: dict[int, dict[Any, _Tally]] = {}

    def add(self, gateway: str | None, batch, now: float) -> None:
        """Count a :class:`~fedep.alerts.Batch` scored at ``now`` for ``gateway`` (with
        ``gateway`` None and per-record ``batch.gateways``: for each record's own)."""
        w = math.floor(float(now) / self.window_s)
        tallies = self._windows.setdefault(w, {})
        scores = np.asarray(batch.scores, dtype=np.float64)
        flagged = np.asarray(batch.flagged, dtype=bool)
        model = getattr(batch, "model", None)
        per_row = getattr(batch, "gateways", None)
        if gateway is None and per_row is not None and len(per_row) == batch.n_records:
            names, inv = np.unique(np.asarray(per_row), return_inverse=True)
            parts = [(str(n), inv == i) for i, n in enumerate(names.tolist())]
        else:
            parts = [(gateway, slice(None))]
        for gw, rows in parts:
            t = tallies.get(gw)
            if t is None:
                t = tallies[gw] = _Tally()
            s = scores[rows]
            t.records += int(s.size)
            t.alerts += int(np.count_nonzero(flagged[rows]))
            fin = s[np.isfinite(s)]
            if fin.size:
                t.score_sum += float(fin.sum())
                t.max_score = max(t.max_score, float(fin.max()))
            if model is not None:
                t.model = model

    def due(self, now: float, final: bool = False) -> list[dict]:
        """Summaries of the windows that ended by ``now`` (all with ``final``): one
        ``window_summary`` per gateway and window, windows in order."""
        out = []
        for w in sorted(self._windows):
            end = (w + 1) * self.window_s
            if not final and end > float(now):
                continue
            tallies = self._windows.pop(w)
            for gw in sorted(tallies, key=lambda g: (g is not None, str(g))):
                t = tallies[gw]
                rec = {
                    "event": "window_summary",
                    "gateway": gw,
                    "start": w * self.window_s,
                    "end": end,
                    "records": t.records,
                    "alerts": t.alerts,
                    "share_above": t.alerts / t.records if t.records else 0.0,
                    "mean_score": t.score_sum / t.records if t.records else None,
                    "max_score": t.max_score if math.isfinite(t.max_score) else None,
                    "model": t.model,
                }
                out.append(to_ecs(rec) if self.ecs else rec)
        return out

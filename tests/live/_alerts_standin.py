"""A minimal stand-in of ``fedep.alerts`` (the contract of docs/architecture.md's floor 6
unit), used by these tests only while that unit is not on this branch."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass

import numpy as np

ID_FIELDS = ("ts", "uid", "id.orig_h", "id.orig_p", "id.resp_h", "id.resp_p", "proto", "service")


@dataclass
class Batch:
    n_records: int
    scores: np.ndarray
    flagged: np.ndarray
    alerts: list


class AlertFactory:
    def __init__(self, det, *, model_id, model_digest, top_k=3, ecs=False, threshold=None):
        self.det = det
        pipe = det.features_
        self.needed_columns = [d.name for d in pipe.decisions_ if d.used]
        self.passthrough_columns = list(ID_FIELDS)
        self.model = {"id": model_id, "digest": model_digest}
        self.threshold = float(det.threshold_ if threshold is None else threshold)

    def score(self, frame, *, gateway, source, first_line):
        X = frame.set_axis(range(first_line, first_line + len(frame)))
        scores = np.asarray(self.det.decision_function(X), dtype=np.float64)
        flagged = scores > self.threshold
        alerts = []
        for i in np.flatnonzero(flagged):
            a = {"event": "alert"}
            for c in ID_FIELDS:
                if c in frame.columns:
                    v = frame[c].iloc[i]
                    a[c] = None if v is None or v != v else (v.item() if hasattr(v, "item") else v)
            a.update(
                score=float(scores[i]),
                threshold=self.threshold,
                gateway=gateway,
                model=dict(self.model),
                log={"file": source, "line": first_line + int(i)},
            )
            alerts.append(a)
        return Batch(len(frame), scores, flagged, alerts)

    def recalibrate(self, recent_scores, target_rate):
        old = self.threshold
        self.threshold = float(np.quantile(recent_scores, 1 - target_rate))
        return {
            "event": "threshold_changed",
            "old": old,
            "new": self.threshold,
            "n_scores": int(len(recent_scores)),
            "target_rate": target_rate,
            "model": dict(self.model),
        }


class AlertSink:
    def __init__(self, path, *, stdout=False, max_bytes=None, backups=5):
        self.path, self.stdout = path, stdout
        self.fh = None if path is None else open(path, "ab")  # noqa: SIM115

    def write(self, records):
        for r in records:
            line = json.dumps(r).encode() + b"\n"
            if self.fh is not None:
                self.fh.write(line)
            if self.stdout:
                sys.stdout.buffer.write(line)

    def flush(self):
        if self.fh is not None:
            self.fh.flush()
            os.fsync(self.fh.fileno())
        if self.stdout:
            sys.stdout.flush()

    def close(self):
        if self.fh is not None:
            self.flush()
            self.fh.close()
            self.fh = None


class AlertGrouper:
    def __init__(self, by, window_s, cap):
        self.by = by

    def add(self, alerts, now):
        return list(alerts)

    def flush(self, now, final=False):
        return []


class WindowStats:
    def __init__(self, window_s):
        self.n = 0

    def add(self, gateway, batch, now):
        self.n += batch.n_records

    def due(self, now, final=False):
        return [{"event": "window_summary", "records": self.n}] if final else []

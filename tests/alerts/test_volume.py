"""AlertGrouper (caps, counts, group records) and WindowStats (window summaries)."""

from __future__ import annotations

import numpy as np
import pytest

from fedep.alerts import AlertGrouper, Batch, WindowStats
from fedep.alerts.volume import field_of


def _alert(host: str, score: float, ts: float, gw: str = "gw0") -> dict:
    return {
        "event": "alert", "ts": ts, "id.orig_h": host, "score": score, "gateway": gw,
        "model": {"id": "m", "digest": "d"},
    }  # fmt: skip


def test_grouper_caps_per_value_and_window_and_counts_the_rest():
    g = AlertGrouper("id.orig_h", window_s=10, cap=2, top=2)
    a = [_alert("A", s, 100 + i) for i, s in enumerate([1.0, 5.0, 3.0, 4.0, 2.0])]
    b = [_alert("B", 9.0, 103)]
    out = g.add(a + b, now=1.0)
    assert out == [a[0], a[1], b[0]]  # the first two of A, all of B, in order
    assert g.flush(now=9.99) == []  # the window is still open
    more = g.add([_alert("A", 7.0, 110)], now=5.0)
    assert more == []  # still over the cap
    groups = g.flush(now=10.0)
    assert groups == [
        {
            "event": "alert_group",
            "by": "id.orig_h",
            "value": "A",
            "start": 0.0,
            "end": 10.0,
            "count": 6,
            "first_seen": 100,
            "last_seen": 110,
            "max_score": 7.0,
            "top": [more_alert for more_alert in [_alert("A", 7.0, 110), a[1]]],
            "suppressed": 4,
            "gateway": "gw0",
            "model": {"id": "m", "digest": "d"},
        }
    ]  # fmt: skip  (B stayed under the cap: no group record)
    assert g.n_suppressed == 4
    assert g.add([_alert("A", 1.0, 200)], now=10.5) == [_alert("A", 1.0, 200)]  # new window


def test_cap_zero_groups_everything_and_windows_close_on_add():
    g = AlertGrouper("gateway", window_s=60, cap=0)
    assert g.add([_alert("A", 1, 1, "gw0"), _alert("B", 2, 2, "gw1")], now=0) == []
    out = g.add([_alert("C", 3, 3, "gw0")], now=61)  # the first window ended
    got = [(r["value"], r["count"], r["suppressed"]) for r in out]
    assert got == [("gw0", 1, 1), ("gw1", 1, 1)]
    final = g.flush(now=61, final=True)
    assert [(r["value"], r["count"], r["start"]) for r in final] == [("gw0", 1, 60.0)]


def test_grouper_memory_bound_and_ecs():
    g = AlertGrouper("source.ip", window_s=5, cap=1, max_groups=2, ecs=True)
    alerts = [
        {
            "@timestamp": f"2026-11-27T10:00:0{k}.500000Z", "event": {"kind": "alert"},
            "source": {"ip": ip}, "fedep": {"score": s},
        }
        for k, (ip, s) in enumerate([("1", 1.0), ("2", 2.0), ("3", 3.0), ("4", 4.0), ("1", 5.0)])
    ]  # fmt: skip
    out = g.add(alerts, now=0)
    assert [a["source"]["ip"] for a in out] == ["1", "2"]
    recs = g.flush(now=0, final=True)
    by = {r["fedep"]["value"]: r for r in recs}
    assert by[None]["fedep"]["overflow"] is True and by[None]["fedep"]["count"] == 2
    assert by["1"]["fedep"]["count"] == 2 and by["1"]["fedep"]["suppressed"] == 1
    t0 = 1795773600.5  # 2026-11-27T10:00:00.5Z: the records' own times
    assert (by["1"]["fedep"]["first_seen"], by["1"]["fedep"]["last_seen"]) == (t0, t0 + 4)
    assert all(r["event"]["kind"] == "alert" for r in recs)
    assert all(r["event"]["action"] == "alert_group" for r in recs)
    assert by["1"]["event"]["count"] == 2 and by["1"]["event"]["risk_score"] == 5.0
    with pytest.raises(ValueError, match="window_s"):
        AlertGrouper("x", 0, 1)
    with pytest.raises(ValueError, match="cap"):
        AlertGrouper("x", 1, -1)


def _batch(scores, flagged, gateways=None) -> Batch:
    s = np.asarray(scores, float)
    return Batch(len(s), s, np.asarray(flagged, bool), [], model={"id": "m"}, gateways=gateways)


def test_window_stats_per_gateway_and_window():
    w = WindowStats(window_s=10)
    w.add("gw0", _batch([1, 2, 3, 4], [0, 0, 1, 1]), now=1)
    w.add("gw1", _batch([1, 1], [0, 0]), now=2)
    w.add("gw0", _batch([5], [1]), now=9)
    w.add("gw0", _batch([1], [0]), now=12)  # next window
    assert w.due(now=9.5) == []
    first = w.due(now=10)
    assert first == [
        {
            "event": "window_summary", "gateway": "gw0", "start": 0.0, "end": 10.0,
            "records": 5, "alerts": 3, "share_above": 0.6, "mean_score": 3.0,
            "max_score": 5.0, "model": {"id": "m"},
        },
        {
            "event": "window_summary", "gateway": "gw1", "start": 0.0, "end": 10.0,
            "records": 2, "alerts": 0, "share_above": 0.0, "mean_score": 1.0,
            "max_score": 1.0, "model": {"id": "m"},
        },
    ]  # fmt: skip
    last = w.due(now=12, final=True)
    assert [(r["gateway"], r["records"], r["start"]) for r in last] == [("gw0", 1, 10.0)]
    assert w.due(now=1e9, final=True) == []


def test_window_stats_split_a_batch_by_its_records_gateways_and_ecs():
    w = WindowStats(window_s=60, ecs=True)
    gws = np.array(["b", "a", "b", "b"])
    w.add(None, _batch([1, 9, 9, 1], [0, 1, 1, 0], gateways=gws), now=0)
    recs = w.due(now=0, final=True)
    got = {r["observer"]["name"]: (r["fedep"]["records"], r["fedep"]["alerts"]) for r in recs}
    assert got == {"a": (1, 1), "b": (3, 1)}
    assert all(r["event"]["kind"] == "metric" and r["@timestamp"].endswith("Z") for r in recs)


def test_grouping_finds_a_field_under_its_other_name():
    plain = _alert("10.0.0.1", 1.0, 5)
    ecs = {"event": {"kind": "alert"}, "source": {"ip": "10.0.0.1"}, "observer": {"name": "g"}}
    assert field_of(ecs, "id.orig_h") == "10.0.0.1" == field_of(plain, "source.ip")
    assert field_of(ecs, "gateway") == "g" and field_of(plain, "observer.name") == "gw0"
    g = AlertGrouper("id.orig_h", window_s=10, cap=1)
    assert g.add([ecs, ecs, plain], now=0) == [ecs]  # one value, whichever the names
    assert g.flush(0, final=True)[0]["count"] == 3

"""The watcher in this process (fedep.live.Watcher): its alerts against a batch scoring
of the same records, bad input, hot model swap, recalibration and gateways."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

import fedep
from _zeek import FIELDS, TYPES
from fedep.data import DataError
from fedep.data.readers import read_table
from fedep.live import WatchConfig, Watcher, WatchStopped

from ._writer import ZeekWriter

SECRET = "hmac:" + "k" * 32


def config(tmp_path, targets, model, **kw) -> WatchConfig:
    kw.setdefault("status_interval", 0)
    return WatchConfig(
        targets=[str(t) for t in targets],
        model=str(model),
        alerts=str(tmp_path / "alerts.json"),
        position_file=str(tmp_path / "alerts.json.position"),
        **kw,
    )


def records(path) -> list[dict]:
    return [json.loads(x) for x in open(path)] if os.path.exists(path) else []


def alerts_of(path) -> list[dict]:
    return [r for r in records(path) if r.get("event") == "alert"]


def batch_flags(model, log) -> tuple[list[str], np.ndarray]:
    """Uids and scores of the records a batch scoring of the whole file flags."""
    det = fedep.load(model)
    df = read_table(log)
    s = det.decision_function(df)
    return df["uid"][s > det.threshold_].tolist(), s[s > det.threshold_]


def test_once_alerts_are_the_batch_scorings_anomalies(tmp_path, model):
    (logs := tmp_path / "logs").mkdir()
    w = ZeekWriter(logs, seed=1)
    w.append(300)
    w.partial()  # not complete: not scored yet
    log_lines = []
    rc = Watcher(config(tmp_path, [logs], model, once=True), log=log_lines.append).run()
    assert rc == 0 and log_lines == []  # nothing on stderr unless asked
    w.complete()
    w.append(100)
    assert Watcher(config(tmp_path, [logs], model, once=True)).run() == 0
    want_uids, want_scores = batch_flags(model, w.path)
    got = alerts_of(tmp_path / "alerts.json")
    assert len(want_uids) > 10
    assert [a["uid"] for a in got] == want_uids  # exactly once, in order
    np.testing.assert_allclose([a["score"] for a in got], want_scores, rtol=1e-9)
    lines = w.path.read_text().splitlines()
    for a in got:  # each alert names its file and line
        assert a["log"]["file"] == str(w.path)
        assert lines[a["log"]["line"] - 1].split("\t")[1] == a["uid"]


def test_a_malformed_line_is_reported_with_file_and_line_and_the_stream_goes_on(tmp_path, model):
    w = ZeekWriter(tmp_path, seed=2)
    w.append(20)
    w.raw(b"garbage line\n")
    w.append(20)
    said = []
    Watcher(config(tmp_path, [w.path], model, once=True), log=said.append).run()
    assert len(said) == 1 and f"{w.path}, line 29:" in said[0] and "skipped" in said[0]
    assert set(a["uid"] for a in alerts_of(tmp_path / "alerts.json")) == set(
        batch_flags(model, _without_line(w.path, 29, tmp_path))[0]
    )
    w.raw(b"more\tgarbage\n")
    stopper = Watcher(config(tmp_path, [w.path], model, once=True, on_error="stop"))
    with pytest.raises(WatchStopped, match=r"line 50: has 2 fields"):
        stopper.run()


def _without_line(path, n: int, tmp_path):
    lines = path.read_bytes().splitlines(keepends=True)
    out = tmp_path / "clean.log"
    out.write_bytes(b"".join(lines[: n - 1] + lines[n:]))
    return out


def test_a_model_whose_columns_the_log_lacks_is_refused_at_start(tmp_path, model):
    keep = [i for i, f in enumerate(FIELDS) if f not in ("orig_bytes", "conn_state")]
    w = ZeekWriter(tmp_path, fields=[FIELDS[i] for i in keep], types=[TYPES[i] for i in keep])
    w.append(5)
    with pytest.raises(DataError) as err:
        Watcher(config(tmp_path, [w.path], model, once=True)).run()
    msg = str(err.value)
    assert "conn_state" in msg and "orig_bytes" in msg and "\n" not in msg


def _resaved(model, tmp_path, name, threshold_scale=1.0, sign_key=None):
    det = fedep.load(model)
    det.threshold_ = det.threshold_ * threshold_scale
    out = tmp_path / name
    fedep.save(det, out, sign_key=sign_key)
    return out


def test_hot_model_swap_between_batches_and_a_refused_model_keeps_the_old(tmp_path, model):
    signed = _resaved(model, tmp_path, "signed.fedep", sign_key=SECRET)
    live = tmp_path / "live.fedep"
    shutil.copy(signed, live)
    w = ZeekWriter(tmp_path, seed=3)
    said = []
    cfg = config(tmp_path, [w.path], live, verify_key=SECRET, model_check=0)
    watcher = Watcher(cfg, log=said.append)
    w.append(200)
    watcher.step()
    first = alerts_of(tmp_path / "alerts.json")
    # a lower threshold, signed: swapped in between batches
    os.replace(_resaved(model, tmp_path, "low.fedep", 0.5, sign_key=SECRET), live)
    w.append(200)
    watcher.step()
    second = alerts_of(tmp_path / "alerts.json")[len(first) :]
    assert {a["model"]["id"] for a in first} != {a["model"]["id"] for a in second}
    assert len({a["model"]["id"] for a in second}) == 1
    assert said and "loaded" in said[-1]
    # an unsigned replacement: refused, the signed one goes on
    os.replace(_resaved(model, tmp_path, "unsigned.fedep", 0.1), live)
    w.append(200)
    watcher.step()
    third = alerts_of(tmp_path / "alerts.json")[len(first) + len(second) :]
    assert "refused" in said[-1] and "\n" not in said[-1]
    assert {a["model"]["id"] for a in third} == {a["model"]["id"] for a in second}
    rate2 = len(second) / 200
    assert len(third) / 200 < 3 * rate2 + 0.05  # not the 0.1x threshold's flood
    watcher.run_once_more = None
    watcher.follower.close()
    watcher.sink.close()


def test_recalibration_says_so_in_the_stream(tmp_path, model):
    w = ZeekWriter(tmp_path, seed=4, attack_rate=0.0)
    w.append(1000)
    cfg = config(tmp_path, [w.path], model, once=True, recalibrate_rate=0.01,
                 recalibrate_window=400, batch_bytes=20_000)  # fmt: skip
    Watcher(cfg).run()
    recs = records(tmp_path / "alerts.json")
    events = [r for r in recs if r.get("event") == "threshold_changed"]
    assert events
    current, checked = None, 0
    for r in recs:  # every alert after an event is flagged at that event's threshold
        if r.get("event") == "threshold_changed":
            current = r["new"]
        elif r.get("event") == "alert" and current is not None:
            assert r["threshold"] == pytest.approx(current) and r["score"] > current
            checked += 1
    assert checked > 0
    saved = json.loads((tmp_path / "alerts.json.position").read_text())
    assert saved["threshold"] == pytest.approx(events[-1]["new"])


def test_gateways_from_the_path(tmp_path, model):
    for gw in ("gw1", "gw2"):
        (tmp_path / gw).mkdir()
        ZeekWriter(tmp_path / gw, seed=int(gw[-1]) + 10, attack_rate=0.2).append(100)
    cfg = config(tmp_path, [str(tmp_path / "*" / "conn.log")], model, once=True,
                 gateway_pattern=r"/(?P<gateway>gw\d)/conn")  # fmt: skip
    Watcher(cfg).run()
    got = alerts_of(tmp_path / "alerts.json")
    assert {a["gateway"] for a in got} == {"gw1", "gw2"}
    for a in got:
        assert f"/{a['gateway']}/" in a["log"]["file"]


def test_json_lines_with_a_client_column_and_ecs_names(tmp_path, model):
    w = ZeekWriter(tmp_path, seed=5, attack_rate=0.2)
    df = w.pool.iloc[:200].copy()
    df["site"] = np.where(np.arange(200) % 2, "gw-a", "gw-b")
    log = tmp_path / "conn.json"
    with open(log, "w") as fh:
        for rec in df.drop(columns="label").to_dict("records"):
            if rec["service"] == "-":
                del rec["service"]  # Zeek JSON leaves unset fields out
            fh.write(json.dumps(rec) + "\n")
    cfg = config(tmp_path, [log], model, once=True, client_column="site", ecs=True)
    Watcher(cfg).run()
    got = [r for r in records(tmp_path / "alerts.json") if r["event"]["kind"] == "alert"]
    assert got
    assert {r["observer"]["name"] for r in got} == {"gw-a", "gw-b"}  # each record's gateway
    assert all(r["source"]["ip"].startswith("10.0.") for r in got)
    uids = {r["zeek"]["session_id"] for r in got}
    planted = set(df.loc[df["label"] == 1, "uid"])
    assert len(planted & uids) >= 0.8 * len(planted)


def test_grouping_and_window_summaries_account_for_every_alert(tmp_path, model):
    w = ZeekWriter(tmp_path, seed=6, attack_rate=0.3)
    w.append(300)
    plain = tmp_path / "plain"
    plain.mkdir()
    Watcher(config(plain, [w.path], model, once=True)).run()
    n_alerts = len(alerts_of(plain / "alerts.json"))
    cfg = config(tmp_path, [w.path], model, once=True, group_by="id.orig_h", group_window=1e9,
                 group_cap=1, summary_window=1e9)  # fmt: skip
    Watcher(cfg).run()
    recs = records(tmp_path / "alerts.json")
    let_through = [r for r in recs if r["event"] == "alert"]
    groups = [r for r in recs if r["event"] == "alert_group"]
    summaries = [r for r in recs if r["event"] == "window_summary"]
    assert groups and len({a["id.orig_h"] for a in let_through}) == len(let_through)
    # every alert is let through or counted in its group: none silently dropped
    assert len(let_through) + sum(g["suppressed"] for g in groups) == n_alerts
    assert sum(s["records"] for s in summaries) == 300
    assert sum(s["alerts"] for s in summaries) == n_alerts


def test_stdout_only_with_a_position_file(tmp_path, model, capfd):
    w = ZeekWriter(tmp_path, seed=7, attack_rate=0.2)
    w.append(100)
    cfg = WatchConfig(targets=[str(w.path)], model=str(model), stdout=True, once=True,
                      position_file=str(tmp_path / "pos.json"), status_interval=0)  # fmt: skip
    Watcher(cfg).run()
    out = [json.loads(x) for x in capfd.readouterr().out.splitlines()]
    assert out and all(r["event"] == "alert" for r in out)
    Watcher(cfg).run()  # nothing new: nothing printed again
    assert capfd.readouterr().out == ""


def test_the_model_file_is_read_once_at_start_and_once_per_replacement(tmp_path, model):
    live = tmp_path / "live.fedep"
    shutil.copy(model, live)
    w = ZeekWriter(tmp_path, seed=5)
    reads = []

    def load(path):
        reads.append(path)
        return fedep.load(path)

    watcher = Watcher(config(tmp_path, [w.path], live, model_check=0), load_model=load)
    w.append(50)
    watcher.step()
    assert reads == [live]  # the start-up load is the one the watcher scores with
    os.replace(_resaved(model, tmp_path, "next.fedep", 0.5), live)
    w.append(50)
    watcher.step()
    assert reads == [live, live] and watcher.slot.swaps == 1
    watcher.follower.close()
    watcher.sink.close()

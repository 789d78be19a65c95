"""``fedep fit --feedback`` with confirmed false positives, then ``fedep score``: the
alerts a benign mode suppresses are not flagged, and are written for audit, naming
the rule (``fedep.detectors.suppression``)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

import fedep
from fedep.alerts import AlertFactory
from fedep.cli import main

N = 8


def _files(tmp_path, seed=0):
    """Three gateways: normal traffic in a 3-D subspace and a tight benign mode off it
    (6 %), keyed by ``uid``; a file to score with new records of the mode and attacks."""
    rng = np.random.default_rng(seed)
    B = np.linalg.qr(rng.normal(size=(N, 3)))[0]
    odd = rng.normal(size=N)
    odd -= B @ (B.T @ odd)
    odd *= 2.5 / np.linalg.norm(odd)
    cols = [f"f{j}" for j in range(N)]
    spot = B @ [2.0, -1.0, 0.5] + odd  # a benign job's records: one place off the subspace

    def normal(m):
        return (rng.normal(size=(m, 3)) * [3, 2, 1]) @ B.T + 0.2 * rng.normal(size=(m, N))

    train, mode_uids = [], []
    for i in range(3):
        X = normal(400)
        X[:24] = spot + 0.1 * rng.normal(size=(24, N))
        df = pd.DataFrame(X, columns=cols)
        df.insert(0, "uid", [f"C{i}x{j}" for j in range(len(X))])
        p = tmp_path / f"gw{i}.csv"
        df.to_csv(p, index=False)
        train.append(str(p))
        mode_uids += [f"C{i}x{j}" for j in range(8)]  # 8 triaged per gateway
    later = spot + 0.1 * rng.normal(size=(30, N))
    attacks = -odd + 0.2 * rng.normal(size=(10, N))
    score = pd.DataFrame(np.vstack([later, attacks]), columns=cols)
    score.insert(0, "uid", [f"S{j}" for j in range(len(score))])
    sp = tmp_path / "score.csv"
    score.to_csv(sp, index=False)
    return train, mode_uids, sp


def test_fit_feedback_then_score_marks_suppressed_alerts(tmp_path, capsys):
    train, uids, sp = _files(tmp_path)
    fb = tmp_path / "fb.csv"
    fb.write_text("uid,label\n" + "".join(f"{u},benign\n" for u in uids))
    model = tmp_path / "m.fedep"
    args = ["fit", "--train", *train, "--method", "pca", "--n-components", "3"]
    args += ["--features", "numeric", "--feedback", str(fb), "uid", "--out", str(model)]
    args += ["--suppression-rules"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "suppression rules (benign modes of" in text
    det = fedep.load(model)
    assert 8 <= det.benign_counts_.sum() <= 24  # a gateway's 1-4 nearest a centre withheld

    out = tmp_path / "alerts.jsonl"
    assert main(["score", "--model", str(model), "--input", str(sp), "--output", str(out),
                 "--anomalies-only", "--quiet"]) == 0  # fmt: skip
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    suppressed = [r for r in recs if r["event"] == "suppressed"]
    alerts = [r for r in recs if r["event"] == "alert"]
    # the benign mode's new records are suppressed, each naming its rule; attacks alert
    assert len(suppressed) >= 3
    assert all(r["suppressed_by"].startswith("benign-mode-") for r in suppressed)
    assert all(r["score"] > r["threshold"] for r in suppressed)
    assert {r["uid"] for r in alerts} >= {f"S{j}" for j in range(30, 40)}
    assert not {r["uid"] for r in suppressed} & {f"S{j}" for j in range(30, 40)}
    assert [r["log"]["line"] for r in recs] == sorted(r["log"]["line"] for r in recs)

    # CSV: a suppressed alert is not flagged
    csv = tmp_path / "scored.csv"
    capsys.readouterr()
    assert main(["score", "--model", str(model), "--input", str(sp), "--output", str(csv)]) == 0
    assert "suppression rules from analyst feedback" in capsys.readouterr().err
    scored = pd.read_csv(csv)
    flagged = set(scored.loc[scored["is_anomaly"] == 1, "uid"])
    assert not flagged & {r["uid"] for r in suppressed}
    assert flagged == {r["uid"] for r in alerts}

    # fedep watch's factory: suppressed alerts are audit records, ECS names included
    factory = AlertFactory(det, model_id="m", model_digest="d", ecs=True)
    frame = pd.read_csv(sp)
    batch = factory.score(frame, gateway=None, source=str(sp), first_line=2)
    assert len(batch.suppressed) == len(suppressed) and len(batch.alerts) == len(alerts)
    for r in batch.suppressed:
        assert r["event"]["action"] == "suppressed" and r["event"]["kind"] == "event"
        assert r["fedep"]["suppressed_by"].startswith("benign-mode-")


def test_feedback_learns_no_rules_unless_asked(tmp_path, capsys):
    train, uids, _sp = _files(tmp_path)
    fb = tmp_path / "fb.csv"
    fb.write_text("uid,label\n" + "".join(f"{u},benign\n" for u in uids))
    model = tmp_path / "m.fedep"
    args = ["fit", "--train", *train, "--method", "pca", "--n-components", "3"]
    args += ["--features", "numeric", "--feedback", str(fb), "uid", "--out", str(model)]
    assert main(args) == 0
    assert "suppression rule" not in capsys.readouterr().out
    assert getattr(fedep.load(model), "benign_centres_", None) is None

"""The README's examples run as written: the Python snippet, and the own-Zeek-logs walkthrough
on logs made here with known attacks. (The `fedep federate` line is run by
``tests/flower/test_federate.py``; the two set-up commands are what ``.ci/run`` runs.)"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pandas as pd

from _zeek import flows, write_zeek
from fedep._procs import stop_group

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _blocks(lang: str, after: str) -> list[str]:
    """The fenced ``lang`` blocks of the README section whose heading is ``after``."""
    part = README.split(f"## {after}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{lang}\n(.*?)```", part, flags=re.S)


def _run(cmd: list[str], cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    """``cmd`` in its own process group; on a timeout the group is terminated, then killed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "MPLBACKEND": "Agg"}
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        out, err = stop_group(proc, grace=10)
        raise AssertionError(f"{cmd} ran past {timeout} s: {err[-2000:]}") from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _fedep_argv(line: str) -> list[str]:
    argv = shlex.split(line)
    assert argv[0] == "fedep", line
    return [sys.executable, "-m", "fedep", *argv[1:]]


def _zeek_logs(tmp_path: Path) -> pd.DataFrame:
    """Three gateways' training logs under ``logs/`` and one gateway's day with 5 %
    attacks under ``today/`` (returned, with its labels)."""
    (logs := tmp_path / "logs").mkdir()
    for i, site in enumerate(("site-a", "site-b", "site-c")):
        write_zeek(flows(600, seed=i), logs / f"{site}.conn.log")
    (tmp_path / "today").mkdir()
    today = flows(400, seed=9, attack_rate=0.05, t0=1.8e9)
    write_zeek(today, tmp_path / "today" / "site-a.conn.log")
    return today


def test_the_python_snippet_runs(tmp_path):
    (code,) = _blocks("python", "Use it from Python")
    proc = _run([sys.executable, "-c", code], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.match(r"\d+ r=\d+: ", proc.stdout), proc.stdout
    assert (tmp_path / "model.fedep").is_file()


def test_the_zeek_walkthrough_runs_and_flags_the_attacks(tmp_path):
    today = _zeek_logs(tmp_path)
    commands, alerts = _blocks("bash", "Your own Zeek logs")
    lines = [ln for ln in commands.splitlines() if ln.strip() and not ln.startswith("#")]
    assert [ln.split()[:2] for ln in lines] == [["fedep", "fit"], ["fedep", "score"]]
    for line in lines:
        proc = _run(_fedep_argv(line), tmp_path)
        assert proc.returncode == 0, (line, proc.stderr[-3000:])
        assert "Traceback" not in proc.stderr
    scored = pd.read_csv(tmp_path / "scored.csv")
    assert len(scored) == len(today)
    assert {"uid", "anomaly_score", "is_anomaly", "top_features"} <= set(scored.columns)
    # the attacks made here (large uploads, no response) are flagged far more often
    attack = today["label"].to_numpy() == 1
    flagged = scored["is_anomaly"].to_numpy() == 1
    assert flagged[attack].mean() > 0.8 and flagged[~attack].mean() < 0.2
    (shown,) = [ln for ln in alerts.splitlines() if ln.strip()]
    argv = shlex.split(shown)
    assert argv[:2] == ["python", "-c"]
    proc = _run([sys.executable, *argv[1:]], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "anomaly_score" in proc.stdout
    assert any(u in proc.stdout for u in scored.loc[flagged, "uid"])
    assert not any(u in proc.stdout for u in scored.loc[~flagged, "uid"])


def test_the_live_section_runs_and_alerts_on_the_attacks(tmp_path):
    """The README's ``fedep watch`` line, after the walkthrough's fit: one JSON alert per
    flagged record, naming the record by its Zeek uid, mostly the attacks made here."""
    today = _zeek_logs(tmp_path)
    commands, _ = _blocks("bash", "Your own Zeek logs")
    fit = [ln for ln in commands.splitlines() if ln.startswith("fedep fit")]
    (live,) = _blocks("bash", "Live logs and alerts")
    (watch,) = [ln for ln in live.splitlines() if ln.strip()]
    assert watch.split()[:2] == ["fedep", "watch"]
    for line in [*fit, watch]:
        proc = _run(_fedep_argv(line), tmp_path)
        assert proc.returncode == 0, (line, proc.stderr[-3000:])
        assert "Traceback" not in proc.stderr
    alerts = [json.loads(ln) for ln in (tmp_path / "alerts.jsonl").read_text().splitlines()]
    alerts = [a for a in alerts if a.get("event") == "alert"]
    assert alerts and all({"uid", "score", "threshold", "model"} <= set(a) for a in alerts)
    uids = {a["uid"] for a in alerts}
    assert len(uids) == len(alerts)  # one alert per record
    attack = set(today.loc[today["label"] == 1, "uid"])
    benign = set(today["uid"]) - attack
    assert len(uids & attack) > 0.8 * len(attack)
    assert len(uids & benign) < 0.2 * len(benign)

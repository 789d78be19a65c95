"""``fedep score`` JSON lines (the alerts of ``fedep watch``), ``--anomalies-only``,
``--ecs`` and ``--output -``: record for record the CSV output's anomalies."""

from __future__ import annotations

import csv
import json

import pandas as pd
import pytest

from fedep.cli import main

from ._helpers import one_error_line


def _score(files, inp, out, *extra) -> int:
    args = ["score", "--model", str(files.model), "--input", str(inp)]
    return main([*args, "--output", str(out), "--quiet", *extra])


@pytest.fixture(scope="module")
def inputs(files, tmp_path_factory):
    """The test records with a Zeek-like ``uid``: as CSV (streamed) and as TSV (read as
    a table)."""
    d = tmp_path_factory.mktemp("jsonl")
    df = pd.read_csv(files.test, dtype=str, keep_default_na=False)
    df.insert(0, "uid", [f"C{i:05d}" for i in range(len(df))])
    df.to_csv(d / "t.csv", index=False)
    df.to_csv(d / "t.tsv", index=False, sep="\t")
    return d


def _lines(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.mark.parametrize("suffix", ["csv", "tsv"])
def test_jsonl_alerts_are_the_csv_anomalies_record_for_record(files, inputs, tmp_path, suffix):
    inp = inputs / f"t.{suffix}"
    assert _score(files, inp, tmp_path / "o.csv", "--client-column", "host") == 0
    assert _score(files, inp, tmp_path / "a.jsonl", "--client-column", "host",
                  "--anomalies-only") == 0  # fmt: skip
    res = pd.read_csv(tmp_path / "o.csv", dtype=str, keep_default_na=False)
    flagged = res[res["is_anomaly"] == "1"]
    alerts = _lines(tmp_path / "a.jsonl")
    assert 0 < len(alerts) == len(flagged) < len(res)
    where = "line" if suffix == "csv" else "row"
    first = 2 if suffix == "csv" else 1  # CSV lines count the header
    for a, (i, row) in zip(alerts, flagged.iterrows(), strict=True):
        assert a["event"] == "alert"
        assert a["uid"] == row["uid"]
        assert a["log"] == {"file": str(inp), where: first + i}
        assert f"{a['score']:.10g}" == row["anomaly_score"]
        assert f"{a['probability']:.4g}" == row["anomaly_probability"]
        names = [t.split(":")[0] for t in row["top_features"].split(";")]
        assert [t["feature"] for t in a["top_features"]] == names
        assert a["gateway"] == row["host"]
        assert a["model"]["digest"] and a["model"]["id"].startswith("fedep-")
    # every record: one line each, flagged as in the CSV
    assert _score(files, inp, tmp_path / "all.ndjson", "--client-column", "host") == 0
    every = _lines(tmp_path / "all.ndjson")  # .ndjson: JSON lines without --output-format
    assert [r["event"] == "alert" for r in every] == (res["is_anomaly"] == "1").tolist()
    assert [r for r in every if r["event"] == "alert"] == alerts


@pytest.mark.parametrize("suffix", ["csv", "tsv"])
def test_csv_anomalies_only_keeps_the_flagged_rows(files, inputs, tmp_path, suffix):
    inp = inputs / f"t.{suffix}"
    assert _score(files, inp, tmp_path / "o.csv") == 0
    assert _score(files, inp, tmp_path / "a.csv", "--anomalies-only") == 0
    full = (tmp_path / "o.csv").read_text().splitlines()
    kept = (tmp_path / "a.csv").read_text().splitlines()
    assert kept[0] == full[0]
    assert kept[1:] == [ln for ln in full[1:] if next(csv.reader([ln]))[-3] == "1"]
    assert 0 < len(kept) - 1 < len(full) - 1


def test_output_dash_writes_to_stdout_only(files, inputs, tmp_path, capsys):
    inp = inputs / "t.csv"
    for extra, name in ([], "o.csv"), (["--output-format", "jsonl", "--ecs"], "o.jsonl"):
        assert _score(files, inp, tmp_path / name, *extra) == 0
        capsys.readouterr()
        args = ["score", "--model", str(files.model), "--input", str(inp), "--output", "-"]
        assert main([*args, *extra]) == 0  # the summary line too: on stderr
        cap = capsys.readouterr()
        assert cap.out == (tmp_path / name).read_text()
        assert "scored" in cap.err and "written to stdout" in cap.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.csv", "o.jsonl"]


def test_ecs_lines(files, inputs, tmp_path):
    out = tmp_path / "e.jsonl"
    assert _score(files, inputs / "t.csv", out, "--ecs", "--anomalies-only") == 0
    plain = tmp_path / "p.jsonl"
    assert _score(files, inputs / "t.csv", plain, "--anomalies-only") == 0
    for e, a in zip(_lines(out), _lines(plain), strict=True):
        assert e["event"]["kind"] == "alert"
        assert e["zeek"]["session_id"] == a["uid"]
        assert e["fedep"]["score"] == a["score"] == e["event"]["risk_score"]
        assert e["rule"] == {**e["rule"], "id": a["model"]["id"], "version": a["model"]["digest"]}
        assert e["log"]["file"]["path"] == a["log"]["file"]


def test_ecs_needs_json_lines(files, inputs, tmp_path, capsys):
    assert _score(files, inputs / "t.csv", tmp_path / "o.csv", "--ecs") != 0
    assert "--ecs" in one_error_line(capsys)
    assert not (tmp_path / "o.csv").exists()


def test_a_zeek_logs_alerts_name_its_lines_and_fields(tmp_path):
    from _zeek import flows, write_zeek  # tests/ is on sys.path (see tests/_zeek.py)

    train, log = tmp_path / "train.log", tmp_path / "conn.log"
    write_zeek(flows(400, 0), train)
    test = flows(200, 1, attack_rate=0.1)
    write_zeek(test, log)
    model = tmp_path / "m.fedep"
    assert main(["fit", "--train", str(train), "--random-state", "0", "--quiet",
                 "--out", str(model)]) == 0  # fmt: skip
    out = tmp_path / "a.jsonl"
    args = ["score", "--model", str(model), "--input", str(log), "--quiet"]
    assert main([*args, "--output", str(out), "--anomalies-only"]) == 0
    alerts = _lines(out)
    assert alerts and all(a["event"] == "alert" for a in alerts)
    lines = log.read_text().splitlines()
    for a in alerts:
        cells = lines[a["log"]["line"] - 1].split("\t")  # the record's own line
        assert cells[1] == a["uid"] and cells[2] == a["id.orig_h"]
        assert int(cells[3]) == a["id.resp_p"] and float(cells[0]) == a["ts"]
        assert a["service"] == (None if cells[5] == "-" else cells[5])
    assert main([*args, "--output", str(tmp_path / "o.csv")]) == 0
    res = pd.read_csv(tmp_path / "o.csv", dtype=str, keep_default_na=False)
    assert [a["uid"] for a in alerts] == res.loc[res["is_anomaly"] == "1", "uid"].tolist()

"""``fedep data summary|verify``, ``fedep reproduce`` and ``fedep --version``."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import fedep
from fedep.cli import main


def test_version(capsys):
    assert main(["--version"]) == 0
    assert fedep.__version__ in capsys.readouterr().out


def test_data_summary_and_verify(files, tmp_path, capsys):
    args = ["data", "summary", "--train", str(files.train), "--label-column", "label"]
    assert main([*args, "--clients", "4", "--partition", "iid"]) == 0
    out = capsys.readouterr().out
    assert "4 clients, 155 rows" in out and "attack_share" in out
    assert main(["data", "verify", "--data-dir", str(tmp_path)]) == 1  # nothing there
    assert "MISSING" in capsys.readouterr().out


def test_data_summary_random_state_changes_iid_partition(files, capsys):
    args = ["data", "summary", "--train", str(files.train), "--label-column", "label"]
    args += ["--clients", "4", "--partition", "iid"]
    outs = []
    for seed in ("0", "0", "5"):
        assert main([*args, "--random-state", seed]) == 0
        outs.append(capsys.readouterr().out)
    assert main(args) == 0  # default seed 0
    assert capsys.readouterr().out == outs[0] == outs[1]
    assert outs[2] != outs[0]


def test_reproduce_calls_run_reproduce(tmp_path, monkeypatch, capsys):
    calls = {}

    def fake(out_dir, *, quick=False, data_dir=None, datasets=None, seeds=None, log=print):
        calls.update(out_dir=out_dir, quick=quick, datasets=datasets, seeds=seeds)
        log("working")
        return Path(out_dir)

    mod = types.ModuleType("fedep.evaluation.reproduce")
    mod.run_reproduce = fake
    monkeypatch.setitem(sys.modules, "fedep.evaluation.reproduce", mod)
    rc = main(["reproduce", "--out", str(tmp_path), "--quick", "--datasets", "nsl-kdd",
               "--seeds", "1", "2"])  # fmt: skip
    assert rc == 0
    assert calls == {"out_dir": tmp_path, "quick": True, "datasets": ["nsl-kdd"], "seeds": [1, 2]}
    assert "working" in capsys.readouterr().out


def test_data_summary_does_not_rank_columns_fit_drops(tmp_path, capsys):
    from _zeek import flows

    # two gateways a day apart: `ts` differs most between them, but fit drops it
    flows(200, seed=1).drop(columns="label").to_csv(tmp_path / "a.csv", index=False)
    later = flows(200, seed=2, t0=1.7e9 + 86400 * 30).drop(columns="label")
    later.to_csv(tmp_path / "b.csv", index=False)
    files = [str(tmp_path / "a.csv"), str(tmp_path / "b.csv")]
    assert main(["data", "summary", "--train", *files]) == 0
    out = capsys.readouterr().out
    table = [ln.split() for ln in out.splitlines() if ln.split()[:1] in (["a"], ["b"])]
    assert len(table) == 2
    assert {row[-1] for row in table} <= {"duration", "orig_bytes", "resp_bytes"}
    assert "not ranked, fit drops them (feature pipeline): ts, uid, id.orig_h, id.resp_p" in out

"""User errors: one ``fedep: error:`` line, status 1, no traceback, no partial output."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from fedep.cli import main

from ._helpers import one_error_line


def _score_args(files, inp, out, model=None):
    return ["score", "--model", str(model or files.model), "--input", str(inp),
            "--output", str(out)]  # fmt: skip


def test_error_missing_input(files, tmp_path, capsys):
    assert main([*_score_args(files, files.test, tmp_path / "o.csv"), "--quiet"]) == 0
    capsys.readouterr()
    assert main(_score_args(files, tmp_path / "nope.csv", tmp_path / "o2.csv")) == 1
    assert "nope.csv" in one_error_line(capsys)


def test_error_unknown_column(files, tmp_path, capsys):
    rc = main(["fit", "--train", str(files.train), "--label-column", "nosuch",
               "--out", str(tmp_path / "m.fedep")])  # fmt: skip
    assert rc == 1
    assert "nosuch" in one_error_line(capsys)
    assert not (tmp_path / "m.fedep").exists()


def test_error_corrupt_model(files, tmp_path, capsys):
    bad = tmp_path / "bad.fedep"
    data = bytearray(files.model.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = b"\0" * 64
    bad.write_bytes(bytes(data))
    assert main(_score_args(files, files.test, tmp_path / "o.csv", model=bad)) == 1
    assert "bad.fedep" in one_error_line(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.fedep"]


def test_error_wrong_number_of_features(files, tmp_path, capsys):
    short = tmp_path / "short.csv"
    pd.read_csv(files.test).drop(columns=["f3"]).to_csv(short, index=False)
    assert main(_score_args(files, short, tmp_path / "o.csv")) == 1
    assert "f3" in one_error_line(capsys)
    rc = main(["evaluate", "--model", str(files.model), "--test", str(short),
               "--label-column", "label", "--normal-label", "normal"])  # fmt: skip
    assert rc == 1
    assert "f3" in one_error_line(capsys)


def test_error_bad_value_names_line_and_column(files, tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    lines = files.test.read_text().splitlines()
    cells = lines[9].split(",")
    cells[3] = "abc"  # column f1 (host, note="x", f0, f1, ...)
    lines[9] = ",".join(cells)
    bad.write_text("\n".join(lines) + "\n")
    out = tmp_path / "o.csv"
    assert main([*_score_args(files, bad, out), "--chunksize", "4"]) == 1
    msg = one_error_line(capsys)
    assert "line 10" in msg and "'f1'" in msg and "abc" in msg
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.csv"]


def test_error_malformed_row(files, tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    lines = files.test.read_text().splitlines()
    lines[5] += ",1,2"
    bad.write_text("\n".join(lines) + "\n")
    assert main(_score_args(files, bad, tmp_path / "o.csv")) == 1
    msg = one_error_line(capsys)
    assert "line 6" in msg and "wrong number of fields: expected 9, found 11" in msg


def test_error_output_column_clash(files, tmp_path, capsys):
    inp = tmp_path / "in.csv"
    pd.read_csv(files.test).assign(anomaly_score=1.0).to_csv(inp, index=False)
    assert main(_score_args(files, inp, tmp_path / "o.csv")) == 1
    assert "anomaly_score" in one_error_line(capsys)


def test_error_options(files, tmp_path, capsys):
    out = str(tmp_path / "m.fedep")
    rc = main(["fit", "--train", str(files.train), "--protocol", "clean", "--out", out])
    assert rc == 1 and "label" in one_error_line(capsys)
    rc = main(["fit", "--train", str(files.train), "--lr", "0.1", "--out", out])
    assert rc == 1 and "lr does not apply to method fedep" in one_error_line(capsys)
    rc = main(["fit", "--dataset", "kdd99", "--out", out])
    assert rc == 1 and "kdd99" in one_error_line(capsys)
    rc = main(["fit", "--train", str(files.train), "--client-column", "host",
               "--n-components", "99", "--quiet", "--out", out])  # fmt: skip
    assert rc == 1 and "n_components" in one_error_line(capsys)


@pytest.mark.parametrize(
    "old",
    [["--rank", "2"], ["--rounds", "3"], ["--seed", "1"], ["--dirichlet-alpha", "0.5"]],
)
def test_old_spellings_are_gone(files, tmp_path, capsys, old):
    rc = main(["fit", "--train", str(files.train), *old, "--out", str(tmp_path / "m")])
    assert rc == 2  # argparse: unrecognized arguments
    assert old[0] in capsys.readouterr().err


def test_console_script_error_exit_code(files, tmp_path):
    exe = Path(sys.executable).parent / "fedep"
    if not exe.exists():
        pytest.skip("fedep console script not installed in this environment")
    proc = subprocess.run(
        [str(exe), *_score_args(files, files.test, tmp_path / "o.csv",
                                model=tmp_path / "missing.fedep")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("fedep: error: ")
    assert "missing.fedep" in lines[0]


@pytest.mark.parametrize("module", ["fedep.cli", "fedep"])
def test_python_m_fedep_cli(tmp_path, module):
    proc = subprocess.run(
        [sys.executable, "-m", module, "fit", "--train", str(tmp_path / "x.csv"),
         "--alpha", "-1", "--out", str(tmp_path / "m")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.startswith("fedep: error: The 'alpha' parameter of FedEP")


@pytest.mark.parametrize("what", ["executable", "package"])
def test_federate_without_flower_is_one_line_and_leaves_no_out(files, tmp_path, monkeypatch,
                                                               capsys, what):  # fmt: skip
    import importlib.util

    find_spec = importlib.util.find_spec
    if what == "executable":  # flwr importable, its programs nowhere to be found
        flwr = object()  # whether or not this environment has it
        bare = tmp_path / "bare-bin"
        bare.mkdir()
        monkeypatch.setattr(sys, "executable", str(bare / "python"))
        monkeypatch.setenv("PATH", str(bare))
    else:
        flwr = None
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: flwr if n == "flwr" else find_spec(n, *a)
    )
    out = tmp_path / "run"
    argv = ["federate", "--gateways", "2", "--train", str(files.train), str(files.test)]
    assert main([*argv, "--out", str(out)]) == 1
    line = one_error_line(capsys)
    assert "Flower is not installed: pip install 'fedep[flower]'" in line
    assert ("flower-superlink" in line) if what == "executable" else ("no flwr package" in line)
    assert not out.exists()

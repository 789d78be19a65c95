"""Tests of the ``fedep`` command line, on small synthetic CSV files."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import fedep
from fedep.cli import main
from fedep.data import make_federated_data

N_FEATURES = 6
FEATURES = [f"f{j}" for j in range(N_FEATURES)]


def _frame(X, groups, labels):
    df = pd.DataFrame(X, columns=FEATURES)
    df.insert(0, "host", [f"gw{g}" for g in groups])
    df.insert(1, "note", ["ok, fine" if i % 5 == 0 else "x" for i in range(len(df))])
    df["label"] = labels
    return df


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Train/test CSVs (clients in column ``host``) and a model fitted by the CLI."""
    d = tmp_path_factory.mktemp("cli")
    fed = make_federated_data(
        n_clients=3,
        n_features=N_FEATURES,
        n_components=2,
        n_samples=50,
        corruption_rate=0.0,
        n_test_per_client=20,
        anomaly_rate=0.3,
        anomaly_scale=3.0,
        random_state=1,
    )
    train = _frame(fed.X_train, fed.groups_train, 0)
    # a few training attacks, dropped by the clean protocol
    att = _frame(fed.X_test[fed.y_test == 1][:5], fed.groups_test[fed.y_test == 1][:5], 1)
    pd.concat([train, att]).to_csv(d / "train.csv", index=False)
    labels = np.where(
        fed.y_test == 1, np.where(np.arange(fed.y_test.size) % 2, "scan", "dos"), "normal"
    )
    _frame(fed.X_test, fed.groups_test, labels).to_csv(d / "test.csv", index=False)
    model = d / "model.fedep"
    rc = main(
        [
            "fit", "--train", str(d / "train.csv"), "--label-column", "label",
            "--client-column", "host", "--rank", "2", "--rounds", "15", "--quiet",
            "--out", str(model),
        ]
    )  # fmt: skip
    assert rc == 0
    return types.SimpleNamespace(dir=d, train=d / "train.csv", test=d / "test.csv", model=model)


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("fedep: error: "), err
    assert "Traceback" not in err
    return lines[0]


# ----------------------------------------------------------------------------- fit
def test_fit_writes_model_with_feature_names_and_clients(files, capsys):
    det = fedep.load(files.model)
    assert type(det).__name__ == "FedEP"
    assert list(det.feature_names_in_) == FEATURES
    assert sorted(det.clients_.tolist()) == ["gw0", "gw1", "gw2"]
    assert det.components_.shape == (2, N_FEATURES)


def test_fit_prints_progress_lines_and_summary(files, tmp_path, capsys):
    out = tmp_path / "m.fedep"
    args = ["fit", "--train", str(files.train), "--label-column", "label"]
    args += ["--clients", "3", "--partition", "iid", "--rounds", "4", "--tol", "0"]
    assert main([*args, "--rank", "2", "--out", str(out)]) == 0
    cap = capsys.readouterr()
    rounds = [ln for ln in cap.err.splitlines() if "round " in ln and "/4" in ln]
    assert len(rounds) == 4  # plain lines when not a TTY, one per round
    assert "4 rounds" in cap.out and "stop reason: max_rounds" in cap.out
    det = fedep.load(out)
    assert det.n_iter_ == 4 and det.clients_.size == 3


@pytest.mark.parametrize(
    ("method", "cls"),
    [("fedpg", "FedPG"), ("case1", "FedEP"), ("pca", "PooledPCA"),
     ("local-pca", "LocalPCA"), ("oneshot", "OneShotPCA")],
)  # fmt: skip
def test_fit_methods(files, tmp_path, method, cls):
    out = tmp_path / "m.fedep"
    args = ["fit", "--train", str(files.train), "--label-column", "label", "--client-column"]
    rounds = ["--rounds", "3"] if method in ("fedpg", "case1") else []
    rc = main([*args, "host", "--method", method, "--rank", "2", *rounds, "--quiet",
               "--out", str(out)])  # fmt: skip
    assert rc == 0
    det = fedep.load(out)
    assert type(det).__name__ == cls
    if method == "case1":
        assert det.sparse_corruption is False and det.beta == 0.0


def test_fit_clean_protocol_drops_attacks(files, tmp_path, capsys):
    out = tmp_path / "m.fedep"
    base = ["fit", "--train", str(files.train), "--label-column", "label", "--quiet"]
    assert main([*base, "--protocol", "clean", "--rank", "2", "--out", str(out)]) == 0
    assert "150 training rows" in capsys.readouterr().out
    assert main([*base, "--protocol", "contaminated", "--rank", "2", "--out", str(out)]) == 0
    assert "155 training rows" in capsys.readouterr().out


# ----------------------------------------------------------------------------- score
def _score(files, out, *extra):
    args = ["score", "--model", str(files.model), "--input", str(files.test)]
    return main([*args, "--output", str(out), "--quiet", *extra])


def test_score_appends_columns_and_keeps_rows(files, tmp_path):
    out = tmp_path / "scored.csv"
    assert _score(files, out, "--client-column", "host") == 0
    src = pd.read_csv(files.test, dtype=str, keep_default_na=False)
    res = pd.read_csv(out, dtype=str, keep_default_na=False)
    assert list(res.columns) == [*src.columns, "anomaly_score", "is_anomaly", "top_features"]
    assert len(res) == len(src)
    pd.testing.assert_frame_equal(res[src.columns], src)  # original text untouched
    det = fedep.load(files.model)
    X = pd.read_csv(files.test)[FEATURES]
    groups = src["host"].to_numpy(dtype=str)
    np.testing.assert_allclose(
        res["anomaly_score"].astype(float), det.decision_function(X, groups), rtol=1e-8
    )
    np.testing.assert_array_equal(res["is_anomaly"].astype(int), det.predict(X, groups))
    # without the client column, the global basis scores every row
    out2 = tmp_path / "global.csv"
    assert _score(files, out2) == 0
    np.testing.assert_allclose(
        pd.read_csv(out2)["anomaly_score"], det.decision_function(X), rtol=1e-8
    )


def test_score_top_features(files, tmp_path):
    out = tmp_path / "scored.csv"
    assert _score(files, out, "--top-features", "2") == 0
    res = pd.read_csv(out)
    det = fedep.load(files.model)
    contrib = det.feature_contributions(pd.read_csv(files.test)[FEATURES])
    for i, text in enumerate(res["top_features"]):
        items = [p.split(":") for p in text.split(";")]
        assert len(items) == 2
        assert items[0][0] == FEATURES[int(np.argmax(contrib[i]))]
        vals = [float(v) for _, v in items]
        assert vals[0] >= vals[1]
        np.testing.assert_allclose(vals[0], contrib[i].max(), rtol=1e-3)


def test_score_streaming_matches_single_chunk(files, tmp_path):
    one, many = tmp_path / "one.csv", tmp_path / "many.csv"
    assert _score(files, one, "--client-column", "host", "--chunksize", "1000000") == 0
    assert _score(files, many, "--client-column", "host", "--chunksize", "7") == 0
    assert one.read_bytes() == many.read_bytes()


# ----------------------------------------------------------------------------- evaluate
def test_evaluate_json(files, capsys):
    args = ["evaluate", "--model", str(files.model), "--test", str(files.test)]
    assert main([*args, "--label-column", "label", "--normal-label", "normal", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    det = fedep.load(files.model)
    assert res["model"]["threshold"] == pytest.approx(det.threshold_)
    assert res["n_test"] == 60
    assert res["model"]["roc_auc"] > 0.9  # planted anomalies are far off the subspace
    assert res["trivial"]["rec"] == 1.0
    assert res["test_tuned"]["f1"] >= res["model"]["f1"]
    assert set(res["per_class_recall"]) == {"normal", "scan", "dos"}


def test_evaluate_personalised_matches_predict(files, capsys):
    args = ["evaluate", "--model", str(files.model), "--test", str(files.test)]
    args += ["--label-column", "label", "--normal-label", "normal", "--json"]
    assert main([*args, "--client-column", "host"]) == 0
    res = json.loads(capsys.readouterr().out)
    det = fedep.load(files.model)
    df = pd.read_csv(files.test)
    groups = df["host"].to_numpy(dtype=str)
    y = (df["label"] != "normal").to_numpy(dtype=int)
    pred = det.predict(df[FEATURES], groups)
    assert res["model"]["tp"] == int(np.sum((pred == 1) & (y == 1)))
    assert res["model"]["fp"] == int(np.sum((pred == 1) & (y == 0)))
    assert res["model"]["threshold"] is None  # one threshold per gateway
    assert res["personalised"] == {
        "client_column": "host",
        "rows_of_known_clients": 60,
        "rows_scored_globally": 0,
    }
    assert main(args) == 0  # without the column: the global basis and threshold
    glob = json.loads(capsys.readouterr().out)
    assert glob["personalised"] is None
    assert glob["model"]["threshold"] == pytest.approx(det.threshold_)


def test_evaluate_client_column_needs_test_table(files, capsys):
    args = ["evaluate", "--model", str(files.model), "--dataset", "nsl-kdd"]
    rc = main([*args, "--client-column", "host"])
    assert rc != 0
    assert "--client-column" in _one_error_line(capsys)


def test_evaluate_table(files, capsys):
    args = ["evaluate", "--model", str(files.model), "--test", str(files.test)]
    assert main([*args, "--label-column", "label", "--normal-label", "normal"]) == 0
    out = capsys.readouterr().out
    assert "model (training threshold)" in out
    assert "trivial all-attack detector" in out
    assert "test-tuned (as in the paper" in out
    assert "roc_auc" in out and "pr_auc" in out
    assert any(ln.strip().startswith("scan") for ln in out.splitlines())


# ----------------------------------------------------------------------------- errors
def test_error_missing_input(files, tmp_path, capsys):
    assert _score(files, tmp_path / "o.csv") == 0  # sanity: the real input works
    capsys.readouterr()
    rc = main(["score", "--model", str(files.model), "--input", str(tmp_path / "nope.csv"),
               "--output", str(tmp_path / "o2.csv")])  # fmt: skip
    assert rc != 0
    assert "nope.csv" in _one_error_line(capsys)


def test_error_unknown_column(files, tmp_path, capsys):
    rc = main(["fit", "--train", str(files.train), "--label-column", "nosuch",
               "--out", str(tmp_path / "m.fedep")])  # fmt: skip
    assert rc != 0
    assert "nosuch" in _one_error_line(capsys)
    assert not (tmp_path / "m.fedep").exists()


def test_error_corrupt_model(files, tmp_path, capsys):
    bad = tmp_path / "bad.fedep"
    data = bytearray(files.model.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = b"\0" * 64
    bad.write_bytes(bytes(data))
    rc = main(["score", "--model", str(bad), "--input", str(files.test),
               "--output", str(tmp_path / "o.csv")])  # fmt: skip
    assert rc != 0
    assert "bad.fedep" in _one_error_line(capsys)
    assert not (tmp_path / "o.csv").exists()


def test_error_wrong_number_of_features(files, tmp_path, capsys):
    short = tmp_path / "short.csv"
    pd.read_csv(files.test).drop(columns=["f3"]).to_csv(short, index=False)
    rc = main(["score", "--model", str(files.model), "--input", str(short),
               "--output", str(tmp_path / "o.csv")])  # fmt: skip
    assert rc != 0
    assert "f3" in _one_error_line(capsys)
    rc = main(["evaluate", "--model", str(files.model), "--test", str(short),
               "--label-column", "label", "--normal-label", "normal"])  # fmt: skip
    assert rc != 0
    assert "f3" in _one_error_line(capsys)


def test_error_bad_value_names_line_and_column(files, tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    lines = files.test.read_text().splitlines()
    cells = lines[9].split(",")
    cells[3] = "abc"  # column f1 (host, note="x", f0, f1, ...)
    lines[9] = ",".join(cells)
    bad.write_text("\n".join(lines) + "\n")
    out = tmp_path / "o.csv"
    rc = main(["score", "--model", str(files.model), "--input", str(bad), "--output", str(out),
               "--chunksize", "4"])  # fmt: skip
    assert rc != 0
    msg = _one_error_line(capsys)
    assert "line 10" in msg and "'f1'" in msg and "abc" in msg
    assert not out.exists() and not (tmp_path / "o.csv.partial").exists()


def test_error_malformed_row(files, tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    lines = files.test.read_text().splitlines()
    lines[5] += ",1,2"
    bad.write_text("\n".join(lines) + "\n")
    rc = main(["score", "--model", str(files.model), "--input", str(bad),
               "--output", str(tmp_path / "o.csv")])  # fmt: skip
    assert rc != 0
    msg = _one_error_line(capsys)
    assert "line 6" in msg and "expected 9 fields, found 11" in msg


def test_error_options(files, tmp_path, capsys):
    out = str(tmp_path / "m.fedep")
    rc = main(["fit", "--train", str(files.train), "--protocol", "clean", "--out", out])
    assert rc != 0 and "label" in _one_error_line(capsys)
    rc = main(["fit", "--train", str(files.train), "--lr", "0.1", "--out", out])
    assert rc != 0 and "--lr" in _one_error_line(capsys)
    rc = main(["fit", "--dataset", "kdd99", "--out", out])
    assert rc != 0 and "kdd99" in _one_error_line(capsys)
    rc = main(["fit", "--train", str(files.train), "--rank", "99", "--quiet", "--out", out])
    assert rc != 0 and "n_components" in _one_error_line(capsys)


def test_console_script_error_exit_code(files, tmp_path):
    exe = Path(sys.executable).parent / "fedep"
    if not exe.exists():
        pytest.skip("fedep console script not installed in this environment")
    proc = subprocess.run(
        [str(exe), "score", "--model", str(tmp_path / "missing.fedep"),
         "--input", str(files.test), "--output", str(tmp_path / "o.csv")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("fedep: error: ")
    assert "missing.fedep" in lines[0]


# ----------------------------------------------------------------------------- misc
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


def test_progress_bar_on_tty_and_plain_lines():
    import io

    from fedep._progress import RoundProgress

    rec = {"objective": 1.5, "consensus_residual_rel": 0.01, "time_s": 0.002}
    buf = io.StringIO()
    bar = RoundProgress(3, "fedep", stream=buf, tty=True)
    for r in (1, 2, 3):
        bar(r, rec)
    bar.close()
    assert "3/3" in buf.getvalue() and "round" in buf.getvalue()
    buf = io.StringIO()
    plain = RoundProgress(3, "fedep", stream=buf, tty=False)
    plain(1, rec)
    plain(2, rec)
    lines = buf.getvalue().splitlines()
    assert lines == [
        "fedep: round 1/3 obj=1.5 cons=0.01 (0.002 s)",
        "fedep: round 2/3 obj=1.5 cons=0.01 (0.002 s)",
    ]
    quiet = io.StringIO()
    RoundProgress(3, stream=quiet, enabled=False)(1, rec)
    assert quiet.getvalue() == ""


def test_score_with_integer_clients(files, tmp_path):
    """A model whose clients come from --clients has integer ids; a numeric client
    column picks each row's personalised basis, unknown values use the global one."""
    model = tmp_path / "m.fedep"
    args = ["fit", "--train", str(files.train), "--label-column", "label", "--quiet"]
    assert main([*args, "--clients", "3", "--rank", "2", "--rounds", "5", "--out", str(model)]) == 0
    det = fedep.load(model)
    assert det.clients_.tolist() == [0, 1, 2]
    src = pd.read_csv(files.test)
    src["site"] = np.arange(len(src)) % 4  # 3 = unknown client
    inp, out = tmp_path / "in.csv", tmp_path / "out.csv"
    src.to_csv(inp, index=False)
    args = ["score", "--model", str(model), "--input", str(inp), "--output", str(out)]
    assert main([*args, "--client-column", "site", "--quiet"]) == 0
    res = pd.read_csv(out)
    groups = src["site"].to_numpy()
    expected = det.decision_function(src[FEATURES], groups)
    np.testing.assert_allclose(res["anomaly_score"], expected, rtol=1e-8)
    unknown = groups == 3
    np.testing.assert_allclose(
        res["anomaly_score"][unknown], det.decision_function(src[FEATURES][unknown]), rtol=1e-8
    )
    assert not np.allclose(expected, det.decision_function(src[FEATURES]))

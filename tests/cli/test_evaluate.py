"""``fedep evaluate``: JSON and tables, personalised thresholds (evaluate_fitted)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import fedep
from fedep.cli import main

from ._helpers import one_error_line


def _evaluate(files, *extra):
    args = ["evaluate", "--model", str(files.model), "--test", str(files.test)]
    return main([*args, "--label-column", "label", "--normal-label", "normal", *extra])


def test_evaluate_json(files, capsys):
    assert _evaluate(files, "--json") == 0
    res = json.loads(capsys.readouterr().out)
    det = fedep.load(files.model)
    assert res["model"]["threshold"] == pytest.approx(det.threshold_)
    assert res["threshold"] == pytest.approx(det.threshold_)
    labels = pd.read_csv(files.test)["label"]
    assert res["n_test"] == 60 and res["n_attack"] == int((labels != "normal").sum()) > 0
    assert res["model"]["roc_auc"] > 0.9  # planted anomalies are far off the subspace
    assert res["trivial"]["rec"] == 1.0
    assert res["test_tuned"]["f1"] >= res["model"]["f1"]
    assert set(res["per_class_recall"]) == {"normal", "scan", "dos"}
    assert res["detector"] == "FedEP" and res["test"] == "test.csv"


def test_evaluate_uses_evaluate_fitted(files, capsys, monkeypatch):
    import fedep.evaluation.evaluate as ev

    calls = []
    real = ev.evaluate_fitted

    def spy(det, X, y, **kw):
        calls.append(kw)
        return real(det, X, y, **kw)

    monkeypatch.setattr(ev, "evaluate_fitted", spy)
    assert _evaluate(files, "--json") == 0
    assert len(calls) == 1 and calls[0]["threshold_policy"] == "model"
    assert set(np.asarray(calls[0]["categories"])) == {"normal", "scan", "dos"}


def test_evaluate_personalised_matches_predict(files, capsys):
    assert _evaluate(files, "--json", "--client-column", "host") == 0
    res = json.loads(capsys.readouterr().out)
    det = fedep.load(files.model)
    df = pd.read_csv(files.test)
    groups = df["host"].to_numpy(dtype=str)
    y = (df["label"] != "normal").to_numpy(dtype=int)
    pred = det.predict(df, groups)  # the pipeline reads its columns by name
    assert res["model"]["tp"] == int(np.sum((pred == 1) & (y == 1)))
    assert res["model"]["fp"] == int(np.sum((pred == 1) & (y == 0)))
    assert res["model"]["threshold"] is None  # one threshold per gateway
    assert res["personalised"] == {
        "client_column": "host",
        "rows_of_known_clients": 60,
        "rows_scored_globally": 0,
    }
    assert _evaluate(files, "--json") == 0  # without the column: global basis and threshold
    glob = json.loads(capsys.readouterr().out)
    assert glob["personalised"] is None
    assert glob["model"]["threshold"] == pytest.approx(det.threshold_)


def test_evaluate_client_column_needs_test_table(files, capsys):
    args = ["evaluate", "--model", str(files.model), "--dataset", "nsl-kdd"]
    assert main([*args, "--client-column", "host"]) == 1
    assert "--client-column" in one_error_line(capsys)


def test_evaluate_table(files, capsys):
    assert _evaluate(files) == 0
    out = capsys.readouterr().out
    assert "model (training threshold)" in out
    assert "trivial all-attack detector" in out
    assert "test-tuned (as in the paper" in out
    assert "roc_auc" in out and "pr_auc" in out
    assert any(ln.strip().startswith("scan") for ln in out.splitlines())


@pytest.mark.realdata
def test_official_dataset_defaults_to_the_generic_path(real_data_dir, tmp_path, capsys):
    """``fit --dataset`` reads the raw table as a user's file (the pipeline lives in the
    model) and ``evaluate --dataset`` scores the raw test table with it."""
    model = tmp_path / "m.fedep"
    common = ["--dataset", "nsl-kdd", "--data-dir", str(real_data_dir)]
    fit = ["fit", *common, "--clients", "3", "--n-components", "4", "--n-rounds", "3"]
    assert main([*fit, "--random-state", "0", "--quiet", "--out", str(model)]) == 0
    det = fedep.load(model)
    assert det.features_ is not None  # the generic path: a fitted feature pipeline
    kinds = {d.name: d.kind for d in det.features_.decisions_}
    assert kinds["protocol_type"] == "categorical"  # a text column, one-hot encoded
    capsys.readouterr()
    assert main(["evaluate", "--model", str(model), *common, "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert (res["n_test"], res["n_attack"]) == (22544, 12833)  # all of KDDTest+
    assert res["test"] == "nsl-kdd test set (generic features)"
    assert 0.8 < res["model"]["roc_auc"] <= 1.0
    # the same model against a hand-written numeric feature set: one clear line
    assert main(["evaluate", "--model", str(model), *common, "--feature-set", "paper"]) == 1
    assert "features do not match" in one_error_line(capsys)


def test_generic_feature_set_needs_a_pipeline_model(tmp_path, capsys):
    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.normal(size=(40, 4)), columns=list("abcd"))
    det = fedep.FedEP(n_components=2, n_rounds=2, tol=0.0, features="numeric", random_state=0)
    det.fit(X, np.repeat([0, 1], 20))
    model = tmp_path / "numeric.fedep"
    fedep.save(det, model)
    rc = main(["evaluate", "--model", str(model), "--dataset", "nsl-kdd"])
    assert rc == 1
    assert "needs a model with a feature pipeline" in one_error_line(capsys)

"""Quick reproduce run on the synthetic scenario (no dataset in the data directory)."""

import json
import math

import numpy as np
import pytest

from fedep.evaluation.reproduce import run_reproduce
from fedep.evaluation.selection import grid_search, parameter_grid

SECTIONS = (
    "## Table 2",
    "test-tuned (as in the paper)",
    "trivial (flag all)",
    "## ROC curves",
    "## Accuracy and objective vs communication round",
    "## Feature importance",
    "## Ablation",
    "## Rank",
    "## Training time per round vs number of clients",
)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    empty = tmp_path_factory.mktemp("no-data")
    out = tmp_path_factory.mktemp("out")
    logs = []
    report = run_reproduce(out, quick=True, data_dir=empty, log=logs.append)
    return out, report, logs, empty


def test_outputs_exist(quick_run):
    out, report, _, _ = quick_run
    assert report == out / "report.md"
    assert (out / "results.json").is_file()
    figs = {p.name for p in (out / "figures").glob("*.png")}
    assert {"roc_synthetic.png", "rounds_synthetic.png", "importance_synthetic.png"} <= figs
    assert "scalability.png" in figs
    assert any((out / "cells").glob("*.json"))


def test_report_says_synthetic_and_how_to_use_real_data(quick_run):
    _, report, _, empty = quick_run
    text = report.read_text()
    assert "No real dataset was found" in text
    assert "--data-dir" in text and "FEDEP_DATA_DIR" in text
    assert str(empty) in text
    for s in SECTIONS:
        assert s in text, s
    for fig in ("roc_synthetic.png", "rounds_synthetic.png", "importance_synthetic.png"):
        assert f"(figures/{fig})" in text


def test_results_json_is_sane(quick_run):
    out, _, _, _ = quick_run
    res = json.loads((out / "results.json").read_text())
    assert res["schema_version"] == 1 and res["mode"] == "quick"
    assert res["data"]["source"] == "synthetic"
    assert set(res["data"]["missing"]) == {"nsl-kdd", "unsw-nb15", "ton-iot"}
    methods = {e["method"] for e in res["main"]}
    assert {"FedEP", "FedPG", "PooledPCA", "LocalPCA", "OneShotPCA"} <= methods
    assert {e["threshold"] for e in res["main"]} >= {"honest", "test-tuned"}
    for e in res["main"]:
        for k in ("acc", "pre", "rec", "fnr", "fpr", "f1", "roc_auc", "pr_auc"):
            v = e["mean"][k]
            assert v is not None and 0.0 <= v <= 1.0, (e["method"], k, v)
        assert math.isclose(e["mean"]["rec"] + e["mean"]["fnr"], 1.0)
    honest = {e["method"]: e for e in res["main"] if e["threshold"] == "honest"}
    tuned = {e["method"]: e for e in res["main"] if e["threshold"] == "test-tuned"}
    # planted anomalies are detectable; the test-tuned F1 is never below the honest one
    assert honest["FedEP"]["mean"]["roc_auc"] > 0.9
    assert honest["PooledPCA"]["mean"]["roc_auc"] > 0.9
    for m in honest:
        assert tuned[m]["mean"]["f1"] >= honest[m]["mean"]["f1"] - 1e-12
    # honest threshold from validation normals with target FPR 5 %
    assert honest["PooledPCA"]["mean"]["fpr"] < 0.2
    triv = res["trivial"]["synthetic"]["clean"]
    assert triv["rec"] == 1.0 and triv["fpr"] == 1.0
    assert {r["case"] for r in res["ablation"]} == {"I", "II", "III", "IV"}
    assert {r["rank"] for r in res["rank"]} == {5, 10}
    assert len(res["rounds"]["synthetic"]["FedEP"]) == res["config"]["curve_rounds"]
    roc = res["roc"]["synthetic"]["FedEP"]
    assert 0.0 <= roc["roc_auc"] <= 1.0 and len(roc["fpr"]) == len(roc["tpr"])
    imp = res["importance"]["synthetic"]
    assert len(imp["FedEP"]) == len(imp["FedPG"]) == len(imp["features"])
    assert all(r["time_per_round_s"] > 0 for r in res["scalability"])


def test_resume_skips_finished_cells(quick_run):
    out, _, logs, empty = quick_run
    n_cells = len(list((out / "cells").glob("*.json")))
    logs2 = []
    run_reproduce(out, quick=True, data_dir=empty, log=logs2.append)
    res = json.loads((out / "results.json").read_text())
    assert res["cells"]["computed"] == 0
    assert res["cells"]["cached"] == n_cells
    assert not any(line.startswith("  [") for line in logs2)
    # a deleted cell is recomputed, and only that one
    victim = sorted((out / "cells").glob("*FedPG-s0.json"))[0]
    victim.unlink()
    run_reproduce(out, quick=True, data_dir=empty, log=lambda m: None)
    res = json.loads((out / "results.json").read_text())
    assert res["cells"]["computed"] == 1


def test_unknown_dataset_rejected(tmp_path):
    with pytest.raises(ValueError):
        run_reproduce(tmp_path, quick=True, datasets=["kdd99"], log=lambda m: None)


def test_grid_search_uses_validation_only():
    from fedep import PooledPCA
    from fedep.evaluation.reproduce import _synthetic_split

    sp = _synthetic_split(0)
    assert len(parameter_grid({"a": [1, 2], "b": [3]})) == 2
    res = grid_search(
        lambda p: PooledPCA(**p),
        {"n_components": [1, 5, 10]},
        sp.X_train,
        sp.groups_train,
        sp.X_val,
        sp.y_val,
    )
    assert len(res["results"]) == 3
    scores = [r["val_roc_auc"] for r in res["results"]]
    assert res["best_score"] == max(scores)
    assert res["best_params"]["n_components"] == 5  # the planted rank
    assert np.all(np.isfinite(scores))

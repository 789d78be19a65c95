"""Quick reproduce run on the synthetic scenario (no dataset in the data directory)."""

import json
import math

import numpy as np
import pytest

from fedep.evaluation.reproduce import run_reproduce
from fedep.evaluation.selection import grid_search, parameter_grid

SECTIONS = (
    "## Best honest configuration (headline)",
    "# Paper setting (paper feature set, rank 5)",
    "## Table 2",
    "test-tuned (as in the paper)",
    "trivial (flag all)",
    "## ROC curves",
    "## Accuracy and objective vs communication round",
    "## What makes attacks anomalous",
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
    assert {"roc_synthetic.png", "rounds_synthetic.png", "contributions_synthetic.png"} <= figs
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
    for fig in ("roc_synthetic.png", "rounds_synthetic.png", "contributions_synthetic.png"):
        assert f"(figures/{fig})" in text


def test_results_json_is_sane(quick_run):
    out, _, _, _ = quick_run
    res = json.loads((out / "results.json").read_text())
    assert res["schema_version"] == 5 and res["mode"] == "quick"
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
    assert roc["operating_point"]["fpr"] == honest["FedEP"]["mean"]["fpr"]
    con = res["contributions"]["synthetic"]
    assert len(con["FedEP"]) == len(con["FedPG"]) == len(con["features"])
    assert all(v >= 0 for v in con["FedEP"])
    assert all(r["time_per_round_s"] > 0 for r in res["scalability"])
    # the contaminated-training table needs real traffic: no rows on synthetic data
    assert res["contaminated"]["rows"] == []


def test_resume_skips_finished_cells(quick_run):
    out, _, logs, empty = quick_run
    n_cells = len(list((out / "cells").glob("*.json")))
    logs2 = []
    run_reproduce(out, quick=True, data_dir=empty, log=logs2.append)
    res = json.loads((out / "results.json").read_text())
    assert res["cells"]["computed"] == 0
    assert res["cells"]["cached"] == n_cells
    assert not any(line.startswith("  [") for line in logs2)
    # the report regenerated from the cache still has the per-dataset setup lines
    text = (out / "report.md").read_text()
    assert "- synthetic/clean: " in text and "- synthetic (rich features" in text
    assert "NOTES" not in text
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


def test_best_config_is_headline(quick_run):
    out, report, _, _ = quick_run
    text = report.read_text()
    i_best = text.index("## Best honest configuration (headline)")
    assert i_best < text.index("# Paper setting") < text.index("## Table 2")
    assert "(figures/roc_best.png)" in text
    assert (out / "figures" / "roc_best.png").is_file()
    res = json.loads((out / "results.json").read_text())
    best = res["best"]
    assert best["config"]["feature_set"] == "rich"
    assert best["config"]["ranks"] == [5, 20] and best["config"]["alphas"] == [1.0]
    rows = {e["method"]: e for e in best["table"] if e["dataset"] == "synthetic"}
    assert set(rows) == {"FedEP", "FedPG", "PooledPCA"}
    for m, e in rows.items():
        sel = best["selection"]["synthetic"][m]
        assert e["rank"] == sel["best_params"]["n_components"] in (5, 20)
        assert len(sel["results"]) == len(best["config"]["ranks"])
        assert e["val_roc_auc"] == pytest.approx(sel["best_score"])
        assert e["n_seeds"] == 1
        for k in ("roc_auc", "pr_auc", "f1", "fpr", "acc"):
            assert 0.0 <= e["mean"][k] <= 1.0
        assert e["mean"]["fpr"] < 0.2  # honest threshold: validation-normal quantile
    assert rows["FedEP"]["alpha"] == 1.0 and rows["PooledPCA"]["alpha"] is None
    assert rows["FedEP"]["params"]["init"] == "oneshot"
    assert rows["FedPG"]["params"]["init"] == "oneshot"
    assert rows["FedEP"]["rank"] == 5  # the planted rank wins on validation
    assert rows["FedEP"]["mean"]["roc_auc"] > 0.95
    assert "synthetic" in best["roc"] and "synthetic" in best["trivial"]


@pytest.mark.parametrize("method", ["FedEP", "PooledPCA"])
def test_best_selection_never_sees_test_data(method):
    import dataclasses

    from fedep.evaluation.reproduce import MODES, select_best_config
    from fedep.evaluation.reproduce import synthetic_split as _synthetic_split

    best = {**MODES["quick"]["best"], "ranks": [2, 5, 10]}
    sp = _synthetic_split(3)
    rng = np.random.default_rng(0)
    bad = dataclasses.replace(
        sp,
        y_test=rng.permutation(sp.y_test),
        X_test=rng.normal(size=sp.X_test.shape) * 100,
    )
    a = select_best_config(method, sp, best, seed=0)
    b = select_best_config(method, bad, best, seed=0)
    assert a["best_params"] == b["best_params"]
    assert a["best_params"]["n_components"] == 5
    assert [r["val_roc_auc"] for r in a["results"]] == [r["val_roc_auc"] for r in b["results"]]
    # and the validation labels do matter: permuting them changes the scores
    c = select_best_config(
        method, dataclasses.replace(sp, y_val=rng.permutation(sp.y_val)), best, seed=0
    )
    assert [r["val_roc_auc"] for r in c["results"]] != [r["val_roc_auc"] for r in a["results"]]

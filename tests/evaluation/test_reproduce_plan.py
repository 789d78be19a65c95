"""The plan: total cells known up front, progress lines with the time left."""

import numpy as np

from fedep.evaluation.reproduce.cells import Cells, format_duration
from fedep.evaluation.reproduce.config import MODES
from fedep.evaluation.reproduce.data import Data
from fedep.evaluation.reproduce.plan import Context, build_plan


def test_plan_counts_every_cell_up_front(tmp_path):
    cfg = {**MODES["quick"], "protocols": ["clean"]}
    data = Data(tmp_path, ["nsl-kdd"], cfg)  # empty dir: synthetic
    ctx = Context(cfg=cfg, data=data, best_data=data)
    plan = build_plan(ctx)
    keys = [c.key for c in plan]
    n_best = 3 * (1 + len(cfg["seeds"])) + 2
    n_main = 5 * len(cfg["seeds"]) + 2 + 1
    n_other = 2 + 4 + 2 * len(cfg["ranks"])
    n_scal = 2 * len(cfg["scal_clients"])
    assert len(keys) == n_best + n_main + n_other + n_scal
    assert "synthetic-clean-split" in keys and "best-synthetic-split" in keys


def test_progress_lines_show_done_total_and_time_left(tmp_path):
    logs = []
    cells = Cells(tmp_path, "quick", {"a": 1}, logs.append)
    cells.plan(["x", "y", "z"])
    ticks = iter(np.arange(0.0, 100.0, 2.0))
    cells._clock = lambda: float(next(ticks))
    assert cells.get("x", lambda: 1) == 1
    assert "3 cells: 3 to compute" in logs[0]
    assert logs[-1].startswith("  [   1/3] [   2.0s] x (about 4 s left)")
    cells.get("y", lambda: 2)
    cells.get("z", lambda: 3)
    assert logs[-1].endswith("(done)")
    again = Cells(tmp_path, "quick", {"a": 1}, logs.append)
    again.plan(["x", "y", "z"])
    assert "0 to compute, 3 stored" in logs[-1]
    assert format_duration(185) == "3 min 5 s"


def test_plan_adds_the_other_feature_sets(tmp_path):
    cfg = {**MODES["quick"], "protocols": ["clean"]}
    data = Data(tmp_path, ["nsl-kdd"], cfg)  # empty dir: synthetic
    plain = build_plan(Context(cfg=cfg, data=data, best_data=data))
    ctx = Context(cfg=cfg, data=data, best_data=data, compare_data={"generic": data})
    keys = [c.key for c in build_plan(ctx)]
    extra = set(keys) - {c.key for c in plain}
    per_method = 1 + len(cfg["seeds"])  # selection + one fit per seed
    assert len(extra) == 1 + 3 * per_method + 1  # scaling, methods, split
    assert "fs-generic-synthetic-scaling" in extra
    # the scaling choice comes before the selections that use it
    assert keys.index("fs-generic-synthetic-scaling") < keys.index(
        "fs-generic-synthetic-select-FedEP"
    )


def test_unknown_feature_set_rejected(tmp_path):
    import pytest

    with pytest.raises(ValueError, match="feature_set must be one of"):
        Data(tmp_path, ["nsl-kdd"], MODES["quick"], feature_set="fancy")


def test_scaling_selection_uses_validation_only():
    import dataclasses

    import pandas as pd

    from fedep.evaluation.reproduce import synthetic_split
    from fedep.evaluation.reproduce.plan import select_scaling

    sp = synthetic_split(3)
    frame = lambda X: pd.DataFrame(X, columns=[f"c{j}" for j in range(X.shape[1])])  # noqa: E731
    sp = dataclasses.replace(
        sp, X_train=frame(sp.X_train), X_val=frame(sp.X_val), X_test=frame(sp.X_test)
    )
    best = {**MODES["quick"]["best"], "ranks": [2, 5], "scalings": ["sd", "floor:0.3"]}
    a = select_scaling(sp, best, seed=0)
    rng = np.random.default_rng(0)
    bad = dataclasses.replace(sp, y_test=rng.permutation(sp.y_test), X_test=sp.X_test * 100)
    b = select_scaling(bad, best, seed=0)
    assert a["chosen"] in ("sd", "floor:0.3") and a["chosen"] == b["chosen"]
    assert set(a["by_scaling"]) == {"sd", "floor:0.3"}
    for v in a["by_scaling"].values():
        assert v["rank"] in (2, 5) and 0.5 < v["val_roc_auc"] <= 1.0
    best_auc = max(v["val_roc_auc"] for v in a["by_scaling"].values())
    assert a["by_scaling"][a["chosen"]]["val_roc_auc"] == best_auc


def test_set_detector_scaling_spec_and_rank_grid():
    from fedep.evaluation.reproduce.config import best_grid
    from fedep.evaluation.reproduce.plan import make_cell_detector

    det = make_cell_detector("PooledPCA", {"n_components": 3, "scaling": "quantile/shrink:0.3"})
    assert det.features.get_params()["numeric_transform"] == "quantile"
    assert (det.features.scale_rule, det.features.scale_floor) == ("shrink", 0.3)
    det = make_cell_detector("PooledPCA", {"n_components": 3, "scaling": "floor:0.1"})
    assert det.features.numeric_transform == "log" and det.features.scale_floor == 0.1
    best = {"ranks": [5, 10, 40, 60, 80], "max_rank": {"FedEP": 40}, "alphas": [1.0]}
    assert best_grid("FedEP", best, 173)["n_components"] == [5, 10, 40]
    assert best_grid("PooledPCA", best, 173)["n_components"] == [5, 10, 40, 60, 80]
    assert best_grid("FedPG", best, 60)["n_components"] == [5, 10, 40]  # below n_features
    assert best_grid("FedEP", best, 4)["n_components"] == [3]


def test_n_model_features_counts_the_encoding():
    import dataclasses

    import pandas as pd

    from fedep.evaluation.reproduce import synthetic_split
    from fedep.evaluation.reproduce.plan import n_model_features

    sp = synthetic_split(1)
    assert n_model_features(sp) == sp.X_train.shape[1]
    df = pd.DataFrame(sp.X_train[:, :3], columns=["a", "b", "c"])
    df["proto"] = np.where(sp.X_train[:, 0] > 0, "tcp", "udp")
    sp = dataclasses.replace(sp, X_train=df)
    assert n_model_features(sp) == 3 + 3  # two categories and <other>


def test_scaling_selection_equals_the_plain_grid_over_pipeline_detectors():
    # select_scaling fits each scaling's pipeline once; the validation ROC AUCs are those
    # of PooledPCA(features=pipeline) fitted per grid point.
    import dataclasses

    import pandas as pd

    from fedep.evaluation.reproduce import synthetic_split
    from fedep.evaluation.reproduce.plan import make_cell_detector, select_scaling
    from fedep.evaluation.selection import grid_search

    sp = synthetic_split(5)
    frame = lambda X: pd.DataFrame(np.exp(X), columns=[f"c{j}" for j in range(X.shape[1])])  # noqa: E731
    sp = dataclasses.replace(sp, X_train=frame(sp.X_train), X_val=frame(sp.X_val))
    best = {"ranks": [2, 6], "scalings": ["floor:0.1", "quantile/shrink:0.3"]}
    fast = select_scaling(sp, best, seed=0)
    grid = {"scaling": best["scalings"], "n_components": best["ranks"]}
    slow = grid_search(
        lambda p: make_cell_detector("PooledPCA", p, 0),
        grid,
        sp.X_train,
        sp.groups_train,
        sp.X_val,
        sp.y_val,
    )
    assert [r["params"] for r in fast["results"]] == [r["params"] for r in slow["results"]]
    np.testing.assert_allclose(
        [r["val_roc_auc"] for r in fast["results"]],
        [r["val_roc_auc"] for r in slow["results"]],
        rtol=1e-9,
    )
    assert fast["best_params"] == slow["best_params"]

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

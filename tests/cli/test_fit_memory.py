"""``fedep fit`` lets the table go once it is encoded: no reference to it outlives the
encoding (a 2,000,000-row table would otherwise stay beside the fit's own state)."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pandas as pd
import pytest

import fedep.detectors.base as base
from fedep.cli import main
from fedep.features import FeaturePipeline


@pytest.mark.parametrize("method", ["pca", "fedep"])
def test_the_table_is_freed_before_the_fit_proper(tmp_path, monkeypatch, method):
    rng = np.random.default_rng(0)
    p = tmp_path / "t.csv"
    pd.DataFrame(rng.standard_normal((400, 5)), columns=list("abcde")).to_csv(p, index=False)
    seen: dict = {}
    encode = FeaturePipeline.fit_transform

    def fit_transform(self, X, y=None, groups=None):
        seen["table"] = weakref.ref(X)
        return encode(self, X, y, groups)

    release = base.release_arrow_memory

    def check_then_release():
        # no gc.collect(): the table must be freed by reference counting alone
        seen["alive_after_encoding"] = seen["table"]() is not None
        release()

    monkeypatch.setattr(FeaturePipeline, "fit_transform", fit_transform)
    monkeypatch.setattr(base, "release_arrow_memory", check_then_release)
    gc.disable()
    try:
        args = ["fit", "--train", str(p), "--method", method, "--n-components", "2"]
        extra = ["--n-rounds", "2"] if method == "fedep" else []
        assert main([*args, *extra, "--out", str(tmp_path / "m.fedep"), "--quiet"]) == 0
    finally:
        gc.enable()
    assert seen["alive_after_encoding"] is False

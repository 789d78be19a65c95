"""The column summaries' fast paths against per-value references: the quantile
sketch's one count over both signs, and columns summarised on threads."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from fedep.features import summaries
from fedep.features.sketches import SKETCH_ZERO, LogHistogram, number_hashes

from .conftest import flow_table


def _reference_bins(x, w, bins_per_decade):
    zero, pos, neg = 0, {}, {}
    for v, c in zip(x.tolist(), w.tolist(), strict=True):
        if abs(v) < SKETCH_ZERO:
            zero += c
            continue
        k = int(np.floor(np.log10(np.abs(np.float64(v))) * bins_per_decade))
        target = neg if v < 0 else pos
        target[k] = target.get(k, 0) + c
    return zero, pos, neg


@pytest.mark.parametrize("bins_per_decade", [4, 32, 1_000_000])
@pytest.mark.parametrize("weighted", [False, True])
def test_sketch_bins_equal_a_per_value_reference(bins_per_decade, weighted):
    rng = np.random.default_rng(bins_per_decade)
    x = np.concatenate(
        [
            rng.standard_normal(500) * 10.0 ** rng.integers(-14, 14, 500),
            [0.0, -0.0, 1e-13, -1e-13, 1e300, -1e-300, 5.0, -5.0],
            -rng.lognormal(0, 3, 100),
        ]
    )
    w = rng.integers(1, 9, len(x)) if weighted else np.ones(len(x), dtype=np.int64)
    sk = LogHistogram(bins_per_decade).add(x, w if weighted else None)
    zero, pos, neg = _reference_bins(x, w, bins_per_decade)
    assert (sk.zero, sk.pos, sk.neg) == (zero, pos, neg)
    assert sk.count == int(w.sum())
    only_positive = LogHistogram(bins_per_decade).add(np.abs(x[np.abs(x) >= 1.0]))
    assert not only_positive.neg and only_positive.zero == 0


def test_number_hashes_are_splitmix64_of_the_bits():
    def splitmix(bits):
        m = (1 << 64) - 1
        z = (bits + 0x9E3779B97F4A7C15) & m
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
        return z ^ (z >> 31)

    x = np.array([0.0, -0.0, 1.5, -3.0, 1e300, 80.0])
    want = [splitmix(int(np.float64(v + 0.0).view(np.uint64))) for v in x]
    assert number_hashes(x).tolist() == want


def test_threaded_summaries_equal_one_thread(monkeypatch):
    df, _ = flow_table(2000, seed=9)
    df.loc[3:6, "duration"] = np.nan
    df.loc[7, "orig_bytes"] = math.inf
    df["wide"] = np.random.default_rng(1).standard_normal(2000) * 1e-13
    one = json.dumps(summaries.summarize_columns(df).to_dict(), sort_keys=True)
    monkeypatch.setattr(summaries, "_THREADED_CELLS", 0)
    monkeypatch.setattr(summaries, "worker_threads", lambda: 3)
    threaded = json.dumps(summaries.summarize_columns(df).to_dict(), sort_keys=True)
    assert threaded == one
    assert json.loads(one)["n_rows"] == 2000 and isinstance(df, pd.DataFrame)

"""The compiled pass over a numeric column (counts, extremes, sketch bins, small
hashes) against the NumPy reference it replaces: equal results, bit for bit."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from fedep.features import _column_pass, summaries
from fedep.features._column_pass import BLOCK, MAX_BINS_PER_DECADE, numeric_pass
from fedep.features.sketches import KMV, LogHistogram


def _columns(n: int, seed: int) -> dict[str, np.ndarray]:
    """Seeded columns that reach every branch: signs, zeros of both signs, values in
    the zero bin, exact bin edges (powers of ten), extremes near float64's limits,
    few distinct values (the hashes' fallback), a constant."""
    rng = np.random.default_rng(seed)
    sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    return {
        "normal": rng.standard_normal(n) * 3,
        "rounded": np.round(rng.standard_normal(n) * 3, 2),
        "codes": rng.integers(0, 12, n).astype(float),
        "powers_of_ten": 10.0 ** rng.integers(-15, 20, n) * sign,
        "bin_edges": 10.0 ** (rng.integers(-300, 300, n) / 32),
        "zero_bin": rng.standard_normal(n) * 1e-11,
        "huge": rng.standard_normal(n) * 1e300,
        "spread": np.exp(rng.uniform(-40, 700, n)) * sign,
        "signed_zeros": np.where(rng.random(n) < 0.5, -0.0, rng.integers(-3, 3, n) * 1.0),
        "negative_zero": np.full(n, -0.0),
        "positive_max": np.where(rng.random(n) < 0.5, 0.0, -rng.random(n)),
        "few_distinct": rng.choice([1.5, -2.25, 1e9, 3.0], n),
        "constant": np.full(n, 7.0),
    }


def _reference(v: np.ndarray, bins_per_decade: int):
    sk = LogHistogram(bins_per_decade).add(v)
    counts = (int((v == 0).sum()), int((v == 1).sum()), int((v >= 0).sum()))
    return sk.to_dict(), KMV.of_numbers(v).hashes, counts, (float(v.min()), float(v.max()))


@pytest.mark.parametrize("n", [1, 700, 3000, BLOCK + 917])
@pytest.mark.parametrize("bins_per_decade", [1, 32, 257])
def test_pass_equals_the_numpy_reference(n, bins_per_decade):
    for name, v in _columns(n, seed=n + bins_per_decade).items():
        sk = LogHistogram(bins_per_decade)
        got = numeric_pass(v, sk, 256)
        assert got is not None, name
        sketch, hashes, counts, (lo, hi) = _reference(v, bins_per_decade)
        assert sk.to_dict() == sketch, name
        assert got.distinct.hashes == hashes, name
        assert (got.n_zero, got.n_one, got.n_nonneg) == counts, name
        # extremes equal, zeros with NumPy's sign
        assert (got.min, got.max) == (lo, hi), name
        assert math.copysign(1, got.min) == math.copysign(1, lo), name
        assert math.copysign(1, got.max) == math.copysign(1, hi), name


def test_pass_declines_what_it_does_not_hold(monkeypatch):
    v = np.arange(10.0)
    assert numeric_pass(v[:0], LogHistogram(32), 256) is None
    sk = LogHistogram(MAX_BINS_PER_DECADE + 1)
    assert numeric_pass(v, sk, 256) is None
    assert sk.count == 0  # a sketch it declines is left untouched
    monkeypatch.setenv("FEDEP_KERNELS", "numpy")
    assert numeric_pass(v, LogHistogram(32), 256) is None
    monkeypatch.setattr(_column_pass, "_pass_kernel", None)
    monkeypatch.setenv("FEDEP_KERNELS", "numba")
    assert numeric_pass(v, LogHistogram(32), 256) is None


@pytest.mark.parametrize("layout", ["columns", "one block"])
def test_summaries_equal_with_and_without_the_compiled_pass(monkeypatch, layout):
    cols = _columns(BLOCK + 5000, seed=3)
    if layout == "columns":
        df = pd.DataFrame(cols)
    else:  # one row-major block: every column a strided view
        df = pd.DataFrame(np.column_stack(list(cols.values())), columns=list(cols), copy=False)
        assert not df["normal"].to_numpy().flags.c_contiguous
    df.loc[3:6, "normal"] = np.nan  # NaN dropped first; the pass sees finite values
    df.loc[7, "rounded"] = math.inf  # not finite: the reference path
    compiled = json.dumps(summaries.summarize_columns(df).to_dict(), sort_keys=True)
    monkeypatch.setenv("FEDEP_KERNELS", "numpy")
    reference = json.dumps(summaries.summarize_columns(df).to_dict(), sort_keys=True)
    assert compiled == reference


def test_small_tables_take_numpy_until_numba_has_started(monkeypatch):
    from fedep.core._kernels import _dispatch

    monkeypatch.setenv("FEDEP_KERNELS", "auto")
    monkeypatch.setattr(_dispatch, "ready", lambda dispatcher: True)  # a warm cache
    monkeypatch.setattr(_dispatch, "_numba_started", False)
    monkeypatch.setattr(_dispatch, "_small_rows", 0)
    v = np.random.default_rng(0).standard_normal(50_000)
    # 50,000 values count as 50,000 / VALUES_PER_ROW rows toward START_ROWS
    assert numeric_pass(v, LogHistogram(32), 256) is None
    assert _dispatch._small_rows == len(v) // _column_pass.VALUES_PER_ROW
    monkeypatch.setattr(_dispatch, "_numba_started", True)  # another kernel started it
    assert numeric_pass(v, LogHistogram(32), 256) is not None


def test_a_large_table_runs_compiled_from_its_first_column(monkeypatch):
    from fedep.core._kernels import _dispatch

    monkeypatch.setenv("FEDEP_KERNELS", "auto")
    monkeypatch.setattr(_dispatch, "ready", lambda dispatcher: True)
    monkeypatch.setattr(_dispatch, "_numba_started", False)
    monkeypatch.setattr(_dispatch, "_small_rows", 0)
    v = np.random.default_rng(0).standard_normal(1000)
    big = _dispatch.START_ROWS * _column_pass.VALUES_PER_ROW
    assert numeric_pass(v, LogHistogram(32), 256, work=big - 1) is None  # adds its own
    assert _dispatch._small_rows == len(v) // _column_pass.VALUES_PER_ROW
    assert numeric_pass(v, LogHistogram(32), 256, work=big) is not None

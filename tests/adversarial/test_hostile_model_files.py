"""Model files that are consistent (digest recomputed) but built to exhaust whoever loads
or scores them: the arrays, vocabularies, knot tables and history are bounded by what
the header declares, and scoring works in blocks of bounded memory."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import fedep
from _hostile import honest_model, wide_vocabulary
from fedep.detectors.blocks import SCORING_BLOCK_BYTES
from fedep.modelfile import ModelFileError, write_model_file


@pytest.fixture(scope="module")
def honest(tmp_path_factory):
    """A small pipeline model (numbers and a 3-value category): its file's content."""
    _, meta, arrays, df = honest_model(tmp_path_factory.mktemp("m"))
    return meta, arrays, df


def _peak(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_wide_vocabulary_scores_in_bounded_memory(honest, tmp_path, monkeypatch):
    # 60,000 categories (the 200,000 is benchmarks/bench_hostile_model.py's):
    # scoring 300 rows in one block builds 300 x 60,003 float64 arrays (a 275 MB peak,
    # as before this change; 11.9 GiB for the input). In blocks of at most
    # SCORING_BLOCK_BYTES (32 MiB) of model coordinates the peak is ~63 MB.
    meta, arrays, df = honest
    m, a = wide_vocabulary(meta, arrays, 60_000)
    path = tmp_path / "wide.fedep"
    write_model_file(path, m, a)
    det = fedep.load(path)
    assert det.scoring_block_rows() * 60_003 * 8 <= SCORING_BLOCK_BYTES
    out = {}
    peak = _peak(lambda: out.setdefault("s", det.decision_function(df)))
    assert out["s"].shape == (300,) and np.isfinite(out["s"]).all()
    assert peak < 128 * 2**20, peak
    # The same rows in one block (the old behaviour): the bound would not hold.
    import fedep.detectors.blocks as blocks

    monkeypatch.setattr(blocks, "SCORING_BLOCK_BYTES", 2**40)
    whole = {}
    assert _peak(lambda: whole.setdefault("s", det.decision_function(df))) > 128 * 2**20
    np.testing.assert_allclose(whole["s"], out["s"], rtol=1e-12)


def test_arrays_larger_than_the_header_allows_are_refused_before_reading(
    honest, tmp_path, monkeypatch
):
    # The manifest declares a basis 10,000 features wide for a pipeline of 6 outputs:
    # refused from the header, no array member decompressed.
    meta, arrays, _ = honest
    a = dict(arrays)
    n = 10_000
    r = a["components_"].shape[0]
    a.update(
        components_=np.zeros((r, n)),
        client_components_=np.zeros((1, r, n)),
        mean_=np.zeros(n),
        scale_=np.ones(n),
        constant_features_=np.zeros(n, dtype=bool),
    )
    path = tmp_path / "big.fedep"
    write_model_file(path, meta, a)
    import fedep.modelfile.readwrite as rw

    def no_read(*args, **kw):
        raise AssertionError("an array was decompressed")

    monkeypatch.setattr(rw, "_read_array", no_read)
    with pytest.raises(ModelFileError, match=r"the arrays have 10000 features, the feature"):
        fedep.load(path)


def test_history_longer_than_the_fit_is_refused(honest, tmp_path):
    meta, arrays, _ = honest
    m = {**meta, "params": {**meta["params"]}, "history": [{"round": i} for i in range(5)]}
    m["params"]["n_rounds"] = 3  # not a PCA parameter: the cap is one record
    m["params"].pop("n_rounds")
    path = tmp_path / "h.fedep"
    write_model_file(path, m, arrays)
    with pytest.raises(ModelFileError, match=r"'history' has 5 rounds, more than the fit's 1"):
        fedep.load(path)
    m["history"] = [{f"k{i}": 0 for i in range(100)}]
    write_model_file(path, m, arrays)
    with pytest.raises(ModelFileError, match=r"'history'\[0\] has 100 keys"):
        fedep.load(path)


def test_knot_tables_beyond_the_sketch_are_refused(honest, tmp_path):
    meta, arrays, _ = honest
    m = {**meta, "features": dict(meta["features"])}
    d = [dict(x) for x in m["features"]["decisions"]]
    n = 50_000
    d[0].update(action="normal-score", cdf_x=list(range(n)), cdf_counts=list(range(n)))
    m["features"]["decisions"] = d
    path = tmp_path / "k.fedep"
    write_model_file(path, m, arrays)
    with pytest.raises(ModelFileError, match=r"has 50000 knots, more than its sketch allows"):
        fedep.load(path)

"""Model files built to hurt whoever loads them, from one honest small model: shared
by the hostile-model tests and ``benchmarks/bench_hostile_model.py``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

import fedep
from fedep.detectors import make_estimator
from fedep.modelfile import read_model_file

__all__ = ["honest_model", "wide_vocabulary"]


def honest_model(folder: Path):
    """The small pipeline model, its metadata and arrays, and its training frame."""
    rng = np.random.default_rng(0)
    df = pd.DataFrame(
        {
            "a": rng.normal(size=300),
            "b": rng.normal(size=300),
            "proto": rng.choice(["tcp", "udp", "icmp"], 300),
        }
    )
    det = make_estimator("pca")
    det.set_params(n_components=2, features="auto")
    det.fit(df)
    path = folder / "honest.fedep"
    fedep.save(det, path)
    meta, arrays = read_model_file(path)
    return path, meta, arrays, df


def wide_vocabulary(meta, arrays, n_vocab):
    """The honest model with ``n_vocab`` categories of ``proto``: every array, the
    scaling and the rank consistent with the wider pipeline (a file the schema accepts)."""
    meta = {**meta, "features": dict(meta["features"])}
    feats = meta["features"]
    decisions = [dict(d) for d in feats["decisions"]]
    decisions[2]["vocabulary"] = [f"v{i}" for i in range(n_vocab)]
    feats["decisions"] = decisions
    n = 2 + n_vocab + 1
    feats["scaling"] = {"mean": [0.0] * n, "scale": [1.0] * n}
    r = arrays["components_"].shape[0]
    comp = np.zeros((r, n))
    comp[0, 0] = comp[1, 1] = 1.0
    out = dict(arrays)
    out.update(
        components_=comp,
        client_components_=comp[None].copy(),
        mean_=np.zeros(n),
        scale_=np.ones(n),
        constant_features_=np.zeros(n, dtype=bool),
    )
    return meta, out

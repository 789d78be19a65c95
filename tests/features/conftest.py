"""Synthetic flow tables for the feature-pipeline tests (ground truth built in code)."""

from __future__ import annotations

import numpy as np
import pandas as pd


def flow_table(n: int, seed: int = 0, attack_share: float = 0.0) -> tuple[pd.DataFrame, np.ndarray]:
    """A Zeek-like conn table; attacks have larger byte counts and a distinct conn_state.

    Returns
    -------
    df : DataFrame of shape (n, 12)
    y : ndarray of shape (n,), 1 for attack rows
    """
    rng = np.random.default_rng(seed)
    y = (rng.uniform(size=n) < attack_share).astype(int)
    alphabet = list("abcdefGHIJKLmnop0123456789")
    df = pd.DataFrame(
        {
            "ts": 1.6e9 + np.sort(rng.uniform(0, 1e6, n)),
            "uid": ["C" + "".join(rng.choice(alphabet, 16)) for _ in range(n)],
            "id.orig_h": [f"192.168.{rng.integers(0, 4)}.{rng.integers(1, 255)}" for _ in range(n)],
            "id.orig_p": rng.integers(1024, 65535, n),
            "id.resp_p": rng.choice([53, 80, 443, 8080], n),
            "proto": rng.choice(["tcp", "udp"], n, p=[0.7, 0.3]),
            "service": rng.choice(["dns", "http", "ssl", "-"], n),
            "conn_state": rng.choice(["SF", "S0", "REJ"], n, p=[0.8, 0.15, 0.05]),
            "duration": rng.lognormal(-1, 2, n),
            "orig_bytes": np.floor(rng.lognormal(6, 1.5, n)),
            "resp_bytes": np.floor(rng.lognormal(7, 2, n)),
            "orig_pkts": 1 + rng.poisson(np.exp(rng.normal(1.5, 1, n))),
        }
    )
    a = y == 1
    k = int(a.sum())
    if k:
        df.loc[a, "orig_bytes"] = np.floor(rng.lognormal(9.5, 0.3, k))
        df.loc[a, "conn_state"] = rng.choice(["RSTO", "OTH"], k)
    return df, y

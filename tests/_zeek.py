"""Synthetic Zeek conn.log flows with known attacks (ground truth made here), and a writer.

Shared by the tests of several packages: ``tests/`` is on ``sys.path`` (its
``conftest.py`` sits outside any package), so ``from _zeek import ...`` works anywhere.

Normal flows: tcp/udp, services http/dns/ssl/-, conn_state mostly SF (some S0/REJ, a
few RSTO), heavy-tailed lognormal byte counts with responses correlated to requests.
Attacks: large uploads (``orig_bytes`` ~ e^11) with no response and the rare
conn_state ``RSTO``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

FIELDS = ["ts", "uid", "id.orig_h", "id.resp_p", "proto", "service", "conn_state",
          "duration", "orig_bytes", "resp_bytes"]  # fmt: skip
TYPES = ["time", "string", "addr", "port", "enum", "string", "string", "interval", "count",
         "count"]  # fmt: skip


def flows(n: int, seed: int, *, attack_rate: float = 0.0, t0: float = 1.7e9) -> pd.DataFrame:
    """``n`` flows (with a 0/1 ``label`` column) of one gateway."""
    rng = np.random.default_rng(seed)
    proto = rng.choice(["tcp", "udp"], n, p=[0.7, 0.3])
    service = np.where(
        proto == "udp", "dns", rng.choice(["http", "ssl", "-"], n, p=[0.5, 0.4, 0.1])
    )
    state = rng.choice(["SF", "S0", "REJ", "RSTO"], n, p=[0.8, 0.1, 0.09, 0.01])
    orig = np.round(rng.lognormal(6.0, 2.0, n))
    resp = np.round(orig * rng.lognormal(1.5, 0.7, n))
    dur = rng.lognormal(-1.0, 1.2, n)
    label = (rng.random(n) < attack_rate).astype(int)
    a = label == 1
    proto[a], service[a], state[a] = "tcp", "-", "RSTO"
    orig[a] = np.round(rng.lognormal(11.0, 0.3, a.sum()))
    resp[a] = 0
    df = pd.DataFrame(
        {
            "ts": t0 + np.sort(rng.uniform(0, 86400, n)),
            "uid": [f"C{v:016x}" for v in rng.integers(0, 2**62, n)],
            "id.orig_h": [f"10.0.{i % 7}.{i % 250 + 1}" for i in rng.integers(0, 10_000, n)],
            "id.resp_p": rng.choice([53, 80, 443, 8080], n),
            "proto": proto,
            "service": service,
            "conn_state": state,
            "duration": dur.round(6),
            "orig_bytes": orig.astype(np.int64),
            "resp_bytes": resp.astype(np.int64),
            "label": label,
        }
    )
    return df


def write_zeek(
    df: pd.DataFrame,
    path,
    *,
    fields: list[str] = FIELDS,
    types: list[str] = TYPES,
    close: str = "2024-01-02-00-00-00",
) -> None:
    """Write the ``fields`` of ``df`` as a Zeek ASCII conn.log (missing values unset: ``-``)."""
    head = [
        "#separator \\x09",
        "#set_separator\t,",
        "#empty_field\t(empty)",
        "#unset_field\t-",
        "#path\tconn",
        "#open\t2024-01-01-00-00-00",
        "#fields\t" + "\t".join(fields),
        "#types\t" + "\t".join(types),
    ]
    cells = df[fields].astype(str).where(df[fields].notna(), "-")
    body = cells.agg("\t".join, axis=1).tolist()
    text = "\n".join([*head, *body, "#close\t" + close]) + "\n"
    with open(path, "w") as fh:
        fh.write(text)

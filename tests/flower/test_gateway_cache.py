"""A long-running ClientApp process keeps its gateway's table between messages, and
reads the file again as soon as it changes (its identity: inode, size, mtime)."""

from __future__ import annotations

import os

import pandas as pd

from fedep.flower import gateway_data


def test_the_table_is_read_once_while_the_file_is_unchanged(tmp_path, monkeypatch):
    path = tmp_path / "gw.csv"
    pd.DataFrame({"a": [1.0, 2.0, 3.0], "b": [4.0, 5.0, 6.0]}).to_csv(path, index=False)
    reads = []
    real = gateway_data._load_gateway_table

    def counting(cfg, p):
        reads.append(p)
        return real(cfg, p)

    monkeypatch.setattr(gateway_data, "_load_gateway_table", counting)
    monkeypatch.setattr(gateway_data, "_TABLE_CACHE", {})
    cfg = {"data-path": str(path), "client-label": "a"}
    df1, label = gateway_data.load_gateway_table(cfg)
    df1.loc[0, "a"] = -99.0  # a caller's change does not reach the cache
    df2, _ = gateway_data.load_gateway_table(cfg)
    assert len(reads) == 1 and label == "a"
    assert df2["a"].tolist() == [1.0, 2.0, 3.0]
    # another node config is another read
    gateway_data.load_gateway_table({**cfg, "client-label": "b"})
    assert len(reads) == 2
    # same size, new content and time: read again
    pd.DataFrame({"a": [7.0, 8.0, 9.0], "b": [4.0, 5.0, 6.0]}).to_csv(path, index=False)
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    df3, _ = gateway_data.load_gateway_table(cfg)
    assert len(reads) == 3 and df3["a"].tolist() == [7.0, 8.0, 9.0]
    # a file that is gone is not served from the cache
    path.unlink()
    try:
        gateway_data.load_gateway_table(cfg)
    except gateway_data.GatewayDataError as exc:
        assert "gw.csv" in str(exc)
    else:
        raise AssertionError("a missing file was served from the cache")

"""Column decisions: type inference per kind, overrides, absent columns, the table."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fedep.features import (
    FeatureError,
    decide_columns,
    format_decisions,
    merge_summaries,
    summarize_columns,
)

N = 400


def _table() -> pd.DataFrame:
    rng = np.random.default_rng(7)
    return pd.DataFrame(
        {
            "ts": 1.6e9 + np.sort(rng.uniform(0, 1e5, N)),
            "epoch": 1.6e9 + rng.uniform(0, 1e5, N),  # no name hint: value rule
            "when": pd.date_range("2021-03-01", periods=N, freq="min").astype(str),
            "dt": pd.date_range("2021-03-01", periods=N, freq="min"),
            "uid": ["C" + "".join(rng.choice(list("abcXYZ0123456789"), 15)) for _ in range(N)],
            "token": [f"{rng.integers(0, 2**62):016x}" for _ in range(N)],
            "id.orig_h": [f"10.0.0.{i % 200}" for i in range(N)],
            "peer": [f"172.16.{i % 7}.{i % 13}" for i in range(N)],
            "dst_port": rng.integers(1, 65535, N),
            "bytes": np.floor(rng.lognormal(6, 2, N)),
            "delta": rng.standard_t(1.2, N) * 50,
            "rate": rng.uniform(0, 1, N),
            "flag": rng.choice([True, False], N),
            "bit": rng.integers(0, 2, N),
            "aa": rng.choice(["T", "F", "-"], N),
            "proto": rng.choice(["tcp", "udp", "icmp"], N),
            "const": np.full(N, 3.0),
            "const_s": ["x"] * N,
            "empty": [None] * N,
            "dashes": ["-"] * N,
            "num_text": rng.choice(["12", "3.5", "7", "0"], N).astype(object),
            "mixed": rng.choice(["a", "1", "2", "b"], N),
            "agent": [f"Mozilla/5.0 build {i}" for i in range(N)],
            "label": rng.integers(0, 2, N),
            "attack_cat": rng.choice(["normal", "dos"], N),
            "type": rng.choice(["normal", "scan"], N),
        }
    )


@pytest.fixture(scope="module")
def decisions():
    df = _table()
    df.loc[3, "num_text"] = "-"  # a few missing tokens among numbers stored as text
    return {d.name: d for d in decide_columns(summarize_columns(df))}


EXPECTED = {
    "ts": ("timestamp", "drop"),
    "epoch": ("timestamp", "drop"),
    "when": ("timestamp", "drop"),
    "dt": ("timestamp", "drop"),
    "uid": ("identifier", "drop"),
    "token": ("identifier", "drop"),
    "id.orig_h": ("address", "drop"),
    "peer": ("address", "drop"),
    "dst_port": ("identifier", "drop"),
    "bytes": ("heavy-tailed", "log1p"),
    "delta": ("signed-heavy-tailed", "signed-log"),
    "rate": ("numeric", "keep"),
    "flag": ("boolean", "keep"),
    "bit": ("boolean", "keep"),
    "aa": ("boolean", "one-hot"),
    "proto": ("categorical", "one-hot"),
    "const": ("constant", "drop"),
    "const_s": ("constant", "drop"),
    "empty": ("all-missing", "drop"),
    "dashes": ("all-missing", "drop"),
    "num_text": ("numeric", "keep"),
    "mixed": ("categorical", "one-hot"),
    "agent": ("free-text", "drop"),
    "label": ("label", "drop"),
    "attack_cat": ("label", "drop"),
    "type": ("label", "drop"),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_kind_and_action(decisions, name):
    d = decisions[name]
    assert (d.kind, d.action) == EXPECTED[name], d.reason
    assert d.reason


def test_details(decisions):
    assert "heavy-tailed" in decisions["bytes"].reason
    assert "IP/MAC" in decisions["peer"].reason
    assert "constant (one value 3 in 400 rows)" in decisions["const"].reason
    assert set(decisions["proto"].vocabulary) == {"tcp", "udp", "icmp"}
    nt = decisions["num_text"]
    assert nt.missing_indicator and nt.impute is not None
    assert decisions["proto"].output_names()[-1] == "proto=<other>"


def test_vocabulary_is_top_k_by_global_count():
    df = pd.DataFrame({"s": ["a"] * 50 + ["b"] * 30 + ["c"] * 10 + ["d"] * 5 + ["e"] * 5})
    (d,) = decide_columns(summarize_columns(df), max_categories=3)
    assert d.kind == "categorical" and d.vocabulary == ("a", "b", "c")


def test_user_overrides_win():
    df = _table()
    # Columns forced categorical send their values (a port column otherwise does not).
    assert summarize_columns(df).columns["dst_port"].top == {}
    s = summarize_columns(df, categorical=["dst_port", "bit"])
    dec = {
        d.name: d
        for d in decide_columns(
            s,
            include=["label", "proto"],
            exclude=["bytes"],
            categorical=["dst_port", "bit"],
            numeric=["ts"],
        )
    }
    assert dec["bytes"].action == "drop" and "excluded by the user" in dec["bytes"].reason
    assert dec["label"].action == "keep" and dec["label"].kind == "boolean"
    assert dec["dst_port"].action == "one-hot" and len(dec["dst_port"].vocabulary) == 32
    assert dec["bit"].action == "one-hot" and set(dec["bit"].vocabulary) == {"0", "1"}
    assert dec["ts"].action == "keep" and dec["ts"].kind == "numeric"
    with pytest.raises(FeatureError, match="'nope'"):
        decide_columns(s, include=["nope"])
    with pytest.raises(FeatureError, match="both categorical and numeric"):
        decide_columns(s, categorical=["rate"], numeric=["rate"])


def test_column_absent_at_one_gateway():
    df = _table()[["bytes", "proto", "rate"]]
    parts = [df.iloc[:150], df.iloc[150:300], df.iloc[300:].drop(columns=["rate"])]
    merged = merge_summaries([summarize_columns(p) for p in parts])
    assert merged["rate"].n_absent == 1 and merged["rate"].n_null == 100
    auto = {d.name: d for d in decide_columns(merged)}
    assert auto["rate"].action == "drop" and "absent at 1 of 3 gateways" in auto["rate"].reason
    assert auto["bytes"].action == "log1p"
    forced = {d.name: d for d in decide_columns(merged, include=["rate"])}
    assert forced["rate"].action == "keep" and forced["rate"].optional
    assert forced["rate"].missing_indicator


def test_format_decisions(decisions):
    table = format_decisions(list(decisions.values()))
    lines = table.splitlines()
    assert lines[0].split()[:4] == ["column", "kind", "action", "reason"]
    assert len(lines) == len(decisions) + 2
    assert any(line.startswith("bytes") and "log1p" in line for line in lines)


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("dst_port", "port"),
        ("Src Port", "port"),
        ("Destination Port", "port"),
        ("L4_SRC_PORT", "port"),
        ("id.resp_p", "port"),
        ("tcp_dport", "port"),
        # Counts, flags and protocols whose names merely contain "port".
        ("ct_src_dport_ltm", None),
        ("is_sm_ips_ports", None),
        ("transport", None),
        ("report_count", None),
    ],
)
def test_port_names_end_in_a_port_word(name, hint):
    from fedep.features.name_hints import name_hint

    assert name_hint(name) == hint


def test_count_named_after_ports_stays_a_feature():
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"ct_src_dport_ltm": rng.integers(1, 40, 500), "x": rng.normal(size=500)})
    dec = {d.name: d for d in decide_columns(summarize_columns(df))}
    assert dec["ct_src_dport_ltm"].used


def test_cipher_suite_names_are_a_vocabulary_not_uids():
    # Zeek ssl.log's cipher column: few underscored names, mostly unset ("-").
    n = 2000
    rng = np.random.default_rng(1)
    suites = ["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_AES_128_GCM_SHA256"]
    cipher = np.where(rng.random(n) < 0.8, "-", rng.choice(suites, n))
    df = pd.DataFrame({"ssl_cipher": cipher, "x": rng.normal(size=n)})
    s = summarize_columns(df)
    assert set(suites) <= set(s.columns["ssl_cipher"].top)  # values are sent
    dec = {d.name: d for d in decide_columns(s)}
    assert dec["ssl_cipher"].action == "one-hot"
    assert set(suites) <= set(dec["ssl_cipher"].vocabulary)
    # a real uid column is still withheld and dropped
    uid = ["C" + "".join(rng.choice(list("abcXYZ0123456789"), 16)) for _ in range(n)]
    s = summarize_columns(pd.DataFrame({"uid_col": uid, "x": rng.normal(size=n)}))
    assert s.columns["uid_col"].top == {}

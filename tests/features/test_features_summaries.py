"""Per-gateway summaries: content, exact merge, associativity, serialisation."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fedep.features import (
    KMV,
    ColumnSummaries,
    FeatureError,
    LogHistogram,
    merge_summaries,
    summarize_columns,
)

from .conftest import flow_table


def _frame(seed: int, n: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "x": rng.lognormal(2, 2, n),
            "s": rng.choice(["a", "b", "c", "-"], n),
            "k": rng.integers(0, 5, n),
            "t": rng.choice(["1", "2.5", "-", "7"], n),
            "b": rng.choice([True, False], n),
        }
    )


def _exact_view(cs) -> dict:
    """Everything that must merge exactly (moments compared separately)."""
    d = cs.to_dict()
    for k in ("mean", "m2", "n_gateways"):
        d.pop(k)
    return d


def test_summary_content():
    df = pd.DataFrame(
        {
            "a": [0.0, 2.0, np.nan, -1.0, np.inf],
            "s": ["x", "y", "-", None, "x"],
            "ip": ["10.0.0.1", "10.0.0.2", "::1", "fe80::1", "aa:bb:cc:dd:ee:ff"],
        }
    )
    s = summarize_columns(df)
    a = s["a"]
    assert (a.n_rows, a.n_null, a.n_num, a.n_posinf) == (5, 1, 3, 1)
    assert (a.min, a.max, a.n_zero, a.n_nonneg) == (-1.0, 2.0, 1, 2)
    assert a.mean == pytest.approx(1 / 3)
    assert a.m2 == pytest.approx(np.var([0, 2, -1]) * 3)
    st_ = s["s"]
    assert st_.top == {"x": 2, "y": 1, "-": 1} and st_.n_null == 1 and st_.n_token == 1
    assert st_.n_junk == 3 and st_.n_distinct == 3
    assert s["ip"].n_address == 5
    assert s["a"].inferred_type == "numeric" and st_.inferred_type == "string"


def test_patterns_do_not_fire_on_times_of_day_or_words():
    df = pd.DataFrame({"c": ["12:30:45", "cafe", "hello world", "2020-01-01T10:00:00Z"]})
    c = summarize_columns(df)["c"]
    assert c.n_address == 0 and c.n_uid == 0 and c.n_time == 1


def test_sketch_quantile_error_bound():
    rng = np.random.default_rng(1)
    v = rng.lognormal(3, 2, 5000)
    h = LogHistogram(32).add(v)
    for q in (0.01, 0.25, 0.5, 0.9, 0.99):
        true = np.sort(v)[int(np.floor(q * (len(v) - 1)))]
        assert abs(h.quantile(q) - true) <= h.relative_error * true * (1 + 1e-9)
    assert h.relative_error == pytest.approx(0.036, abs=1e-3)


def test_kmv_exact_below_k_and_estimate_above():
    small = KMV.of([f"v{i}" for i in range(100)])
    assert small.estimate() == 100 and not small.saturated
    big = KMV.of([f"v{i}" for i in range(20000)])
    assert big.saturated and abs(big.estimate() / 20000 - 1) < 0.25


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(1, 120),
    n_parts=st.integers(1, 5),
    drop_col=st.booleans(),
)
def test_merge_equals_summary_of_concatenation(seed, n, n_parts, drop_col):
    df = _frame(seed, n)
    rng = np.random.default_rng(seed + 1)
    cuts = np.sort(rng.integers(0, n + 1, n_parts - 1))
    bounds = [0, *cuts.tolist(), n]
    parts = [df.iloc[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]
    if drop_col and len(parts) > 1:
        parts[-1] = parts[-1].drop(columns=["k"])  # a gateway lacking a column
    # Every column forced categorical: the merge arithmetic of the category view is
    # exact only when no gateway withholds its values (identifying columns do).
    cats = list(parts[0].columns)
    merged = merge_summaries([summarize_columns(p, categorical=cats) for p in parts])
    whole = summarize_columns(pd.concat(parts, ignore_index=True), categorical=cats)
    assert merged.n_rows == whole.n_rows == n
    for name, cw in whole.columns.items():
        cm = merged[name]
        ew, em = _exact_view(cw), _exact_view(cm)
        if name == "k" and drop_col and len(parts) > 1:
            assert cm.n_absent == 1
            ew.pop("families"), em.pop("families"), ew.pop("n_absent"), em.pop("n_absent")
        assert ew == em, name
        assert cm.mean == pytest.approx(cw.mean, rel=1e-9, abs=1e-9)
        assert cm.m2 == pytest.approx(cw.m2, rel=1e-8, abs=1e-6)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_merge_is_associative_and_commutative(seed):
    a, b, c = (
        summarize_columns(_frame(seed + i, 30 + 7 * i), categorical=["x", "s", "k", "t", "b"])
        for i in range(3)
    )
    left = merge_summaries([merge_summaries([a, b]), c])
    right = merge_summaries([a, merge_summaries([b, c])])
    flipped = merge_summaries([c, b, a])
    for name in left.columns:
        assert _exact_view(left[name]) == _exact_view(right[name]) == _exact_view(flipped[name])
        assert left[name].mean == pytest.approx(right[name].mean, rel=1e-12)
        assert left[name].m2 == pytest.approx(flipped[name].m2, rel=1e-10)


def test_json_round_trip():
    df, _ = flow_table(300, seed=3)
    s = summarize_columns(df)
    back = ColumnSummaries.from_dict(json.loads(json.dumps(s.to_dict())))
    assert back.to_dict() == s.to_dict()
    with pytest.raises(FeatureError, match="version"):
        ColumnSummaries.from_dict({**s.to_dict(), "version": 99})
    # a gateway of the previous version hashed numbers by their text: not mergeable
    with pytest.raises(FeatureError, match="not a version-2 ColumnSummaries dict"):
        ColumnSummaries.from_dict({**s.to_dict(), "version": 1})


def test_merge_rejects_different_sketch_sizes():
    df = _frame(0, 10)
    with pytest.raises(FeatureError, match="sketch"):
        merge_summaries([summarize_columns(df), summarize_columns(df, sketch_size=64)])


def test_identifying_values_stay_on_the_gateway():
    rng = np.random.default_rng(0)
    n = 300
    df = pd.DataFrame(
        {
            "id.orig_h": [f"10.0.{i % 7}.{i % 250}" for i in range(n)],
            "uid": [f"C{rng.integers(1 << 40):x}" for _ in range(n)],
            "ts": 1.6e9 + np.arange(n) * 0.5,
            "when": pd.date_range("2024-01-01", periods=n, freq="s").astype(str),
            "orig_bytes": rng.lognormal(6, 2, n).round(),
            "proto": rng.choice(["tcp", "udp", "icmp"], n),
            "code": rng.integers(0, 4, n),
        }
    )
    cols = summarize_columns(df).columns
    for name in ("id.orig_h", "uid", "ts", "when", "orig_bytes"):
        assert cols[name].top == {}, name
        assert cols[name].other_count + cols[name].n_null == n
    assert set(cols["proto"].top) == {"tcp", "udp", "icmp"}
    assert set(cols["code"].top) == {"0", "1", "2", "3"}
    sent = json.dumps(summarize_columns(df).to_dict())
    assert "10.0." not in sent and df["uid"][0] not in sent


@pytest.mark.parametrize("keep", [3, 256])
def test_numeric_category_view_equals_per_row_reference(keep):
    # numbers are counted by value and keyed once each; the reference keys every row
    from fedep.features._values import column_family, string_view
    from fedep.features.sketches import KMV
    from fedep.features.summaries import _summarize_one

    rng = np.random.default_rng(keep)
    n = 5000
    values = {
        "ints": rng.integers(-30, 30, n),
        "decimals": np.round(rng.exponential(10, n), 2),  # ~1000 distinct, many ties
        "mixed": rng.choice([0.0, -0.0, 1.5, np.inf, -np.inf, 2.0**60, 1e-300, 7.0], n),
        "with_nan": np.where(rng.uniform(size=n) < 0.2, np.nan, rng.integers(0, 9, n)),
        "objects": pd.Series(rng.choice([1, 2.5, None, 3], n), dtype=object),
    }
    for name, v in values.items():
        s = pd.Series(v)
        fam = column_family(s)
        assert fam == "numeric"
        cs = _summarize_one(name, s, keep, 32, forced=True)
        vc = string_view(s, fam).value_counts(dropna=True, sort=False)
        uniq, cnt = vc.index.to_numpy(dtype=object), vc.to_numpy()
        order = sorted(range(len(uniq)), key=lambda i: (-cnt[i], uniq[i]))[:keep]
        assert list(cs.top.items()) == [(str(uniq[i]), int(cnt[i])) for i in order], name
        assert cs.n_null == len(s) - int(cnt.sum()) and cs.n_token == 0
        assert cs.distinct.hashes == KMV.of([str(u) for u in uniq]).hashes
        assert cs.truncated == (len(uniq) > keep)


def test_cdf_knots_are_the_empirical_distribution_at_bin_edges():
    rng = np.random.default_rng(11)
    v = np.concatenate([-rng.lognormal(0, 1, 300), np.zeros(200), rng.lognormal(2, 2, 1500)])
    sk = LogHistogram(32).add(v)
    x, c = sk.cdf_knots()
    assert np.all(np.diff(x) > 0) and np.all(np.diff(c) >= 0) and c[-1] == len(v)
    # at a bin edge (not the zero atom) the count is exactly the number of values below
    for xi, ci in zip(x, c, strict=True):
        if xi != 0:
            assert ci == int((v < xi).sum()), xi
    assert c[x == 0][0] == 300 + 100  # mid-rank of the zero atom
    assert LogHistogram(32).cdf_knots()[0].size == 0


# ------------------------------------------------- distinct values without text keys
def _pool(rng: np.random.Generator, size: int) -> np.ndarray:
    """``size`` floats mixing every kind of key: integral, decimal, huge, tiny, signed
    zeros, infinities (distinct as keys except for -0.0 / 0.0)."""
    special = np.array(
        [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, 2.0**53, 2.0**53 + 2, 1e16, 5e-324, 1e-13, 0.1]
    )
    mixed = np.concatenate(
        [
            rng.integers(-1000, 100_000, size).astype(float),
            np.round(rng.exponential(50.0, size), 2),
            # up to 1e150: moments of huge values are test_features_overflow's
            rng.standard_normal(size) * 10.0 ** rng.integers(-20, 150, size),
        ]
    )
    return np.concatenate([special[: max(1, size // 4)], rng.choice(mixed, size)])[:size]


def test_number_and_text_keys_share_an_identity_across_gateways():
    from fedep.features._values import canonical_keys
    from fedep.features.sketches import key_hashes, number_hashes

    numbers = np.array([80.0, 1.5, -0.0, np.inf, 3.0, -np.inf, 2.0**53, 1e16, 0.1, np.nan])
    text = ["80", "1.5", "80.0", "-0", "inf", "0", "abc", "-", "nan", " 80", "1e16", "1e+16"]
    text += ["-inf", "+80", "080", "9007199254740992.0", "0.10", "Infinity", "0.1"]
    a = summarize_columns(pd.DataFrame({"port_ish": numbers}), categorical=["port_ish"])
    b = summarize_columns(pd.DataFrame({"port_ish": pd.Series(text, dtype=object)}))
    assert a["port_ish"].families == ("numeric",) and b["port_ish"].families == ("string",)
    merged = merge_summaries([a, b])["port_ish"]
    # brute force: the identity of a key is its text, numbers written canonically
    keys = set(canonical_keys(numbers[~np.isnan(numbers)])) | set(text)
    assert "0" in keys and "-0" in keys and "80.0" in keys  # distinct keys
    assert merged.distinct.estimate() == len(keys) == 20
    assert merged.n_distinct == len(keys)
    # the same values typed as text on both sides count the same
    assert merge_summaries([b, b])["port_ish"].n_distinct == len(set(text))
    # canonical text hashes as its number; other spellings of a number hash as text
    h = key_hashes(["80", "inf", "-inf", "0", "1e+16", "9007199254740992.0", "0.1"])
    nh = number_hashes(np.array([80.0, np.inf, -np.inf, -0.0, 1e16, 2.0**53, 0.1]))
    assert h.tolist() == nh.tolist()
    odd = ["80.0", "-0", " 80", "+80", "080", "1e16", "Infinity", "0.10", "nan", "abc"]
    assert key_hashes(odd).tolist() == pd.util.hash_array(np.array(odd, dtype=object)).tolist()
    assert len(set(key_hashes(odd).tolist()) | set(nh.tolist())) == len(odd) + len(nh)


@settings(max_examples=60, deadline=None)
@given(x=st.lists(st.floats(allow_nan=False, width=64), min_size=1, max_size=50))
def test_canonical_text_of_any_float_hashes_as_the_float(x):
    from fedep.features._values import canonical_keys
    from fedep.features.sketches import key_hashes, number_hashes

    v = np.array(x, dtype=float)
    assert key_hashes(canonical_keys(v)).tolist() == number_hashes(v).tolist()
    assert KMV.of(canonical_keys(v)) == KMV.of_numbers(v)
    assert KMV.of_numbers(v).estimate() == len(set(canonical_keys(v)))


def _reference_numeric_summary(name: str, s: pd.Series, keep: int, forced: bool):
    """The summary of a numeric column as first written: every row keyed as text
    (``string_view``), the keys counted, the sketch binned one value at a time."""
    from collections import Counter

    from fedep.features._values import string_view
    from fedep.features.summaries import ColumnSummary, _withhold_values

    vc = string_view(s, "numeric").value_counts(dropna=True, sort=False)
    uniq, cnt = [str(u) for u in vc.index], vc.to_numpy(dtype=np.int64)
    cs = ColumnSummary(name=name, families=("numeric",), n_rows=len(s))
    cs.sketch = LogHistogram(32)
    cs.n_null = len(s) - int(cnt.sum())
    vals = pd.to_numeric(pd.Series(s, dtype=object)).to_numpy(dtype=float)
    vals = vals[~np.isnan(vals)]
    fin = vals[np.isfinite(vals)]
    cs.n_posinf, cs.n_neginf = int((vals == np.inf).sum()), int((vals == -np.inf).sum())
    cs.n_num = len(fin)
    if len(fin):
        cs.mean = float(np.mean(fin))
        cs.m2 = float(((fin - cs.mean) ** 2).sum())
        cs.min, cs.max = float(fin.min()), float(fin.max())
        cs.n_zero, cs.n_one = int((fin == 0).sum()), int((fin == 1).sum())
        cs.n_nonneg = int((fin >= 0).sum())
        bins = {1: Counter(), -1: Counter()}
        for x in fin.tolist():
            if abs(x) < 1e-12:
                cs.sketch.zero += 1
            else:
                bins[1 if x > 0 else -1][int(np.floor(np.log10(abs(x)) * 32))] += 1
        cs.sketch.pos, cs.sketch.neg = dict(bins[1]), dict(bins[-1])
    order = sorted(range(len(uniq)), key=lambda i: (-cnt[i], uniq[i]))[:keep]
    cs.top = {uniq[i]: int(cnt[i]) for i in order}
    cs.other_count = int(cnt.sum()) - sum(cs.top.values())
    cs.truncated = len(uniq) > keep
    cs.distinct = KMV.of(uniq)  # the keys' text, through the identity rule
    if not forced and _withhold_values(name, cs, "numeric"):
        cs.other_count, cs.top, cs.truncated = int(cnt.sum()), {}, True
    return cs, len(uniq)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 3000),
    n_values=st.sampled_from([1, 3, 40, 255, 256, 300, 399, 401, 2000]),
    keep=st.sampled_from([3, 256, 400]),
    forced=st.booleans(),
    dtype=st.sampled_from(["float64", "float32", "object", "int64"]),
    null_share=st.sampled_from([0.0, 0.1]),
    name=st.sampled_from(["x", "src_port"]),
)
def test_numeric_summary_equals_the_text_key_reference(
    seed, n, n_values, keep, forced, dtype, null_share, name
):
    from fedep.features.summaries import _summarize_one

    rng = np.random.default_rng(seed)
    pool = _pool(rng, n_values)
    if dtype == "int64":
        pool = np.unique(rng.integers(-(2**62), 2**62, n_values)).astype(float)
        pool = pool.astype(np.int64).astype(float)  # exactly representable
    v = rng.choice(pool, n)
    if n > len(pool):  # every value of the pool at least once: > 256 distinct for real
        v[: len(pool)] = pool
    if dtype == "int64":
        s = pd.Series(v.astype(np.int64))
    else:
        v[rng.uniform(size=n) < null_share] = np.nan
        with np.errstate(over="ignore"):  # float32: beyond 3.4e38 is inf, as it should
            s = pd.Series(v.astype(dtype) if dtype != "object" else list(v), dtype=dtype)
        if dtype == "object":
            s[s.isna()] = None
    from fedep.features._values import column_family

    # a column of nulls only (one row, drawn null) is not of the numeric family
    assume(column_family(s) == "numeric")
    cs = _summarize_one(name, s, keep, 32, forced)
    ref, n_distinct = _reference_numeric_summary(name, s, keep, forced)
    assert cs.mean == pytest.approx(ref.mean, rel=1e-9, abs=1e-300)
    assert cs.m2 == pytest.approx(ref.m2, rel=1e-9, abs=1e-300)
    got, want = cs.to_dict(), ref.to_dict()
    for k in ("mean", "m2"):
        got.pop(k), want.pop(k)
    assert got == want  # top, counts, sketch, and the sketch's hashes themselves
    if n_distinct < 256:
        assert cs.distinct.estimate() == cs.n_distinct == n_distinct
    if forced:
        assert len(cs.top) == min(n_distinct, keep)


def test_forced_categorical_numeric_column_keeps_its_top_list():
    rng = np.random.default_rng(5)
    n = 5000
    df = pd.DataFrame({"code": np.round(rng.lognormal(3, 1, n), 1), "x": rng.normal(size=n)})
    free = summarize_columns(df)["code"]
    assert free.top == {} and free.truncated and free.other_count == n
    forced = summarize_columns(df, categorical=["code"])["code"]
    vc = df["code"].value_counts()
    assert forced.truncated and len(forced.top) == 256
    assert sum(forced.top.values()) + forced.other_count == n
    assert forced.top[repr(float(vc.index[0]))] == vc.iloc[0]
    assert forced.distinct == free.distinct and forced.n_distinct > 256
    # the withheld list of the free column is what a forced list would have added up to
    assert free.other_count == forced.other_count + sum(forced.top.values())


def test_datetime_distinct_values_hash_as_epoch_seconds():
    t = pd.Series(pd.date_range("2024-01-01", periods=50, freq="500ms"))
    cs = summarize_columns(pd.DataFrame({"when": t}))["when"]
    secs = t.to_numpy(dtype="datetime64[ns]").astype(np.int64) / 1e9
    assert cs.distinct == KMV.of_numbers(secs) and cs.n_distinct == 50
    assert cs.n_time == 50 and cs.top == {} and cs.other_count == 50


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(max_size=40),
            st.text(alphabet="0123456789abcdefABCDEF:.%/-TZ +", max_size=40),
            st.sampled_from(
                [
                    "10.0.0.1",
                    "192.168.1.20:443",
                    "fe80::1%eth0",
                    "00:1a:2b:3c:4d:5e",
                    "CHhAvVGS1DHFjwGM9",
                    "123e4567-e89b-12d3-a456-426614174000",
                    "2024-01-02T03:04:05Z",
                    "1/2/2024 10:00 PM",
                    "\u0663\u0664\u0665\u0666-01-01",
                    "\u00b2024-01-01",
                    "abcdefghij",
                    "abc123def4",
                ]
            ),
        ),
        max_size=30,
    )
)
def test_pattern_flags_equal_pandas_fullmatch(texts):
    # the prefilters (first character, length) never change what the regexes say
    from fedep.features.summaries import _ADDRESS_RE, _TIME_RE, _UID_RE, _pattern_flags

    texts = [t.strip() for t in texts]
    s = pd.Series(texts, dtype=object)
    address, uid, time = _pattern_flags(texts)
    for got, pattern in ((address, _ADDRESS_RE), (uid, _UID_RE), (time, _TIME_RE)):
        np.testing.assert_array_equal(got, s.str.fullmatch(pattern).to_numpy(bool))


@pytest.mark.parametrize("dtype", ["str", "string"])
def test_text_column_summary_does_not_depend_on_its_storage(dtype):
    # a pandas string column (what the readers give) is counted as stored; the same
    # values in an object column go through string_view: the same summary
    from fedep.features.summaries import _summarize_one

    rng = np.random.default_rng(0)
    pool = ["tcp", "udp", "", " x ", "80", "1.5", "-", "10.0.0.1", "CHhAvVGS1DHFjwGM9", "True"]
    values = [None if rng.random() < 0.1 else str(rng.choice(pool)) for _ in range(500)]
    values += [f"C{i:09d}abc" for i in range(300)]  # many distinct uid-like tokens
    for keep in (3, 64):
        got = _summarize_one("c", pd.Series(values, dtype=dtype), keep, 32).to_dict()
        want = _summarize_one("c", pd.Series(values, dtype=object), keep, 32).to_dict()
        assert got == want

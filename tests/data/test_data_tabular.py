"""load_csv / Parquet: round trips and a bad-input matrix."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedep.data import DataError, load_csv

finite = st.floats(allow_nan=False, allow_infinity=False, width=64)


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    data=st.integers(1, 30).flatmap(
        lambda n: st.tuples(
            st.lists(st.lists(finite, min_size=n, max_size=n), min_size=1, max_size=40),
            st.just(n),
        )
    ),
    bom=st.booleans(),
    crlf=st.booleans(),
    with_label=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_round_trip(tmp_path, data, bom, crlf, with_label, seed):
    rows, n = data
    X = np.array(rows, dtype=np.float64)
    names = [f"f{j}" for j in range(n)]
    nl = "\r\n" if crlf else "\n"
    y = np.random.default_rng(seed).integers(0, 2, len(X))
    header = names + (["label"] if with_label else [])
    lines = [",".join(header)]
    for i, r in enumerate(X):
        fields = [repr(float(v)) for v in r] + ([str(y[i])] if with_label else [])
        lines.append(",".join(fields))
    text = nl.join(lines) + nl
    path = tmp_path / f"t{seed}_{bom}_{crlf}.csv"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode())
    t = load_csv(path, label_column="label" if with_label else None)
    assert t.feature_names == names
    np.testing.assert_array_equal(t.X, X)
    assert t.n_dropped == 0 and t.groups is None
    if with_label:
        np.testing.assert_array_equal(t.y, y)
    else:
        assert t.y is None


def _write(tmp_path, content: bytes, name="data.csv"):
    p = tmp_path / name
    p.write_bytes(content)
    return p


# (content, kwargs, expected line, expected column, message fragment)
BAD = {
    "too_few_fields": (
        b"a,b,label\n1,2,0\n3,4\n",
        {},
        3,
        None,
        "wrong number of fields: expected 3, found 2",
    ),
    "too_many_fields": (b"a,b,label\n1,2,0\n1,2,0\n3,4,1,5\n", {}, 4, None, "found 4"),
    "blank_line_inside": (b"a,b,label\n1,2,0\n\n3,4,1\n", {}, 3, None, "blank line"),
    "non_numeric": (b"a,b,label\n1,2,0\n3,x,1\n5,6,1\n7,8,0\n", {}, 3, "b", "non-numeric"),
    "nan": (b"a,b,label\n1,2,0\n3,nan,1\n", {}, 3, "b", "non-finite"),
    "inf": (b"a,b,label\n1,2,0\n3,4,1\n-inf,4,1\n", {}, 4, "a", "non-finite"),
    "empty_value": (b"a,b,label\n1,2,0\n3,,1\n", {}, 3, "b", "missing value"),
    "empty_file": (b"", {}, 1, None, "empty file"),
    "header_only": (b"a,b,label\n", {}, 2, None, "no data rows"),
    "bad_label": (b"a,b,label\n1,2,0\n3,4,2\n", {}, 3, "label", "0 or 1"),
    "text_label": (b"a,b,label\n1,2,normal\n3,4,dos\n", {}, 2, "label", "0 or 1"),
    "missing_label": (b"a,b,label\n1,2,0\n3,4,\n", {}, 3, "label", "missing label"),
    "unknown_label_column": (b"a,b\n1,2\n", {"label_column": "y"}, 1, "y", "not a column"),
    "unknown_feature": (
        b"a,b,label\n1,2,0\n",
        {"feature_columns": ["a", "zz"]},
        1,
        "zz",
        "unknown",
    ),
    "unknown_client": (b"a,b,label\n1,2,0\n", {"client_column": "site"}, 1, "site", "not a column"),
    "duplicate_header": (b"a,a,label\n1,2,0\n", {}, 1, "a", "duplicate"),
    "missing_client": (
        b"a,b,label,site\n1,2,0,s1\n3,4,1,\n",
        {"client_column": "site"},
        3,
        "site",
        "client",
    ),
    "unterminated_quote": (
        b'a,b,label\n1,2,0\n"3,4,1\n5,6,0\n',
        {},
        3,
        None,
        "wrong number of fields",
    ),
    "crlf_bom_bad_value": (
        b"\xef\xbb\xbfa,b,label\r\n1,2,0\r\n3,4,1\r\n5,?,0\r\n",
        {},
        4,
        "b",
        "'?'",
    ),
    "label_is_feature": (
        b"a,b,label\n1,2,0\n",
        {"feature_columns": ["a", "label"]},
        None,
        "label",
        "cannot",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input(tmp_path, case):
    content, kwargs, line, column, fragment = BAD[case]
    kwargs = {"label_column": "label", **kwargs} if b"label" in content else kwargs
    p = _write(tmp_path, content)
    with pytest.raises(DataError) as exc:
        load_csv(p, **kwargs)
    err = exc.value
    msg = str(err)
    assert str(p) in msg and fragment in msg
    assert err.line == line
    if line is not None:
        assert f"line {line}" in msg
    assert err.column == column
    if column is not None:
        assert repr(column) in msg
    assert isinstance(err, ValueError)


def test_trailing_blank_lines_and_whitespace_ok(tmp_path):
    p = _write(tmp_path, b"a , b\r\n 1, 2 \r\n3,4\r\n\r\n\r\n")
    t = load_csv(p)
    assert t.feature_names == ["a", "b"] and t.X.tolist() == [[1, 2], [3, 4]]


def test_normal_label_and_clients(tmp_path):
    p = _write(
        tmp_path, b"site,x,host,cls\nA,1,h1,normal\nB,2,h2,dos\nA,3,h3,scan\nC,4,h4,normal\n"
    )
    t = load_csv(p, label_column="cls", normal_label="normal", client_column="site")
    assert t.y.tolist() == [0, 1, 1, 0]
    assert t.groups.tolist() == [0, 1, 0, 2] and t.group_names == ["A", "B", "C"]
    assert t.feature_names == ["x"] and t.skipped_columns == ["host"]


def test_numeric_normal_label(tmp_path):
    p = _write(tmp_path, b"x,lab\n1,0.0\n2,3\n3,0\n")
    t = load_csv(p, label_column="lab", normal_label=0)
    assert t.y.tolist() == [0, 1, 0]


def test_normal_label_never_seen_warns(tmp_path):
    p = _write(tmp_path, b"x,lab\n1,a\n2,b\n")
    with pytest.warns(UserWarning, match="never occurs"):
        t = load_csv(p, label_column="lab", normal_label="normal")
    assert t.y.tolist() == [1, 1]


def test_feature_columns_order(tmp_path):
    p = _write(tmp_path, b"a,b,c\n1,2,3\n4,5,6\n")
    t = load_csv(p, feature_columns=["c", "a"])
    assert t.feature_names == ["c", "a"] and t.X.tolist() == [[3, 1], [6, 4]]


def test_parquet(tmp_path):
    df = pd.DataFrame({"a": [1.0, 2.0], "b": [3, 4], "label": [0, 1], "host": ["x", "y"]})
    p = tmp_path / "t.parquet"
    df.to_parquet(p)
    t = load_csv(p, label_column="label")
    assert t.X.tolist() == [[1, 3], [2, 4]] and t.y.tolist() == [0, 1]
    df.loc[1, "a"] = np.nan
    df.to_parquet(p)
    with pytest.raises(DataError, match=r"row 2, column 'a'"):
        load_csv(p, label_column="label")


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_csv(tmp_path / "nope.csv")

"""fedep.data._tails: the compiled writer of ``fedep score``'s lines against the
per-row Python formatting (:class:`fedep.data.stream.ScoreTailFormatter`)."""

from __future__ import annotations

import numpy as np
import pytest

from fedep.data._tails import HAVE_KERNEL, digits, write_lines
from fedep.data.stream import CsvBlockReader, ScoreTailFormatter

pytestmark = pytest.mark.skipif(not HAVE_KERNEL, reason="numba is a declared dependency")


def _awkward_values(rng, n):
    """Values over the whole double range, plus ties and near-ties of 4 and 10 digits."""
    wide = rng.lognormal(0.0, 40.0, n) * rng.choice([-1.0, 1.0], n)
    money = np.round(rng.uniform(0, 1e6, n), 3)
    # exact decimal ties (x.5 at the 4th / 10th digit) and their neighbours
    ties = np.concatenate([np.arange(1, 2000) + 0.5, (np.arange(1, 2000) + 0.5) * 1e-3])
    ties = np.concatenate([ties, np.nextafter(ties, 0), np.nextafter(ties, np.inf)])
    ties10 = (rng.integers(10**9, 10**10, 3000) + 0.5) * 10.0 ** rng.integers(-12, 3, 3000)
    special = np.array(
        [0.0, -0.0, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 1e-5, 1e-4,
         9.9995, 99995.0, 999999999.5, 9999999999.5, 123456789012.0, 1e16, 1e22, 1e23]
    )  # fmt: skip
    return np.concatenate([wide, money, ties, ties10, special, -special])


@pytest.mark.parametrize("p", [4, 10])
def test_digits_match_python_correct_rounding(p):
    x = _awkward_values(np.random.default_rng(p), 50_000)
    neg, m, e = digits(x, p)
    for v, s, mm, ee in zip(x.tolist(), neg.tolist(), m.tolist(), e.tolist(), strict=True):
        if v == 0:
            assert mm == 0 and s == (str(v)[0] == "-")
            continue
        mant, exp = f"{abs(v):.{p - 1}e}".split("e")
        assert (s, mm, ee) == (v < 0, int(mant.replace(".", "")), int(exp)), v


@pytest.mark.parametrize("k", [0, 1, 3])
@pytest.mark.parametrize("quote", [False, True])
def test_write_lines_equals_reference_formatter(k, quote):
    rng = np.random.default_rng(k)
    names = ["a", "proto=tcp", "bytes", 'x,"y"' if quote else "z", "é"]
    vals = rng.permutation(_awkward_values(rng, 2000))
    n = vals.size // 5
    scores = vals[:n]
    contrib = vals[n : 5 * n].reshape(n, 4)[:, :k] if k else None
    idx = rng.integers(0, len(names), (n, k)) if k else None
    flags = rng.integers(0, 2, n)
    # probabilities in [0, 1], with exact 0 and 1 and values near 4-digit rounding ties
    probs = np.clip(np.abs(vals[::-1][:n]) % 1.0, 0.0, 1.0)
    probs[:3] = [0.0, 1.0, 0.99995]
    lines = [f"{i},row {i}".encode() for i in range(n)]
    buf = b"\n".join(lines) + b"\n"
    lengths = np.array([len(ln) for ln in lines])
    ends = np.cumsum(lengths + 1) - 1
    starts = ends - lengths
    ref = ScoreTailFormatter(names, k)
    tails = ref(scores, flags, probs, idx, contrib)
    expected = b"".join(ln + t for ln, t in zip(lines, tails, strict=True))
    got = write_lines(
        np.frombuffer(buf, np.uint8), starts, ends, scores, flags, probs, idx, contrib,
        [str(n).encode() for n in ref.names.tolist()], ref.quote and ref.k > 0,
    )  # fmt: skip
    assert got == expected


def test_non_finite_values_fall_back_to_the_reference(tmp_path):
    p = tmp_path / "t.csv"
    p.write_bytes(b"a,b\r\n1,2\r\n3,4\n\r\n\n")  # CRLF, mixed line ends, trailing blanks
    (block,) = list(CsvBlockReader(p, ["a", "b"]))
    fmt = ScoreTailFormatter(["a", "b"], 2)
    idx = np.array([[0, 1], [1, 0]])
    for scores in (np.array([1.5, 2.25]), np.array([np.nan, np.inf])):
        vals = np.array([[0.5, 0.25], [-np.inf, 1.0]]) if np.isnan(scores[0]) else idx * 1.0
        probs = np.array([0.25, 1.0])
        got = fmt.block_output(block, scores, np.array([0, 1]), probs, idx, vals)
        assert got == block.with_tails(fmt(scores, np.array([0, 1]), probs, idx, vals))
    assert block.lines == [b"1,2", b"3,4"]


def test_count_per_line_equals_numpy_reference():
    from fedep.data._lines import count_per_line, count_per_line_reference

    rng = np.random.default_rng(3)
    buf = rng.choice(np.frombuffer(b'a,,\n"x', np.uint8), 5000)
    cuts = np.sort(rng.integers(0, buf.size, 400))
    starts, ends = cuts[:-1], cuts[1:]  # some lines empty
    for byte in (44, 34, 10):
        np.testing.assert_array_equal(
            count_per_line(buf, starts, ends, byte),
            count_per_line_reference(buf, starts, ends, byte),
        )


@pytest.mark.parametrize("k", [1, 3, 7, 9])
def test_top_k_matches_the_stable_sort(k):
    from fedep.data._tails import top_k, top_k_reference

    rng = np.random.default_rng(k)
    C = rng.exponential(size=(500, 7))
    C[:100] = rng.integers(0, 3, size=(100, 7))  # many ties: the lower column first
    C[100] = 0.0
    idx, vals = top_k(C, k)
    ref_idx, ref_vals = top_k_reference(C, k)
    assert idx.shape == (500, min(k, 7)) and idx.dtype == np.int64
    np.testing.assert_array_equal(idx, ref_idx)
    np.testing.assert_array_equal(vals, ref_vals)
    np.testing.assert_array_equal(vals, np.take_along_axis(C, idx, axis=1))
    assert (np.diff(vals, axis=1) <= 0).all()
    assert idx[100].tolist() == list(range(min(k, 7)))
    # against a brute force on the first rows: the k largest values
    for i in range(20):
        assert sorted(vals[i].tolist(), reverse=True) == sorted(C[i], reverse=True)[: min(k, 7)]


def test_top_k_non_finite_falls_back():
    from fedep.data._tails import top_k, top_k_reference

    C = np.array([[1.0, np.nan, 3.0], [np.inf, 0.0, 2.0]])
    idx, vals = top_k(C, 2)
    ref_idx, ref_vals = top_k_reference(C, 2)
    np.testing.assert_array_equal(idx, ref_idx)
    np.testing.assert_array_equal(vals, ref_vals)
    assert idx.tolist() == [[2, 0], [0, 2]]


def test_a_cold_writer_runs_the_reference_and_starts_the_background_compile(tmp_path, monkeypatch):
    from fedep.core._kernels import _dispatch
    from fedep.data import _tails

    p = tmp_path / "t.csv"
    p.write_bytes(b"a,b\n1,2\n3,4\n")
    (block,) = list(CsvBlockReader(p, ["a", "b"]))
    fmt = ScoreTailFormatter(["a", "b"], 1)
    args = (block, np.array([1.5, 2.25]), np.array([0, 1]), np.array([0.25, 1.0]),
            np.array([[0], [1]]), np.array([[0.5], [2.0]]))  # fmt: skip
    compiled_out = fmt.block_output(*args)  # FEDEP_KERNELS=numba in the suite
    started, calls = [], []
    monkeypatch.setenv("FEDEP_KERNELS", "auto")
    monkeypatch.setattr(_dispatch, "ready", lambda kernel: False)  # a cold cache
    monkeypatch.setattr(_dispatch, "compile_in_background", started.append)
    monkeypatch.setattr(_tails, "write_lines", lambda *a: calls.append(a))
    assert fmt.block_output(*args) == compiled_out  # the reference's bytes
    assert calls == [] and started == [_tails._write_kernel]
    monkeypatch.setenv("FEDEP_KERNELS", "numpy")
    started.clear()
    assert fmt.block_output(*args) == compiled_out and started == [] and calls == []
    monkeypatch.setattr(_dispatch, "ready", lambda kernel: True)  # a warm cache
    monkeypatch.setenv("FEDEP_KERNELS", "auto")
    monkeypatch.setattr(_tails, "write_lines", lambda *a: calls.append(a) or b"compiled")
    assert fmt.block_output(*args) == b"compiled" and len(calls) == 1

"""``fedep score``: appended columns, personalised scores, streaming, atomic output."""

from __future__ import annotations

import os
import signal

import numpy as np
import pandas as pd
import pytest

import fedep
from fedep.cli import main

from ._helpers import FEATURES, one_error_line


def _score(files, out, *extra, inp=None):
    args = ["score", "--model", str(files.model), "--input", str(inp or files.test)]
    return main([*args, "--output", str(out), "--quiet", *extra])


def test_score_appends_columns_and_keeps_rows(files, tmp_path):
    out = tmp_path / "scored.csv"
    assert _score(files, out, "--client-column", "host") == 0
    src = pd.read_csv(files.test, dtype=str, keep_default_na=False)
    res = pd.read_csv(out, dtype=str, keep_default_na=False)
    assert list(res.columns) == [
        *src.columns,
        "anomaly_score",
        "is_anomaly",
        "anomaly_probability",
        "top_features",
    ]
    assert len(res) == len(src)
    pd.testing.assert_frame_equal(res[src.columns], src)  # original text untouched
    det = fedep.load(files.model)
    X = pd.read_csv(files.test)  # the model's pipeline picks its columns by name
    groups = src["host"].to_numpy(dtype=str)
    np.testing.assert_allclose(
        res["anomaly_score"].astype(float), det.decision_function(X, groups), rtol=1e-8
    )
    np.testing.assert_array_equal(res["is_anomaly"].astype(int), det.predict(X, groups))
    # the anomaly probability is predict_proba's, to the 4 digits written
    proba = det.predict_proba(X, groups)[:, 1]
    np.testing.assert_allclose(res["anomaly_probability"].astype(float), proba, rtol=5e-4, atol=0)
    assert proba.min() < 0.5 < proba.max()  # the test file holds normal rows and attacks
    # without the client column, the global basis scores every row
    out2 = tmp_path / "global.csv"
    assert _score(files, out2) == 0
    np.testing.assert_allclose(
        pd.read_csv(out2)["anomaly_score"], det.decision_function(X), rtol=1e-8
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["global.csv", "scored.csv"]


def test_score_top_features(files, tmp_path):
    out = tmp_path / "scored.csv"
    assert _score(files, out, "--top-features", "2") == 0
    res = pd.read_csv(out)
    det = fedep.load(files.model)
    contrib = det.feature_contributions(pd.read_csv(files.test))
    names = list(det.feature_names_out_)  # the pipeline's output features
    for i, text in enumerate(res["top_features"]):
        items = [p.split(":") for p in text.split(";")]
        assert len(items) == 2
        assert items[0][0] == names[int(np.argmax(contrib[i]))]
        vals = [float(v) for _, v in items]
        assert vals[0] >= vals[1]
        np.testing.assert_allclose(vals[0], contrib[i].max(), rtol=1e-3)


def test_score_streaming_matches_single_chunk(files, tmp_path):
    one, many = tmp_path / "one.csv", tmp_path / "many.csv"
    assert _score(files, one, "--client-column", "host", "--chunksize", "1000000") == 0
    assert _score(files, many, "--client-column", "host", "--chunksize", "7") == 0
    assert one.read_bytes() == many.read_bytes()


def test_score_with_integer_clients(files, tmp_path):
    """A model whose clients come from --clients has integer ids; a numeric client
    column picks each row's personalised basis, unknown values use the global one."""
    model = tmp_path / "m.fedep"
    args = ["fit", "--train", str(files.train), "--label-column", "label", "--quiet"]
    args += ["--clients", "3", "--n-components", "2", "--n-rounds", "5", "--out", str(model)]
    assert main(args) == 0
    det = fedep.load(model)
    assert det.clients_.tolist() == [0, 1, 2]
    src = pd.read_csv(files.test)
    src["site"] = np.arange(len(src)) % 4  # 3 = unknown client
    inp, out = tmp_path / "in.csv", tmp_path / "out.csv"
    src.to_csv(inp, index=False)
    args = ["score", "--model", str(model), "--input", str(inp), "--output", str(out)]
    assert main([*args, "--client-column", "site", "--quiet"]) == 0
    res = pd.read_csv(out)
    groups = src["site"].to_numpy()
    feats = src[["note", *FEATURES]]
    expected = det.decision_function(feats, groups)
    np.testing.assert_allclose(res["anomaly_score"], expected, rtol=1e-8)
    unknown = groups == 3
    np.testing.assert_allclose(
        res["anomaly_score"][unknown], det.decision_function(feats[unknown]), rtol=1e-8
    )
    assert not np.allclose(expected, det.decision_function(feats))


def test_score_output_directory_checked(files, tmp_path, capsys):
    assert _score(files, tmp_path) == 1
    assert "is a directory" in one_error_line(capsys)
    assert _score(files, tmp_path / "nope" / "o.csv") == 1
    assert "does not exist" in one_error_line(capsys)


@pytest.mark.parametrize("how", ["keyboard", "sigterm"])
def test_score_interrupted_leaves_no_partial_output(files, tmp_path, monkeypatch, capsys, how):
    import fedep.cli.score as score_mod

    out = tmp_path / "o.csv"
    out.write_text("previous\n")  # an existing output is kept as it was
    real = score_mod.score_block
    calls = []

    def interrupt_on_second_block(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            if how == "keyboard":
                raise KeyboardInterrupt
            os.kill(os.getpid(), signal.SIGTERM)  # fedep's handler raises KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(score_mod, "score_block", interrupt_on_second_block)
    seen = []

    # Outside the command SIGTERM only records (were fedep's handler missing, the
    # command would finish with status 0 instead of dying with the test process).
    def record(*a):
        seen.append(a)

    previous = signal.signal(signal.SIGTERM, record)
    try:
        rc = _score(files, out, "--chunksize", "5")
        restored = signal.getsignal(signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert rc == 130
    assert one_error_line(capsys) == "fedep: error: interrupted"
    assert len(calls) == 2 and seen == []
    assert out.read_text() == "previous\n"
    assert [p.name for p in tmp_path.iterdir()] == ["o.csv"]  # no temporary file left
    assert restored is record  # the command restored the handler it replaced


def test_score_error_removes_temporary_file(files, tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    lines = files.test.read_text().splitlines()
    lines[40] += ",1"  # line 41: one field too many, in the 6th block of 8 lines
    bad.write_text("\n".join(lines) + "\n")
    out = tmp_path / "o.csv"
    assert _score(files, out, "--chunksize", "8", inp=bad) == 1
    msg = one_error_line(capsys)
    assert "line 41" in msg and "wrong number of fields: expected 9, found 10" in msg
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.csv"]


@pytest.mark.parametrize("codec", ["gzip", "bz2", "xz", "zstd"])
def test_compressed_csv_streams_like_plain(files, tmp_path, codec, monkeypatch):
    import pyarrow as pa

    import fedep.cli.score as score_cmd

    raw = files.test.read_bytes()
    suffix = {"gzip": "gz", "bz2": "bz2", "xz": "xz", "zstd": "zst"}[codec]
    inp = tmp_path / f"test.csv.{suffix}"
    if codec == "xz":
        import lzma

        inp.write_bytes(lzma.compress(raw))
    else:
        with pa.output_stream(str(inp), compression=codec) as fh:
            fh.write(raw)
    ref, out = tmp_path / "ref.csv", tmp_path / "out.csv"
    assert _score(files, ref, "--client-column", "host", "--chunksize", "7") == 0
    streamed = []
    real = score_cmd._score_csv_stream
    monkeypatch.setattr(score_cmd, "_score_csv_stream", lambda *a: streamed.append(1) or real(*a))
    assert _score(files, out, "--client-column", "host", "--chunksize", "7", inp=inp) == 0
    assert streamed == [1]  # the byte-copying path, not read_table + to_csv
    assert out.read_bytes() == ref.read_bytes()


def test_corrupt_gzip_is_one_error(files, tmp_path, capsys):
    import gzip

    data = gzip.compress(files.test.read_bytes())
    inp = tmp_path / "broken.csv.gz"
    inp.write_bytes(data[: len(data) // 2])
    assert _score(files, tmp_path / "o.csv", inp=inp) != 0
    line = one_error_line(capsys)
    assert "broken.csv.gz" in line and "gzip" in line
    assert not (tmp_path / "o.csv").exists()


@pytest.mark.parametrize("kind", ["blank_line", "cp1252", "multiline", "unnamed"])
def test_score_reads_as_a_table_what_it_cannot_stream(tmp_path, capsys, kind):
    # fit reads these files as tables; score must not refuse them because its
    # byte-copying stream cannot: it scores every record through the table reader
    rng = np.random.default_rng(0)
    df = pd.DataFrame(rng.normal(size=(60, 3)), columns=["a", "b", "c"])
    df["proto"] = np.where(np.arange(60) % 3, "tcp", "udp")
    p = tmp_path / "t.csv"
    text = df.to_csv(index=False)
    lines = text.splitlines(keepends=True)
    if kind == "blank_line":
        lines.insert(30, "\n")
    elif kind == "cp1252":
        lines[5] = lines[5].replace("tcp", "t\u2013cp")
    elif kind == "multiline":
        lines[5] = lines[5].replace("tcp", '"t\ncp"')
    else:
        lines[0] = lines[0].replace("proto", "")
    data = "".join(lines)
    p.write_bytes(data.encode("cp1252" if kind == "cp1252" else "utf-8"))
    model, out = tmp_path / "m.fedep", tmp_path / "s.csv"
    assert main(["fit", "--train", str(p), "--n-rounds", "2", "--quiet", "--out", str(model)]) == 0
    capsys.readouterr()
    assert main(["score", "--model", str(model), "--input", str(p), "--output", str(out)]) == 0
    err = capsys.readouterr().err
    if kind != "unnamed":
        assert "read as a table instead of streamed" in err
    scored = pd.read_csv(out)
    assert len(scored) == 60 and scored["anomaly_score"].notna().all()


@pytest.mark.parametrize("infinity", ["nan", "clip"])
@pytest.mark.parametrize("chunksize", ["7", "1000"])
def test_score_copies_an_infinite_value_as_read(tmp_path, infinity, chunksize):
    # the table path (here Parquet) copies each record as the file has it: the
    # infinity policy changes what the features see, not the output's copy
    rng = np.random.default_rng(0)
    df = pd.DataFrame(rng.normal(size=(40, 3)), columns=["a", "b", "c"])
    train, model = tmp_path / "train.parquet", tmp_path / "m.fedep"
    df.to_parquet(train, index=False)
    argv = ["fit", "--train", str(train), "--n-rounds", "2", "--quiet", "--out", str(model)]
    assert main(argv) == 0
    test = df.copy()
    test.loc[3, "a"], test.loc[5, "b"] = np.inf, -np.inf
    inp, out = tmp_path / "test.parquet", tmp_path / "s.csv"
    test.to_parquet(inp, index=False)
    argv = ["score", "--model", str(model), "--input", str(inp), "--output", str(out)]
    assert main([*argv, "--infinity", infinity, "--chunksize", chunksize, "--quiet"]) == 0
    got = pd.read_csv(out)
    pd.testing.assert_frame_equal(got[["a", "b", "c"]], test, check_exact=True)
    fixed = test.copy()
    if infinity == "nan":
        fixed.loc[3, "a"], fixed.loc[5, "b"] = np.nan, np.nan
    else:
        fixed.loc[3, "a"], fixed.loc[5, "b"] = df["a"].drop(3).max(), df["b"].drop(5).min()
    want = fedep.load(model).decision_function(fixed)
    np.testing.assert_allclose(got["anomaly_score"], want, rtol=1e-6)

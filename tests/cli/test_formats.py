"""Your own gateways' traffic, as it comes: Zeek logs / Parquet / .csv.gz through
``fedep fit`` (one file per gateway, the federated feature pipeline), ``fedep score``
and ``fedep evaluate``, on synthetic conn.logs whose attacks are known."""

from __future__ import annotations

import gzip
import json
import shutil
import types

import numpy as np
import pandas as pd
import pytest

import fedep
from _zeek import FIELDS, flows, write_zeek
from fedep.cli import main
from fedep.data.readers import read_table

from ._helpers import one_error_line

FIT = ["--n-rounds", "40", "--random-state", "0", "--quiet"]


@pytest.fixture(scope="module")
def zeek(tmp_path_factory):
    d = tmp_path_factory.mktemp("zeek")
    gw = d / "gateways"
    gw.mkdir()
    for i in (1, 2, 3):
        write_zeek(flows(800, seed=i), gw / f"gw{i}.log")
    test = flows(600, seed=9, attack_rate=0.1, t0=1.7e9 + 86400)
    test.to_csv(d / "test.csv", index=False)  # with the label column
    write_zeek(test, d / "test.log")
    with open(d / "test.log", "rb") as src, gzip.open(d / "test.log.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    test[FIELDS].to_csv(d / "plain.csv", index=False)
    test[FIELDS].to_csv(d / "plain.csv.gz", index=False, compression="gzip")
    test[FIELDS].to_parquet(d / "plain.parquet", index=False)
    model = d / "m.fedep"
    files = [str(gw / f"gw{i}.log") for i in (1, 2, 3)]
    assert main(["fit", "--train", *files, "--out", str(model), *FIT]) == 0
    return types.SimpleNamespace(dir=d, gw=gw, files=files, test=test, model=model)


def _evaluate_json(model, test, capsys) -> dict:
    capsys.readouterr()
    args = ["evaluate", "--model", str(model), "--test", str(test), "--label-column", "label"]
    assert main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _score(model, inp, out, *extra) -> pd.DataFrame:
    args = ["score", "--model", str(model), "--input", str(inp), "--output", str(out)]
    assert main([*args, "--quiet", *extra]) == 0
    return pd.read_csv(out, dtype=str, keep_default_na=False)


def test_fit_one_file_per_gateway_prints_the_decisions(zeek, tmp_path, capsys):
    out = tmp_path / "m.fedep"
    fit = ["--n-rounds", "5", "--tol", "0", "--random-state", "0"]
    assert main(["fit", "--train", *zeek.files, "--out", str(out), *fit]) == 0
    text = capsys.readouterr().out
    rows = {ln.split()[0]: ln.split() for ln in text.splitlines() if ln.split()}
    for col in ("ts", "uid", "id.orig_h"):
        assert rows[col][2] == "drop", rows[col]
    assert rows["orig_bytes"][2] == "log1p"
    assert rows["proto"][2] == "one-hot"
    det = fedep.load(out)
    assert det.clients_.tolist() == ["gw1", "gw2", "gw3"]  # gateway id = file stem
    assert "orig_bytes" in det.feature_names_out_ and "ts" not in det.feature_names_out_
    assert list(det.feature_names_in_) == FIELDS


def test_fit_directory_is_one_gateway_per_file(zeek, tmp_path):
    out = tmp_path / "m.fedep"
    assert main(["fit", "--train", str(zeek.gw), "--out", str(out), *FIT]) == 0
    det, ref = fedep.load(out), fedep.load(zeek.model)
    assert det.clients_.tolist() == ["gw1", "gw2", "gw3"]
    np.testing.assert_array_equal(det.components_, ref.components_)


def test_pipeline_beats_raw_z_scores(zeek, tmp_path, capsys):
    auto = _evaluate_json(zeek.model, zeek.dir / "test.csv", capsys)
    assert auto["model"]["roc_auc"] > 0.9
    raw_model = tmp_path / "raw.fedep"
    args = ["fit", "--train", *zeek.files, "--features", "numeric", "--out", str(raw_model)]
    assert main([*args, *FIT]) == 0
    assert list(fedep.load(raw_model).feature_names_in_) == [
        "ts", "id.resp_p", "duration", "orig_bytes", "resp_bytes"
    ]  # fmt: skip
    raw = _evaluate_json(raw_model, zeek.dir / "test.csv", capsys)
    # Both at the automatic rank (1 here). Under the former default rank 5 the raw model
    # (5 columns) had no residual left at all; now it detects, but worse (measured: the
    # pipeline 1.000, raw z-scores 0.978 with fits that reach their optimum; 0.95 or
    # less when the stop fired on a plateau).
    assert fedep.load(raw_model).n_components_ == fedep.load(zeek.model).n_components_
    assert raw["model"]["roc_auc"] < auto["model"]["roc_auc"] - 0.01


def test_score_zeek_gz_appends_columns(zeek, tmp_path):
    res = _score(zeek.model, zeek.dir / "test.log.gz", tmp_path / "o.csv", "--top-features", "2")
    assert list(res.columns) == [
        *FIELDS,
        "anomaly_score",
        "is_anomaly",
        "anomaly_probability",
        "top_features",
    ]
    assert len(res) == len(zeek.test)
    det = fedep.load(zeek.model)
    # Zeek's "-" is the unset marker: service "-" is a missing value there
    expected = det.decision_function(read_table(zeek.dir / "test.log.gz"))
    np.testing.assert_allclose(res["anomaly_score"].astype(float), expected, rtol=1e-8)
    names = set(det.feature_names_out_)
    for text in res["top_features"]:
        assert {p.split(":")[0] for p in text.split(";")} <= names
    flagged = res["is_anomaly"].astype(int).to_numpy() == 1
    assert zeek.test["label"].to_numpy()[flagged].mean() > 0.5


def test_parquet_and_csv_gz_score_like_csv(zeek, tmp_path):
    ref = _score(zeek.model, zeek.dir / "plain.csv", tmp_path / "a.csv")
    for name in ("plain.parquet", "plain.csv.gz"):
        got = _score(zeek.model, zeek.dir / name, tmp_path / f"{name}.out.csv")
        pd.testing.assert_frame_equal(got, ref, check_dtype=False)


def test_unseen_category_is_other(zeek, tmp_path):
    test = zeek.test.copy()
    test.loc[:9, "proto"] = "icmp"
    test[FIELDS].to_csv(tmp_path / "t.csv", index=False)
    res = _score(zeek.model, tmp_path / "t.csv", tmp_path / "o.csv")
    assert len(res) == len(test)
    det = fedep.load(zeek.model)
    Z = det.features_.encode(test[FIELDS])
    other = list(det.feature_names_out_).index("proto=<other>")
    assert (Z[:10, other] == 1).all() and (Z[10:, other] == 0).all()


@pytest.mark.parametrize("suffix", ["csv", "parquet"])
def test_missing_column_is_one_error(zeek, tmp_path, capsys, suffix):
    test = zeek.test[FIELDS].drop(columns=["orig_bytes"])
    inp = tmp_path / f"t.{suffix}"
    test.to_csv(inp, index=False) if suffix == "csv" else test.to_parquet(inp, index=False)
    out = tmp_path / "o.csv"
    args = ["score", "--model", str(zeek.model), "--input", str(inp), "--output", str(out)]
    assert main(args) == 1
    assert "'orig_bytes'" in one_error_line(capsys)
    assert not out.exists()


def test_extra_and_reordered_columns_are_fine(zeek, tmp_path):
    ref = _score(zeek.model, zeek.dir / "plain.csv", tmp_path / "a.csv")
    test = zeek.test[FIELDS[::-1]].assign(extra="zzz")
    test.to_csv(tmp_path / "t.csv", index=False)
    got = _score(zeek.model, tmp_path / "t.csv", tmp_path / "b.csv")
    assert got["anomaly_score"].tolist() == ref["anomaly_score"].tolist()


def test_label_column_never_becomes_a_feature(zeek, tmp_path, capsys):
    out = tmp_path / "m.fedep"
    args = ["fit", "--train", str(zeek.dir / "test.csv"), "--label-column", "label"]
    assert main([*args, "--protocol", "contaminated", "--out", str(out), *FIT]) == 0
    det = fedep.load(out)
    assert "label" not in det.feature_names_in_
    assert not any(n.startswith("label") for n in det.feature_names_out_)


def test_pipeline_overrides(zeek, tmp_path, capsys):
    out = tmp_path / "m.fedep"
    args = ["fit", "--train", *zeek.files, "--exclude", "duration", "--categorical", "id.resp_p"]
    assert main([*args, "--n-rounds", "5", "--tol", "0", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    line = next(ln for ln in text.splitlines() if ln.startswith("duration"))
    assert "drop" in line
    det = fedep.load(out)
    assert "duration" not in det.feature_names_out_
    assert any(n.startswith("id.resp_p=") for n in det.feature_names_out_)
    assert det.get_params()["features"].exclude == ["duration"]
    rc = main([*args, "--features", "numeric", "--out", str(out)])
    assert rc == 1 and "--features auto" in one_error_line(capsys)


def test_format_options(zeek, tmp_path):
    tsv = tmp_path / "t.txt"
    zeek.test[FIELDS].to_csv(tsv, index=False, sep=";")
    ref = _score(zeek.model, zeek.dir / "plain.csv", tmp_path / "a.csv")
    got = _score(zeek.model, tsv, tmp_path / "b.csv", "--format", "csv", "--delimiter", ";")
    assert got["anomaly_score"].tolist() == ref["anomaly_score"].tolist()


def test_streamed_csv_does_not_depend_on_chunksize(zeek, tmp_path):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    _score(zeek.model, zeek.dir / "plain.csv", a, "--client-column", "proto")
    _score(zeek.model, zeek.dir / "plain.csv", b, "--client-column", "proto", "--chunksize", "7")
    assert a.read_bytes() == b.read_bytes()
    assert (
        a.read_bytes()
        .splitlines()[1]
        .startswith((zeek.dir / "plain.csv").read_bytes().splitlines()[1])
    )


def test_score_copies_zeek_unset_marker(zeek, tmp_path):
    res = _score(zeek.model, zeek.dir / "test.log", tmp_path / "o.csv")
    want = zeek.test["service"].tolist()
    assert "-" in want  # Zeek's unset marker in the log
    # copied as the log has it, not as an empty cell
    assert res["service"].tolist() == want


def test_headerless_zeek_cut_output_is_one_error(zeek, tmp_path, capsys):
    cut = tmp_path / "cut.tsv"  # what `zeek-cut` (without -c) writes: values only
    lines = (zeek.dir / "test.log").read_text().splitlines(keepends=True)
    cut.write_text("".join(ln for ln in lines if not ln.startswith("#")))
    capsys.readouterr()
    args = ["score", "--model", str(zeek.model), "--input", str(cut), "--output"]
    assert main([*args, str(tmp_path / "o.csv")]) == 1
    line = one_error_line(capsys)
    assert "cut.tsv, line 1: no header line: cut.tsv starts with data" in line
    assert "zeek-cut -c" in line
    assert main(["fit", "--train", str(cut), "--out", str(tmp_path / "m.fedep"), *FIT]) == 1
    assert "no header line" in one_error_line(capsys)
    assert not (tmp_path / "m.fedep").exists()


def test_one_log_and_its_compressed_copy_are_refused(zeek, tmp_path, capsys):
    log = zeek.gw / "gw1.log"
    gz = tmp_path / "gw1.log.gz"
    gz.write_bytes(gzip.compress(log.read_bytes()))
    capsys.readouterr()
    out = tmp_path / "m.fedep"
    assert main(["fit", "--train", str(log), str(gz), "--out", str(out), *FIT]) == 1
    line = one_error_line(capsys)
    assert f"{gz}: same gateway id 'gw1' as '{log}'" in line
    assert main(["fit", "--train", str(log), str(log), "--out", str(out), *FIT]) == 1
    assert "same file as" in one_error_line(capsys)
    assert not out.exists()


def test_gateway_like_column_without_client_column_warns(zeek, tmp_path, capsys):
    df = pd.concat(
        [read_table(f).assign(gateway=f"gw{i}") for i, f in enumerate(zeek.files)],
        ignore_index=True,
    )
    one = tmp_path / "all.csv"
    df.to_csv(one, index=False)
    out = tmp_path / "m.fedep"
    fit = ["--n-rounds", "3", "--quiet"]
    capsys.readouterr()
    assert main(["fit", "--train", str(one), "--out", str(out), *fit]) == 0
    warn = [ln for ln in capsys.readouterr().err.splitlines() if "warning" in ln]
    assert len(warn) == 1, warn
    assert "column 'gateway' looks like a gateway id (3 distinct values)" in warn[0]
    assert "pass --client-column gateway" in warn[0]
    assert fedep.load(out).clients_.size == 1
    args = ["fit", "--train", str(one), "--client-column", "gateway", "--out", str(out)]
    assert main([*args, *fit]) == 0
    assert "warning" not in capsys.readouterr().err
    assert fedep.load(out).clients_.tolist() == ["gw0", "gw1", "gw2"]

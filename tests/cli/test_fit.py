"""``fedep fit``: models, methods, protocols, progress, the summary and output checks."""

from __future__ import annotations

import io
import re

import numpy as np
import pandas as pd
import pytest

import fedep
from fedep.cli import main
from fedep.federation.rounds import stop_tests

from ._helpers import FEATURES, N_FEATURES, one_error_line


def _fit(files, out, *extra):
    args = ["fit", "--train", str(files.train), "--label-column", "label"]
    return main([*args, *extra, "--out", str(out)])


def test_fit_writes_model_with_feature_names_and_clients(files):
    det = fedep.load(files.model)
    assert type(det).__name__ == "FedEP"
    # --features auto (default): the pipeline sees every column but the label and
    # client columns; the text column "note" is one-hot encoded, not silently dropped.
    assert list(det.feature_names_in_) == ["note", *FEATURES]
    out = list(det.feature_names_out_)
    assert out[-N_FEATURES:] == FEATURES or set(FEATURES) <= set(out)
    assert any(n.startswith("note=") for n in out)
    assert "label" not in " ".join(out) and "host" not in " ".join(out)
    assert sorted(det.clients_.tolist()) == ["gw0", "gw1", "gw2"]
    assert det.components_.shape == (2, len(out))
    assert det.n_components == 2 and det.n_rounds == 15 and det.random_state == 0


def test_fit_prints_progress_lines_and_summary(files, tmp_path, capsys):
    out = tmp_path / "m.fedep"
    extra = ["--clients", "3", "--partition", "iid", "--n-rounds", "4", "--tol", "0"]
    assert _fit(files, out, *extra, "--n-components", "2") == 0
    cap = capsys.readouterr()
    rounds = [ln for ln in cap.err.splitlines() if "round " in ln and "/4" in ln]
    assert len(rounds) == 4  # plain lines when not a TTY, one per round (4 <= MAX_LINES)
    assert "4 rounds" in cap.out and "stop reason: max_rounds" in cap.out
    det = fedep.load(out)
    assert det.n_iter_ == 4 and det.clients_.size == 3


def test_fit_quiet_prints_only_the_model_path(files, tmp_path, capsys):
    # The summary tests above and below leave --quiet out: --quiet is the one line
    # a script reads (MODEL=$(fedep fit ... --quiet)), nothing on stderr.
    out = tmp_path / "m.fedep"
    extra = ["--client-column", "host", "--n-components", "2", "--n-rounds", "3", "--quiet"]
    assert _fit(files, out, *extra) == 0
    cap = capsys.readouterr()
    assert cap.out.splitlines() == [str(out)]
    assert cap.err == ""
    assert fedep.load(out).n_components == 2


def test_fit_summary_names_non_default_parameters(files, tmp_path, capsys):
    out = tmp_path / "m.fedep"
    assert _fit(files, out, "--n-components", "2", "--alpha", "0.5") == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "non-default" in ln)
    assert "n_components=2" in line and "alpha=0.5" in line
    assert "beta=" not in line and "n_rounds=" not in line  # defaults are not listed
    assert "callback" not in line


def test_fit_round_cap_prints_final_residuals(files, tmp_path, capsys):
    out = tmp_path / "m.fedep"
    extra = ["--n-components", "2", "--n-rounds", "3", "--tol", "1e-12"]
    assert _fit(files, out, *extra) == 0
    text = capsys.readouterr().out
    assert "round cap reached" in text
    det = fedep.load(out)
    last = det.history_[-1]
    # The tests not met, each with its value and bound (the Lagrangian's change is not
    # known by round 3, so not shown; met tests are not shown either).
    tests = stop_tests(last, 1e-12, "fedep")
    assert last["lagrangian_change"] is None and "lagrangian_change" not in text
    unmet = [(k, v, b) for k, (v, b) in tests.items() if v is not None and v > b]
    assert unmet
    for key, v, b in unmet:
        assert f"{key}={v:.3g} (bound {b:.3g})" in text
    assert "tol=1e-12" in text


def test_fit_converged_prints_no_residuals(files, tmp_path, capsys):
    out = tmp_path / "m.fedep"
    assert _fit(files, out, "--n-components", "2", "--tol", "0.5") == 0
    text = capsys.readouterr().out
    assert "stop reason: stationary" in text and "residual" not in text


@pytest.mark.parametrize(
    ("method", "cls"),
    [("fedpg", "FedPG"), ("case1", "FedEP"), ("pca", "PooledPCA"),
     ("local-pca", "LocalPCA"), ("oneshot", "OneShotPCA")],
)  # fmt: skip
def test_fit_methods(files, tmp_path, method, cls):
    out = tmp_path / "m.fedep"
    rounds = ["--n-rounds", "3"] if method in ("fedpg", "case1") else []
    extra = ["--client-column", "host", "--method", method, "--n-components", "2", *rounds]
    assert _fit(files, out, *extra, "--quiet") == 0
    det = fedep.load(out)
    assert type(det).__name__ == cls
    if method == "case1":
        assert det.sparse_corruption is False and det.beta == 0.0


def test_fit_clean_protocol_drops_attacks(files, tmp_path, capsys):
    out = tmp_path / "m.fedep"
    base = ["--n-components", "2"]
    assert _fit(files, out, *base, "--protocol", "clean") == 0
    assert "150 training rows" in capsys.readouterr().out
    assert _fit(files, out, *base, "--protocol", "contaminated") == 0
    assert "155 training rows" in capsys.readouterr().out


def test_fit_random_state_seeds_the_partition(files, tmp_path, monkeypatch):
    import fedep.cli.training

    seeds = []
    real = fedep.cli.training.partition_iid

    def spy(n, d, seed):
        seeds.append(seed)
        return real(n, d, seed)

    monkeypatch.setattr(fedep.cli.training, "partition_iid", spy)
    out = tmp_path / "m.fedep"
    base = ["--clients", "3", "--partition", "iid", "--method", "pca", "--quiet"]
    assert _fit(files, out, *base) == 0
    assert fedep.load(out).random_state is None  # the estimator keeps its default
    assert _fit(files, out, *base, "--random-state", "7") == 0
    assert fedep.load(out).random_state == 7
    assert seeds == [0, 7]  # default 0 for the partition; else --random-state


def test_fit_features_numeric_keeps_the_numeric_columns(files, tmp_path, capsys):
    out = tmp_path / "m.fedep"
    assert _fit(files, out, "--client-column", "host", "--features", "numeric",
                "--n-components", "2", "--n-rounds", "3") == 0  # fmt: skip
    err = capsys.readouterr().err
    assert "ignoring non-numeric column(s) ['note']" in err
    det = fedep.load(out)
    assert list(det.feature_names_in_) == FEATURES and not hasattr(det, "features_")
    assert det.components_.shape == (2, N_FEATURES)


@pytest.mark.parametrize("kind", ["dir", "parent_missing", "parent_is_file"])
def test_fit_checks_output_before_training(files, tmp_path, monkeypatch, capsys, kind):
    import fedep.cli.fit

    def boom(*a, **k):  # pragma: no cover - must not be reached
        raise AssertionError("training data loaded before the output check")

    monkeypatch.setattr(fedep.cli.fit, "load_training", boom)
    (tmp_path / "afile").write_text("x")
    out = {
        "dir": tmp_path,
        "parent_missing": tmp_path / "nope" / "m.fedep",
        "parent_is_file": tmp_path / "afile" / "m.fedep",
    }[kind]
    assert _fit(files, out, "--quiet") == 1
    line = one_error_line(capsys)
    assert "--out" in line
    assert {"dir": "is a directory", "parent_missing": "does not exist",
            "parent_is_file": "is not a directory"}[kind] in line  # fmt: skip


def test_fit_saves_through_fedep_save(files, tmp_path, monkeypatch):
    calls = []
    real = fedep.save

    def spy(det, path, **kw):
        calls.append(path)
        real(det, path, **kw)

    monkeypatch.setattr(fedep, "save", spy)
    out = tmp_path / "m.fedep"
    assert _fit(files, out, "--method", "pca", "--quiet") == 0
    assert calls == [out] and out.is_file()


def test_progress_bar_on_tty_and_plain_lines():
    from fedep._progress import RoundProgress

    rec = {"objective": 1.5, "consensus_residual_rel": 0.01, "time_s": 0.002}
    V = np.eye(3)[:, :1]
    buf = io.StringIO()
    bar = RoundProgress(3, "fedep", stream=buf, tty=True)
    for r in (1, 2, 3):
        bar(r, V, rec)
    bar.close()
    assert "3/3" in buf.getvalue() and "round" in buf.getvalue()
    buf = io.StringIO()
    plain = RoundProgress(3, "fedep", stream=buf, tty=False)
    plain(1, V, rec)
    plain(2, V, rec)
    assert buf.getvalue().splitlines() == [
        "fedep: round 1/3 obj=1.5 cons=0.01 (0.002 s)",
        "fedep: round 2/3 obj=1.5 cons=0.01 (0.002 s)",
    ]
    quiet = io.StringIO()
    RoundProgress(3, stream=quiet, enabled=False)(1, V, rec)
    assert quiet.getvalue() == ""


def test_fit_prints_the_automatic_rank_and_its_reason(files, tmp_path, capsys):
    out = tmp_path / "m.fedep"
    assert _fit(files, out, "--method", "pca") == 0  # --n-components not given
    text = capsys.readouterr().out
    det = fedep.load(out)
    assert det.n_components == "auto"
    r = det.n_components_
    assert det.components_.shape[0] == r >= 1
    line = next(ln for ln in text.splitlines() if ln.startswith("rank "))
    assert line == f"rank {r} ({det.rank_reason_})"
    assert f"r={r}: " in line and "Gavish-Donoho" in line and "merged covariance" in line
    assert _fit(files, out, "--method", "pca", "--n-components", "2") == 0
    assert "rank 2 (r=2: n_components=2 given)" in capsys.readouterr().out


def test_fit_reports_record_trimming_and_the_estimated_contamination(files, tmp_path, capsys):
    out = tmp_path / "m.fedep"
    extra = ["--n-components", "2", "--trim-steps", "2", "--trim-share", "0.1"]
    assert _fit(files, out, *extra, "--contamination", "auto") == 0
    text = capsys.readouterr().out
    n = int(re.search(r"(\d+) training rows", text).group(1))
    line = next(ln for ln in text.splitlines() if ln.startswith("record trimming:"))
    # a fixed share: every step keeps n - round(0.1 n) records
    assert f"10.0 % trimmed at each; kept {n - round(0.1 * n)} of {n} records" in line
    assert re.search(r"record trimming: [12] selection steps?, ", line)
    det = fedep.load(out)
    est = next(ln for ln in text.splitlines() if ln.startswith("contamination:"))
    assert f"{100 * det.contamination_:.2f} % of the training records" in est


def test_fit_without_trimming_prints_no_trimming_line(files, tmp_path, capsys):
    out = tmp_path / "m.fedep"
    assert _fit(files, out, "--n-components", "2") == 0
    text = capsys.readouterr().out
    assert "record trimming" not in text and "contamination:" not in text


def _gateway_files(tmp_path, n=3, rows=40):
    rng = np.random.default_rng(0)
    d = tmp_path / "gws"
    d.mkdir()
    for g in range(n):
        df = pd.DataFrame(rng.normal(size=(rows, 4)), columns=list("abcd"))
        df["label"] = (np.arange(rows) % 10 == 0).astype(int)
        df.to_csv(d / f"gw{g}.csv", index=False)
    return d


@pytest.mark.parametrize("kind", ["parquet", "zeek"])
def test_fit_refuses_a_gateway_file_without_rows(tmp_path, capsys, kind):
    d = _gateway_files(tmp_path)
    if kind == "parquet":
        empty = d / "gw9.parquet"
        pd.read_csv(d / "gw0.csv").head(0).to_parquet(empty)
    else:
        empty = d / "gw9.conn.log"
        empty.write_text(
            "#separator \\x09\n#fields\ta\tb\n#types\tdouble\tdouble\n#close\t2024-01-01\n"
        )
    out = tmp_path / "m.fedep"
    for train in ([str(d)], [str(empty)]):
        capsys.readouterr()
        assert main(["fit", "--train", *train, "--n-rounds", "2", "--out", str(out)]) == 1
        line = one_error_line(capsys)
        assert str(empty) in line and "no data rows" in line
    assert not out.exists()
    one = tmp_path / "one.csv"
    one.write_text("a,b\n1,2\n")
    assert main(["fit", "--train", str(one), "--out", str(out)]) == 1
    assert one_error_line(capsys).endswith(f"{one}: 1 data row: a fit needs at least 2 records")


def test_fit_clean_protocol_names_a_gateway_without_normal_rows(tmp_path, capsys):
    d = _gateway_files(tmp_path)
    df = pd.read_csv(d / "gw2.csv")
    df["label"] = 1
    df.to_csv(d / "gw2.csv", index=False)
    out = tmp_path / "m.fedep"
    argv = ["fit", "--train", str(d), "--label-column", "label", "--n-rounds", "2"]
    assert main([*argv, "--out", str(out)]) == 1
    line = one_error_line(capsys)
    assert "1 gateway(s) have no normal rows" in line and "'gw2'" in line
    assert main([*argv, "--protocol", "contaminated", "--out", str(out), "--quiet"]) == 0


def test_fit_warns_about_a_gateway_lacking_columns_and_sniffs_a_comma_tsv(tmp_path, capsys):
    d = _gateway_files(tmp_path)
    pd.read_csv(d / "gw2.csv").drop(columns=["b", "c"]).to_csv(d / "gw2.csv", index=False)
    # a comma-separated file named .tsv: read as CSV, not as one column
    (d / "gw1.csv").rename(d / "gw1.tsv")
    out = tmp_path / "m.fedep"
    capsys.readouterr()
    assert main(["fit", "--train", str(d), "--n-rounds", "2", "--out", str(out), "--quiet"]) == 0
    warnings = [ln for ln in capsys.readouterr().err.splitlines() if "warning: gateway" in ln]
    assert warnings == [
        "fedep: warning: gateway 'gw2' lacks 2 of the 5 columns the other gateways have "
        "('b', 'c'): its values there count as missing"
    ]


def test_fit_names_the_file_and_row_of_a_bad_value(tmp_path, capsys):
    d = _gateway_files(tmp_path)
    df = pd.read_csv(d / "gw2.csv").astype({"b": object})
    df.loc[6, "b"] = "abc"  # data row 7 of the third file (row 87 of the three together)
    df.to_csv(d / "gw2.csv", index=False)
    out = tmp_path / "m.fedep"
    argv = ["fit", "--train", str(d), "--n-rounds", "2", "--quiet", "--out", str(out)]
    assert main(argv) == 1
    assert one_error_line(capsys) == (
        f"fedep: error: {d / 'gw2.csv'}, row 7, column 'b': non-numeric value 'abc' in a "
        "numeric feature column"
    )
    # one file with a client column; the clean protocol drops rows before the fit
    one = pd.concat([pd.read_csv(d / f"gw{g}.csv").assign(gw=g) for g in range(3)])
    one.to_csv(tmp_path / "all.csv", index=False)
    argv = ["fit", "--train", str(tmp_path / "all.csv"), "--client-column", "gw"]
    argv += ["--label-column", "label", "--n-rounds", "2", "--quiet", "--out", str(out)]
    assert main(argv) == 1
    assert f"all.csv, row {80 + 7}, column 'b'" in one_error_line(capsys)


@pytest.mark.parametrize("suffix", ["csv", "json"])
def test_client_ids_are_text_as_written(tmp_path, suffix):
    # 1, 01 and 1.0 are three gateways (typed as numbers they were merged into one), in
    # fit and in both of score's paths (the CSV stream and the table reader)
    rng = np.random.default_rng(0)
    ids = ["1", "01", "1.0"]
    df = pd.DataFrame(rng.normal(size=(90, 3)), columns=["a", "b", "c"])
    df.insert(0, "gw", np.repeat(ids, 30))
    p = tmp_path / f"all.{suffix}"
    if suffix == "csv":
        df.to_csv(p, index=False)
    else:
        df.to_json(p, orient="records")
    out = tmp_path / "m.fedep"
    argv = ["fit", "--train", str(p), "--client-column", "gw", "--n-rounds", "5"]
    assert main([*argv, "--n-components", "1", "--quiet", "--out", str(out)]) == 0
    det = fedep.load(out)
    assert sorted(det.clients_.tolist()) == sorted(ids)
    scored = tmp_path / "s.csv"
    argv = ["score", "--model", str(out), "--input", str(p), "--output", str(scored)]
    assert main([*argv, "--client-column", "gw", "--quiet"]) == 0
    got = pd.read_csv(scored, dtype={"gw": str})
    assert got["gw"].tolist() == df["gw"].tolist()
    want = det.decision_function(df[["a", "b", "c"]], groups=df["gw"].to_numpy())
    np.testing.assert_allclose(got["anomaly_score"], want, rtol=1e-6)


def test_fit_reports_the_privacy_spent(files, tmp_path, capsys):
    pytest.importorskip("dp_accounting")
    out = tmp_path / "m.fedep"
    extra = ["--features", "numeric", "--clients", "3", "--partition", "iid", "--tol", "0"]
    dp = ["--n-components", "2", "--n-rounds", "3", "--dp-epsilon", "4", "--dp-clip", "10"]
    assert _fit(files, out, *extra, *dp) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "privacy" in ln)
    det = fedep.load(out)
    assert 3.9 < det.dp_epsilon_ <= 4.0 and det.dp_delta_ == 1e-5
    assert f"epsilon {det.dp_epsilon_:.4g} at delta 1e-05" in line

"""``fedep fit --warm-start``, ``fedep federate --warm-start`` and ``fedep models``."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from fedep.cli import build_parser, federate, main
from fedep.cli._common import UsageError
from fedep.data.synthetic import make_federated_data

KEY = "hmac:0123456789abcdef0123"


@pytest.fixture(scope="module")
def periods(tmp_path_factory):
    """Two days of three gateways' records: day1/gw0.csv .. day2/gw2.csv, with ts."""
    root = tmp_path_factory.mktemp("periods")
    fd = make_federated_data(n_clients=3, n_features=6, n_components=2, n_samples=300)
    for c in range(3):
        X = fd.X_train[fd.groups_train == c]
        for day, part in ((1, X[: len(X) // 2]), (2, X[len(X) // 2 :])):
            df = pd.DataFrame(part, columns=[f"f{j}" for j in range(6)])
            df["ts"] = np.arange(len(df)) + 1000.0 * day
            (root / f"day{day}").mkdir(exist_ok=True)
            df.to_csv(root / f"day{day}" / f"gw{c}.csv", index=False)
    return root


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_fit_warm_start_then_models_show_and_diff(periods, tmp_path, capsys):
    d1, d2 = periods / "day1", periods / "day2"
    a, b = tmp_path / "a.fedep", tmp_path / "b.fedep"
    code, _, err = _run(capsys, "fit", "--train", d1 / "gw0.csv", d1 / "gw1.csv",
                        "--n-components", "2", "--out", a, "--sign-key", KEY,
                        "--quiet")  # fmt: skip
    assert code == 0, err
    code, out, err = _run(capsys, "fit", "--train", *sorted(d2.glob("*.csv")), "--warm-start", a,
                          "--verify-key", KEY, "--out", b, "--sign-key", KEY)  # fmt: skip
    assert code == 0, err
    assert "warm start from model" in out and "stationary" in out
    code, out, _ = _run(capsys, "models", "show", b, "--verify-key", KEY, "--json")
    lin = json.loads(out)
    assert lin["gateways"] == ["gw0", "gw1", "gw2"] and lin["rank"] == 2
    w = lin["window"]
    assert (w["rows"], w["ts_first"], w["ts_last"]) == (450, 2000.0, 2149.0)
    assert [f["name"] for f in w["files"]] == ["gw0.csv", "gw1.csv", "gw2.csv"]
    code, out, _ = _run(capsys, "models", "show", a, "--json")
    parent = json.loads(out)
    assert lin["parent"] == parent["id"] and lin["parent_sha256"] == parent["sha256"]
    code, out, _ = _run(capsys, "models", "diff", a, b, "--verify-key", KEY)
    assert code == 0
    assert "B's parent is A: yes; B records A's file digest: yes; both signatures" in out
    assert "new gateways: gw2" in out and "moved far: none" in out
    code, out, _ = _run(capsys, "models", "diff", a, b, "--json")
    d = json.loads(out)
    assert set(d["gateways"]) == {"gw0", "gw1"} and d["lineage"]["b_records_a_sha256"]


def test_warm_start_refusals_are_one_line(periods, tmp_path, capsys):
    d1 = periods / "day1"
    a = tmp_path / "a.fedep"
    assert _run(capsys, "fit", "--train", d1 / "gw0.csv", d1 / "gw1.csv", "--n-components", "2",
                "--out", a, "--quiet")[0] == 0  # fmt: skip
    others = [tmp_path / "x0.csv", tmp_path / "x1.csv"]
    for i, o in enumerate(others):
        pd.read_csv(d1 / f"gw{i}.csv").drop(columns="f3").to_csv(o, index=False)
    cases = [
        (["--train", *others, "--warm-start", a], "warm start:"),
        (["--train", d1 / "gw0.csv", d1 / "gw1.csv", "--warm-start", a, "--n-components", "3"],
         "n_components=3 but the model has rank 2"),
        (["--train", d1 / "gw0.csv", d1 / "gw1.csv", "--verify-key", KEY], "give --warm-start"),
        (["--train", d1 / "gw0.csv", d1 / "gw1.csv", "--warm-start", a, "--verify-key", KEY],
         "not signed"),
        (["--train", d1 / "gw0.csv", d1 / "gw1.csv", "--warm-start", a, "--method", "fedpg"],
         "is a FedEP model, --method fedpg fits FedPG"),
    ]  # fmt: skip
    for argv, says in cases:
        code, _, err = _run(capsys, "fit", *argv, "--out", tmp_path / "b.fedep")
        assert code == 1, argv
        errors = [ln for ln in err.splitlines() if ln.startswith("fedep: error:")]
        assert len(errors) == 1 and says in errors[0], err
        assert "Traceback" not in err
    assert not (tmp_path / "b.fedep").exists()


def test_federate_passes_the_warm_start_to_the_server(periods, tmp_path, capsys):
    d1 = periods / "day1"
    a = tmp_path / "a.fedep"
    assert _run(capsys, "fit", "--train", d1 / "gw0.csv", d1 / "gw1.csv", "--n-components", "2",
                "--out", a, "--quiet")[0] == 0  # fmt: skip
    base = ["federate", "--train", str(d1 / "gw0.csv"), str(d1 / "gw1.csv")]
    plan = federate.plan(build_parser().parse_args([*base, "--out", str(tmp_path / "o"),
                                                    "--warm-start", str(a)]))  # fmt: skip
    assert plan.run_config["warm-start"] == str(a.resolve())
    with pytest.raises(UsageError, match="is a FedEP model, --method fedpg"):
        federate.plan(build_parser().parse_args(
            [*base, "--out", str(tmp_path / "p"), "--warm-start", str(a), "--method", "fedpg"]
        ))  # fmt: skip

"""Model files whose digest is valid (recomputed after an edit) but whose content is
inconsistent: refused at load time with one line naming the field, through
``fedep.load`` and through ``fedep score`` (never a traceback, never accepted)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

import fedep
from fedep import FedEP
from fedep.cli import main
from fedep.detectors import DETECTORS, FITTED_ARRAYS, STATE_ARRAYS
from fedep.modelfile import ModelFileError, read_model_file, write_model_file
from fedep.modelfile.content import _ARRAYS, _SCALARS


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A small FedEP fitted through the feature pipeline (a one-hot column, string
    gateways), its model file and a CSV to score."""
    d = tmp_path_factory.mktemp("content")
    rng = np.random.default_rng(0)
    n = 120
    frame = pd.DataFrame(
        {
            "gateway": np.repeat(["gw-a", "gw-b", "gw-c"], n // 3),
            "duration": rng.exponential(2.0, n),
            "bytes": rng.lognormal(5.0, 2.0, n).round(),
            "rate": rng.normal(size=n),
            "proto": rng.choice(["icmp", "tcp", "udp"], n),
        }
    )
    det = FedEP(n_components=2, n_rounds=2, random_state=0)
    with warnings.catch_warnings():  # two rounds stop at the cap: enough here
        warnings.simplefilter("ignore")
        det.fit(frame.drop(columns="gateway"), groups=frame["gateway"].to_numpy())
    path = d / "good.fedep"
    fedep.save(det, path)
    frame.to_csv(d / "in.csv", index=False)
    return d, path


def _decision(meta, name):
    return next(x for x in meta["features"]["decisions"] if x["name"] == name)


def _set_decision(name, key, value):
    def edit(m, a):
        _decision(m, name)[key] = value

    return edit


def _scalar(key, value):
    return lambda m, a: m["scalars"].__setitem__(key, value)


def _array(key, fn):
    return lambda m, a: a.__setitem__(key, fn(a[key]))


EDITS = {
    # the reported cases
    "A-score_std-text": (_scalar("score_std_", "x"), "scalars['score_std_']"),
    "B-vocabulary-duplicate": (
        _set_decision("proto", "vocabulary", ["tcp", "tcp", "udp"]),
        "['vocabulary'] has the duplicate entry 'tcp'",
    ),
    "C-decision-name-duplicate": (
        lambda m, a: m["features"]["decisions"][1].__setitem__("name", "duration"),
        "features.decisions[1] repeats the column 'duration'",
    ),
    "D-components-1d": (_array("components_", lambda x: x[0]), "'components_' must be 2-D"),
    "E-clients-2d": (_array("clients_", lambda x: x.reshape(3, 1)), "'clients_' must be 1-D"),
    # accepted silently before
    "vocabulary-string": (_set_decision("proto", "vocabulary", "tcp"), "['vocabulary']"),
    "vocabulary-number": (_set_decision("proto", "vocabulary", ["tcp", 3]), "['vocabulary'][1]"),
    "clients-duplicate": (
        _array("clients_", lambda x: np.array(["gw-a", "gw-a", "gw-c"])),
        "duplicate client id 'gw-a'",
    ),
    "clients-unsorted": (_array("clients_", lambda x: x[::-1].copy()), "increasing order"),
    "clients-kind-mismatch": (_scalar("clients_kind", "i"), "'clients_' has dtype"),
    "action-unknown": (_set_decision("rate", "action", "square"), "['action'] must be one of"),
    "kind-unknown": (_set_decision("rate", "kind", "weird"), "['kind'] must be one of"),
    "impute-text": (_set_decision("rate", "impute", "0"), "['impute']"),
    "impute-missing": (_set_decision("rate", "impute", None), "['impute'] is missing"),
    "lo-above-hi": (_set_decision("rate", "lo", 1e9), "lo > hi"),
    "missing-indicator-int": (_set_decision("rate", "missing_indicator", 1), "missing_indicator"),
    "decision-extra-key": (_set_decision("rate", "scale", 2.0), "unexpected key 'scale'"),
    "cdf-counts-float": (_set_decision("rate", "cdf_counts", [0.5]), "['cdf_counts'][0]"),
    "scaling-short": (
        lambda m, a: m["features"]["scaling"]["mean"].pop(),
        "features['scaling']['mean'] has",
    ),
    "scaling-text": (
        lambda m, a: m["features"]["scaling"]["scale"].__setitem__(0, "1"),
        "features['scaling']['scale'][0]",
    ),
    "columns-in-order": (
        lambda m, a: m["features"]["columns_in"].reverse(),
        "features.decisions must name the columns",
    ),
    "pipeline-param": (
        lambda m, a: m["features"]["params"].__setitem__("scale_rule", "bogus"),
        "scale_rule",
    ),
    "threshold-none": (_scalar("threshold_", None), "scalars['threshold_']"),
    "threshold-list": (_scalar("threshold_", [1.0]), "scalars['threshold_']"),
    "threshold-negative": (_scalar("threshold_", -1.0), "non-finite or negative"),
    "threshold-huge-int": (_scalar("threshold_", 10**400), "non-finite"),
    "score-mean-none": (_scalar("score_mean_", None), "scalars['score_mean_']"),
    "n-features-bool": (_scalar("n_features_in_", True), "scalars['n_features_in_']"),
    "n-iter-float": (_scalar("n_iter_", 2.5), "scalars['n_iter_']"),
    "contamination-range": (_scalar("contamination_", 0.9), "scalars['contamination_']"),
    "stop-reason-unknown": (_scalar("stop_reason_", "bored"), "scalars['stop_reason_']"),
    "rank-reason-list": (_scalar("rank_reason_", ["r"]), "scalars['rank_reason_']"),
    "scalar-unknown": (_scalar("foo_", 1), "unexpected key 'foo_' in scalars"),
    "scalar-missing": (lambda m, a: m["scalars"].pop("threshold_"), "missing 'threshold_'"),
    "mean-int": (_array("mean_", lambda x: x.astype(np.int64)), "'mean_' has dtype int64"),
    "components-complex": (_array("components_", lambda x: x.astype(complex)), "'components_'"),
    "constant-float": (_array("constant_features_", lambda x: x.astype(float)), "constant_"),
    "thresholds-short": (_array("client_thresholds_", lambda x: x[:2]), "'client_thresholds_'"),
    "client-components-rank": (
        _array("client_components_", lambda x: x[:, :1]),
        "'client_components_' has shape",
    ),
    "array-extra": (lambda m, a: a.__setitem__("extra", np.zeros(2)), "unexpected array 'extra'"),
    "names-duplicate": (
        lambda m, a: m["feature_names_in_"].__setitem__(1, m["feature_names_in_"][0]),
        "'feature_names_in_' has the duplicate entry",
    ),
    "names-not-pipeline": (
        lambda m, a: m["feature_names_in_"].__setitem__(0, "other"),
        "feature_names_in_ are not the feature pipeline's",
    ),
    "history-text": (lambda m, a: m.__setitem__("history", "x"), "'history'"),
    "meta-unknown-key": (lambda m, a: m.__setitem__("extra", 1), "unexpected key 'extra'"),
    "params-features": (
        lambda m, a: m["params"].__setitem__("features", {"x": {}}),
        "params['features']",
    ),
}


def _bad_file(model, edit, name="bad.fedep"):
    d, good = model
    meta, arrays = read_model_file(good)
    edit(meta, arrays)
    out = d / name
    write_model_file(out, meta, arrays)  # recomputes the integrity digest
    return out


def _one_line_error(path, fragment):
    with pytest.raises(ModelFileError) as info:
        fedep.load(path)
    msg = str(info.value)
    assert "\n" not in msg, msg
    assert msg.startswith(f"model file {path}: inconsistent content ("), msg
    assert fragment in msg, msg
    return msg


@pytest.mark.parametrize("case", list(EDITS))
def test_inconsistent_content_is_one_line_naming_the_field(model, case, tmp_path, capsys):
    edit, fragment = EDITS[case]
    bad = _bad_file(model, edit, f"{case}.fedep")
    msg = _one_line_error(bad, fragment)
    # the CLI: exit code 2 and the same one line on stderr, no traceback, no output
    out = tmp_path / "scored.csv"
    args = ["score", "--model", str(bad), "--input", str(model[0] / "in.csv")]
    rc = main([*args, "--output", str(out), "--client-column", "gateway", "--quiet"])
    err = capsys.readouterr().err
    assert rc != 0
    assert "Traceback" not in err
    assert err.strip() == f"fedep: error: {msg}", err
    assert not out.exists()


def test_the_untouched_file_loads_and_scores(model, tmp_path):
    d, good = model
    det = fedep.load(good)
    out = tmp_path / "scored.csv"
    args = ["score", "--model", str(good), "--input", str(d / "in.csv"), "--output", str(out)]
    assert main([*args, "--client-column", "gateway", "--quiet"]) == 0
    assert len(pd.read_csv(out)) == 120
    assert det.clients_.tolist() == ["gw-a", "gw-b", "gw-c"]


@pytest.mark.parametrize("value", ["x", None, [1.0], {"a": 1}, True])
def test_every_scalar_of_the_wrong_type_is_refused(model, value):
    d, good = model
    meta, _ = read_model_file(good)
    assert len(meta["scalars"]) == 11
    for key in meta["scalars"]:
        if key in ("rank_reason_", "contamination_reason_") and value == "x":
            continue  # any non-empty text is a valid reason
        bad = _bad_file(model, _scalar(key, value), "scalar.fedep")
        _one_line_error(bad, f"scalars[{key!r}]")


@pytest.mark.parametrize("key", list(FITTED_ARRAYS))
def test_every_array_of_the_wrong_ndim_or_dtype_is_refused(model, key):
    bad = _bad_file(model, _array(key, lambda x: x[..., None]), "ndim.fedep")
    _one_line_error(bad, f"array {key!r} must be")
    wrong = {
        "clients_": lambda x: np.arange(x.size, dtype=float),
        "constant_features_": (lambda x: x.astype(float)),
    }.get(key, lambda x: x.astype(np.complex128))
    bad = _bad_file(model, _array(key, wrong), "dtype.fedep")
    _one_line_error(bad, f"array {key!r} has dtype")


@pytest.mark.parametrize("field", ["name", "kind", "action", "reason", "vocabulary", "impute"])
def test_every_decision_field_of_the_wrong_type_is_refused(model, field):
    for value in ([1], {"a": 1}, 3) if field != "impute" else ("x", [1]):
        bad = _bad_file(model, _set_decision("rate", field, value), "decision.fedep")
        i = [x["name"] for x in read_model_file(model[1])[0]["features"]["decisions"]].index("rate")
        _one_line_error(bad, f"features.decisions[{i}][{field!r}]")


def test_the_schema_covers_every_fitted_array_and_scalar():
    assert set(_ARRAYS) == set(FITTED_ARRAYS) | set(STATE_ARRAYS)
    for cls in DETECTORS.values():
        assert set(cls.persisted_scalars) <= set(_SCALARS), cls

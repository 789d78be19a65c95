"""``fedep fit``'s estimator options are the estimators' own parameters (fedep.params):
defaults, reachability of every parameter, and the estimator's validation messages."""

from __future__ import annotations

import numbers

import pytest
from sklearn.utils._param_validation import Interval, StrOptions

import fedep.cli.fit as fit_mod
from fedep.cli import UsageError, build_parser, main
from fedep.detectors import (
    ABLATION_CASES,
    METHODS,
    FedEP,
    FedPG,
    LocalPCA,
    OneShotPCA,
    PooledPCA,
    detector_param_table,
)
from fedep.params import validate_params

from ._helpers import one_error_line

_CLASS = {
    "fedep": FedEP,
    "fedpg": FedPG,
    "case1": FedEP,
    "case2": FedEP,
    "case3": FedEP,
    "pca": PooledPCA,
    "local-pca": LocalPCA,
    "oneshot": OneShotPCA,
}
_FIXED = {f"case{i}": ABLATION_CASES[c] for i, c in ((1, "I"), (2, "II"), (3, "III"))}
_METHOD_OF_CLASS = {"FedEP": "fedep", "FedPG": "fedpg", "PooledPCA": "pca",
                    "LocalPCA": "local-pca", "OneShotPCA": "oneshot"}  # fmt: skip


def _args(*extra):
    return build_parser().parse_args(["fit", "--train", "t.csv", "--out", "m.fedep", *extra])


def _defaults(cls) -> dict:
    params = cls().get_params(deep=False)
    params.pop("callback", None)
    return params


def _params(det) -> dict:
    params = det.get_params(deep=False)
    params.pop("callback", None)
    return params


def test_methods_cover_the_table():
    assert set(METHODS) == set(_CLASS)


# ------------------------------------------------------------------- (a) defaults
@pytest.mark.parametrize("method", METHODS)
def test_fit_without_options_builds_the_class_defaults(method):
    det = fit_mod.build_estimator(_args("--method", method))
    assert type(det) is _CLASS[method]
    assert _params(det) == {**_defaults(_CLASS[method]), **_FIXED.get(method, {})}


@pytest.mark.parametrize("method", METHODS)
def test_fit_command_builds_the_class_defaults(method, files, tmp_path, monkeypatch, capsys):
    """The same through ``main``: the estimator ``fedep fit`` builds before reading data."""
    built = []

    def spy(args):
        built.append(real(args))
        return built[-1]

    def stop(*a, **k):
        raise UsageError("stop before training")

    real = fit_mod.build_estimator
    monkeypatch.setattr(fit_mod, "build_estimator", spy)
    monkeypatch.setattr(fit_mod, "load_training", stop)
    rc = main(["fit", "--train", str(files.train), "--method", method,
               "--out", str(tmp_path / "m.fedep")])  # fmt: skip
    assert rc == 1 and "stop before training" in one_error_line(capsys)
    assert len(built) == 1
    assert _params(built[0]) == {**_defaults(_CLASS[method]), **_FIXED.get(method, {})}


# ------------------------------------------------------------------- (b) reachability
def _other_value(spec, default):
    """A valid value different from ``default`` and its command-line text."""
    for c in spec.constraints:
        if c == "boolean":
            return (not default), [f"--{'no-' if default else ''}{spec.key}"]
        if isinstance(c, StrOptions):
            if not c.options - {default}:
                continue  # the default is the only option (n_components="auto"): a number
            v = sorted(c.options - {default})[0]
            return v, [f"--{spec.key}", v]
        if c == "random_state":
            return 7, [f"--{spec.key}", "7"]
        if isinstance(c, Interval):
            if c.type is numbers.Integral:
                cands = [7, 3, 2]
            else:
                cands = [0.25, 0.5, 0.75, 2.0]
            for v in cands:
                if v != default and v in c:
                    return v, [f"--{spec.key}", repr(v)]
    raise AssertionError(f"no test value for {spec.name}")  # pragma: no cover


@pytest.mark.parametrize("name", list(detector_param_table()))
def test_every_parameter_is_reachable_from_fit(name):
    spec = detector_param_table()[name]
    method = _METHOD_OF_CLASS[spec.estimators[0]]
    default = spec.defaults[spec.estimators[0]]
    value, argv = _other_value(spec, default)
    assert value != default
    det = fit_mod.build_estimator(_args("--method", method, *argv))
    got = det.get_params(deep=False)[name]
    assert got == value and type(got) is type(value)
    expected = {**_defaults(_CLASS[method]), name: value}
    assert _params(det) == expected  # nothing else changed


def test_every_parameter_has_one_option():
    fit_parser = build_parser()._subparsers._group_actions[0].choices["fit"]
    options = set(fit_parser._option_string_actions)
    for spec in detector_param_table().values():
        assert f"--{spec.key}" in options, spec.key
    for old in ("--rank", "--rounds", "--seed", "--dirichlet-alpha"):
        assert old not in options


# ------------------------------------------------------------------- (c) bad values
@pytest.mark.parametrize(
    ("argv", "est"),
    [
        (["--alpha", "-1"], FedEP(alpha=-1.0)),
        (["--consensus-weights", "size"], FedEP(consensus_weights="size")),
        (["--penalty-scaling", "relatve"], FedEP(penalty_scaling="relatve")),
        (["--n-components", "0"], FedEP(n_components=0)),
        (["--n-components", "two"], FedEP(n_components="two")),
        (["--contamination", "0.9"], FedEP(contamination=0.9)),
        (["--method", "fedpg", "--lr", "0"], FedPG(lr=0.0)),
        (["--method", "pca", "--random-state", "seed"], PooledPCA(random_state="seed")),
    ],
)
def test_bad_value_is_the_estimators_message(argv, est, tmp_path, capsys):
    with pytest.raises(ValueError) as exc:
        validate_params(est)
    expected = " ".join(str(exc.value).split())
    # --train does not exist: the parameter is checked before any data is read
    rc = main(["fit", "--train", str(tmp_path / "absent.csv"), *argv,
               "--out", str(tmp_path / "m.fedep")])  # fmt: skip
    assert rc == 1
    line = one_error_line(capsys)
    assert line == f"fedep: error: {expected}"
    assert not (tmp_path / "m.fedep").exists()


def test_estimator_specific_check_runs_before_data(tmp_path, capsys):
    argv = ["--method", "oneshot", "--n-components", "3", "--sketch-rank", "2"]
    rc = main(["fit", "--train", str(tmp_path / "absent.csv"), *argv, "--out", str(tmp_path / "m")])
    assert rc == 1
    assert "sketch_rank must be >= n_components=3" in one_error_line(capsys)


@pytest.mark.parametrize(
    ("argv", "name"),
    [(["--lr", "0.1"], "lr"), (["--method", "pca", "--alpha", "2"], "alpha"),
     (["--method", "oneshot", "--n-rounds", "3"], "n-rounds")],
)  # fmt: skip
def test_option_of_another_method_is_named(argv, name, tmp_path, capsys):
    rc = main(["fit", "--train", str(tmp_path / "absent.csv"), *argv,
               "--out", str(tmp_path / "m.fedep")])  # fmt: skip
    assert rc == 1
    line = one_error_line(capsys)
    assert f"{name} does not apply to method" in line


def test_ablation_case_parameter_cannot_be_overridden(tmp_path, capsys):
    rc = main(["fit", "--train", str(tmp_path / "absent.csv"), "--method", "case1",
               "--sparse-corruption", "--out", str(tmp_path / "m.fedep")])  # fmt: skip
    assert rc == 1
    assert "sparse-corruption is fixed by method case1" in one_error_line(capsys)

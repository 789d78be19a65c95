"""One parameter table: every estimator parameter on every surface, with one set of rules."""

from __future__ import annotations

import numbers

import numpy as np
import pytest
from sklearn.utils._param_validation import Interval, InvalidParameterError, StrOptions

import fedep
from fedep.detectors import METHODS, detector_param_table, make_estimator
from fedep.params import (
    params_from_run_config,
    parse_value,
    pipeline_table,
    run_config_defaults,
    validate_params,
)


def _other_value(constraints, default):
    """A valid value different from ``default``, from the constraints alone."""
    for c in constraints:
        if c == "boolean":
            return not default
        if isinstance(c, StrOptions):
            others = sorted(o for o in c.options if o != default)
            if others:
                return others[0]
            continue  # the default is the only option (n_components="auto"): a number
        if isinstance(c, Interval) and c.type is numbers.Integral:
            return 10 if default is None or isinstance(default, str) else int(default) + 1
        if isinstance(c, Interval):
            if c.right is not None:
                return (max(c.left, 0.0) + c.right) / 2
            return 1.0 if default is None else float(default) * 2 + 0.5
        if c == "random_state":
            return 7
    raise AssertionError(f"no value for {constraints}")


def _defaults(cls):
    p = cls().get_params(deep=False)
    p.pop("callback", None)
    p.pop("warm_start", None)  # a fitted object's state, not a text value
    return p


def test_table_covers_every_parameter_with_a_help_text():
    table = detector_param_table()
    for m in METHODS:
        est = make_estimator(m)
        for name in est.get_params(deep=False):
            if name in ("callback", "warm_start"):  # not data / a model file on the CLI
                assert name not in table, name
                continue
            assert name in table, name
            assert table[name].help, name
            assert table[name].key == name.replace("_", "-")
    assert table["n_components"].key == "n-components"
    assert set(table["lr"].estimators) == {"FedPG"}


@pytest.mark.parametrize("method", METHODS)
def test_flower_run_config_defaults_are_the_estimators(method):
    from fedep.flower.server_app import DEFAULT_RUN_CONFIG

    est = make_estimator(method, params_from_run_config(DEFAULT_RUN_CONFIG, detector_param_table()))
    fixed = {"case1": fedep.ABLATION_CASES["I"], "case2": fedep.ABLATION_CASES["II"],
             "case3": fedep.ABLATION_CASES["III"]}.get(method, {})  # fmt: skip
    got = est.get_params(deep=False)
    got.pop("callback", None)
    assert got.pop("warm_start", False) is False
    assert got == {**_defaults(type(est)), **fixed}
    assert set(run_config_defaults(detector_param_table(), pipeline_table())) <= set(
        DEFAULT_RUN_CONFIG
    )


@pytest.mark.parametrize("method", ["fedep", "fedpg", "pca", "local-pca", "oneshot"])
def test_every_parameter_is_reachable_from_the_run_config(method):
    est0 = make_estimator(method)
    table = detector_param_table()
    for name, default in _defaults(type(est0)).items():
        spec = table[name]
        value = _other_value(type(est0)._parameter_constraints[name], default)
        for raw in (value, str(value).lower() if isinstance(value, bool) else str(value)):
            params = params_from_run_config({spec.key: raw}, detector_param_table())
            assert params == {name: value}, (name, raw, params)
            assert make_estimator(method, params).get_params()[name] == value


@pytest.mark.parametrize(
    "method, params",
    [
        ("fedep", {"alpha": -1.0}),
        ("fedep", {"consensus_weights": "size"}),
        ("fedep", {"penalty_scaling": "relatve"}),
        ("fedep", {"n_components": 0}),
        ("fedpg", {"local_epochs": 0}),
        ("fedep", {"tol": float("inf")}),
        ("fedep", {"sparse_corruption": "maybe"}),
    ],
)
def test_invalid_values_get_the_estimators_message_on_every_path(method, params):
    est = make_estimator(method, validate=False)
    est.set_params(**params)
    with pytest.raises(InvalidParameterError) as direct:
        validate_params(est)
    with pytest.raises(InvalidParameterError) as fitted:
        type(est)(**est.get_params()).fit(np.random.default_rng(0).normal(size=(20, 4)))
    rc = {k.replace("_", "-"): (str(v) if isinstance(v, float) else v) for k, v in params.items()}
    with pytest.raises(InvalidParameterError) as from_rc:
        make_estimator(method, params_from_run_config(rc, detector_param_table()))
    assert str(direct.value) == str(fitted.value) == str(from_rc.value)
    assert next(iter(params)) in str(direct.value)


def test_flower_server_rejects_before_any_message(monkeypatch, tmp_path):
    pytest.importorskip("flwr")
    from fedep.flower import run_local

    monkeypatch.setenv("FLWR_HOME", str(tmp_path))
    cfgs = [{"partition-id": i, "synthetic-seed": 1} for i in range(2)]
    with pytest.raises(InvalidParameterError, match="'penalty_scaling' parameter of FedEP"):
        run_local(cfgs, {"penalty-scaling": "relatve"})
    with pytest.raises(ValueError, match="lr does not apply to method fedep"):
        run_local(cfgs, {"lr": 0.1})


def test_flower_gateways_build_the_servers_estimator(monkeypatch, tmp_path):
    pytest.importorskip("flwr")
    from fedep.flower import run_local

    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "home"))
    cfgs = [
        {"partition-id": i, "synthetic-seed": 1, "model-path": str(tmp_path / f"g{i}.fedep")}
        for i in range(2)
    ]
    rc = {"n-components": 2, "n-rounds": 2, "tol": 0.0, "consensus-weights": "samples",
          "alpha": 2.5, "contamination": 0.1, "random-state": 3}  # fmt: skip
    run_local(cfgs, rc)
    m = fedep.load(tmp_path / "g0.fedep")
    p = m.get_params()
    assert (p["consensus_weights"], p["alpha"], p["contamination"]) == ("samples", 2.5, 0.1)
    assert p["mu"] == fedep.FedEP().mu  # untouched parameters keep the estimator default


def test_make_estimator_refuses_options_of_other_methods_and_fixed_cases():
    with pytest.raises(ValueError, match="lr does not apply to method fedep"):
        make_estimator("fedep", {"lr": 0.1})
    with pytest.raises(ValueError, match="beta is fixed by method case1"):
        make_estimator("case1", {"beta": 0.5})
    with pytest.raises(ValueError, match="method must be one of"):
        make_estimator("pcaa")
    with pytest.raises(ValueError, match="aggregation does not apply to method pca"):
        make_estimator(
            "pca", params_from_run_config({"aggregation": "median"}, detector_param_table())
        )


def test_make_estimator_by_detector_class_name():
    # The reproduction's vocabulary: a class name, no fixed parameters.
    est = make_estimator("FedEP", {"beta": 0.5, "random_state": 3})
    assert type(est) is fedep.FedEP and (est.beta, est.random_state) == (0.5, 3)
    assert type(make_estimator("PooledPCA")) is fedep.PooledPCA
    with pytest.raises(ValueError, match="lr does not apply to method FedEP"):
        make_estimator("FedEP", {"lr": 0.1})


def test_parse_value_by_constraints():
    t = detector_param_table()
    assert parse_value(t["lr"], "none") is None
    assert parse_value(t["lr"], "0.5") == 0.5
    assert parse_value(t["n_components"], "7") == 7
    assert parse_value(t["n_components"], "auto") == "auto"
    assert set(t["n_components"].defaults.values()) == {"auto"}  # every estimator's default
    assert parse_value(t["standardize"], "false") is False
    assert parse_value(t["init"], "oneshot") == "oneshot"
    assert parse_value(t["init"], "sometimes") == "sometimes"  # left to the estimator


def test_pipeline_parameters_on_every_surface():
    # The feature pipeline's parameters come from its own declaration, like the
    # estimators': CLI options, run-config keys (lists as comma-separated text).
    import argparse

    from fedep.features import FeaturePipeline
    from fedep.params import (
        add_param_options,
        params_from_args,
        pipeline_params_from_run_config,
        pipeline_table,
        run_config_defaults,
    )

    table = pipeline_table()
    assert set(table) == set(FeaturePipeline().get_params())
    assert {"include", "scale-rule", "scale-floor"} <= set(
        run_config_defaults(detector_param_table(), table)
    )
    got = pipeline_params_from_run_config({"include": "a, b", "scale-rule": "none", "alpha": 2})
    assert got == {"include": ["a", "b"], "scale_rule": None}
    ap = argparse.ArgumentParser()
    add_param_options(ap, table, "pipeline")
    args = ap.parse_args(["--exclude", "ts", "uid", "--scale-floor", "0.3"])
    assert params_from_args(args, table) == {"exclude": ["ts", "uid"], "scale_floor": 0.3}

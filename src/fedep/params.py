"""One parameter table for every surface: the estimators declare, the rest derive.

Each estimator declares its hyper-parameters once, in scikit-learn's
``_parameter_constraints`` (validated by ``_validate_params``) and its ``__init__``
defaults; its numpydoc docstring describes them. This module reads those three
places and gives every other surface the same parameters:

- the command line (:func:`add_param_options` / :func:`params_from_args`):
  ``--n-components``, ``--alpha``, ... ;
- the Flower run configuration (:func:`run_config_defaults` /
  :func:`params_from_run_config`): ``n-components``, ``alpha``, ... ;
- the same for the feature pipeline's parameters (:func:`pipeline_table`,
  :func:`pipeline_params_from_run_config`): ``--include``, ``--scale-rule``, ... ;

with one spelling per concept (the Python name with ``_`` -> ``-``), the estimator's
defaults, and the estimator's own validation message for a bad value. Adding a
hyper-parameter therefore touches the core (what it means numerically) and the
estimator (its constraint, default and docstring) only.

The module knows no estimator: its callers pass the classes (:func:`param_table`),
e.g. every detector (:func:`fedep.detectors.detector_param_table`), so that the
detectors can use its validation (:func:`validate_params`). The method names and the
one estimator factory are :mod:`fedep.detectors.registry`'s.

Values cross text surfaces (argv, TOML, JSON) as text or TOML scalars:
:func:`parse_value` turns them back into Python values by the parameter's
constraints (``"none"`` for ``None``, ``true``/``false`` for booleans, the options of
a ``StrOptions``, integers, reals); range checks are left to the estimator.
"""

from __future__ import annotations

import argparse
import inspect
import math
import numbers
import re
from dataclasses import dataclass
from typing import Any

from sklearn.utils._param_validation import (
    Interval,
    InvalidParameterError,
    StrOptions,
    validate_parameter_constraints,
)

from fedep.features import FeaturePipeline

__all__ = [
    "ParamSpec",
    "InvalidParameterError",
    "param_table",
    "parse_value",
    "validate_params",
    "add_param_options",
    "params_from_args",
    "run_config_defaults",
    "UNSET",
    "params_from_run_config",
    "pipeline_params_from_run_config",
    "pipeline_table",
    "make_pipeline",
    "option_name",
]

#: Parameters that are not data: they never appear on a text surface.
_NOT_ON_SURFACES = frozenset({"callback"})


def option_name(name: str) -> str:
    """The one spelling of a parameter outside Python: ``n_components`` -> ``n-components``."""
    return name.replace("_", "-")


@dataclass(frozen=True)
class ParamSpec:
    """One hyper-parameter as every surface sees it.

    Attributes
    ----------
    name : str
        Python name (``n_components``).
    key : str
        CLI option without ``--`` and Flower run-config key (``n-components``).
    constraints : list
        scikit-learn constraints, from the first estimator that declares it.
    defaults : dict of str -> Any
        Default per estimator class name (they may differ, e.g. ``tol``).
    help : str
        First sentence of the numpydoc description.
    estimators : tuple of str
        Estimator class names that accept it.
    """

    name: str
    key: str
    constraints: tuple
    defaults: dict
    help: str
    estimators: tuple[str, ...]


def _docstring_params(cls) -> dict[str, str]:
    """Parameter -> first sentence of its numpydoc description (shared entries expanded)."""
    doc = inspect.getdoc(cls) or ""
    m = re.search(r"^Parameters\n-+\n(.*?)(?:^\w[\w ]*\n-+\n|\Z)", doc, re.S | re.M)
    if not m:
        return {}
    out: dict[str, str] = {}
    entries = re.split(r"^(?=\S)", m.group(1), flags=re.M)
    for entry in entries:
        if not entry.strip():
            continue
        head, _, body = entry.partition("\n")
        names = [n.strip() for n in head.split(":")[0].split(",")]
        text = " ".join(line.strip() for line in body.splitlines() if line.strip())
        first = re.split(r"(?<=[.;])\s", text, maxsplit=1)[0].rstrip(".;")
        for n in names:
            if n:
                out[n] = first
    return out


def param_table(estimators) -> dict[str, ParamSpec]:
    """Every hyper-parameter of the given estimator classes, in declaration order.

    Parameters
    ----------
    estimators : iterable of estimator classes
        E.g. every detector (:func:`fedep.detectors.detector_param_table`) or the
        feature pipeline (:func:`pipeline_table`).

    Returns
    -------
    dict of str -> ParamSpec
    """
    table: dict[str, dict] = {}
    for cls in estimators:
        sig = inspect.signature(cls.__init__)
        docs = _docstring_params(cls)
        for name, p in sig.parameters.items():
            if name == "self" or name in _NOT_ON_SURFACES:
                continue
            if name not in cls._parameter_constraints:
                raise TypeError(f"{cls.__name__}.{name} has no entry in _parameter_constraints")
            row = table.setdefault(
                name,
                {
                    "constraints": tuple(cls._parameter_constraints[name]),
                    "defaults": {},
                    "help": "",
                    "estimators": [],
                },
            )
            row["defaults"][cls.__name__] = p.default
            row["estimators"].append(cls.__name__)
            text = docs.get(name, "")
            if not row["help"] and text and not text.startswith("As in"):
                row["help"] = text
    return {
        name: ParamSpec(
            name=name,
            key=option_name(name),
            constraints=row["constraints"],
            defaults=dict(row["defaults"]),
            help=row["help"],
            estimators=tuple(row["estimators"]),
        )
        for name, row in table.items()
    }


def parse_value(spec: ParamSpec, value: Any) -> Any:
    """A value from a text surface as the Python value the estimator expects.

    Non-strings (TOML ints, floats, booleans) pass through, except that an integral
    float is kept as is (the estimator's constraint decides). Strings are tried
    against the constraints in order: ``None`` ("none"), ``"boolean"``
    ("true"/"false"/"1"/"0"/"yes"/"no"), ``StrOptions`` (exact option), integer
    ``Interval`` (decimal integer), real ``Interval`` (float); a string that matches
    none is returned unchanged, so that the estimator's validation names it.
    """
    if not isinstance(value, str):
        return value
    text = value.strip()
    low = text.lower()
    if list in spec.constraints:  # a list of names, comma-separated on text surfaces
        return [t.strip() for t in text.split(",") if t.strip()] or None
    for c in spec.constraints:
        if c is None and low in ("none", "null", ""):
            return None
        if c == "boolean" and low in ("true", "false", "1", "0", "yes", "no"):
            return low in ("true", "1", "yes")
        if isinstance(c, StrOptions) and text in c.options:
            return text
        if isinstance(c, Interval) and c.type is numbers.Integral:
            if re.fullmatch(r"[+-]?\d+", text):
                return int(text)
        if isinstance(c, Interval) and c.type in (numbers.Real, "real_not_int"):
            try:
                return float(text)
            except ValueError:
                pass
        if c == "random_state" and re.fullmatch(r"[+-]?\d+", text):
            return int(text)
        if c == "random_state" and low in ("none", "null", ""):
            return None
    return text


def validate_params(est) -> None:
    """scikit-learn's validation of ``est``'s parameters, plus finiteness of numbers.

    Raises
    ------
    InvalidParameterError
        (a ``ValueError``) with scikit-learn's message, naming the estimator, the
        parameter, what it must be and what it got.
    """
    params = est.get_params(deep=False)
    cls = type(est).__name__
    validate_parameter_constraints(est._parameter_constraints, params, caller_name=cls)
    for name, v in params.items():
        numeric = any(isinstance(c, Interval) for c in est._parameter_constraints.get(name, ()))
        if not numeric or v is None or isinstance(v, str):
            continue
        if isinstance(v, bool) or (isinstance(v, numbers.Real) and not math.isfinite(v)):
            raise InvalidParameterError(
                f"The {name!r} parameter of {cls} must be a finite number. Got {v!r} instead."
            )
    # rules between parameters that the table cannot state (OneShotPCA's sketch_rank)
    combined = getattr(est, "_check_param_combinations", None)
    if combined is not None:
        combined()


# ---------------------------------------------------------------------- CLI
def _metavar(spec: ParamSpec) -> str:
    parts = []
    for c in spec.constraints:
        if isinstance(c, StrOptions):
            parts.extend(sorted(c.options - set(getattr(c, "deprecated", ()) or ())))
        elif isinstance(c, Interval):
            parts.append("INT" if c.type is numbers.Integral else "FLOAT")
        elif c is None:
            parts.append("none")
        elif c == "random_state":
            parts.append("INT")
    return "{" + ",".join(dict.fromkeys(parts)) + "}" if len(parts) > 1 else (parts or ["V"])[0]


def _default_text(spec: ParamSpec) -> str:
    vals = {repr(v) for v in spec.defaults.values()}
    if len(vals) == 1:
        return f"default: {next(iter(spec.defaults.values()))!r}"
    return "default: " + ", ".join(f"{k} {v!r}" for k, v in spec.defaults.items())


def add_param_options(
    parser: argparse.ArgumentParser,
    table: dict[str, ParamSpec],
    title: str = "estimator parameters (one per estimator parameter)",
) -> None:
    """Add one ``--key`` option per parameter of the table (default: not given).

    A boolean parameter gets ``--key`` / ``--no-key``, a list of names ``--key A B``.
    Every option's default is "not given" (the estimator's own default applies), so
    that :func:`params_from_args` passes only what the user typed.
    """
    group = parser.add_argument_group(title)
    for spec in table.values():
        used = ", ".join(spec.estimators)
        help_ = f"{spec.help} ({_default_text(spec)}; {used})".replace("%", "%%")
        if list in spec.constraints:
            group.add_argument(
                f"--{spec.key}", dest=f"param__{spec.name}", nargs="+", metavar="COL", help=help_
            )
        elif spec.constraints == ("boolean",):
            group.add_argument(
                f"--{spec.key}",
                dest=f"param__{spec.name}",
                action=argparse.BooleanOptionalAction,
                default=None,
                help=help_,
            )
        else:
            group.add_argument(
                f"--{spec.key}",
                dest=f"param__{spec.name}",
                default=None,
                metavar=_metavar(spec),
                help=help_,
            )


def params_from_args(args: argparse.Namespace, table: dict[str, ParamSpec]) -> dict[str, Any]:
    """The parameters of ``table`` given on the command line, as Python values."""
    out = {}
    for spec in table.values():
        v = getattr(args, f"param__{spec.name}", None)
        if v is not None:
            out[spec.name] = parse_value(spec, v)
    return out


# ---------------------------------------------------------------------- Flower
#: Run-config value meaning "the estimator's own default" (TOML has no null, and
#: defaults differ between estimators, e.g. ``tol``).
UNSET = ""


def pipeline_table() -> dict[str, ParamSpec]:
    """The parameters of the feature pipeline (:class:`fedep.features.FeaturePipeline`),
    the estimators' ``features="auto"``: ``--include``, ``--scale-rule``, ..."""
    return param_table([FeaturePipeline])


def make_pipeline(
    params: dict[str, Any],
    features: Any = "auto",
    *,
    spell=option_name,
    needs: str = "features 'auto'",
):
    """The :class:`~fedep.features.FeaturePipeline` of the given pipeline parameters
    (by Python name), validated by its own rules, as every surface builds it.

    ``features`` is the estimator's: the pipeline's parameters need ``"auto"``. The
    refusal names the options as the surface spells them (``spell``) and what they
    need (``needs``).

    Raises
    ------
    ValueError
        The pipeline's own message for a bad value, or options given without
        ``features="auto"``.
    """
    if params and features != "auto":
        opts = " / ".join(spell(k) for k in params)
        raise ValueError(f"{opts} configure the feature pipeline: they need {needs}")
    pipe = FeaturePipeline(**params)
    pipe._validate_params()
    return pipe


def run_config_defaults(*tables: dict[str, ParamSpec]) -> dict[str, Any]:
    """One run-config key per parameter of the given tables, each :data:`UNSET`.

    Flower only accepts ``--run-config`` keys that the app declares, so every
    parameter (of every estimator and of the feature pipeline) is declared; left
    unset it takes the chosen method's own default.
    """
    return {spec.key: UNSET for table in tables for spec in table.values()}


def params_from_run_config(run_config: dict, table: dict[str, ParamSpec]) -> dict[str, Any]:
    """The parameters of ``table`` set in a Flower run config, as Python values (a list
    of column names is comma-separated text).

    Keys that are not in the table configure something else and are ignored here;
    whether a parameter applies to the chosen method is the estimator factory's check
    (:func:`fedep.detectors.make_estimator`).
    """
    out = {}
    for spec in table.values():
        v = run_config.get(spec.key, UNSET)
        if not (isinstance(v, str) and v == UNSET):
            out[spec.name] = parse_value(spec, v)
    return out


def pipeline_params_from_run_config(run_config: dict) -> dict[str, Any]:
    """The feature-pipeline parameters set in a Flower run config, as Python values."""
    return params_from_run_config(run_config, pipeline_table())

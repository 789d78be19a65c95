"""One parameter table for every surface: the estimators declare, the rest derive.

Each estimator declares its hyper-parameters once, in scikit-learn's
``_parameter_constraints`` (validated by ``_validate_params``), its ``__init__``
defaults and, next to the constraints, ``_parameter_summaries`` (one plain sentence
each: the command line's help); its numpydoc docstring describes them in full. This
module reads those places and gives every other surface the same parameters:

- the command line (:func:`add_param_options` / :func:`params_from_args`):
  ``--n-components``, ``--alpha``, ... ;
- the Flower run configuration (:func:`run_config_defaults` /
  :func:`params_from_run_config`): ``n-components``, ``alpha``, ... ;
- the same for the feature pipeline's parameters (:func:`pipeline_table`,
  :func:`pipeline_params_from_run_config`): ``--include``, ``--scale-rule``, ... ;

with one spelling per concept (the Python name with ``_`` -> ``-``), the estimator's
defaults, and the estimator's own validation message for a bad value. Adding a
hyper-parameter therefore touches the core (what it means numerically) and the
estimator (its constraint, default, summary and docstring) only.

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
    "param_help",
    "plain_text",
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
        One plain sentence: the estimator's ``_parameter_summaries`` entry (declared
        next to its constraint), else the first sentence of its numpydoc entry as
        plain text (:func:`plain_text`).
    estimators : tuple of str
        Estimator class names that accept it.
    """

    name: str
    key: str
    constraints: tuple
    defaults: dict
    help: str
    estimators: tuple[str, ...]


_RST_ROLE = re.compile(r":[\w.:+-]+:`(~?)([^`]*)`")


def _role_text(m: re.Match) -> str:
    tilde, body = m.group(1), m.group(2).strip()
    if "<" in body:  # :role:`title <target>`
        return body.split("<", 1)[0].strip()
    return body.rsplit(".", 1)[-1] if tilde else body


def plain_text(text: str) -> str:
    """reStructuredText as plain text for a terminal: roles by their text
    (:func:`~a.b` -> b), double and single backquotes dropped, whitespace collapsed."""
    text = _RST_ROLE.sub(_role_text, text)
    text = text.replace("``", "").replace("`", "")
    return " ".join(text.split())


def _docstring_params(cls) -> dict[str, str]:
    """Parameter -> first sentence of its numpydoc description (shared entries
    expanded), as plain text."""
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
        text = plain_text(" ".join(line.strip() for line in body.splitlines() if line.strip()))
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
        summaries = getattr(cls, "_parameter_summaries", {})
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
            text = summaries.get(name) or docs.get(name, "")
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


def _inf_allowed(constraints) -> bool:
    """Whether a constraint admits ``+inf``: an interval closed at an open-ended right
    end (``Interval(Real, 0, None, closed="right")``, e.g. ``dp_epsilon``)."""
    return any(
        isinstance(c, Interval) and c.right is None and c.closed in ("right", "both")
        for c in constraints
    )


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
        if _inf_allowed(est._parameter_constraints[name]) and v == math.inf:
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
def _plain(value: Any) -> str:
    """A default as a user types it: none, on/off, auto, 0.001."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _choices(spec: ParamSpec) -> list[str]:
    out: list[str] = []
    for c in spec.constraints:
        if isinstance(c, StrOptions):
            out.extend(sorted(c.options - set(getattr(c, "deprecated", ()) or ())))
    return out


def _metavar(spec: ParamSpec) -> str:
    """``N`` (an integer), ``X`` (a real), ``{a,b}`` (short choices), else the value's
    initial: the option stays short; the summary names the other values (auto, none)."""
    for c in spec.constraints:
        if c == "random_state" or (isinstance(c, Interval) and c.type is numbers.Integral):
            return "N"
        if isinstance(c, Interval):
            return "X"
    text = "{" + ",".join(_choices(spec)) + "}"
    return text if len(text) <= 16 else spec.key.rsplit("-", 1)[-1][0].upper()


def _default_text(spec: ParamSpec) -> str:
    vals = list(spec.defaults.values())
    if list in spec.constraints and all(v is None for v in vals):
        return ""  # a list of columns: none by default
    if len({repr(v) for v in vals}) == 1:
        return f"default: {_plain(vals[0])}"
    return "default: " + ", ".join(f"{k} {_plain(v)}" for k, v in spec.defaults.items())


def param_help(spec: ParamSpec) -> str:
    """The option's help: the parameter's one plain sentence and its default (``%``
    escaped for argparse)."""
    default = _default_text(spec)
    text = spec.help + (f" ({default})" if default else "")
    return text.replace("%", "%%")


def _group(parser: argparse.ArgumentParser, title: str):
    """The parser's argument group of that title (made on first use)."""
    for g in parser._action_groups:
        if g.title == title:
            return g
    return parser.add_argument_group(title)


def add_param_options(
    parser: argparse.ArgumentParser,
    table: dict[str, ParamSpec],
    title: str = "estimator parameters",
    *,
    group_of=None,
) -> None:
    """Add one ``--key`` option per parameter of the table (default: not given).

    A boolean parameter gets ``--key`` / ``--no-key``, a list of names ``--key A B``.
    Every option's default is "not given" (the estimator's own default applies), so
    that :func:`params_from_args` passes only what the user typed. Its help is
    :func:`param_help`. The options go to the argument group ``title``, or to the
    group ``group_of(spec)`` names when that is not None (groups of the same title are
    shared, also with the parser's other options).
    """
    for spec in table.values():
        group = _group(parser, (group_of(spec) if group_of else None) or title)
        help_ = param_help(spec)
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

"""What the metadata and arrays of a model file may hold: the schema that
:mod:`fedep.modelfile.estimator` checks a file's content against before building an
estimator from it.

Each JSON value is declared once (its type, bounds, allowed values, whether it may be
null), each stored array with its named dimensions, so that an inconsistent file (one
that passes the integrity check but was edited, or written by faulty code) is refused
with one line naming the field instead of failing somewhere inside the estimator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedep import detectors
from fedep._errors import one_line
from fedep.detectors.suppression import MODE_ARRAYS
from fedep.features.decide import ACTIONS, KINDS
from fedep.features.sketches import DEFAULT_SKETCH_SIZE
from fedep.federation.rounds import STOP_REASONS

# --------------------------------------------------------------------------- the schema


@dataclass(frozen=True)
class _Value:
    """What one JSON value of a model file may be.

    Parameters
    ----------
    kind : str
        ``"real"`` (int or float, never bool; finite), ``"int"`` (never bool),
        ``"str"``, ``"bool"``, ``"object"`` (a JSON object), ``"objects"`` (a list of
        them), ``"names"`` (a list of distinct strings), ``"reals"`` (a list of finite
        numbers) or ``"counts"`` (a list of integers >= 0).
    lo, hi : float, optional
        Inclusive bounds of a ``"real"`` or ``"int"``.
    choices : tuple of str
        The allowed values of a ``"str"`` (empty: any).
    required : bool
        The key must be present.
    null : bool
        ``None`` is allowed.
    nonempty : bool
        A ``"str"`` may not be empty.
    """

    kind: str
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] = ()
    required: bool = False
    null: bool = False
    nonempty: bool = False

    def describe(self) -> str:
        """What the value must be, for the error message."""
        if self.kind in ("real", "int"):
            what = "a finite number" if self.kind == "real" else "an integer"
            if self.lo is not None and self.hi is not None:
                what += f" in [{self.lo:g}, {self.hi:g}]"
            elif self.lo is not None:
                what += f" >= {self.lo:g}"
        elif self.kind == "str":
            if self.choices:
                what = "one of " + ", ".join(map(repr, self.choices))
            else:
                what = "a non-empty string" if self.nonempty else "a string"
        else:
            what = {
                "bool": "true or false",
                "object": "a JSON object",
                "objects": "a list of JSON objects",
                "names": "a list of distinct strings",
                "reals": "a list of finite numbers",
                "counts": "a list of integers >= 0",
            }[self.kind]
        return what + (" or null" if self.null else "")

    def check(self, value: Any, where: str) -> None:
        """Raise ValueError naming ``where`` unless ``value`` is of this kind."""
        if value is None and self.null:
            return
        bad = f"{where} must be {self.describe()}, not {_show(value)}"
        k = self.kind
        if k in ("real", "int"):
            if not _is_number(value, integer=k == "int"):
                raise ValueError(bad)
            if not _finite(value):
                raise ValueError(f"{where} = {_show(value)} is non-finite")
            if (self.lo is not None and value < self.lo) or (
                self.hi is not None and value > self.hi
            ):
                if self.lo == 0 and self.hi is None:
                    raise ValueError(f"{where} = {_show(value)} is non-finite or negative")
                raise ValueError(f"{where} = {_show(value)} is not {self.describe()}")
        elif k == "str":
            ok = isinstance(value, str) and (value or not self.nonempty)
            if not ok or (self.choices and value not in self.choices):
                raise ValueError(bad)
        elif k == "bool":
            if not isinstance(value, bool):
                raise ValueError(bad)
        elif k == "object":
            if not isinstance(value, dict):
                raise ValueError(bad)
        elif not isinstance(value, list):
            raise ValueError(bad)
        elif k == "objects":
            for i, v in enumerate(value):
                if not isinstance(v, dict):
                    raise ValueError(f"{where}[{i}] must be a JSON object, not {_show(v)}")
        elif k == "names":
            seen: set[str] = set()
            for i, v in enumerate(value):
                if not isinstance(v, str):
                    raise ValueError(f"{where}[{i}] must be a string, not {_show(v)}")
                if v in seen:
                    raise ValueError(f"{where} has the duplicate entry {one_line(v, 40)!r}")
                seen.add(v)
        elif k in ("reals", "counts"):
            integer = k == "counts"
            for i, v in enumerate(value):
                if not (_is_number(v, integer=integer) and _finite(v)) or (integer and v < 0):
                    what = "an integer >= 0" if integer else "a finite number"
                    raise ValueError(f"{where}[{i}] must be {what}, not {_show(v)}")
        else:  # pragma: no cover - a typo in a table below
            raise AssertionError(k)


def _is_number(v: Any, *, integer: bool) -> bool:
    # bool is an int to Python, never a number to a model file
    kinds = (int,) if integer else (int, float)
    return isinstance(v, kinds) and not isinstance(v, bool)


def _finite(v: int | float) -> bool:
    try:
        return math.isfinite(v)
    except OverflowError:  # an int beyond float's range
        return False


def _show(v: Any) -> str:
    """A value as an error message shows it: short, one line, with its JSON type."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        text = repr(v)
        return text if len(text) <= 40 else text[:37] + "..."
    if isinstance(v, str):
        return "the string " + repr(one_line(v, 40))
    return {dict: "a JSON object", list: "a list"}.get(type(v), type(v).__name__)


def _check_object(obj: Any, table: dict[str, _Value], where: str) -> None:
    """Check a JSON object against a table: every key known, required ones present,
    each value of its kind. ``where`` names the object in messages ("" for the top)."""
    inside = f" in {where}" if where else ""
    if not isinstance(obj, dict):
        raise ValueError(f"{where or 'meta'} must be a JSON object, not {_show(obj)}")
    for key in obj:
        if key not in table:
            raise ValueError(f"unexpected key {key!r}{inside}")
    for key, spec in table.items():
        if key not in obj:
            if spec.required:
                raise ValueError(f"missing {key!r}{inside}")
            continue
        spec.check(obj[key], f"{where}[{key!r}]" if where else repr(key))


#: The model file's ``meta`` (what :func:`save_model` writes).
_META: dict[str, _Value] = {
    "class": _Value("str", required=True),
    "fedep_version": _Value("str"),
    "params": _Value("object", required=True),
    "scalars": _Value("object", required=True),
    "history": _Value("objects", null=True),
    # distinct: scoring selects the columns by name
    "feature_names_in_": _Value("names", null=True),
    "features": _Value("object", null=True),
    "lineage": _Value("object", null=True),
}

#: ``meta["lineage"]`` (:func:`fedep.detectors.lineage.new_lineage`).
_LINEAGE: dict[str, _Value] = {
    "id": _Value("str", required=True, nonempty=True),
    "parent": _Value("str", null=True, nonempty=True),
    "parent_sha256": _Value("str", null=True, nonempty=True),
    "window": _Value("object", required=True),
    "gateways": _Value("names", required=True),
    "gateway_rows": _Value("counts"),
}
_WINDOW: dict[str, _Value] = {
    "rows": _Value("int", lo=0, required=True),
    "time_column": _Value("str", nonempty=True),
    "ts_first": _Value("real"),
    "ts_last": _Value("real"),
    "files": _Value("objects"),
}
_WINDOW_FILE: dict[str, _Value] = {
    "name": _Value("str", required=True, nonempty=True),
    "rows": _Value("int", lo=0, required=True),
}

#: The fitted scalars, ``meta["scalars"]``: those of :func:`save_model` and of every
#: detector's ``persisted_scalars`` (a test checks that each has an entry). Only
#: ``threshold_`` and ``n_features_in_`` are required: files written before the others
#: existed still load.
_SCALARS: dict[str, _Value] = {
    "threshold_": _Value("real", lo=0, required=True),
    "n_features_in_": _Value("int", lo=1, required=True),
    # the dtype kind of ``clients_`` at fit (strings are stored as "U"): see _CLIENT_KINDS
    "clients_kind": _Value("str", choices=("b", "i", "u", "f", "U", "S", "O")),
    "contamination_": _Value("real", lo=0, hi=0.5),
    "contamination_reason_": _Value("str", nonempty=True),
    "score_mean_": _Value("real"),
    "score_std_": _Value("real", lo=0),
    "n_components_": _Value("int", lo=1),
    "rank_reason_": _Value("str", nonempty=True),
    "n_iter_": _Value("int", lo=0),
    # "converged": the name files written before the named stop reasons hold
    "stop_reason_": _Value("str", choices=(*STOP_REASONS, "converged", "lagrangian_stationary")),
    # differential privacy (FedEP's dp_epsilon): the loss spent (null: inf, no noise),
    # its delta and the noise multiplier of every release
    "dp_epsilon_": _Value("real", lo=0, null=True),
    "dp_delta_": _Value("real", lo=0, hi=1),
    "dp_noise_multiplier_": _Value("real", lo=0),
}

#: The arrays of :data:`fedep.detectors.FITTED_ARRAYS`: allowed dtype kinds and named
#: dimensions. Naming the dimensions checks every array against the same
#: ``n_components`` / ``n_features`` / ``n_clients`` (bound by the first array that
#: has each, in this order).
_ARRAYS: dict[str, tuple[str, tuple[str, ...]]] = {
    "components_": ("f", ("n_components", "n_features")),
    "clients_": ("biufU", ("n_clients",)),
    "client_components_": ("f", ("n_clients", "n_components", "n_features")),
    "mean_": ("f", ("n_features",)),
    "scale_": ("f", ("n_features",)),
    "constant_features_": ("b", ("n_features",)),
    "client_thresholds_": ("f", ("n_clients",)),
    # optional (:data:`fedep.detectors.STATE_ARRAYS`): the state a warm start carries,
    # its shapes bound by the dimensions of the arrays above
    "consensus_": ("f", ("n_features", "n_components")),
    "client_duals_": ("f", ("n_clients", "n_components", "n_features")),
    "client_multipliers_": ("f", ("n_clients", "n_components", "n_components")),
}
_KIND_NAMES = {"b": "bool", "i": "integer", "u": "unsigned", "f": "float", "U": "string"}

#: ``clients_kind`` -> the dtype kinds ``clients_`` may then have (save_model stores
#: object and byte strings as unicode).
_CLIENT_KINDS = {"b": "b", "i": "iu", "u": "iu", "f": "f", "U": "U", "S": "U", "O": "U"}

#: The feature pipeline's dict (:meth:`FeaturePipeline.to_dict`), ``meta["features"]``;
#: ``from_dict`` checks ``format`` and ``version`` themselves.
_PIPELINE: dict[str, _Value] = {
    "format": _Value("str", required=True),
    "version": _Value("int", required=True),
    "params": _Value("object", required=True),
    "columns_in": _Value("names", required=True),
    "decisions": _Value("objects", required=True),
    "scaling": _Value("object", null=True),
}

#: One column decision (:meth:`fedep.features.ColumnDecision.to_dict`); version-1
#: pipelines lack the ``cdf_*`` keys.
_DECISION: dict[str, _Value] = {
    "name": _Value("str", required=True),
    "kind": _Value("str", choices=KINDS, required=True),
    "action": _Value("str", choices=ACTIONS, required=True),
    "reason": _Value("str", required=True),
    # distinct: each entry is one output feature, looked up by value
    "vocabulary": _Value("names"),
    "impute": _Value("real", null=True),
    "lo": _Value("real", null=True),
    "hi": _Value("real", null=True),
    "missing_indicator": _Value("bool"),
    "optional": _Value("bool"),
    "cdf_x": _Value("reals"),
    "cdf_counts": _Value("counts"),
}
#: Actions that read a column as numbers: they need ``impute``, ``lo`` and ``hi``.
_NUMERIC_ACTIONS = ("keep", "log1p", "signed-log", "normal-score")

_SCALING: dict[str, _Value] = {
    "mean": _Value("reals", required=True),
    "scale": _Value("reals", required=True),
    "moments": _Value("object"),
}
_MOMENTS: dict[str, _Value] = {
    "count": _Value("int", lo=0, required=True),
    "mean": _Value("reals", required=True),
    "m2": _Value("reals", required=True),
}


@dataclass(frozen=True)
class _Declared:
    """An array as the manifest declares it (dtype and shape; no data)."""

    dtype: np.dtype
    shape: tuple[int, ...]

    @property
    def ndim(self) -> int:
        return len(self.shape)


def declared_arrays(manifest: dict) -> dict[str, _Declared]:
    """The manifest's arrays as dtype-and-shape stand-ins for :func:`_check_shapes`."""
    return {
        name: _Declared(np.dtype(m["dtype"]), tuple(int(n) for n in m["shape"]))
        for name, m in manifest.items()
    }


def _check_arrays(files: dict, clients_kind: str | None) -> None:
    """The fitted arrays against :data:`_ARRAYS`: names, dtypes, dimensions and shapes,
    and ``clients_`` as ``fit`` stores it (distinct, increasing)."""
    _check_shapes(files, clients_kind)
    _check_clients(files["clients_"])
    for name in detectors.STATE_ARRAYS:
        if name in files and not np.isfinite(files[name]).all():
            raise ValueError(f"array {name!r} holds NaN or inf")


def _check_shapes(files: dict, clients_kind: str | None) -> dict[str, int]:
    """Names, dtypes, dimensions and shapes of the arrays (real ones, or the manifest's
    :class:`_Declared` stand-ins); returns the named dimensions."""
    missing = [n for n in detectors.FITTED_ARRAYS if n not in files]
    if missing:
        raise ValueError(f"lacks the array(s) {missing}")
    extra = sorted(set(files) - set(_ARRAYS) - set(MODE_ARRAYS))
    if extra:
        raise ValueError(f"unexpected array {extra[0]!r}")
    present = {k: v for k, v in _ARRAYS.items() if k in files}
    for name, (kinds, dims) in present.items():
        a = files[name]
        if name == "clients_" and clients_kind is not None:
            kinds = _CLIENT_KINDS[clients_kind]
        if a.dtype.kind not in kinds:
            want = " or ".join(_KIND_NAMES[k] for k in kinds)
            raise ValueError(f"array {name!r} has dtype {a.dtype}, expected {want}")
        if a.ndim != len(dims):
            raise ValueError(
                f"array {name!r} must be {len(dims)}-D ({', '.join(dims)}), not {a.ndim}-D"
            )
    size: dict[str, int] = {}
    for name, (_, dims) in present.items():
        shape = files[name].shape
        for dim, n in zip(dims, shape, strict=True):
            size.setdefault(dim, n)
        expected = tuple(size[d] for d in dims)
        if shape != expected:
            raise ValueError(
                f"array shapes are inconsistent: {name!r} has shape {shape}, expected "
                f"({', '.join(dims)}) = {expected}"
            )
    empty = [d for d, n in size.items() if n < 1]
    if empty:
        raise ValueError(f"the arrays have {empty[0]} = 0")
    return size


def _check_clients(clients: np.ndarray) -> None:
    if clients.dtype.kind == "f" and not np.isfinite(clients).all():
        raise ValueError("array 'clients_' holds NaN or infinite client ids")
    # fit stores np.unique's labels; scoring finds a client by binary search in them
    if clients.size > 1 and not (clients[1:] > clients[:-1]).all():
        values, counts = np.unique(clients, return_counts=True)
        if (counts > 1).any():
            dup = values[counts > 1][0].item()
            raise ValueError(f"array 'clients_' has the duplicate client id {dup!r}")
        raise ValueError("array 'clients_' is not in increasing order (as fit stores it)")


def _check_lineage(data: dict) -> None:
    """``meta["lineage"]`` against :data:`_LINEAGE` and :data:`_WINDOW`."""
    _check_object(data, _LINEAGE, "lineage")
    _check_object(data["window"], _WINDOW, "lineage['window']")
    for i, f in enumerate(data["window"].get("files", [])):
        _check_object(f, _WINDOW_FILE, f"lineage['window']['files'][{i}]")
    rows = data.get("gateway_rows")
    if rows is not None and len(rows) != len(data["gateways"]):
        raise ValueError("lineage['gateway_rows'] must have one count per gateway")


def knot_cap(sketch_size: Any) -> int:
    """Most distribution-function knots one column's sketch can give: two per non-empty
    bin, ``sketch_size`` bins per decade, both signs, over the 321 decades of float64
    magnitudes from the sketch's zero bin (1e-12) up, and the zero bin."""
    b = sketch_size if _is_number(sketch_size, integer=True) and sketch_size > 0 else 0
    b = max(int(b), DEFAULT_SKETCH_SIZE)
    return 2 * (2 * 321 * b + 1)


def _check_pipeline_dict(data: dict) -> None:
    """The pipeline's dict against :data:`_PIPELINE` and :data:`_DECISION`: one
    decision per input column, in ``columns_in`` order (as ``decide_columns`` makes
    them), numeric decisions with their imputation and clipping values."""
    _check_object(data, _PIPELINE, "features")
    decisions, columns = data["decisions"], data["columns_in"]
    seen: set[str] = set()
    for i, d in enumerate(decisions):
        where = f"features.decisions[{i}]"
        _check_object(d, _DECISION, where)
        if d["name"] in seen:
            raise ValueError(f"{where} repeats the column {d['name']!r}")
        seen.add(d["name"])
        knots = len(d.get("cdf_x", ()))
        if knots != len(d.get("cdf_counts", ())):
            raise ValueError(
                f"{where} has {knots} cdf_x knots for {len(d.get('cdf_counts', ()))} counts"
            )
        cap = knot_cap(data["params"].get("sketch_size"))
        if knots > cap:
            raise ValueError(f"{where} has {knots} knots, more than its sketch allows ({cap})")
        if d["action"] in _NUMERIC_ACTIONS:
            for k in ("impute", "lo", "hi"):
                if d.get(k) is None:
                    raise ValueError(f"{where}[{k!r}] is missing for action {d['action']!r}")
            if d["lo"] > d["hi"]:
                raise ValueError(f"{where} has lo > hi")
    names = [d["name"] for d in decisions]
    if names != columns:
        raise ValueError(
            "features.decisions must name the columns of features['columns_in'], in order "
            f"({len(names)} decisions for {len(columns)} columns)"
        )
    sc = data.get("scaling")
    if sc is not None:
        _check_object(sc, _SCALING, "features['scaling']")
        if "moments" in sc:
            _check_object(sc["moments"], _MOMENTS, "features['scaling']['moments']")

"""Saving and loading fitted detectors, without pickle.

This module maps a fitted detector to the contents of a model file and back; the
file format itself (container, integrity, caps, signatures) is
:mod:`fedep.modelfile`. The file holds the estimator class, its parameters, the
arrays of :data:`fedep.detectors.FITTED_ARRAYS`, the fitted scalars (with the rank
``n_components_`` and how it was chosen, ``rank_reason_``), the feature names, the
fitted feature pipeline (``features_``, as its versioned
:meth:`~fedep.features.FeaturePipeline.to_dict` JSON in the meta, so the integrity
digest covers it), the fit history and the fedep version. Loading builds the estimator from its
parameters, validates them with the estimator's own rules, and makes it fitted
through the same ``set_fitted`` as ``fit``; any inconsistency is a
:class:`~fedep.modelfile.ModelFileError` naming the file.

This module imports the estimators; the estimators never import :mod:`fedep.modelfile`.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from sklearn.utils.validation import check_is_fitted

from fedep import detectors
from fedep._json import jsonable
from fedep.detectors.suppression import MODE_ARRAYS, check_mode_arrays
from fedep.features import FeaturePipeline
from fedep.federation.rounds import stop_reason_of
from fedep.modelfile import ModelFileError, read_model_file, write_model_file
from fedep.modelfile.content import (
    _META,
    _SCALARS,
    _check_arrays,
    _check_lineage,
    _check_object,
    _check_pipeline_dict,
    _check_shapes,
    declared_arrays,
)
from fedep.params import validate_params

__all__ = ["ModelFileError", "save_model", "load_model"]

_DETECTORS = detectors.DETECTORS


def _model_path(path) -> Path:
    """``path`` as a Path; a clear TypeError for anything that is not a path."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(
            f"a model file's path must be a str or os.PathLike, got {type(path).__name__}"
        )
    return Path(path)


def save_model(det, path, *, sign_key=None) -> None:
    """Write a fitted detector to ``path`` (conventionally ``*.fedep``), atomically.

    Parameters
    ----------
    det : BaseFederatedDetector
        A fitted detector.
    path : str or Path
    sign_key : optional
        Signs the file (see :func:`fedep.modelfile.write_model_file`).
    """
    path = _model_path(path)
    check_is_fitted(det, "components_")
    if type(det).__name__ not in _DETECTORS:
        raise TypeError(f"cannot save a {type(det).__name__}")
    arrays = {}
    for name in detectors.FITTED_ARRAYS:
        a = np.asarray(getattr(det, name))
        if a.dtype.kind in "OUS":
            a = a.astype(str).astype("U")
        arrays[name] = a
    for name in detectors.STATE_ARRAYS:
        if getattr(det, name, None) is not None:
            arrays[name] = np.asarray(getattr(det, name), dtype=float)
    for name in MODE_ARRAYS:
        if getattr(det, name, None) is not None:
            arrays[name] = np.asarray(getattr(det, name))
    params = det.get_params(deep=False)
    params.pop("callback", None)
    if isinstance(params.get("features"), FeaturePipeline):
        # The parameter (unfitted settings); the fitted pipeline is "features" below.
        params["features"] = {"FeaturePipeline": jsonable(params["features"].get_params())}
    pipe = getattr(det, "features_", None)
    meta = {
        "class": type(det).__name__,
        "fedep_version": __import__("fedep").__version__,
        "params": jsonable(params),
        "scalars": {
            "threshold_": float(det.threshold_),
            "n_features_in_": int(det.n_features_in_),
            "clients_kind": np.asarray(det.clients_).dtype.kind,
            **{k: jsonable(getattr(det, k)) for k in det.persisted_scalars if hasattr(det, k)},
        },
        "history": jsonable(getattr(det, "history_", None)),
        "feature_names_in_": (
            [str(c) for c in det.feature_names_in_] if hasattr(det, "feature_names_in_") else None
        ),
        "features": None if pipe is None else jsonable(pipe.to_dict()),
        "lineage": jsonable(getattr(det, "lineage_", None)),
    }
    write_model_file(path, meta, arrays, sign_key=sign_key)


def load_model(path, *, verify_key=None, require_signature=False):
    """Load a detector written by :func:`save_model`.

    The file's content is checked against the schema of :mod:`fedep.modelfile.content`
    (its ``_META``, ``_SCALARS``, ``_ARRAYS`` and the feature pipeline's tables) before
    any of it reaches the estimator: a file whose digest was recomputed after an edit
    is refused here, with the field it got wrong, rather than failing (or scoring
    wrongly) later.

    The returned detector's ``file_sha256_`` is the file's integrity digest (what a
    signature signs), verified while reading: it names the model in its alerts
    (:func:`fedep.alerts.model_identity`).

    Raises
    ------
    ModelFileError
        If the file is missing, not a fedep model, corrupt, tampered with, of a
        format version this fedep cannot read, or inconsistent (one line
        ``model file PATH: inconsistent content (...)`` naming the field).
    """
    path = _model_path(path)
    digest: list = []
    meta, files = read_model_file(
        path,
        verify_key=verify_key,
        require_signature=require_signature,
        check_manifest=_check_manifest,
        digest_out=digest,
    )
    try:
        det = _detector_from(meta, files)
        det.file_sha256_ = digest[0]  # the integrity digest: a warm start's parent
        return det
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, ArithmeticError) as exc:
        # The schema catches what it knows; any other failure while building the
        # estimator is still about this file's content, so it says so in one line.
        if isinstance(exc, ModelFileError):
            raise
        what = f"missing {exc}" if isinstance(exc, KeyError) else str(exc).splitlines()[0]
        raise ModelFileError(f"model file {path}: inconsistent content ({what})") from None


#: Most keys one round's record of ``history`` may hold (a record holds ~25).
MAX_HISTORY_KEYS = 64


def _check_meta(meta: dict):
    """The metadata against the schema; returns the detector class and the scalars."""
    _check_object(meta, _META, "")
    cls = _DETECTORS.get(meta["class"])
    if cls is None:
        raise ValueError(f"unknown detector class {meta['class']!r}")
    known = ("threshold_", "n_features_in_", "clients_kind", *cls.persisted_scalars)
    sc = meta["scalars"]
    _check_object(sc, {k: _SCALARS[k] for k in known}, "scalars")
    return cls, sc


def _history_cap(params: dict) -> int:
    """Most round records a model's ``history`` may hold: ``n_rounds`` per fit, one fit
    per concentration step of record trimming (and the first)."""
    rounds = params.get("n_rounds")
    steps = params.get("trim_steps")
    rounds = rounds if isinstance(rounds, int) and not isinstance(rounds, bool) else 1
    steps = steps if isinstance(steps, int) and not isinstance(steps, bool) else 0
    return max(rounds, 1) * (max(steps, 0) + 1)


def _check_manifest(meta: dict, manifest: dict) -> None:
    """Before any array is decompressed: the arrays the manifest declares must be the
    model's own, as its metadata describes it (a basis of ``n_components_`` x the
    pipeline's outputs or ``n_features_in_``, per-client arrays of one client count),
    and ``history`` no longer than the fit's rounds allow.

    So the memory a file can make :func:`load_model` use is its own honest size (the
    arrays its metadata implies) plus the metadata's cap: a declared array larger than
    the model's dimensions is refused from the header, and scoring works in row blocks
    of bounded size (:meth:`~fedep.detectors.base.BaseFederatedDetector.scoring_block_rows`).
    """
    cls, sc = _check_meta(meta)
    declared = declared_arrays(manifest)
    size = _check_shapes(declared, sc.get("clients_kind"))
    n, r = size["n_features"], size["n_components"]
    check_mode_arrays(declared, n)
    data = meta.get("features")
    if data is None:
        n_model, what = sc["n_features_in_"], "scalars['n_features_in_']"
    else:
        n_model, what = len(_pipeline_from(data).get_feature_names_out()), "the feature pipeline"
    if n != n_model:
        raise ValueError(f"the arrays have {n} features, {what} {n_model}")
    rank = sc.get("n_components_")
    if r > n or (rank is not None and r != rank):
        raise ValueError(
            f"{r} components for n_components={meta['params'].get('n_components')!r} "
            f"(n_components_={rank!r}) and {n} features"
        )
    history = meta.get("history")
    if history is not None:
        cap = _history_cap(meta["params"])
        if len(history) > cap:
            raise ValueError(f"'history' has {len(history)} rounds, more than the fit's {cap}")
        for i, h in enumerate(history):
            if len(h) > MAX_HISTORY_KEYS:
                raise ValueError(f"'history'[{i}] has {len(h)} keys (at most {MAX_HISTORY_KEYS})")


def _detector_from(meta: dict, files: dict):
    cls, sc = _check_meta(meta)
    _check_arrays(files, sc.get("clients_kind"))
    params = dict(meta["params"])
    if isinstance(params.get("features"), dict):
        spec = params["features"]
        if set(spec) != {"FeaturePipeline"} or not isinstance(spec["FeaturePipeline"], dict):
            raise ValueError("params['features'] must be {'FeaturePipeline': {...}}")
        params["features"] = FeaturePipeline(**spec["FeaturePipeline"])
        validate_params(params["features"])
    det = cls(**params)
    validate_params(det)
    pipe = _pipeline_from(meta.get("features"))
    names = meta.get("feature_names_in_")
    if pipe is not None and names is not None and set(names) != set(pipe.feature_names_in_):
        raise ValueError("feature_names_in_ are not the feature pipeline's input columns")
    clients = files["clients_"]
    if sc.get("clients_kind") in ("i", "u"):
        clients = clients.astype(np.int64, copy=False)
    det.set_fitted(
        components=files["components_"],
        client_components=files["client_components_"],
        clients=clients,
        mean=files["mean_"],
        scale=files["scale_"],
        constant_features=files["constant_features_"],
        feature_names=names,
        features=pipe,
        copy=False,  # fresh arrays, read for this detector alone
    )
    det.threshold_ = float(sc["threshold_"])
    det.client_thresholds_ = np.asarray(files["client_thresholds_"], dtype=float)
    for k in cls.persisted_scalars:
        if k in sc:
            setattr(det, k, sc[k])
    if isinstance(getattr(det, "stop_reason_", None), str):
        # Files written before the stop reasons named what stopped the fit say
        # "converged" for a fit that met tol.

        det.stop_reason_ = stop_reason_of(det.stop_reason_, getattr(cls, "server_step", ""))
    if meta.get("history") is not None:
        det.history_ = meta["history"]
    for name in detectors.STATE_ARRAYS:
        if name in files:
            setattr(det, name, np.asarray(files[name], dtype=float))
    check_mode_arrays(files, det.components_.shape[1])
    for name in MODE_ARRAYS:
        if name in files:
            setattr(det, name, np.asarray(files[name]))
    if meta.get("lineage") is not None:
        _check_lineage(meta["lineage"])
        det.lineage_ = meta["lineage"]
    _check_consistent(det, sc["n_features_in_"])
    return det


def _pipeline_from(data):
    """The fitted FeaturePipeline of a model file (None when it has none).

    Its errors start ``feature pipeline:`` (then the field), so that a message says
    which part of the file is wrong before saying where in it.
    """
    if data is None:
        return None
    try:
        _check_pipeline_dict(data)
    except ValueError as exc:
        raise ValueError(f"feature pipeline: {exc}") from None
    try:
        pipe = FeaturePipeline.from_dict(data)
        validate_params(pipe)
    except Exception as exc:  # any malformed content: one line, via ModelFileError
        what = " ".join(str(exc).split()) or type(exc).__name__
        raise ValueError(f"unreadable feature pipeline: {what}") from None
    n_out = len(pipe.get_feature_names_out())
    problem = None
    if pipe.mean_ is None:
        problem = "features['scaling'] is null (not fitted)"
    else:
        for name, v in (("mean", pipe.mean_), ("scale", pipe.scale_)):
            if v.shape != (n_out,):
                problem = f"features['scaling'][{name!r}] has {v.size} values for {n_out} outputs"
                break
        else:
            m = pipe.moments_
            if not (pipe.scale_ > 0).all():
                problem = "features['scaling']['scale'] holds values <= 0"
            elif m is not None and (m.mean.shape != (n_out,) or m.m2.shape != (n_out,)):
                problem = f"features['scaling']['moments'] do not have {n_out} outputs"
    if problem:
        raise ValueError(f"feature pipeline: {problem}")
    return pipe


def _all_finite(a: np.ndarray, block: int = 1 << 22) -> bool:
    """``np.isfinite(a).all()`` over blocks of at most ``block`` values (no mask the
    size of a large array)."""
    flat = a.reshape(-1)
    return all(np.isfinite(flat[i : i + block]).all() for i in range(0, flat.size, block))


def _check_consistent(det, n_features: int) -> None:
    """What the schema cannot see alone: the rank against the parameters, the number
    of features against the pipeline and the names, and the values of the arrays."""
    pipe = getattr(det, "features_", None)
    if pipe is not None and det.n_features_in_ != n_features:
        raise ValueError("feature names are inconsistent with the feature pipeline")
    n = n_features if pipe is None else len(det.feature_names_out_)
    r = det.components_.shape[0]
    # The fitted rank (``n_components_``, stored since "auto") must be the basis's and,
    # for an integer ``n_components``, that integer.
    wanted = det.n_components_ if det.n_components == "auto" else det.n_components
    if not (1 <= r <= n and r == wanted and r == det.n_components_):
        raise ValueError(
            f"{r} components for n_components={det.n_components!r} "
            f"(n_components_={det.n_components_!r})"
        )
    if det.components_.shape[1] != n:
        raise ValueError(
            f"array shapes are inconsistent: {det.components_.shape[1]} features in the "
            f"arrays, {n} in the model (scalars['n_features_in_'] or the feature pipeline)"
        )
    names = getattr(det, "feature_names_in_", None)
    if names is not None and len(names) != det.n_features_in_:
        raise ValueError("feature names are inconsistent")
    values = {
        "components_": np.isfinite(det.components_).all(),
        "client_components_": _all_finite(det.client_components_),
        "mean_": np.isfinite(det.mean_).all(),
        "scale_": np.isfinite(det.scale_).all() and (det.scale_ > 0).all(),
        "client_thresholds_": np.isfinite(det.client_thresholds_).all(),
    }
    bad = [k for k, ok in values.items() if not ok]
    if bad:
        raise ValueError(f"non-finite or negative values in the fitted array {bad[0]!r}")

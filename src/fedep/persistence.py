"""Saving and loading fitted detectors without pickle.

A model file is a NumPy ``.npz`` archive (a zip) holding plain numeric arrays and one
``__meta__`` array with UTF-8 JSON: the format name and version, the estimator class,
its parameters, fitted scalars, the fedep version and a SHA-256 digest of every array.
Loading never unpickles (``allow_pickle=False``), checks the format, the version, the
class, every digest and the shapes, and raises :class:`ModelFileError` naming the file
and the problem when anything is off.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import numpy as np

FORMAT = "fedep-model"
FORMAT_VERSION = 1

__all__ = ["ModelFileError", "save_model", "load_model", "FORMAT", "FORMAT_VERSION"]

_ARRAYS = (
    "components_",
    "client_components_",
    "clients_",
    "mean_",
    "scale_",
    "constant_features_",
    "client_thresholds_",
)


class ModelFileError(ValueError):
    """A model file is missing, corrupt, tampered with or of an unknown version."""


def _digest(a: np.ndarray) -> str:
    h = hashlib.sha256()
    h.update(str(a.dtype.str).encode())
    h.update(str(a.shape).encode())
    h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _jsonable(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return None  # callables, generators: not part of a saved model


def save_model(det, path) -> None:
    """Write a fitted detector to ``path`` (conventionally ``*.fedep``).

    Parameters
    ----------
    det : BaseFederatedDetector
        A fitted detector.
    path : str or Path
    """
    from sklearn.utils.validation import check_is_fitted

    check_is_fitted(det, "components_")
    arrays = {}
    for name in _ARRAYS:
        a = np.asarray(getattr(det, name))
        if a.dtype.kind in "OUS":
            a = a.astype(str).astype("U")
        arrays[name] = a
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "class": type(det).__name__,
        "fedep_version": __import__("fedep").__version__,
        "params": {k: _jsonable(v) for k, v in det.get_params(deep=False).items()},
        "scalars": {
            "threshold_": float(det.threshold_),
            "n_features_in_": int(det.n_features_in_),
            "clients_kind": np.asarray(det.clients_).dtype.kind,
            **{k: _jsonable(getattr(det, k)) for k in det._persist_scalars if hasattr(det, k)},
        },
        "history": getattr(det, "history_", None),
        "feature_names_in_": (
            [str(c) for c in det.feature_names_in_] if hasattr(det, "feature_names_in_") else None
        ),
        "digests": {k: _digest(v) for k, v in arrays.items()},
    }
    path = Path(path)
    with open(path, "wb") as fh:
        np.savez_compressed(
            fh, __meta__=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), **arrays
        )


def load_model(path):
    """Load a detector written by :func:`save_model`.

    Raises
    ------
    ModelFileError
        If the file is missing, not a fedep model, corrupt, tampered with, or of a
        format version this fedep cannot read.
    """
    import fedep.detectors as detectors

    path = Path(path)
    if not path.is_file():
        raise ModelFileError(f"model file {path} does not exist")
    try:
        with np.load(path, allow_pickle=False) as z:
            files = {k: z[k] for k in z.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError) as exc:
        raise ModelFileError(f"model file {path} is corrupt or not a fedep model: {exc}") from None
    if "__meta__" not in files:
        raise ModelFileError(f"model file {path} has no fedep metadata (not a fedep model)")
    try:
        meta = json.loads(files.pop("__meta__").tobytes().decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelFileError(f"model file {path}: metadata is corrupt ({exc})") from None
    if meta.get("format") != FORMAT:
        raise ModelFileError(
            f"model file {path} is not a fedep model (format {meta.get('format')!r})"
        )
    if meta.get("format_version") != FORMAT_VERSION:
        raise ModelFileError(
            f"model file {path} has format version {meta.get('format_version')!r}; "
            f"this fedep reads version {FORMAT_VERSION}"
        )
    cls = getattr(detectors, str(meta.get("class")), None)
    if (
        cls is None
        or not isinstance(cls, type)
        or not issubclass(cls, detectors.BaseFederatedDetector)
    ):
        raise ModelFileError(
            f"model file {path} names an unknown detector class {meta.get('class')!r}"
        )
    digests = meta.get("digests", {})
    for name in _ARRAYS:
        if name not in files:
            raise ModelFileError(f"model file {path} lacks the array {name!r}")
        if digests.get(name) != _digest(files[name]):
            raise ModelFileError(
                f"model file {path}: checksum mismatch for {name!r} (corrupt or altered)"
            )
    try:
        det = cls(**meta["params"])
    except TypeError as exc:
        raise ModelFileError(
            f"model file {path}: parameters do not fit {cls.__name__} ({exc})"
        ) from None
    sc = meta["scalars"]
    for name in _ARRAYS:
        setattr(det, name, files[name])
    if sc.get("clients_kind") in ("i", "u"):
        det.clients_ = det.clients_.astype(np.int64)
    det.threshold_ = float(sc["threshold_"])
    det.n_features_in_ = int(sc["n_features_in_"])
    for k in cls._persist_scalars:
        if k in sc:
            setattr(det, k, sc[k])
    if meta.get("history") is not None:
        det.history_ = meta["history"]
    names = meta.get("feature_names_in_")
    if names is not None:
        if not isinstance(names, list) or len(names) != det.n_features_in_:
            raise ModelFileError(f"model file {path}: feature names are inconsistent")
        det.feature_names_in_ = np.asarray([str(c) for c in names], dtype=object)
    n, r = det.n_features_in_, det.components_.shape[0]
    d = det.clients_.shape[0]
    shapes_ok = (
        det.components_.shape == (r, n)
        and det.client_components_.shape == (d, r, n)
        and det.mean_.shape == (n,)
        and det.scale_.shape == (n,)
        and det.client_thresholds_.shape == (d,)
    )
    if not shapes_ok:
        raise ModelFileError(f"model file {path}: array shapes are inconsistent")
    return det

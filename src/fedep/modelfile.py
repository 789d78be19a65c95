"""The model file format (interim: replaced by the hardened format on merge)."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import numpy as np

FORMAT = "fedep-model"
FORMAT_VERSION = 1

__all__ = ["ModelFileError", "write_model_file", "read_model_file", "FORMAT", "FORMAT_VERSION"]


class ModelFileError(ValueError):
    """A model file is missing, corrupt, tampered with or of an unknown version."""


def _digest(a: np.ndarray) -> str:
    h = hashlib.sha256()
    h.update(str(a.dtype.str).encode())
    h.update(str(a.shape).encode())
    h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def write_model_file(path, meta: dict, arrays: dict, *, sign_key=None) -> None:
    meta = {"format": FORMAT, "format_version": FORMAT_VERSION, **meta}
    meta["digests"] = {k: _digest(v) for k, v in arrays.items()}
    with open(Path(path), "wb") as fh:
        np.savez_compressed(
            fh, __meta__=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), **arrays
        )


def read_model_file(path, *, verify_key=None, require_signature=False):
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
        raise ModelFileError(f"model file {path} is not a fedep model")
    if meta.get("format_version") != FORMAT_VERSION:
        raise ModelFileError(
            f"model file {path} has format version {meta.get('format_version')!r}; "
            f"this fedep reads version {FORMAT_VERSION}"
        )
    digests = meta.get("digests", {})
    for name, a in files.items():
        if digests.get(name) != _digest(a):
            raise ModelFileError(
                f"model file {path}: checksum mismatch for {name!r} (corrupt or altered)"
            )
    return meta, files

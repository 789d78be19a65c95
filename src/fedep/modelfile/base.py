"""The model file format's constants and caps, its error, and the helpers that word
the one-line error messages."""

from __future__ import annotations

import os
import re

from fedep._errors import one_line

FORMAT = "fedep-model"
FORMAT_VERSION = 2

GiB = 1 << 30
MiB = 1 << 20
DEFAULT_MAX_BYTES = 8 * GiB
DEFAULT_MAX_ARRAY_BYTES = 4 * GiB
DEFAULT_MAX_META_BYTES = 16 * MiB
DEFAULT_MAX_RATIO = 200
RATIO_MIN_BYTES = 1 * MiB
MAX_MEMBERS = 1024
MAX_CENTRAL_DIRECTORY = 1 * MiB
MAX_JSON_DEPTH = 64
MAX_NPY_HEADER = 10_000
MAX_SIGNATURE_BYTES = 64 * 1024
MIN_HMAC_SECRET = 16

META_MEMBER = "__meta__.json"
SIGNATURE_MEMBER = "__signature__.json"
_ARRAY_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")
_MEMBER_NAME = re.compile(r"(__meta__\.json|__signature__\.json|[A-Za-z_][A-Za-z0-9_]{0,99}\.npy)")
_DTYPE_STR = re.compile(r"[<>|](b1|[iu][1248]|f[248]|c(8|16)|U[1-9][0-9]{0,8})")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_ENVELOPE_KEYS = {"format", "format_version", "meta", "arrays", "meta_sha256", "sha256"}
_SIG_TAG = b"fedep-model/2 signature\x00"
_CHUNK = 8 * MiB
_DATE = (1980, 1, 1, 0, 0, 0)


class ModelFileError(ValueError):
    """A model file is missing, not a fedep model, corrupt, altered, too large, or unsigned.

    The message is one line: ``model file PATH: <what is wrong>``.
    """


class _Refuse(Exception):
    """Internal: a precise refusal message, turned into ModelFileError."""


# --------------------------------------------------------------------------- helpers


def _show_path(path: object) -> str:
    s = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else str(path)
    return s if s.isprintable() else ascii(s)


def _fail(path: object, what: str) -> ModelFileError:
    return ModelFileError(f"model file {_show_path(path)}: {one_line(what, 400)}")


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError  # pragma: no cover


def _name(s: str) -> str:
    return repr(one_line(s, 60))

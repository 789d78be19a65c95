"""The metadata envelope: canonical JSON, the integrity digests, bounded JSON parsing
(nesting depth checked before parsing) and the checks of ``meta`` and the envelope."""

from __future__ import annotations

import hashlib
import json
import math
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from fedep.modelfile.base import (
    _ARRAY_NAME,
    _DTYPE_STR,
    _ENVELOPE_KEYS,
    _HEX64,
    FORMAT,
    FORMAT_VERSION,
    MAX_JSON_DEPTH,
    MiB,
    _name,
    _Refuse,
    _size,
)


def _lp(data: bytes) -> bytes:
    """Length-prefixed field (8-byte little-endian length)."""
    return struct.pack("<Q", len(data)) + data


def _canonical(obj: Any) -> bytes:
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=True
    ).encode("ascii")


def _meta_digest(meta: Mapping, manifest: Mapping) -> str:
    head = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "meta": meta,
        "arrays": {k: {"dtype": v["dtype"], "shape": v["shape"]} for k, v in manifest.items()},
    }
    return hashlib.sha256(b"fedep-meta\x00" + _lp(_canonical(head))).hexdigest()


def _array_hasher(name: str, dtype: np.dtype, shape: tuple[int, ...]) -> Any:
    h = hashlib.sha256(b"fedep-array\x00")
    h.update(_lp(name.encode()))
    h.update(_lp(dtype.str.encode()))
    h.update(_lp(json.dumps(list(shape)).encode()))
    return h


def _total_digest(meta_sha: str, array_shas: Mapping[str, str]) -> str:
    h = hashlib.sha256(f"{FORMAT}/{FORMAT_VERSION}\x00".encode())
    h.update(bytes.fromhex(meta_sha))
    for k in sorted(array_shas):
        h.update(_lp(k.encode()))
        h.update(bytes.fromhex(array_shas[k]))
    return h.hexdigest()


def _json_depth(raw: bytes, chunk: int = MiB) -> int:
    """Maximum bracket nesting of JSON text, ignoring brackets inside strings.

    Vectorised and chunked, so linear in time and bounded in memory on any input. A
    quote is unescaped when preceded by an even run of backslashes; brackets count when
    an even number of unescaped quotes precede them. This agrees with a JSON parser up to
    the first syntax error, where the parser stops, so it never under-counts its depth.
    """
    depth = deepest = 0
    quotes = 0  # parity of unescaped quotes so far
    bs_run = 0  # backslashes ending the previous chunk
    for start in range(0, len(raw), chunk):
        b = np.frombuffer(raw, dtype=np.uint8, count=min(chunk, len(raw) - start), offset=start)
        idx = np.arange(b.size, dtype=np.int64)
        is_bs = b == ord("\\")
        last = np.maximum.accumulate(np.where(is_bs, -1 - bs_run, idx))
        prev_last = np.concatenate(([-1 - bs_run], last[:-1]))
        unescaped = (b == ord('"')) & ((idx - 1 - prev_last) % 2 == 0)
        q = np.cumsum(unescaped, dtype=np.int64) + quotes
        outside = q % 2 == 0
        step = ((b == ord("[")) | (b == ord("{"))).astype(np.int64)
        step -= (b == ord("]")) | (b == ord("}"))
        step *= outside
        path = np.cumsum(step) + depth
        deepest = max(deepest, int(path.max()))
        depth, quotes = int(path[-1]), int(q[-1]) % 2
        bs_run = int(b.size - 1 - last[-1]) if is_bs[-1] else 0
    return deepest


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name} in JSON")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    d = dict(pairs)
    if len(d) != len(pairs):
        raise ValueError("duplicate key in a JSON object")
    return d


def _parse_json(raw: bytes, what: str) -> Any:
    depth = _json_depth(raw)
    if depth > MAX_JSON_DEPTH:
        raise ValueError(f"{what} is nested {depth} deep > cap {MAX_JSON_DEPTH}")
    text = raw.decode("utf-8")
    return json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_no_duplicates)


def _check_meta(obj: Any, where: str = "meta") -> None:
    if obj is None or isinstance(obj, (bool, int, str)):
        return
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise ValueError(f"{where} is {obj!r}; model metadata must be finite")
        return
    if isinstance(obj, list):
        for i, v in enumerate(obj):
            _check_meta(v, f"{where}[{i}]")
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not isinstance(k, str):
                raise ValueError(f"{where} has a non-string key {k!r}")
            _check_meta(v, f"{where}[{k!r}]")
        return
    raise ValueError(
        f"{where} is a {type(obj).__name__}; model metadata holds only None, bool, int, "
        "finite float, str, list and dict (convert NumPy scalars with .item())"
    )


def _check_envelope(env: Any, max_array_bytes: int) -> None:
    if not isinstance(env, dict):
        raise _Refuse(
            f"is not a fedep model file (metadata is a JSON {type(env).__name__}, not an object)"
        )
    if env.get("format") != FORMAT:
        raise _Refuse(f"is not a fedep model file (format {_name(str(env.get('format')))})")
    v = env.get("format_version")
    if type(v) is not int:
        raise _Refuse("has no valid format version")
    if v != FORMAT_VERSION:
        newer = "a newer" if v > FORMAT_VERSION else "an older"
        raise _Refuse(
            f"has format version {v} (written by {newer} fedep); this fedep reads "
            f"version {FORMAT_VERSION}"
        )
    keys = set(env)
    if keys != _ENVELOPE_KEYS:
        missing, extra = sorted(_ENVELOPE_KEYS - keys), sorted(keys - _ENVELOPE_KEYS)
        raise _Refuse(
            "metadata has the wrong keys"
            + (f" (missing {', '.join(missing)})" if missing else "")
            + (f" (unexpected {', '.join(_name(k) for k in extra[:5])})" if extra else "")
        )
    if not isinstance(env["meta"], dict):
        raise _Refuse("metadata 'meta' is not a JSON object")
    for k in ("meta_sha256", "sha256"):
        if not isinstance(env[k], str) or not _HEX64.fullmatch(env[k]):
            raise _Refuse(f"metadata {k!r} is not a SHA-256 hex digest")
    arrays = env["arrays"]
    if not isinstance(arrays, dict):
        raise _Refuse("metadata 'arrays' is not a JSON object")
    for name, spec in arrays.items():
        if not _ARRAY_NAME.fullmatch(name) or name.startswith("__"):
            raise _Refuse(f"metadata names an invalid array {_name(name)}")
        if not isinstance(spec, dict) or set(spec) != {"dtype", "shape", "sha256"}:
            raise _Refuse(f"metadata for array {_name(name)} is malformed")
        dt, shape, sha = spec["dtype"], spec["shape"], spec["sha256"]
        if not isinstance(dt, str) or not _DTYPE_STR.fullmatch(dt):
            raise _Refuse(f"array {_name(name)} has a refused dtype {_name(str(dt))}")
        if (
            not isinstance(shape, list)
            or len(shape) > 32
            or not all(type(d) is int and d >= 0 for d in shape)
        ):
            raise _Refuse(f"array {_name(name)} has an invalid shape")
        if not isinstance(sha, str) or not _HEX64.fullmatch(sha):
            raise _Refuse(f"array {_name(name)} has an invalid digest")
        nbytes = math.prod(shape) * np.dtype(dt).itemsize
        if nbytes > max_array_bytes:
            raise _Refuse(
                f"array {_name(name)} would take {_size(nbytes)} > cap {_size(max_array_bytes)}"
            )

"""The fedep model file format (version 2): a guarded zip of JSON and ``.npy`` members.

This module knows the container only; it imports no estimator. :func:`write_model_file`
stores a JSON-able ``meta`` dict and named NumPy arrays; :func:`read_model_file` returns
them, or raises :class:`ModelFileError` with one line ``model file PATH: <problem>``.
Reading never unpickles and keeps time and memory bounded by the caps below, whatever
the bytes of the file.

File layout
-----------
A zip archive (conventionally ``*.fedep``) with exactly these members, in this order:

``__meta__.json`` (deflate)
    UTF-8 JSON object, the *envelope*::

        {"format": "fedep-model", "format_version": 2,
         "meta": {...caller's metadata...},
         "arrays": {"NAME": {"dtype": "<f8", "shape": [3, 4], "sha256": HEX}, ...},
         "meta_sha256": HEX, "sha256": HEX}

``NAME.npy`` (deflate, or stored when deflate would exceed the ratio cap), one per array
    A ``.npy`` file (format 1.0 or 2.0, C order, ``allow_pickle=False``). Allowed dtypes:
    bool, integers, float16/32/64, complex64/128 and fixed-width unicode ``U``. Names
    match ``[A-Za-z_][A-Za-z0-9_]{0,99}`` and do not start with ``__``.

``__signature__.json`` (stored, optional)
    ``{"scheme": ..., "signed_sha256": HEX, "signature": ..., "key_fingerprint": ...}``;
    not covered by the digest (it signs it).

Integrity digest
----------------
All SHA-256, so any change of any stored item is detected:

* ``meta_sha256`` covers the canonical JSON (``sort_keys``, no spaces, no NaN, ASCII) of
  ``{"format", "format_version", "meta", "arrays": {NAME: {"dtype", "shape"}}}``;
* each array's ``sha256`` covers its name, ``dtype.str``, shape and raw C-order bytes
  (every field length-prefixed);
* ``sha256`` covers ``meta_sha256`` and every (name, array digest) in name order: it is
  the digest of everything, and the one a signature signs.

Without a signature the digest detects corruption and naive edits, not a forger who
recomputes it: use a signature (below) for authenticity.

Caps (keyword arguments of :func:`read_model_file`)
---------------------------------------------------
Sized for models up to about 10,000 gateways x 1,000 features x rank 50 (the largest
array, per-gateway components in float64, is 4.0e9 bytes):

* ``max_bytes`` = 8 GiB: the file's size and the sum of its members' uncompressed sizes;
* ``max_array_bytes`` = 4 GiB: one ``.npy`` member;
* ``max_meta_bytes`` = 16 MiB: the ``__meta__.json`` member;
* ``max_ratio`` = 200: uncompressed/compressed size of any member over 1 MiB (deflate
  reaches 1,032 on zeros; model arrays compress far less, and the writer stores a member
  uncompressed when it would exceed the ratio), so a file of F bytes inflates to at
  most about 200 F;
* fixed: at most 1,024 members, a central directory of at most 1 MiB, JSON nesting
  depth 64, ``.npy`` headers of at most 10,000 bytes, a signature member of 64 KiB.

All are checked on the zip's central directory and the ``.npy`` headers *before* any
decompression or allocation; each member is then read with a bounded read and its
CRC-32 checked.

Signing schemes (optional)
--------------------------
``sign_key`` / ``verify_key`` select the scheme:

* ``"ed25519"``: a path to an Ed25519 private key PEM (PKCS#8, unencrypted) to sign, the
  matching public key PEM (or the private one) to verify; see
  :func:`generate_signing_key`. The signature is over ``sha256`` and the key's
  fingerprint (SHA-256 of the raw public key) is stored. Needs ``cryptography``.
* ``"hmac-sha256"``: a shared secret of at least 16 bytes, given as ``bytes`` or as a
  string ``"hmac:SECRET"``; HMAC-SHA256 over ``sha256``.

A signed file loads without a key (its integrity is still checked); with a key it must
verify; ``require_signature=True`` refuses unsigned files.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import io
import json
import math
import os
import re
import struct
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from fedep._atomic import atomic_write

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "ModelFileError",
    "read_model_file",
    "write_model_file",
    "generate_signing_key",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_ARRAY_BYTES",
    "DEFAULT_MAX_META_BYTES",
    "DEFAULT_MAX_RATIO",
]

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


# --------------------------------------------------------------------------- helpers


def _one_line(text: object, limit: int = 200) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _show_path(path: object) -> str:
    s = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else str(path)
    return s if s.isprintable() else ascii(s)


def _fail(path: object, what: str) -> ModelFileError:
    return ModelFileError(f"model file {_show_path(path)}: {_one_line(what, 400)}")


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError  # pragma: no cover


def _name(s: str) -> str:
    return repr(_one_line(s, 60))


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


# --------------------------------------------------------------------------- keys


def _crypto():
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError as exc:  # pragma: no cover - cryptography is a dependency
        raise ValueError("Ed25519 signatures need the 'cryptography' package") from exc
    return serialization, ed25519


def _read_key_file(key: str | os.PathLike[str]) -> bytes:
    p = Path(key)
    try:
        if p.stat().st_size > MAX_SIGNATURE_BYTES:
            raise ValueError(f"key file {p} is too large to be a PEM key")
        return p.read_bytes()
    except OSError as exc:
        raise ValueError(f"key file {p}: {exc.strerror or exc}") from None


def _hmac_secret(key: bytes | bytearray | str) -> bytes:
    secret = bytes(key) if isinstance(key, (bytes, bytearray)) else key[5:].encode()
    if len(secret) < MIN_HMAC_SECRET:
        raise ValueError(f"an HMAC secret needs at least {MIN_HMAC_SECRET} bytes")
    return secret


def _is_hmac(key: object) -> bool:
    return isinstance(key, (bytes, bytearray)) or (isinstance(key, str) and key.startswith("hmac:"))


def _fingerprint(public_key: Any) -> str:
    serialization, _ = _crypto()
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def _private_key(key: Any) -> Any:
    serialization, ed25519 = _crypto()
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key
    if not isinstance(key, (str, os.PathLike)):
        raise TypeError("sign_key must be an Ed25519 private key PEM path, bytes or 'hmac:SECRET'")
    try:
        k = serialization.load_pem_private_key(_read_key_file(key), password=None)
    except (ValueError, TypeError) as exc:
        raise ValueError(
            f"key file {_show_path(key)} is not an unencrypted private key PEM ({exc})"
        ) from None
    if not isinstance(k, ed25519.Ed25519PrivateKey):
        raise ValueError(f"key file {_show_path(key)} is not an Ed25519 key")
    return k


def _public_key(key: Any) -> Any:
    serialization, ed25519 = _crypto()
    if isinstance(key, ed25519.Ed25519PublicKey):
        return key
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key.public_key()
    if not isinstance(key, (str, os.PathLike)):
        raise TypeError("verify_key must be an Ed25519 public key PEM path, bytes or 'hmac:SECRET'")
    pem = _read_key_file(key)
    try:
        k = serialization.load_pem_public_key(pem)
    except (ValueError, TypeError):
        try:
            k = serialization.load_pem_private_key(pem, password=None)
        except (ValueError, TypeError) as exc:
            raise ValueError(
                f"key file {_show_path(key)} is not an Ed25519 public key PEM ({exc})"
            ) from None
        k = k.public_key() if isinstance(k, ed25519.Ed25519PrivateKey) else k
    if not isinstance(k, ed25519.Ed25519PublicKey):
        raise ValueError(f"key file {_show_path(key)} is not an Ed25519 key")
    return k


def _sign(digest: str, sign_key: Any) -> dict:
    msg = _SIG_TAG + digest.encode()
    if _is_hmac(sign_key):
        mac = hmac.new(_hmac_secret(sign_key), msg, hashlib.sha256).hexdigest()
        return {"scheme": "hmac-sha256", "signed_sha256": digest, "signature": mac}
    k = _private_key(sign_key)
    return {
        "scheme": "ed25519",
        "signed_sha256": digest,
        "signature": base64.b64encode(k.sign(msg)).decode("ascii"),
        "key_fingerprint": _fingerprint(k.public_key()),
    }


def generate_signing_key(
    path_private: str | os.PathLike[str],
    path_public: str | os.PathLike[str],
    *,
    overwrite: bool = False,
) -> None:
    """Create an Ed25519 key pair as PEM files for signing model files.

    Parameters
    ----------
    path_private : str or os.PathLike
        The private key (PKCS#8 PEM, unencrypted, permissions ``0o600``): keep it secret.
    path_public : str or os.PathLike
        The public key (SubjectPublicKeyInfo PEM), to give to whoever loads the models.
    overwrite : bool, default False
        Replace existing files (otherwise :class:`FileExistsError`).
    """
    serialization, ed25519 = _crypto()
    for p in (path_private, path_public):
        if not overwrite and os.path.lexists(p):
            raise FileExistsError(f"key file {_show_path(p)} already exists")
    key = ed25519.Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    with atomic_write(path_private, perm=0o600) as fh:
        fh.write(private_pem)
    with atomic_write(path_public) as fh:
        fh.write(public_pem)


# --------------------------------------------------------------------------- writing


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


def _check_array(name: Any, value: Any) -> np.ndarray:
    if not isinstance(name, str) or not _ARRAY_NAME.fullmatch(name) or name.startswith("__"):
        raise ValueError(
            f"array name {name!r} is not allowed (use [A-Za-z_][A-Za-z0-9_]*, at most 100 "
            "characters, not starting with '__')"
        )
    a = np.asarray(value)
    dt = a.dtype
    if dt.names is not None or dt.subdtype is not None or not _DTYPE_STR.fullmatch(dt.str):
        raise ValueError(
            f"array {name!r} has dtype {dt}; model files hold bool, integer, float16/32/64, "
            "complex64/128 and fixed-width unicode arrays only (no object dtype)"
        )
    if a.ndim > 32:
        raise ValueError(f"array {name!r} has {a.ndim} dimensions > 32")
    return a if a.flags.c_contiguous else a.copy(order="C")


def _zinfo(name: str, compress: int, level: int = 6) -> zipfile.ZipInfo:
    zi = zipfile.ZipInfo(name, date_time=_DATE)
    zi.compress_type = compress
    zi.external_attr = 0o644 << 16
    for attr in ("compress_level", "_compresslevel"):
        try:
            setattr(zi, attr, level)
            break
        except AttributeError:
            continue
    return zi


def _over_ratio(zi: zipfile.ZipInfo) -> bool:
    return zi.file_size > RATIO_MIN_BYTES and zi.file_size > DEFAULT_MAX_RATIO * max(
        zi.compress_size, 1
    )


def _write_zip(fh: Any, meta_raw: bytes, arrays: dict, stored: set[str], sig: bytes | None):
    over = []
    with zipfile.ZipFile(fh, "w", allowZip64=True) as zf:
        kind = zipfile.ZIP_STORED if META_MEMBER in stored else zipfile.ZIP_DEFLATED
        zi = _zinfo(META_MEMBER, kind)
        zf.writestr(zi, meta_raw)
        if _over_ratio(zi):
            over.append(META_MEMBER)
        for name in sorted(arrays):
            a = arrays[name]
            member = name + ".npy"
            kind = zipfile.ZIP_STORED if member in stored else zipfile.ZIP_DEFLATED
            zi = _zinfo(member, kind, level=1)
            with zf.open(zi, "w", force_zip64=a.nbytes > GiB) as out:
                np.lib.format.write_array(out, a, allow_pickle=False)
            if _over_ratio(zi):
                over.append(member)
        if sig is not None:
            zf.writestr(_zinfo(SIGNATURE_MEMBER, zipfile.ZIP_STORED), sig)
    return over


def write_model_file(
    path: str | os.PathLike[str],
    meta: dict,
    arrays: Mapping[str, np.ndarray],
    *,
    sign_key: Any = None,
) -> None:
    """Write ``meta`` and ``arrays`` to a model file, atomically.

    Parameters
    ----------
    path : str or os.PathLike
        The model file; replaced atomically (the old file survives any failure).
    meta : dict
        JSON-able metadata: str keys; values None, bool, int, finite float, str, lists
        and dicts of these. Returned unchanged by :func:`read_model_file`.
    arrays : mapping of str to numpy.ndarray
        Bool, integer, float16/32/64, complex64/128 or fixed-width unicode ``U``
        arrays. Names match ``[A-Za-z_][A-Za-z0-9_]{0,99}``, not starting with ``__``.
    sign_key : str, os.PathLike, bytes or Ed25519PrivateKey, optional
        Sign the file: a path to an Ed25519 private key PEM, or an HMAC secret given as
        ``bytes`` or ``"hmac:SECRET"`` (at least 16 bytes).

    Raises
    ------
    ValueError
        If ``meta``, an array or the key is not acceptable (nothing is written).
    OSError
        If the file cannot be written (the previous file, if any, is untouched).
    """
    if not isinstance(meta, dict):
        raise ValueError(f"meta must be a dict, not {type(meta).__name__}")
    _check_meta(meta)
    if not isinstance(arrays, Mapping):
        raise ValueError(f"arrays must be a mapping, not {type(arrays).__name__}")
    if len(arrays) > MAX_MEMBERS - 2:
        raise ValueError(f"at most {MAX_MEMBERS - 2} arrays fit in a model file")
    arrs = {name: _check_array(name, a) for name, a in arrays.items()}
    manifest: dict[str, dict] = {}
    for name, a in arrs.items():
        h = _array_hasher(name, a.dtype, a.shape)
        h.update(a.reshape(-1).view(np.uint8))
        manifest[name] = {"dtype": a.dtype.str, "shape": list(a.shape), "sha256": h.hexdigest()}
    meta_sha = _meta_digest(meta, manifest)
    total = _total_digest(meta_sha, {k: v["sha256"] for k, v in manifest.items()})
    envelope = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "meta": meta,
        "arrays": manifest,
        "meta_sha256": meta_sha,
        "sha256": total,
    }
    meta_raw = _canonical(envelope)
    if _json_depth(meta_raw) > MAX_JSON_DEPTH:
        raise ValueError(f"meta is nested deeper than {MAX_JSON_DEPTH - 1} levels")
    if len(meta_raw) > DEFAULT_MAX_META_BYTES:
        raise ValueError(
            f"meta takes {_size(len(meta_raw))} > {_size(DEFAULT_MAX_META_BYTES)} "
            "(the default read cap)"
        )
    sig = None if sign_key is None else _canonical(_sign(total, sign_key))
    with atomic_write(path) as fh:
        stored: set[str] = set()
        for _ in range(2):
            over = _write_zip(fh, meta_raw, arrs, stored, sig)
            if not over:
                break
            stored.update(over)  # highly compressible: store it, so readers accept it
            fh.seek(0)
            fh.truncate()


# --------------------------------------------------------------------------- reading


def _sniff(head: bytes) -> str:
    """What a non-zip file looks like, for the error message."""
    if head.startswith(b"\x80") and len(head) > 1 and 2 <= head[1] <= 5:
        return "it looks like a Python pickle; fedep never loads pickles"
    if head.startswith(b"\x1f\x8b"):
        return "it looks like a gzip file"
    if head.startswith(b"\x93NUMPY"):
        return "it looks like a bare NumPy .npy array"
    for magic, what in (
        (b"BZh", "a bzip2 file"),
        (b"\xfd7zXZ\x00", "an xz file"),
        (b"\x28\xb5\x2f\xfd", "a zstd file"),
        (b"PAR1", "a Parquet file"),
        (b"\x89HDF", "an HDF5 file"),
        (b"7z\xbc\xaf", "a 7-zip archive"),
        (b"%PDF", "a PDF document"),
    ):
        if head.startswith(magic):
            return f"it looks like {what}"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        text = head[:-4].decode("utf-8", errors="replace") if len(head) > 4 else ""
        if "\ufffd" in text or not text:
            return "unrecognised binary content"
    if "\x00" in text:
        return "unrecognised binary content"
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        return "it looks like a JSON text file"
    first = stripped.split("\n", 1)[0]
    if "," in first or "\t" in first or ";" in first:
        return "it looks like a CSV text file"
    return "it looks like a text file"


def _central_directory_size(fh: Any, size: int) -> int:
    """Size of the zip central directory per the end record (bounded tail read)."""
    tail_len = min(size, 22 + 65535)
    fh.seek(size - tail_len)
    tail = fh.read(tail_len)
    pos = tail.rfind(b"PK\x05\x06")
    if pos < 0 or len(tail) - pos < 22:
        raise ValueError("no zip end-of-archive record")
    (_, _, _, _, entries, cd_size, _, _) = struct.unpack("<4s4H2LH", tail[pos : pos + 22])
    if pos >= 20 and tail[pos - 20 : pos - 16] == b"PK\x06\x07" and pos >= 76:
        rec = tail[pos - 76 : pos - 20]
        if rec[:4] == b"PK\x06\x06":
            _, _, _, _, _, _, _, entries64, cd64, _ = struct.unpack("<4sQ2H2L4Q", rec)
            entries, cd_size = max(entries, entries64), max(cd_size, cd64)
    if entries > MAX_MEMBERS:
        raise _Refuse(f"has {entries} zip members > cap {MAX_MEMBERS}")
    return cd_size


class _Refuse(Exception):
    """Internal: a precise refusal message, turned into ModelFileError."""


def _read_member(zf: zipfile.ZipFile, zi: zipfile.ZipInfo) -> bytes:
    with zf.open(zi) as f:
        data = f.read(zi.file_size + 1)
    if len(data) != zi.file_size:
        raise _Refuse(f"is truncated or corrupt (member {_name(zi.filename)} has the wrong size)")
    return data


def _npy_header(f: Any, member: str) -> tuple[int, tuple[int, ...], bool, np.dtype]:
    """Parse a .npy header from a stream; return (header length, shape, fortran, dtype)."""
    magic = f.read(8)
    if len(magic) != 8:
        raise _Refuse(f"member {_name(member)} is truncated")
    version = np.lib.format.read_magic(io.BytesIO(magic))
    if version == (1, 0):
        fmt, reader = "<H", np.lib.format.read_array_header_1_0
    elif version == (2, 0):
        fmt, reader = "<I", np.lib.format.read_array_header_2_0
    else:
        raise _Refuse(f"member {_name(member)} has unsupported .npy version {version}")
    raw_len = f.read(struct.calcsize(fmt))
    if len(raw_len) != struct.calcsize(fmt):
        raise _Refuse(f"member {_name(member)} is truncated")
    (hlen,) = struct.unpack(fmt, raw_len)
    if hlen > MAX_NPY_HEADER:
        raise _Refuse(f"member {_name(member)} has a .npy header of {hlen} bytes > cap")
    header = f.read(hlen)
    if len(header) != hlen:
        raise _Refuse(f"member {_name(member)} is truncated")
    shape, fortran, dtype = reader(io.BytesIO(raw_len + header), max_header_size=MAX_NPY_HEADER)
    return 8 + len(raw_len) + hlen, tuple(shape), bool(fortran), dtype


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


def _read_array(zf: zipfile.ZipFile, zi: zipfile.ZipInfo, name: str, spec: dict, cap: int):
    with zf.open(zi) as f:
        hlen, shape, fortran, dtype = _npy_header(f, zi.filename)
        if dtype.hasobject or dtype.names is not None or not _DTYPE_STR.fullmatch(dtype.str):
            raise _Refuse(f"array {_name(name)} has a refused dtype {_name(str(dtype))}")
        if fortran:
            raise _Refuse(f"array {_name(name)} is in Fortran order (never written by fedep)")
        if any(d < 0 for d in shape) or len(shape) > 32:
            raise _Refuse(f"array {_name(name)} has an invalid shape")
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes > cap:
            raise _Refuse(f"array {_name(name)} would take {_size(nbytes)} > cap {_size(cap)}")
        if hlen + nbytes != zi.file_size:
            raise _Refuse(
                f"array {_name(name)} header claims {_size(nbytes)} but the member holds "
                f"{_size(max(zi.file_size - hlen, 0))}"
            )
        if dtype.str != spec["dtype"] or list(shape) != spec["shape"]:
            raise _Refuse(f"array {_name(name)} does not match its metadata (altered)")
        buf = np.empty(nbytes, dtype=np.uint8)
        mv = memoryview(buf)
        h = _array_hasher(name, dtype, shape)
        pos = 0
        while pos < nbytes:
            chunk = f.read(min(_CHUNK, nbytes - pos))
            if not chunk:
                raise _Refuse(f"is truncated or corrupt (member {_name(zi.filename)} ends early)")
            mv[pos : pos + len(chunk)] = chunk
            h.update(chunk)
            pos += len(chunk)
        if f.read(1):
            raise _Refuse(f"is truncated or corrupt (member {_name(zi.filename)} is too long)")
    if h.hexdigest() != spec["sha256"]:
        raise _Refuse(f"array {_name(name)} was altered (integrity digest mismatch)")
    return buf.view(dtype).reshape(shape)


def _check_directory(
    infos: list[zipfile.ZipInfo],
    file_size: int,
    max_bytes: int,
    max_array_bytes: int,
    max_meta_bytes: int,
    max_ratio: float,
) -> dict[str, zipfile.ZipInfo]:
    if len(infos) > MAX_MEMBERS:
        raise _Refuse(f"has {len(infos)} zip members > cap {MAX_MEMBERS}")
    names = [zi.filename for zi in infos]
    if META_MEMBER not in names:
        if "__meta__.npy" in names:
            raise _Refuse(
                "is a fedep model file of format version 1 (an .npz archive); this reader "
                f"reads format version {FORMAT_VERSION}"
            )
        raise _Refuse(f"is a zip archive but not a fedep model file (no {META_MEMBER!r} member)")
    members: dict[str, zipfile.ZipInfo] = {}
    total = compressed = 0
    for zi in infos:
        n = zi.filename
        if not _MEMBER_NAME.fullmatch(n) or (n.endswith(".npy") and n.startswith("__")):
            raise _Refuse(f"has an unexpected zip member {_name(n)}")
        if n in members:
            raise _Refuse(f"has the zip member {_name(n)} twice")
        members[n] = zi
        if zi.flag_bits & 0x41:
            raise _Refuse(f"member {_name(n)} is encrypted")
        if zi.flag_bits & 0x20:
            raise _Refuse(f"member {_name(n)} uses unsupported zip features (patched data)")
        if zi.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise _Refuse(f"member {_name(n)} uses unsupported compression {zi.compress_type}")
        if zi.compress_type == zipfile.ZIP_STORED and zi.compress_size != zi.file_size:
            raise _Refuse(f"is truncated or corrupt (member {_name(n)} sizes disagree)")
        cap = (
            max_meta_bytes
            if n == META_MEMBER
            else MAX_SIGNATURE_BYTES
            if n == SIGNATURE_MEMBER
            else max_array_bytes
        )
        if zi.file_size > cap:
            raise _Refuse(
                f"member {_name(n)} would inflate to {_size(zi.file_size)} > cap {_size(cap)}"
            )
        if zi.file_size > RATIO_MIN_BYTES and zi.file_size > max_ratio * max(zi.compress_size, 1):
            raise _Refuse(
                f"member {_name(n)} would inflate {zi.file_size / max(zi.compress_size, 1):.0f}"
                f"-fold to {_size(zi.file_size)} > ratio cap {max_ratio:g} (a zip bomb?)"
            )
        if zi.header_offset < 0 or zi.header_offset + zi.compress_size > file_size:
            raise _Refuse(f"is truncated or corrupt (member {_name(n)} lies outside the file)")
        total += zi.file_size
        compressed += zi.compress_size
    if total > max_bytes:
        raise _Refuse(f"would inflate to {_size(total)} > cap {_size(max_bytes)}")
    if compressed > file_size:
        raise _Refuse("is truncated or corrupt (zip members overlap)")
    return members


def _check_signature(raw: bytes, digest: str, verify_key: Any, key_error: list[Exception]) -> None:
    try:
        sig = _parse_json(raw, "signature")
    except (ValueError, RecursionError) as exc:
        raise _Refuse(f"signature block is corrupt ({exc})") from None
    if (
        not isinstance(sig, dict)
        or sig.get("scheme") not in ("ed25519", "hmac-sha256")
        or not isinstance(sig.get("signature"), str)
        or not isinstance(sig.get("signed_sha256"), str)
        or set(sig)
        != {"scheme", "signed_sha256", "signature"}
        | ({"key_fingerprint"} if sig.get("scheme") == "ed25519" else set())
    ):
        raise _Refuse("signature block is malformed")
    if not hmac.compare_digest(sig["signed_sha256"], digest):
        raise _Refuse("signature block does not match the content (altered)")
    if verify_key is None:
        return
    msg = _SIG_TAG + digest.encode()
    bad = "signature does not verify (altered or signed with another key)"
    if _is_hmac(verify_key):
        if sig["scheme"] != "hmac-sha256":
            raise _Refuse(f"{bad}: it is an {sig['scheme']} signature, an HMAC secret was given")
        try:
            secret = _hmac_secret(verify_key)
        except ValueError as exc:
            key_error.append(exc)
            return
        expect = hmac.new(secret, msg, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expect, sig["signature"]):
            raise _Refuse(bad)
        return
    try:
        public = _public_key(verify_key)
    except (ValueError, TypeError) as exc:
        key_error.append(exc)
        return
    if sig["scheme"] != "ed25519":
        raise _Refuse(f"{bad}: it is an {sig['scheme']} signature, an Ed25519 key was given")
    if sig.get("key_fingerprint") != _fingerprint(public):
        raise _Refuse(f"{bad}: signed with key {_name(str(sig.get('key_fingerprint')))}")
    from cryptography.exceptions import InvalidSignature

    try:
        public.verify(base64.b64decode(sig["signature"], validate=True), msg)
    except (InvalidSignature, ValueError):
        raise _Refuse(bad) from None


def read_model_file(
    path: str | os.PathLike[str],
    *,
    verify_key: Any = None,
    require_signature: bool = False,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_array_bytes: int = DEFAULT_MAX_ARRAY_BYTES,
    max_meta_bytes: int = DEFAULT_MAX_META_BYTES,
    max_ratio: float = DEFAULT_MAX_RATIO,
) -> tuple[dict, dict[str, np.ndarray]]:
    """Read a model file written by :func:`write_model_file`.

    Parameters
    ----------
    path : str or os.PathLike
        The model file.
    verify_key : str, os.PathLike, bytes or Ed25519PublicKey, optional
        Check the signature: a path to the Ed25519 public key PEM, or the HMAC secret
        (``bytes`` or ``"hmac:SECRET"``). The file must then be signed with that key.
    require_signature : bool, default False
        Refuse unsigned files. Needs ``verify_key``.
    max_bytes, max_array_bytes, max_meta_bytes, max_ratio : int or float
        Caps on the file size and total inflated size, on one array member, on the
        metadata member, and on any member's compression ratio (see module docstring).

    Returns
    -------
    meta : dict
        The ``meta`` given to :func:`write_model_file`.
    arrays : dict of str to numpy.ndarray
        The arrays, with their dtypes and shapes.

    Raises
    ------
    ModelFileError
        One line ``model file PATH: <problem>`` for any problem with the file: missing,
        not a fedep model, truncated or corrupt, altered, over a cap, unsigned or not
        verifying.
    ValueError
        If ``verify_key`` cannot be used (an unreadable key file, a short secret), or
        ``require_signature`` is given without ``verify_key``.
    """
    if require_signature and verify_key is None:
        raise ValueError("require_signature=True needs a verify_key to check the signature")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise _fail(path, "does not exist") from None
    except OSError as exc:
        raise _fail(path, f"cannot be read ({exc.strerror or exc})") from None
    if os.path.isdir(path):
        raise _fail(path, "is a directory")
    size = st.st_size
    if size == 0:
        raise _fail(path, "is empty")
    if size > max_bytes:
        raise _fail(path, f"is {_size(size)} > cap {_size(max_bytes)}")
    key_error: list[Exception] = []
    try:
        with open(path, "rb") as fh:
            head = fh.read(512)
            if not head.startswith(b"PK\x03\x04"):
                if head.startswith(b"PK\x05\x06"):
                    raise _Refuse("is an empty zip archive, not a fedep model file")
                raise _Refuse(f"is not a fedep model file ({_sniff(head)})")
            try:
                cd_size = _central_directory_size(fh, size)
            except (ValueError, struct.error):
                raise _Refuse("is truncated or corrupt (no zip end-of-archive record)") from None
            if cd_size > MAX_CENTRAL_DIRECTORY:
                raise _Refuse(f"has a zip directory of {_size(cd_size)} > cap")
            fh.seek(0)
            with zipfile.ZipFile(fh) as zf:
                members = _check_directory(
                    zf.infolist(), size, max_bytes, max_array_bytes, max_meta_bytes, max_ratio
                )
                raw = _read_member(zf, members[META_MEMBER])
                try:
                    env = _parse_json(raw, "metadata")
                except (ValueError, RecursionError) as exc:
                    raise _Refuse(f"metadata is not valid JSON ({exc})") from None
                _check_envelope(env, max_array_bytes)
                manifest = env["arrays"]
                if _meta_digest(env["meta"], manifest) != env["meta_sha256"]:
                    raise _Refuse("metadata was altered (integrity digest mismatch)")
                npy = {n[:-4] for n in members if n.endswith(".npy")}
                if npy != set(manifest):
                    extra, missing = sorted(npy - set(manifest)), sorted(set(manifest) - npy)
                    if extra:
                        raise _Refuse(f"has an unexpected zip member {_name(extra[0] + '.npy')}")
                    raise _Refuse(f"lacks the array member {_name(missing[0] + '.npy')}")
                arrays = {
                    name: _read_array(
                        zf, members[name + ".npy"], name, manifest[name], max_array_bytes
                    )
                    for name in sorted(manifest)
                }
                shas = {k: v["sha256"] for k, v in manifest.items()}
                digest = _total_digest(env["meta_sha256"], shas)
                if digest != env["sha256"]:
                    raise _Refuse("integrity digest was altered (mismatch)")
                if SIGNATURE_MEMBER in members:
                    sig_raw = _read_member(zf, members[SIGNATURE_MEMBER])
                    _check_signature(sig_raw, digest, verify_key, key_error)
                elif verify_key is not None:
                    raise _Refuse(
                        "is not signed but a verify key was given (refusing an unsigned model)"
                    )
    except _Refuse as exc:
        raise _fail(path, str(exc)) from None
    except zipfile.BadZipFile as exc:
        msg = str(exc)
        if "CRC" in msg:
            raise _fail(path, f"is truncated or corrupt (bad CRC-32: {msg})") from None
        raise _fail(path, f"is truncated or corrupt ({msg})") from None
    except zlib.error as exc:
        raise _fail(path, f"is truncated or corrupt (deflate data: {exc})") from None
    except EOFError:
        raise _fail(path, "is truncated or corrupt (unexpected end of data)") from None
    except MemoryError:
        raise _fail(path, "is too large to load in the available memory") from None
    except RecursionError:
        raise _fail(path, "is corrupt (nested too deeply)") from None
    except (
        OSError,
        ValueError,
        struct.error,
        OverflowError,
        KeyError,
        IndexError,
        TypeError,
        UnicodeError,
        NotImplementedError,
        RuntimeError,
        SyntaxError,
    ) as exc:
        raise _fail(path, f"is truncated or corrupt ({type(exc).__name__}: {exc})") from None
    if key_error:
        raise key_error[0]
    return env["meta"], arrays

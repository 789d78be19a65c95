"""The entry points: :func:`write_model_file` and :func:`read_model_file`."""

from __future__ import annotations

import json
import os
import struct
import zipfile
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from fedep._atomic import atomic_write
from fedep.modelfile.base import (
    DEFAULT_MAX_ARRAY_BYTES,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_META_BYTES,
    DEFAULT_MAX_RATIO,
    FORMAT,
    FORMAT_VERSION,
    MAX_CENTRAL_DIRECTORY,
    MAX_JSON_DEPTH,
    MAX_MEMBERS,
    MAX_SIGNATURE_BYTES,
    META_MEMBER,
    SIGNATURE_MEMBER,
    _fail,
    _name,
    _Refuse,
    _size,
)
from fedep.modelfile.container import (
    _central_directory_size,
    _check_array,
    _check_directory,
    _read_array,
    _read_member,
    _sniff,
    _write_zip,
)
from fedep.modelfile.meta import (
    _array_hasher,
    _canonical,
    _check_envelope,
    _check_meta,
    _json_depth,
    _meta_digest,
    _parse_json,
    _total_digest,
)
from fedep.modelfile.signing import _check_signature, _sign


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


def signature_scheme(path: str | os.PathLike[str]) -> str | None:
    """The scheme of a model file's signature member (``"ed25519"``, ``"hmac-sha256"``),
    or None when it has none; for a file :func:`read_model_file` has accepted (a
    signature it has not verified with a key says who *claims* to have signed it)."""
    try:
        with zipfile.ZipFile(path) as zf:
            if SIGNATURE_MEMBER not in zf.namelist():
                return None
            info = zf.getinfo(SIGNATURE_MEMBER)
            if info.file_size > MAX_SIGNATURE_BYTES:
                return "unknown"
            sig = json.loads(zf.read(info))
    except (OSError, ValueError, zipfile.BadZipFile):
        return "unknown"
    return str(sig.get("scheme", "unknown")) if isinstance(sig, dict) else "unknown"


def read_model_file(
    path: str | os.PathLike[str],
    *,
    verify_key: Any = None,
    require_signature: bool = False,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_array_bytes: int = DEFAULT_MAX_ARRAY_BYTES,
    max_meta_bytes: int = DEFAULT_MAX_META_BYTES,
    max_ratio: float = DEFAULT_MAX_RATIO,
    check_manifest: Any = None,
    digest_out: list | None = None,
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
    check_manifest : callable, optional
        ``check_manifest(meta, manifest)`` once the metadata has passed its digest and
        before any array is decompressed: ``manifest`` maps each array's name to its
        ``{"dtype", "shape"}``. A ``ValueError`` it raises refuses the file (one line):
        what the metadata says bounds the arrays it may hold, so that an array larger
        than the model's own dimensions allow costs no time or memory.
    digest_out : list, optional
        Receives the file's integrity digest (the SHA-256 hex that a signature covers),
        appended once the file is verified (a model's lineage records its parent's).

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
                if check_manifest is not None:
                    try:
                        check_manifest(env["meta"], manifest)
                    except (ValueError, TypeError, KeyError) as exc:
                        what = " ".join(str(exc).split()) or type(exc).__name__
                        raise _Refuse(f"inconsistent content ({what})") from None
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
    if digest_out is not None:
        digest_out.append(env["sha256"])
    return env["meta"], arrays

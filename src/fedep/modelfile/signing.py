"""Signatures: Ed25519 (PEM key files, ``cryptography``) and HMAC-SHA256 (a shared
secret); signing, verifying and generating a key pair."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from pathlib import Path
from typing import Any

from fedep._atomic import atomic_write
from fedep.modelfile.base import (
    _SIG_TAG,
    MAX_SIGNATURE_BYTES,
    MIN_HMAC_SECRET,
    _name,
    _Refuse,
    _show_path,
)
from fedep.modelfile.meta import _parse_json


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


def write_public_key(sign_key: str | os.PathLike[str], path: str | os.PathLike[str]) -> None:
    """Write the public key (SubjectPublicKeyInfo PEM) of an Ed25519 private key PEM.

    Raises
    ------
    ValueError
        One line: the file is not an unencrypted Ed25519 private key PEM.
    """
    serialization, _ = _crypto()
    pem = (
        _private_key(sign_key)
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    with atomic_write(path) as fh:
        fh.write(pem)


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


def sign_digest(digest: str, sign_key: Any) -> dict:
    """A signature block over a SHA-256 hex ``digest`` (for messages, not files).

    ``sign_key`` as for :func:`fedep.modelfile.write_model_file`.
    """
    return _sign(digest, sign_key)


def verify_digest(block: dict, digest: str, verify_key: Any) -> None:
    """Check a block from :func:`sign_digest` against ``digest`` with ``verify_key``.

    Raises
    ------
    ValueError
        One line: malformed, altered, or signed with another key (or an unusable key).
    """
    import json

    errors: list[Exception] = []
    try:
        _check_signature(json.dumps(block).encode(), digest, verify_key, errors)
    except _Refuse as exc:
        raise ValueError(str(exc)) from None
    if errors:
        raise ValueError(f"unusable verify key: {errors[0]}")


def parse_key(text: str | None):
    """A key given as text, as :func:`sign_digest` and the file functions take it.

    ``hmac:SECRET`` (a shared secret), ``@FILE`` (a shared secret read from a file,
    which keeps it out of the process list) or the path of an Ed25519 PEM key file.
    Empty or None: no key.

    Raises
    ------
    FileNotFoundError
        If the named key file does not exist.
    """
    if not text:
        return None
    if text.startswith("@"):
        path = Path(text[1:])
        if not path.is_file():
            raise FileNotFoundError(f"key file {str(path)!r} does not exist")
        return path.read_bytes().strip()
    if text.startswith("hmac:"):
        return text
    path = Path(text)
    if not path.is_file():
        raise FileNotFoundError(f"key file {str(path)!r} does not exist")
    return str(path)

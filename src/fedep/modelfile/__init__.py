"""The fedep model file: its format (version 2, a guarded zip of JSON and ``.npy``
members), what a fitted detector's file holds, and the detector's save and load.

The package holds everything about model files:

* :mod:`~fedep.modelfile.base`, :mod:`~fedep.modelfile.container`,
  :mod:`~fedep.modelfile.meta`, :mod:`~fedep.modelfile.readwrite`,
  :mod:`~fedep.modelfile.signing`: the container, its integrity digest, caps and
  signatures, exported here; they import no estimator.
* :mod:`~fedep.modelfile.content`: the schema of a detector's metadata and arrays.
* :mod:`~fedep.modelfile.estimator`: a fitted detector to a file and back
  (:func:`fedep.save` and :func:`fedep.load`); the one module that imports the
  estimators, and not imported here, so that reading the container stays light.

:func:`write_model_file` stores a JSON-able ``meta`` dict and named NumPy arrays;
:func:`read_model_file` returns them, or raises :class:`ModelFileError` with one line
``model file PATH: <problem>``.
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

from fedep.modelfile.base import (
    DEFAULT_MAX_ARRAY_BYTES,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_META_BYTES,
    DEFAULT_MAX_RATIO,
    FORMAT,
    FORMAT_VERSION,
    ModelFileError,
)
from fedep.modelfile.readwrite import read_model_file, write_model_file
from fedep.modelfile.signing import generate_signing_key

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

"""The zip container: writing the members, and reading them within the caps (the
central directory checked before any decompression, bounded reads, ``.npy`` headers
parsed without NumPy's loader)."""

from __future__ import annotations

import io
import math
import struct
import zipfile
from typing import Any

import numpy as np

from fedep.modelfile.base import (
    _ARRAY_NAME,
    _CHUNK,
    _DATE,
    _DTYPE_STR,
    _MEMBER_NAME,
    DEFAULT_MAX_RATIO,
    FORMAT_VERSION,
    MAX_MEMBERS,
    MAX_NPY_HEADER,
    MAX_SIGNATURE_BYTES,
    META_MEMBER,
    RATIO_MIN_BYTES,
    SIGNATURE_MEMBER,
    GiB,
    _name,
    _Refuse,
    _size,
)
from fedep.modelfile.meta import _array_hasher

# --------------------------------------------------------------------------- writing


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

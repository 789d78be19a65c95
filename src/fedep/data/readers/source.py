"""Sources: a path plus its compression (found from magic bytes), opened as a binary
stream; the readers' error, :class:`ReadError`, and the formats and policies."""

from __future__ import annotations

import io
import lzma
import os
import re
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pyarrow as pa

from fedep.data.errors import DataError

FORMATS = ("csv", "tsv", "parquet", "feather", "zeek", "zeek-json", "json")
INFINITY_POLICIES = ("nan", "clip", "error")

_BOM = b"\xef\xbb\xbf"
# magic bytes -> codec; xz has no pyarrow codec, the stdlib reads it
_COMPRESSION_MAGIC = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bz2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
)
_COMPRESSION_SUFFIX = {
    ".gz": "gzip",
    ".gzip": "gzip",
    ".bz2": "bz2",
    ".xz": "xz",
    ".zst": "zstd",
    ".zstd": "zstd",
}
_COMPRESSION_NAME = {"gzip": "gzip", "bz2": "bzip2", "xz": "xz", "zstd": "zstd"}
_HEAD_BYTES = 1 << 16
MAX_FIRST_LINE = 1 << 20  # bytes: a longer first (header) line is refused
_BINARY_MAGIC = (b"PAR1", b"ARROW1", b"FEA1")
_BINARY_SUFFIXES = (".parquet", ".pq", ".feather", ".arrow", ".ipc")


class ReadError(DataError):
    """A raw flow-record file cannot be read.

    Same parameters and attributes as :class:`~fedep.data.errors.DataError`; the message
    is one line: ``"<file>[, line N][, row N][, column 'c']: <what is wrong>"``.
    """

    def __init__(self, path, message: str, **where) -> None:
        # one line even when the reason quotes a multi-line pyarrow message
        super().__init__(path, re.sub(r"\s*\n\s*", " ", str(message)).strip(), **where)


# --------------------------------------------------------------------------------------
# sources: a path plus its compression


@dataclass(frozen=True)
class _Source:
    path: Path
    compression: str | None  # None, "gzip", "bz2", "xz", "zstd"
    encoding: str = "utf-8"  # text formats; see _ENCODINGS

    def open(self) -> IO[bytes] | pa.NativeFile:
        """A binary stream of the decompressed content."""
        if self.compression is None:
            # a plain OS file, not a memory map: mapped pages would count as resident memory
            return pa.OSFile(str(self.path), "rb")
        if self.compression == "xz":
            return lzma.open(self.path, "rb")
        # gzip, bz2 and zstd: pyarrow's C++ codecs (zstd without the zstandard package)
        return pa.input_stream(str(self.path), compression=self.compression)

    @contextmanager
    def errors(self) -> Iterator[None]:
        """Turn decompression and I/O failures into one-line ReadErrors."""
        try:
            yield
        except ReadError:
            raise
        except (OSError, EOFError, zlib.error, lzma.LZMAError) as exc:
            if isinstance(exc, FileNotFoundError | PermissionError | IsADirectoryError):
                raise ReadError(self.path, f"cannot read file: {exc.strerror}") from None
            if self.compression is not None:
                name = _COMPRESSION_NAME[self.compression]
                raise ReadError(
                    self.path, f"not a valid {name} file (truncated or corrupt: {exc})"
                ) from None
            raise ReadError(self.path, f"cannot read file: {exc}") from None


def _check_file(path: Path) -> None:
    if not path.exists():
        raise ReadError(path, "no such file")
    if path.is_dir():
        raise ReadError(path, "is a directory, not a file")
    if not os.access(path, os.R_OK):
        raise ReadError(path, "cannot read file: permission denied")


def _open_source(path: Path) -> _Source:
    """Check the file and find its compression from its magic bytes."""
    _check_file(path)
    try:
        with open(path, "rb") as fh:
            magic = fh.read(8)
    except OSError as exc:
        raise ReadError(path, f"cannot read file: {exc.strerror or exc}") from None
    if not magic:
        raise ReadError(path, "empty file")
    found = next((c for m, c in _COMPRESSION_MAGIC if magic.startswith(m)), None)
    claimed = _COMPRESSION_SUFFIX.get(path.suffix.lower())
    if claimed is not None and found != claimed:
        # the name promises a compressed file: reading it as text would only produce a
        # confusing decode error (e.g. "can't decode byte 0x8b") further down
        raise ReadError(
            path,
            f"not a valid {_COMPRESSION_NAME[claimed]} file (its first bytes are not the "
            f"{_COMPRESSION_NAME[claimed]} magic bytes)",
        )
    return _Source(path, found)


def _read_head(src: _Source, n: int = _HEAD_BYTES) -> bytes:
    """The first ``n`` decompressed bytes, extended to the end of the first line.

    The first line is read in pieces joined once (linear time) and at most
    :data:`MAX_FIRST_LINE` bytes of it: a longer one is refused (a ReadError), unless
    the file is binary (Parquet / Arrow magic bytes or name) or a JSON array (one line
    by design), whose readers take the file whole; their head is then cut there.
    """
    with src.errors():
        fh = src.open()
        try:
            head = bytes(fh.read(n))
            if b"\n" in head or head.startswith(_BINARY_MAGIC) or head[:4] == b"\xff" * 4:
                return head
            parts, size = [head], len(head)
            # a very wide header: read on until its line ends (or the file does)
            while size <= MAX_FIRST_LINE:
                more = bytes(fh.read(n))
                if not more:
                    break
                parts.append(more)
                size += len(more)
                if b"\n" in more:
                    break
        finally:
            fh.close()
    head = b"".join(parts)
    nl = head.find(b"\n")
    if (nl < 0 and size > MAX_FIRST_LINE) or nl > MAX_FIRST_LINE + len(_BOM):
        name = src.path.name.lower()
        if head.removeprefix(_BOM).lstrip().startswith(b"[") or name.endswith(_BINARY_SUFFIXES):
            return head
        raise ReadError(
            src.path,
            f"the first line is longer than {MAX_FIRST_LINE >> 20} MiB (no line break in "
            f"the first {size:,} bytes): not a flow-record table",
        )
    return head


# byte-order marks of the text encodings the readers do not take (UTF-32 first: its
# little-endian mark starts with UTF-16's)
_WIDE_BOMS = (
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe", "UTF-16"),
    (b"\xfe\xff", "UTF-16"),
)


def _check_text_head(path, head: bytes) -> None:
    """Refuse UTF-16 / UTF-32 text (by its byte-order mark, or without one by NUL bytes
    in every other position) with a message that says so, rather than a misleading
    parse error further down."""
    enc = next((e for bom, e in _WIDE_BOMS if head.startswith(bom)), None)
    if enc is None:
        sample = head[:4096]
        n = len(sample) // 2
        even, odd = sample[0::2].count(0), sample[1::2].count(0)
        # ASCII in UTF-16: one byte of each pair is NUL; in UTF-32 three bytes of four
        if n >= 2 and max(even, odd) >= 0.6 * n:
            # no byte-order mark: name the byte order (ASCII first: little-endian)
            order = "LE" if odd > even else "BE"
            if min(even, odd) <= 0.1 * n:
                enc = "UTF-16" + order
            elif min(even, odd) >= 0.3 * n:
                enc = "UTF-32" + order
    if enc is not None:
        raise ReadError(path, f"{enc} text; convert it to UTF-8 (iconv -f {enc} -t UTF-8)")


def _find_nul(src: _Source, piece: int = 1 << 22) -> None:
    """Refuse a text file holding a NUL byte: one ReadError naming the line of the first
    (one ``bytes.find`` per piece read; the line is counted only when one is found)."""
    with src.errors():
        fh = src.open()
        try:
            offset = 0
            while True:
                data = bytes(fh.read(piece))
                if not data:
                    return
                at = data.find(b"\x00")
                if at >= 0:
                    break
                offset += len(data)
        finally:
            fh.close()
    _raise_nul(src, offset + at)


def _raise_nul(src: _Source, position: int, piece: int = 1 << 22) -> None:
    """The ReadError for a NUL byte at decompressed byte ``position``."""
    with src.errors():
        fh = src.open()
        try:
            lines, left = 0, position
            while left > 0:
                data = bytes(fh.read(min(piece, left)))
                if not data:
                    break
                lines += data.count(b"\n")
                left -= len(data)
        finally:
            fh.close()
    raise ReadError(
        src.path, "NUL byte in a text file (binary data, or UTF-16 text?)", line=lines + 1
    )


def _text_lines(src: _Source) -> Iterator[str]:
    """The decompressed file as text lines (error paths only: slow but exact)."""
    fh = src.open()
    try:
        raw = fh if not isinstance(fh, pa.NativeFile) else io.BufferedReader(fh)
        yield from io.TextIOWrapper(raw, encoding=src.encoding, errors="replace", newline="")
    finally:
        fh.close()

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
    """The first ``n`` decompressed bytes, extended to the end of the first line."""
    with src.errors():
        fh = src.open()
        try:
            head = fh.read(n)
            # a very wide header: read on until its line ends (or the file does)
            while b"\n" not in head:
                more = fh.read(n)
                if not more:
                    break
                head += more
        finally:
            fh.close()
    return bytes(head)


def _text_lines(src: _Source) -> Iterator[str]:
    """The decompressed file as text lines (error paths only: slow but exact)."""
    fh = src.open()
    try:
        raw = fh if not isinstance(fh, pa.NativeFile) else io.BufferedReader(fh)
        yield from io.TextIOWrapper(raw, encoding=src.encoding, errors="replace", newline="")
    finally:
        fh.close()

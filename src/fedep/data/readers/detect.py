"""Format detection: from the content (magic bytes, first line), then the file name."""

from __future__ import annotations

import ipaddress
import json
import os
import re
from pathlib import Path

from fedep.data.readers.source import (
    _BOM,
    _COMPRESSION_SUFFIX,
    ReadError,
    _check_text_head,
    _open_source,
    _read_head,
    _Source,
)

# a suffix that names a format; None: the content decides (Zeek writes ``conn.log``)
_FORMAT_SUFFIX: dict[str, str | None] = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".tab": "tsv",
    ".txt": None,
    ".log": None,
    ".json": None,
    ".jsonl": None,
    ".ndjson": None,
    ".parquet": "parquet",
    ".pq": "parquet",
    ".feather": "feather",
    ".arrow": "feather",
    ".ipc": "feather",
}
_DELIMITERS = (",", "\t", ";", "|")


def _strip_suffixes(name: str) -> tuple[str, list[str]]:
    """``conn.log.gz`` -> (``conn``, [``.gz``, ``.log``]): known suffixes, outermost first."""
    removed = []
    while True:
        stem, dot, ext = name.rpartition(".")
        ext = "." + ext.lower()
        if not dot or not stem or (ext not in _COMPRESSION_SUFFIX and ext not in _FORMAT_SUFFIX):
            return name, removed
        removed.append(ext)
        name = stem
        if ext in _FORMAT_SUFFIX:
            # only one format suffix: ``a.csv.log`` keeps ``a.csv``
            return name, removed


def _sniff_delimiter(first_line: str) -> str:
    """The most frequent of ``, \\t ; |`` in the header line (outside quotes); ``,`` if none."""
    unquoted = re.sub(r'"[^"]*"', "", first_line)
    counts = {d: unquoted.count(d) for d in _DELIMITERS}
    best = max(_DELIMITERS, key=lambda d: counts[d])  # ties: earlier in _DELIMITERS wins
    return best if counts[best] > 0 else ","


def _first_line(head: bytes) -> bytes:
    if head.startswith(_BOM):
        head = head[len(_BOM) :]
    return head.split(b"\n", 1)[0].rstrip(b"\r")


_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
_IPV4 = re.compile(r"\d{1,3}(\.\d{1,3}){3}")
_UNSET = frozenset({"-", "(empty)"})  # Zeek's unset and empty fields


def _is_address(text: str) -> bool:
    if not (_IPV4.fullmatch(text) or (":" in text and len(text) <= 45)):
        return False
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def header_looks_like_data(fields) -> bool:
    """Whether a first line's fields are values rather than column names.

    A field that is an IP address, Zeek's unset ``-`` / ``(empty)`` beside a number, or
    only numbers of which one is not an integer (a Zeek ``ts``): ``zeek-cut`` output
    without ``-c``, a CSV exported without its header. Integer-only names (``0,1,2``)
    stay a header.
    """
    f = [str(x).strip() for x in fields]
    if len(f) < 2:
        return False
    if any(_is_address(x) for x in f):
        return True
    numbers = [x for x in f if _NUMBER.fullmatch(x)]
    if numbers and any(x in _UNSET for x in f):
        return True
    return len(numbers) == len(f) and any(not x.lstrip("+-").isdigit() for x in numbers)


def no_header_message(path, fields, delimiter: str) -> str:
    """The one-line reason for a file whose first line is data."""
    shown = delimiter.join(str(x) for x in fields[:4]) + (
        delimiter + "..." if len(fields) > 4 else ""
    )
    name = Path(path).name
    if delimiter == "\t":
        hint = "zeek-cut drops the header (use zeek-cut -c or pass the log itself)"
    else:
        hint = "its first line must name the columns"
    return f"no header line: {name} starts with data ({shown!r}); {hint}"


def _looks_like_zeek_json(line: bytes) -> bool:
    try:
        obj = json.loads(line)
    except ValueError:
        return False
    return isinstance(obj, dict) and (
        "uid" in obj or "id.orig_h" in obj or ("ts" in obj and "_path" in obj)
    )


def _detect(src: _Source, head: bytes) -> str:
    if head.startswith(b"PAR1"):
        return "parquet"
    if head.startswith(b"ARROW1") or head.startswith(b"FEA1") or head[:4] == b"\xff" * 4:
        return "feather"
    _stem, suffixes = _strip_suffixes(src.path.name)
    by_name = next((_FORMAT_SUFFIX[s] for s in suffixes if s in _FORMAT_SUFFIX), None)
    if by_name in ("parquet", "feather"):
        return by_name  # a binary format without its magic: its reader says what is wrong
    _check_text_head(src.path, head)
    text = head[len(_BOM) :] if head.startswith(_BOM) else head
    stripped = text.lstrip()
    if not stripped:
        raise ReadError(src.path, "empty file")
    if stripped.startswith(b"#separator"):
        return "zeek"
    if stripped.startswith(b"{"):
        return "zeek-json" if _looks_like_zeek_json(stripped.split(b"\n", 1)[0]) else "json"
    if stripped.startswith(b"["):
        return "json"
    first = _first_line(head).decode("utf-8", errors="replace")
    sniffed = "tsv" if _sniff_delimiter(first) == "\t" else "csv"
    if by_name == "tsv" and sniffed == "csv" and any(d in first for d in ",;|"):
        # a ".tsv" whose header has no tab but another delimiter: read as one column,
        # every feature of that gateway would be missing
        return "csv"
    if by_name is not None:
        return by_name
    return sniffed


def detect_format(path: str | os.PathLike) -> str:
    """How :func:`read_table` would read a file with ``format="auto"``.

    Parameters
    ----------
    path : str or PathLike
        The file; it may be gzip-, bzip2-, xz- or zstd-compressed.

    Returns
    -------
    str
        One of :data:`FORMATS`: from the content first (``PAR1`` / ``ARROW1`` magic bytes,
        a ``#separator`` first line for Zeek, a ``{`` first character for JSON Lines,
        Zeek JSON when the first object has Zeek keys such as ``uid`` / ``id.orig_h``),
        then the extension, else CSV or TSV by the delimiter sniffed in the header line.

    Raises
    ------
    ReadError
        Missing, unreadable or empty file, corrupt compression.
    """
    path = Path(path)
    src = _open_source(path)
    return _detect(src, _read_head(src))

"""Many files, one per gateway: :func:`gateway_files`, :func:`gateway_id`, :func:`read_many`."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from fedep.data.readers.detect import _FORMAT_SUFFIX, _strip_suffixes
from fedep.data.readers.source import ReadError
from fedep.data.readers.table import read_table


def gateway_id(path: str | os.PathLike) -> str:
    """A gateway id from a file name: the name without known suffixes.

    ``conn.log.gz`` -> ``conn``, ``gw-03.csv`` -> ``gw-03``, ``site.a.parquet`` -> ``site.a``.
    """
    name = Path(path).name
    while True:
        stem, removed = _strip_suffixes(name)
        if not removed or stem == name:
            return stem
        if any(s in _FORMAT_SUFFIX for s in removed):
            return stem
        name = stem


def _supported(path: Path) -> bool:
    _stem, removed = _strip_suffixes(path.name)
    return any(s in _FORMAT_SUFFIX for s in removed)


def gateway_files(path_or_paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[Path]:
    """Expand files and directories into the list of files to read, one per gateway.

    Parameters
    ----------
    path_or_paths : path or iterable of paths
        A file is kept as given; a directory contributes its (non-hidden) files with a
        supported extension (``.csv .tsv .tab .txt .log .json .jsonl .ndjson .parquet
        .pq .feather .arrow .ipc``, optionally followed by ``.gz .bz2 .xz .zst``), sorted
        by name; subdirectories are not searched.

    Returns
    -------
    list of Path

    Raises
    ------
    ReadError
        A path that does not exist, a directory with no supported file, or one holding
        a broken symbolic link.
    """
    if isinstance(path_or_paths, str | os.PathLike):
        items: list = [path_or_paths]
    else:
        items = list(path_or_paths)
    out: list[Path] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            broken = sorted(f for f in p.iterdir() if f.is_symlink() and not f.exists())
            if broken:  # a gateway's file gone missing: not a gateway silently left out
                raise ReadError(broken[0], "broken symbolic link (its target does not exist)")
            found = sorted(
                f
                for f in p.iterdir()
                if f.is_file() and not f.name.startswith(".") and _supported(f)
            )
            if not found:
                raise ReadError(p, "directory has no supported flow-record file")
            out.extend(found)
        elif p.exists():
            out.append(p)
        else:
            raise ReadError(p, "no such file or directory")
    return out


def _same_bytes(a: Path, b: Path) -> bool:
    """Whether two files of equal size hold the same bytes (compared in blocks)."""
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x, y = fa.read(1 << 20), fb.read(1 << 20)
            if x != y:
                return False
            if not x:
                return True


def check_distinct_gateways(files: Iterable[str | os.PathLike]) -> None:
    """Refuse two files that would be one gateway's records twice.

    Two paths of one file (the same file given twice, a symbolic link to it), two files
    with the same gateway id (:func:`gateway_id`: ``a.log`` and its compressed copy
    ``a.log.gz``, ``a/conn.log`` and ``b/conn.log``) or two files with the same bytes
    (a copy under another name) would each train as a gateway of their own.

    Raises
    ------
    ReadError
        Naming both files.
    """
    seen_path: dict[Path, Path] = {}
    seen_id: dict[str, Path] = {}
    by_size: dict[int, list[Path]] = {}
    for f in map(Path, files):
        real = f.resolve()
        if real in seen_path:
            other = seen_path[real]
            raise ReadError(f, f"same file as {str(other)!r}: give each gateway's file once")
        gid = gateway_id(f)
        if gid in seen_id:
            other = seen_id[gid]
            raise ReadError(
                f,
                f"same gateway id {gid!r} as {str(other)!r} (gateway id = file name without "
                "suffixes): give each gateway's records once, or rename one of the files",
            )
        size = real.stat().st_size
        for other in by_size.get(size, []):
            if _same_bytes(real, other.resolve()):
                raise ReadError(
                    f, f"same content as {str(other)!r}: give each gateway's records once"
                )
        seen_path[real] = f
        seen_id[gid] = f
        by_size.setdefault(size, []).append(f)


def read_many(
    paths: str | os.PathLike | Iterable[str | os.PathLike], **kwargs: Any
) -> dict[str, pd.DataFrame]:
    """Read one file per gateway.

    Parameters
    ----------
    paths : path or iterable of paths
        Files and/or directories, expanded by :func:`gateway_files`.
    **kwargs
        Passed to :func:`read_table` (``format``, ``delimiter``, ``infinity``,
        ``columns``; not ``chunksize``).

    Returns
    -------
    dict of str to DataFrame
        Gateway id (:func:`gateway_id`, e.g. ``conn.log.gz`` -> ``conn``) to its table, in
        file order.

    Raises
    ------
    ReadError
        From :func:`read_table`, or two files that are one gateway's data twice
        (:func:`check_distinct_gateways`, naming both).
    """
    if "chunksize" in kwargs:
        raise TypeError("read_many does not stream: read_table(..., chunksize=) per file")
    files = gateway_files(paths)
    check_distinct_gateways(files)
    keys = [gateway_id(f) for f in files]
    return {k: read_table(f, **kwargs) for k, f in zip(keys, files, strict=True)}

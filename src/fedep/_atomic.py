"""Atomic file writes.

:func:`atomic_write` writes to a temporary file in the target's directory, flushes and
``fsync``\\ s it, then renames it onto the target with :func:`os.replace` (atomic on
POSIX and Windows within one file system) and ``fsync``\\ s the directory. If anything
fails on the way (a full disk, an interrupt), the temporary file is removed and the
previous target, if any, is left byte for byte as it was.

The command line checks its output paths before long work with
:func:`fedep.cli._common.check_output_file`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

__all__ = ["atomic_write"]


def _temp_name(target: Path) -> Path:
    return target.parent / f".{target.name}.{secrets.token_hex(4)}.tmp"


def _open_temp(target: Path, perm: int) -> tuple[int, Path]:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    flags |= getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = _temp_name(target)
        try:
            return os.open(tmp, flags, perm), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"cannot create a temporary file next to {target}")


def fsync_dir(directory: Path) -> None:
    """Make a rename or a new file in ``directory`` durable (fsync of the directory;
    nothing where the platform cannot open one)."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # Windows, or a directory we may not open: the rename stands
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_write(
    path: str | os.PathLike[str],
    mode: str = "wb",
    *,
    encoding: str | None = None,
    perm: int | None = None,
) -> Iterator[IO[Any]]:
    """Open ``path`` for writing so that it is replaced atomically, or not at all.

    Parameters
    ----------
    path : str or os.PathLike
        The target. A symbolic link is followed: the file it points to is replaced and
        the link is kept.
    mode : {"wb", "w"}
        Binary or text mode.
    encoding : str, optional
        Text encoding for ``mode="w"`` (default UTF-8).
    perm : int, optional
        Permission bits of the new file. By default an existing target's bits are kept,
        and a new file gets ``0o666`` minus the process umask, like :func:`open`.

    Yields
    ------
    file object
        A file in the target's directory named ``.NAME.XXXXXXXX.tmp``.

    Notes
    -----
    On success the data is flushed, ``fsync``\\ ed, renamed onto the target with
    :func:`os.replace`, and the directory is ``fsync``\\ ed. On any exception, including
    :class:`KeyboardInterrupt` and ``OSError(ENOSPC)``, the temporary file is removed,
    the target is untouched, and the exception propagates.
    """
    if mode not in ("wb", "w"):
        raise ValueError(f"atomic_write mode must be 'wb' or 'w', not {mode!r}")
    target = Path(os.path.realpath(os.fspath(path)))
    keep_bits = None
    if perm is None:
        try:
            st = os.stat(target)
        except FileNotFoundError:
            perm = 0o666
        else:
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(f"cannot write {path}: it is a directory")
            if not stat.S_ISREG(st.st_mode):
                # a device or FIFO: the rename would replace it with a regular file
                raise OSError(f"cannot write {path}: it exists and is not a regular file")
            keep_bits = stat.S_IMODE(st.st_mode)
            perm = 0o600
    fd, tmp = _open_temp(target, perm)
    fh = None
    try:
        if keep_bits is not None:
            os.chmod(tmp, keep_bits)
        if mode == "w":
            fh = os.fdopen(fd, "w", encoding=encoding or "utf-8")
        else:
            fh = os.fdopen(fd, "wb")
        yield fh
        fh.flush()
        os.fsync(fh.fileno())
        fh.close()
        os.replace(tmp, target)
    except BaseException:
        if fh is None:
            with contextlib.suppress(OSError):
                os.close(fd)
        else:
            with contextlib.suppress(Exception):
                fh.close()
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(target.parent)

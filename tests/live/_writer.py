"""A Zeek conn.log writer for the watcher's tests: it appends records, pauses (the test
decides when), writes partial lines, rotates the log as Zeek does (rename, then gzip into
a dated folder) and truncates it."""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import pandas as pd

from _zeek import FIELDS, TYPES, flows


def header(fields=FIELDS, types=TYPES, opened: str = "2024-01-01-00-00-00") -> bytes:
    lines = [
        "#separator \\x09",
        "#set_separator\t,",
        "#empty_field\t(empty)",
        "#unset_field\t-",
        "#path\tconn",
        f"#open\t{opened}",
        "#fields\t" + "\t".join(fields),
        "#types\t" + "\t".join(types),
    ]
    return ("\n".join(lines) + "\n").encode()


def lines_of(df: pd.DataFrame, fields=FIELDS) -> list[bytes]:
    cells = df[fields].astype(str).where(df[fields].notna(), "-")
    return [(s + "\n").encode() for s in cells.agg("\t".join, axis=1)]


class ZeekWriter:
    """Writes ``directory/name`` record by record, with a unique ``uid`` per record.

    Parameters
    ----------
    directory : Path
    name : str
    seed : int
        Of the synthetic flows (:func:`_zeek.flows`).
    attack_rate : float
        Share of planted attacks (the model should flag them).
    fields, types : list of str
        The log's ``#fields`` / ``#types`` (:meth:`rotate` may change them).
    """

    def __init__(
        self,
        directory,
        name="conn.log",
        *,
        seed=0,
        attack_rate=0.05,
        fields=FIELDS,
        types=TYPES,
        pool=20_000,
    ):
        self.dir = Path(directory)
        self.path = self.dir / name
        self.fields, self.types = list(fields), list(types)
        self.pool = flows(pool, seed=seed, attack_rate=attack_rate)
        self.pool["uid"] = [f"C{seed:03d}{i:012d}" for i in range(pool)]
        self.next = 0
        self.written: list[str] = []  # uids, in order
        self.rest = b""  # the rest of a partial line
        self.n_rotations = 0
        self._open()

    def _open(self) -> None:
        opened = f"2024-01-01-{self.n_rotations:02d}-00-00"
        self.path.write_bytes(header(self.fields, self.types, opened))

    def _take(self, n: int) -> pd.DataFrame:
        df = self.pool.iloc[self.next : self.next + n]
        self.next += n
        return df

    def append(self, n: int) -> list[str]:
        """Write ``n`` complete records; returns their uids."""
        df = self._take(n)
        with open(self.path, "ab") as fh:
            fh.write(b"".join(lines_of(df, self.fields)))
        self.written += df["uid"].tolist()
        return df["uid"].tolist()

    def partial(self) -> str:
        """Write the first half of one record (no newline); :meth:`complete` ends it."""
        df = self._take(1)
        line = lines_of(df, self.fields)[0]
        half = len(line) // 2
        with open(self.path, "ab") as fh:
            fh.write(line[:half])
        self.rest = line[half:]
        self.written += df["uid"].tolist()
        return df["uid"].iloc[0]

    def complete(self) -> None:
        with open(self.path, "ab") as fh:
            fh.write(self.rest)
        self.rest = b""

    def raw(self, data: bytes) -> None:
        with open(self.path, "ab") as fh:
            fh.write(data)

    def rotate(self, *, compress: bool = True, fields=None, types=None) -> Path:
        """Rotate as Zeek does: ``#close``, rename, then gzip into a dated folder; a new
        log (with new ``#fields`` when given) at the same path. Returns the archive."""
        self.raw(b"#close\t2024-01-01-00-59-59\n")
        h = self.n_rotations
        stamp = f"conn.{h:02d}:00:00-{h:02d}:59:59.log"
        renamed = self.dir / stamp
        os.rename(self.path, renamed)
        self.n_rotations += 1
        if fields is not None:
            self.fields, self.types = list(fields), list(types)
        self._open()
        if not compress:
            return renamed
        day = self.dir / "2024-01-01"
        day.mkdir(exist_ok=True)
        archive = day / (stamp + ".gz")
        tmp = day / ("." + stamp + ".gz.tmp")
        with open(renamed, "rb") as src, gzip.open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.rename(tmp, archive)
        os.unlink(renamed)
        return archive

    def truncate(self) -> None:
        """Empty the log and write its header again (records written before are gone)."""
        with open(self.path, "r+b") as fh:
            fh.truncate(0)
        self.n_rotations += 1
        self._open()

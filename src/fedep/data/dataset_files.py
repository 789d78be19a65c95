"""Where the official dataset files live, and whether they are intact.

Data directory resolution (:func:`resolve_data_dir`), first match wins:

1. the ``data_dir`` argument (the CLI's ``--data-dir``);
2. the environment variable ``FEDEP_DATA_DIR``;
3. ``../shared/data`` relative to the current working directory, if that directory
   exists (the layout of the fedep development checkout);
4. ``~/.fedep/data``.

The chosen directory is returned even when it does not exist; loaders then raise
:class:`~fedep.data.errors.DatasetNotFoundError` naming the missing file, the
directory and the official download page.

Inside the data directory each dataset has its own sub-folder holding the files
exactly as published (see :data:`KNOWN_FILES`)::

    nsl-kdd/KDDTrain+.txt, nsl-kdd/KDDTrain+_20Percent.txt, nsl-kdd/KDDTest+.txt
    unsw-nb15/UNSW_NB15_testing-set.csv  [, unsw-nb15/UNSW_NB15_training-set.csv]
    ton-iot/train_test_network.csv

:func:`verify_data_dir` checks every known file against the SHA-256 table embedded
here (:data:`SHA256`).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DATASET_URLS",
    "KNOWN_FILES",
    "SHA256",
    "FileRecord",
    "format_verify_report",
    "resolve_data_dir",
    "sha256_file",
    "verify_data_dir",
]

ENV_VAR = "FEDEP_DATA_DIR"

DATASET_URLS: dict[str, str] = {
    "nsl-kdd": "https://www.unb.ca/cic/datasets/nsl.html",
    "unsw-nb15": "https://research.unsw.edu.au/projects/unsw-nb15-dataset",
    "ton-iot": "https://research.unsw.edu.au/projects/toniot-datasets",
}

#: SHA-256 of the official files (copied from the project's ``SHA256SUMS``).
SHA256: dict[str, str] = {
    "nsl-kdd/KDDTest+.txt": "fa46b0935342616aa83b7c2578db355b6a7aaabbc492248172c7a1e8b7ab8f84",
    "nsl-kdd/KDDTrain+.txt": "1b86d2f957b33082081bba410fe129b475efebcc13c9014c3f447c8271aadf95",
    "nsl-kdd/KDDTrain+_20Percent.txt": (
        "7ea86479faab5ca2190b7f18b4982fb058ce5bf2b46e0e1017d0d9ef90f9c16e"
    ),
    "ton-iot/train_test_network.csv": (
        "26ddc513552de36de6428b2e578efaed2b57504c716dfba847cc0109a64e1974"
    ),
    "unsw-nb15/UNSW_NB15_testing-set.csv": (
        "734fe6642edf758f7c94d7d9149426b49d202fe8e7bf0bef47392489c3c0a559"
    ),
}

#: Every file a loader may read: ``relative path -> (dataset, required)``. The UNSW-NB15
#: training set is optional (used only when present) and has no reference hash here.
KNOWN_FILES: dict[str, tuple[str, bool]] = {
    "nsl-kdd/KDDTrain+.txt": ("nsl-kdd", True),
    "nsl-kdd/KDDTrain+_20Percent.txt": ("nsl-kdd", True),
    "nsl-kdd/KDDTest+.txt": ("nsl-kdd", True),
    "unsw-nb15/UNSW_NB15_testing-set.csv": ("unsw-nb15", True),
    "unsw-nb15/UNSW_NB15_training-set.csv": ("unsw-nb15", False),
    "ton-iot/train_test_network.csv": ("ton-iot", True),
}


def resolve_data_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """Resolve the data directory (argument, ``FEDEP_DATA_DIR``, ``../shared/data``, home).

    Parameters
    ----------
    data_dir : str or PathLike, optional
        Explicit directory; wins over everything else.

    Returns
    -------
    Path
        The directory (``~`` expanded); it need not exist.
    """
    if data_dir is not None and str(data_dir) != "":
        return Path(data_dir).expanduser()
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    shared = Path.cwd() / ".." / "shared" / "data"
    if shared.is_dir():
        return shared.resolve()
    return Path.home() / ".fedep" / "data"


def sha256_file(path: str | os.PathLike[str], chunk_size: int = 1 << 20) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(chunk_size):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True)
class FileRecord:
    """Result of checking one known file.

    Attributes
    ----------
    file : str
        Path relative to the data directory.
    dataset : str
        Dataset the file belongs to.
    status : {"present", "missing", "altered"}
        ``present``: exists and matches its reference hash (or has none);
        ``altered``: exists but its hash differs; ``missing``: not there.
    sha256 : str or None
        Actual hash (None when missing).
    expected : str or None
        Reference hash (None when the file has none).
    required : bool
        False for optional files (the UNSW-NB15 training set).
    """

    file: str
    dataset: str
    status: str
    sha256: str | None
    expected: str | None
    required: bool


def verify_data_dir(data_dir: str | os.PathLike[str] | None = None) -> list[FileRecord]:
    """Check every known dataset file in the data directory against its SHA-256.

    Parameters
    ----------
    data_dir : str or PathLike, optional
        Resolved with :func:`resolve_data_dir`.

    Returns
    -------
    list of FileRecord
        One record per entry of :data:`KNOWN_FILES`, in that order.
    """
    root = resolve_data_dir(data_dir)
    out: list[FileRecord] = []
    for rel, (ds, required) in KNOWN_FILES.items():
        path = root / rel
        expected = SHA256.get(rel)
        if not path.is_file():
            out.append(FileRecord(rel, ds, "missing", None, expected, required))
            continue
        digest = sha256_file(path)
        status = "present" if expected is None or digest == expected else "altered"
        out.append(FileRecord(rel, ds, status, digest, expected, required))
    return out


def format_verify_report(records: list[FileRecord], data_dir: str | None = None) -> str:
    """Human-readable table of :func:`verify_data_dir` records.

    Parameters
    ----------
    records : list of FileRecord
    data_dir : str, optional
        Shown in the heading when given.

    Returns
    -------
    str
        One line per file and a summary line.
    """
    lines = []
    if data_dir is not None:
        lines.append(f"data directory: {data_dir}")
    width = max((len(r.file) for r in records), default=4)
    for r in records:
        note = ""
        if r.status == "missing":
            note = "" if r.required else " (optional)"
            note += f"  download: {DATASET_URLS[r.dataset]}"
        elif r.status == "altered":
            note = f"  sha256 {r.sha256} != expected {r.expected}"
        elif r.expected is None:
            note = f"  sha256 {r.sha256} (no reference hash)"
        else:
            note = f"  sha256 {r.sha256[:16]}... ok" if r.sha256 else ""
        lines.append(f"{r.status.upper():8s} {r.file:<{width}}{note}")
    bad = [r for r in records if r.status == "altered" or (r.required and r.status == "missing")]
    lines.append("all required files present and intact" if not bad else f"{len(bad)} problem(s)")
    return "\n".join(lines)

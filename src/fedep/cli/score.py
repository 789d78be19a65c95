"""``fedep score``: append anomaly_score, is_anomaly and top_features to every row of
a CSV file, streaming it in blocks (:mod:`fedep.data.stream`).

The output is written to a temporary file in the output's directory and renamed onto
``--output`` at the end; on any error or interruption (Ctrl-C, SIGTERM) the temporary
file is removed and ``--output`` is left as it was.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import numpy as np

from fedep.cli._common import (
    UsageError,
    check_output_file,
    info,
    load_model,
    model_features,
    nonneg_int,
    positive_int,
)


def register(sub) -> None:
    p = sub.add_parser(
        "score",
        help="score the rows of a CSV file",
        description="Append anomaly_score, is_anomaly and top_features to every row of a "
        "CSV file, streaming it in chunks.",
    )
    p.add_argument("--model", required=True, help="model file from `fedep fit`")
    p.add_argument("--input", required=True, help="CSV file with a header row")
    p.add_argument("--output", required=True, help="CSV file to write")
    p.add_argument(
        "--client-column",
        help="client id column: rows of a known client use its personalised basis and threshold",
    )
    p.add_argument(
        "--top-features",
        type=nonneg_int,
        default=3,
        metavar="K",
        help="features contributing most to each score (default: 3; 0 leaves the "
        "top_features column empty)",
    )
    p.add_argument(
        "--chunksize",
        type=positive_int,
        default=100_000,
        metavar="N",
        help="rows read per chunk (default: 100000)",
    )
    p.add_argument("--quiet", action="store_true", help="no summary line")
    p.set_defaults(func=cmd_score)


def client_ids(ids: np.ndarray, det) -> np.ndarray:
    """Client column text in the dtype of the model's client ids (integer models: a
    value that is not an integer matches no client)."""
    import pandas as pd

    if det.clients_.dtype.kind in "iu":
        v = pd.to_numeric(pd.Series(ids), errors="coerce").to_numpy(dtype=np.float64)
        ok = np.isfinite(v) & (v == np.round(v))
        return np.where(ok, v, -(2**62)).astype(np.int64)
    return np.asarray(ids, dtype=str)


def top_indices(contrib: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Column indices and values of the ``k`` largest entries of each row, largest first."""
    k = min(k, contrib.shape[1])
    idx = np.argpartition(-contrib, k - 1, axis=1)[:, :k]
    vals = np.take_along_axis(contrib, idx, axis=1)
    order = np.argsort(-vals, axis=1, kind="stable")
    return np.take_along_axis(idx, order, axis=1), np.take_along_axis(vals, order, axis=1)


def score_block(det, X, groups, names, k):
    """Scores, 0/1 flags and top-feature indices/values of one block."""
    import pandas as pd

    frame = pd.DataFrame(X, columns=names, copy=False)
    idx = vals = None
    if k > 0:
        # One pass: contributions' rows sum to decision_function (documented).
        contrib = det.feature_contributions(frame, groups)
        scores = contrib.sum(axis=1)
        idx, vals = top_indices(contrib, k)
    else:
        scores = det.decision_function(frame, groups)
    # predict()'s rule (score above the row's client threshold), without a second pass.
    flags = (scores > det.row_thresholds(groups, X.shape[0])).astype(int)
    return scores, flags, idx, vals


def _temp_beside(dst: Path) -> Path:
    """An empty new file next to ``dst`` with the permissions a new file would get."""
    fd, name = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".partial", dir=dst.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(name, 0o666 & ~umask)
    return Path(name)


def cmd_score(args) -> int:
    from fedep.data import DataError
    from fedep.data.stream import CsvBlockReader, ScoreTailFormatter

    src = Path(args.input)
    if not src.is_file():
        raise FileNotFoundError(f"input file {str(src)!r} does not exist")
    dst = check_output_file(args.output, "--output")
    if dst.exists() and dst.resolve() == src.resolve():
        raise UsageError("--output must differ from --input")
    if src.suffix.lower() in (".parquet", ".pq"):
        raise UsageError("fedep score streams CSV files; convert Parquet input to CSV")
    det = load_model(args.model)
    names = model_features(det, args.model)
    reader = CsvBlockReader(src, names, args.chunksize, args.client_column)
    tails = ScoreTailFormatter(names, args.top_features)
    clash = [c for c in tails.columns if c in reader.header]
    if clash:
        raise DataError(src, f"already has output column {clash[0]!r}", line=1, column=clash[0])

    n_anom = 0
    t0 = time.perf_counter()
    tmp = _temp_beside(dst)
    try:
        with open(tmp, "wb") as fout:
            fout.write(reader.header_raw + b"," + ",".join(tails.columns).encode() + b"\n")
            for block in reader:
                groups = None if block.ids is None else client_ids(block.ids, det)
                scores, flags, idx, vals = score_block(det, block.X, groups, names, tails.k)
                fout.write(block.with_tails(tails(scores, flags, idx, vals)))
                n_anom += int(flags.sum())
        os.replace(tmp, dst)
    finally:  # errors, KeyboardInterrupt (and SIGTERM, turned into one by main)
        tmp.unlink(missing_ok=True)
    n_rows = reader.n_rows
    dt = time.perf_counter() - t0
    rate = n_rows / dt if dt > 0 else float("inf")
    info(
        f"scored {n_rows} records in {dt:.2f} s ({rate:,.0f} records/s); {n_anom} flagged "
        f"as anomalies ({100 * n_anom / n_rows:.2f}%); written to {dst}",
        args.quiet,
    )
    return 0

"""``fedep score``: append anomaly_score, is_anomaly, anomaly_probability and top_features
to every row of a flow-record file, written as CSV.

``anomaly_probability`` is ``P(anomaly)`` of the detector's ``predict_proba`` (PyOD's
"unify" calibration on the training scores: monotone in the score, 4 significant
digits); ``is_anomaly`` still compares the score with the threshold.

A comma-separated CSV file, plain or gzip/bzip2/xz/zstd-compressed, is streamed in blocks
(:mod:`fedep.data.stream`) and its lines are copied byte for byte; any other input (Zeek
logs, Parquet, Feather, JSON, non-comma CSV/TSV, or ``--infinity clip``) is read in
chunks by :func:`fedep.data.readers.read_table` and its columns written back by pandas. A model
with a feature pipeline reads the columns it needs by name (any order; extra columns
are ignored; a missing one is one error naming it); ``top_features`` names the
pipeline's output features (``orig_bytes``, ``proto=tcp``, ...).

The output is written to a temporary file in the output's directory and renamed onto
``--output`` at the end; on any error or interruption (Ctrl-C, SIGTERM) the temporary
file is removed and ``--output`` is left as it was.
"""

from __future__ import annotations

import csv
import io
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

from fedep._atomic import atomic_write
from fedep._errors import one_line
from fedep.cli._common import (
    PROG,
    add_model_options,
    add_read_options,
    bad_value_error,
    check_columns,
    check_output_file,
    command_parser,
    info,
    load_model,
    model_features,
    nonneg_int,
    output_feature_names,
    positive_int,
    read_kwargs,
    used_columns,
)
from fedep.cli.training import numeric_matrix
from fedep.data import DataError
from fedep.data._tails import top_k
from fedep.data.readers import detect_format
from fedep.data.readers.source import _open_source, _read_head
from fedep.data.readers.table import chunks_with_originals
from fedep.data.readers.zeek import zeek_unset_field
from fedep.data.stream import (
    CsvBlockReader,
    NotStreamable,
    ScoreTailFormatter,
    read_csv_header,
)
from fedep.features import FeatureError


def register(sub) -> None:
    p = command_parser(
        sub,
        "score",
        description="Append anomaly_score, is_anomaly, anomaly_probability and top_features "
        "to every row of a "
        "flow-record file (any supported format), streaming it in chunks; the output is CSV.",
    )
    add_model_options(p)
    p.add_argument(
        "--input",
        required=True,
        help="flow records: CSV/TSV with a header row, Zeek log, Parquet, Feather, JSON "
        "(optionally compressed)",
    )
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
    add_read_options(p)
    p.set_defaults(func=cmd_score)


def client_ids(ids: np.ndarray, det) -> np.ndarray:
    """Client column text in the dtype of the model's client ids (integer models: a
    value that is not an integer matches no client)."""
    if det.clients_.dtype.kind in "iu":
        v = pd.to_numeric(pd.Series(ids), errors="coerce").to_numpy(dtype=np.float64)
        ok = np.isfinite(v) & (v == np.round(v))
        return np.where(ok, v, -(2**62)).astype(np.int64)
    return np.asarray(ids, dtype=str)


def top_indices(contrib: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Column indices and values of the ``k`` largest entries of each row, largest first
    (equal entries: the lower column first); :func:`fedep.data._tails.top_k`."""
    return top_k(contrib, k)


def score_block(det, X, groups, names, k):
    """Scores, 0/1 flags, anomaly probabilities and top-feature indices/values of one
    block (``X``: a DataFrame, or an array of the columns ``names``)."""
    frame = X if isinstance(X, pd.DataFrame) else pd.DataFrame(X, columns=names, copy=False)
    idx = vals = None
    if k > 0:
        # One pass: contributions' rows sum to decision_function (documented).
        contrib = det.feature_contributions(frame, groups)
        scores = contrib.sum(axis=1)
        idx, vals = top_indices(contrib, k)
    else:
        scores = det.decision_function(frame, groups)
    # predict()'s rule (score above the row's client threshold), without a second pass.
    flags = (scores > det.row_thresholds(groups, len(frame))).astype(int)
    return scores, flags, det.anomaly_probability(scores), idx, vals


def streams_as_csv(src: Path, args) -> bool:
    """Whether ``src`` is a comma-separated CSV file, plain or compressed (streamed byte
    for byte)."""
    fmt = args.format if args.format != "auto" else detect_format(src)
    if fmt != "csv" or args.infinity == "clip":
        return False
    if args.delimiter is not None:
        return args.delimiter == ","
    head = _read_head(_open_source(src))  # decompressed
    try:
        first = head.split(b"\n", 1)[0].removeprefix(b"\xef\xbb\xbf").decode("utf-8")
        names = next(csv.reader([first.rstrip("\r")]))
    except (UnicodeDecodeError, csv.Error, StopIteration):
        return False  # read_table's encodings and errors
    if any(not n.strip() for n in names):
        return False  # unnamed columns: read_table names them as pandas does
    return max((",", "\t", ";", "|"), key=first.count) == ","


class _MissingColumns:
    """The model's columns that no row of the input holds a value in: the pipeline
    imputes them silently, so ``fedep score`` names each once per run (on stderr, after
    the rows are written), not per chunk.

    A value is missing when null / NaN or, in a text column, one of the pipeline's
    missing tokens (``-``, ``?``, ``NA`` ...): what its transform imputes.
    """

    def __init__(self, det, src) -> None:
        self.src = src
        pipe = getattr(det, "features_", None)
        self.used = [] if pipe is None else used_columns(det)
        self.reset()

    def reset(self) -> None:
        self.pending = dict.fromkeys(self.used)  # no value seen yet
        self.absent: list[str] = []

    def columns(self, present) -> None:
        """The input's columns: a used one it lacks is absent (the pipeline imputes an
        optional column; a required one is refused before)."""
        have = set(present)
        self.absent = [c for c in self.used if c not in have]

    def update(self, frame: pd.DataFrame) -> None:
        from fedep.features import MISSING_TOKENS

        for c in [c for c in self.pending if c in frame.columns]:
            s = frame[c]
            if s.dtype.kind in "biufc":
                has = bool(s.notna().any())
            else:
                vals = pd.unique(s.dropna().astype(str))
                has = any(str(v).strip().lower() not in MISSING_TOKENS for v in vals)
            if has:
                del self.pending[c]

    def warn(self) -> None:
        for c in self.used:
            if c in self.absent:
                what = f"column {c!r} is not in the file"
            elif c in self.pending:
                what = f"column {c!r} is missing in every row"
            else:
                continue
            print(
                f"{PROG}: warning: {self.src}: {what}; the model imputes it (scores may be "
                "meaningless for it)",
                file=sys.stderr,
                flush=True,
            )


def cmd_score(args) -> int:
    src = Path(args.input)
    if not src.is_file():
        raise FileNotFoundError(f"input file {str(src)!r} does not exist")
    dst = check_output_file(args.output, "--output", {"--input": src, "--model": args.model})
    det = load_model(args.model, args.verify_key, args.require_signature)
    model_features(det, args.model)  # a model fitted on a plain array cannot read tables
    tails_names = output_feature_names(det)
    # chunks of bounded memory, whatever the model's width (a wide vocabulary)
    args.chunksize = min(args.chunksize, det.scoring_block_rows())
    stream = streams_as_csv(src, args)
    t0 = time.perf_counter()
    # Errors and KeyboardInterrupt (SIGTERM too, turned into one by main) leave no file.
    missing = _MissingColumns(det, src)
    with atomic_write(dst) as fout:
        try:
            run = _score_csv_stream if stream else _score_chunks
            n_rows, n_anom = run(det, src, fout, tails_names, args, missing)
        except NotStreamable as exc:
            # fit read this file as a table: so does score, rather than refuse it
            info(f"{one_line(exc)}: read as a table instead of streamed", args.quiet)
            fout.seek(0)
            fout.truncate()
            missing.reset()
            n_rows, n_anom = _score_chunks(det, src, fout, tails_names, args, missing)
    missing.warn()
    dt = time.perf_counter() - t0
    rate = n_rows / dt if dt > 0 else float("inf")
    info(
        f"scored {n_rows} records in {dt:.2f} s ({rate:,.0f} records/s); {n_anom} flagged "
        f"as anomalies ({100 * n_anom / max(n_rows, 1):.2f}%); written to {dst}",
        args.quiet,
    )
    return 0


def _score_located(det, X, groups, tails_names, k, src, where: str):
    """:func:`score_block`; a bad value the pipeline meets is a DataError naming the file,
    the ``where`` ("line" or "row") of the index label and the column."""
    try:
        return score_block(det, X, groups, tails_names, k)
    except FeatureError as exc:
        if not isinstance(exc.row, int | np.integer) or exc.row < 0:
            raise DataError(src, str(exc)) from None
        raise bad_value_error(exc, src, **{where: int(exc.row)}) from None


def _check_clash(columns, tails, src) -> None:
    clash = [c for c in tails.columns if c in columns]
    if clash:
        raise DataError(src, f"already has output column {clash[0]!r}", line=1, column=clash[0])


def _score_csv_stream(det, src, fout, tails_names, args, missing) -> tuple[int, int]:
    """Stream a comma-separated CSV file, copying its lines and appending the tails."""
    pipe = getattr(det, "features_", None)
    if pipe is None:
        names = [str(c) for c in det.feature_names_in_]
        reader = CsvBlockReader(src, names, args.chunksize, args.client_column)
    else:
        header, _ = read_csv_header(src)
        check_columns(det, header, src)
        missing.columns(header)
        cols = [c for c in used_columns(det) if c in header]
        reader = CsvBlockReader(
            src, [], args.chunksize, args.client_column, frame_columns=cols,
            infinity=args.infinity,
        )  # fmt: skip
    tails = ScoreTailFormatter(tails_names, args.top_features)
    _check_clash(reader.header, tails, src)
    n_anom = 0
    fout.write(reader.header_raw + b"," + ",".join(tails.columns).encode() + b"\n")
    for block in _read_ahead(reader):
        groups = None if block.ids is None else client_ids(block.ids, det)
        if block.frame is None:
            scores, flags, probs, idx, vals = score_block(
                det, block.X, groups, tails_names, tails.k
            )
        else:
            missing.update(block.frame)
            X = block.frame.set_axis(range(block.first_line, block.first_line + len(block)))
            scores, flags, probs, idx, vals = _score_located(
                det, X, groups, tails_names, tails.k, src, "line"
            )
        fout.write(tails.block_output(block, scores, flags, probs, idx, vals))
        n_anom += int(flags.sum())
    return reader.n_rows, n_anom


def _read_ahead(blocks):
    """The items of ``blocks``, the next one read by a worker thread while the caller
    works on the current one (parsing and scoring overlap on two cores: pandas' parser,
    NumPy/BLAS and the output writer release the GIL). Order, errors (raised where
    the plain loop would raise them) and memory (one block ahead) are unchanged."""
    it = iter(blocks)
    end = object()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="fedep-read") as pool:
        pending = pool.submit(next, it, end)
        while True:
            block = pending.result()
            if block is end:
                return
            pending = pool.submit(next, it, end)
            yield block


def _score_chunks(det, src, fout, tails_names, args, missing) -> tuple[int, int]:
    """Any other format: read_table chunks, written back as CSV with the tails."""
    tails = ScoreTailFormatter(tails_names, args.top_features)
    pipe = getattr(det, "features_", None)
    n_rows = n_anom = 0
    # the output copies each record as read (an infinite value stays infinite); the
    # features see the --infinity policy's value
    pairs = chunks_with_originals(src, args.chunksize, **read_kwargs(args))
    # a Zeek log's unset fields are copied as its unset marker ("-"), not as empty cells
    fmt = args.format if args.format != "auto" else detect_format(src)
    unset = zeek_unset_field(src) if fmt == "zeek" else ""
    for original, chunk in pairs:
        if n_rows == 0:
            cols = [str(c) for c in chunk.columns]
            check_columns(det, cols, src)
            missing.columns(cols)
            _check_clash(cols, tails, src)
            if args.client_column is not None and args.client_column not in cols:
                raise DataError(
                    src, f"client column {args.client_column!r} is not a column",
                    column=args.client_column,
                )  # fmt: skip
        groups = None
        if args.client_column is not None:
            s = chunk[args.client_column]
            ids = s.astype(object).where(s.notna(), "").astype(str).str.strip()
            groups = client_ids(ids.to_numpy(dtype=str), det)
        if pipe is None:
            X = numeric_matrix(chunk, tails_names, src)
            scores, flags, probs, idx, vals = score_block(det, X, groups, tails_names, tails.k)
        else:
            missing.update(chunk)
            X = chunk.set_axis(range(n_rows + 1, n_rows + 1 + len(chunk)))
            scores, flags, probs, idx, vals = _score_located(
                det, X, groups, tails_names, tails.k, src, "row"
            )
        out = original.assign(**tails.fields(scores, flags, probs, idx, vals))
        buf = io.StringIO()
        out.to_csv(buf, header=n_rows == 0, index=False, lineterminator="\n", na_rep=unset)
        fout.write(buf.getvalue().encode("utf-8"))
        n_rows += len(chunk)
        n_anom += int(flags.sum())
    if n_rows == 0:
        raise DataError(src, "no data rows")
    return n_rows, n_anom

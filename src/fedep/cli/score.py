"""``fedep score``: append anomaly_score, is_anomaly, anomaly_probability and top_features
to every row of a flow-record file, written as CSV; or write JSON lines, the records
``fedep watch`` writes (:mod:`fedep.alerts`, ``docs/alerts.md``).

Output format: ``--output-format csv|jsonl``, by default ``jsonl`` for an ``--output``
ending in ``.jsonl`` or ``.ndjson`` and ``csv`` otherwise (``--output -`` too).
``--anomalies-only`` keeps the records flagged as anomalies (CSV: those rows; JSON
lines: the alerts); without it a JSON line is written for every record (``"event":
"alert"`` or ``"score"``). ``--ecs`` writes the JSON lines under Elastic Common Schema
names.

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
file is removed and ``--output`` is left as it was. ``--output -`` writes the output to
stdout once it is complete (nothing on error), and nothing else goes to stdout.
"""

from __future__ import annotations

import contextlib
import csv
import io
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

from fedep._atomic import atomic_write
from fedep._errors import one_line
from fedep.alerts import AlertFactory, encode_record, model_identity
from fedep.alerts.scoring import score_block
from fedep.cli._common import (
    PROG,
    UsageError,
    add_model_options,
    add_read_options,
    check_columns,
    check_output_file,
    command_parser,
    info,
    load_model,
    model_features,
    nonneg_int,
    positive_int,
    read_kwargs,
)
from fedep.data import DataError
from fedep.data.errors import bad_value_error
from fedep.data.readers import detect_format
from fedep.data.readers.source import _open_source, _read_head
from fedep.data.readers.table import chunks_with_originals
from fedep.data.readers.zeek import zeek_header_lines, zeek_unset_field
from fedep.data.stream import (
    CsvBlockReader,
    NotStreamable,
    ScoreTailFormatter,
    read_csv_header,
)
from fedep.detectors.columns import (
    client_ids,
    numeric_matrix,
    output_feature_names,
    used_columns,
)
from fedep.features import FeatureError

#: ``--output-format``'s values; JSON lines for these ``--output`` suffixes by default.
OUTPUT_FORMATS = ("csv", "jsonl")
JSONL_SUFFIXES = (".jsonl", ".ndjson")


def register(sub) -> None:
    p = command_parser(
        sub,
        "score",
        description="Append anomaly_score, is_anomaly, anomaly_probability and top_features "
        "to every row of a "
        "flow-record file (any supported format), streaming it in chunks; the output is CSV, "
        "or JSON lines (one record per row, or per anomaly: the alerts of fedep watch; "
        "docs/alerts.md).",
    )
    add_model_options(p)
    p.add_argument(
        "--input",
        required=True,
        help="flow records: CSV/TSV with a header row, Zeek log, Parquet, Feather, JSON "
        "(optionally compressed)",
    )
    p.add_argument(
        "--output",
        required=True,
        metavar="PATH",
        help="file to write (replaced when complete), or - for stdout",
    )
    p.add_argument(
        "--output-format",
        choices=OUTPUT_FORMATS,
        help="csv: the input's rows with the four columns appended; jsonl: one JSON "
        "object per line (default: jsonl for an --output ending in .jsonl or .ndjson, "
        "else csv)",
    )
    p.add_argument(
        "--anomalies-only",
        action="store_true",
        help="write only the records flagged as anomalies (jsonl: the alerts)",
    )
    p.add_argument(
        "--ecs",
        action="store_true",
        help="jsonl under Elastic Common Schema names (event.kind, source.ip, ...), for "
        "Filebeat, Fluent Bit or Vector to ship as they are",
    )
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


def output_format(args) -> str:
    """``--output-format``, or from ``--output``'s suffix (``.jsonl``/``.ndjson``:
    jsonl; anything else, ``-`` included: csv)."""
    if args.output_format is not None:
        return args.output_format
    suffix = Path(args.output).suffix.lower() if args.output != "-" else ""
    return "jsonl" if suffix in JSONL_SUFFIXES else "csv"


@contextlib.contextmanager
def _output(dst: Path | None):
    """A binary file for the output: written atomically onto ``dst``, or (``dst``
    None) spooled to a temporary file and copied to stdout once complete."""
    if dst is not None:
        with atomic_write(dst) as fout:
            yield fout
        return
    with tempfile.TemporaryFile() as tmp:
        yield tmp
        tmp.seek(0)
        sys.stdout.flush()
        out = sys.stdout.buffer
        shutil.copyfileobj(tmp, out)
        out.flush()


def cmd_score(args) -> int:
    src = Path(args.input)
    if not src.is_file():
        raise FileNotFoundError(f"input file {str(src)!r} does not exist")
    fmt = output_format(args)
    if args.ecs and fmt != "jsonl":
        raise UsageError("--ecs names JSON fields: use --output-format jsonl (or a .jsonl output)")
    to_stdout = args.output == "-"
    dst = None
    if not to_stdout:
        dst = check_output_file(args.output, "--output", {"--input": src, "--model": args.model})
    det = load_model(args.model, args.verify_key, args.require_signature)
    model_features(det, args.model)  # a model fitted on a plain array cannot read tables
    tails_names = output_feature_names(det)
    # chunks of bounded memory, whatever the model's width (a wide vocabulary)
    args.chunksize = min(args.chunksize, det.scoring_block_rows())
    if fmt == "jsonl":
        model_id, digest = model_identity(det)
        factory = AlertFactory(
            det, model_id=model_id, model_digest=digest, top_k=args.top_features,
            ecs=args.ecs, client_column=args.client_column,
        )  # fmt: skip
        streamed, tabled = _jsonl_csv_stream, _jsonl_chunks
        what: object = factory
    else:
        streamed, tabled = _score_csv_stream, _score_chunks
        what = tails_names
    stream = streams_as_csv(src, args)
    t0 = time.perf_counter()
    # Errors and KeyboardInterrupt (SIGTERM too, turned into one by main) leave no file.
    missing = _MissingColumns(det, src)
    with _output(dst) as fout:
        try:
            run = streamed if stream else tabled
            n_rows, n_anom = run(det, src, fout, what, args, missing)
        except NotStreamable as exc:
            # fit read this file as a table: so does score, rather than refuse it
            info(f"{one_line(exc)}: read as a table instead of streamed", args.quiet)
            fout.seek(0)
            fout.truncate()
            missing.reset()
            n_rows, n_anom = tabled(det, src, fout, what, args, missing)
    missing.warn()
    dt = time.perf_counter() - t0
    rate = n_rows / dt if dt > 0 else float("inf")
    info(
        f"scored {n_rows} records in {dt:.2f} s ({rate:,.0f} records/s); {n_anom} flagged "
        f"as anomalies ({100 * n_anom / max(n_rows, 1):.2f}%); written to "
        f"{'stdout' if dst is None else dst}",
        args.quiet,
    )
    rules = getattr(det, "benign_counts_", None)
    if rules is not None and fmt != "jsonl":
        info(f"the model holds {len(rules)} suppression rules from analyst feedback: jsonl "
             "output writes each suppressed alert with its rule", args.quiet)  # fmt: skip
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
        if args.anomalies_only:
            fout.write(_flagged_lines(block, tails, scores, flags, probs, idx, vals))
        else:
            fout.write(tails.block_output(block, scores, flags, probs, idx, vals))
        n_anom += int(flags.sum())
    return reader.n_rows, n_anom


def _flagged_lines(block, tails, scores, flags, probs, idx, vals) -> bytes:
    """The flagged rows of a block with their tails (``--anomalies-only``)."""
    rows = np.flatnonzero(flags)
    if rows.size == 0:
        return b""
    sub = (None if a is None else a[rows] for a in (idx, vals))
    tail = tails(scores[rows], flags[rows], probs[rows], *sub)
    buf, starts, ends = block.buf, block.starts[rows].tolist(), block.ends[rows].tolist()
    return b"".join(buf[a:b] + t for a, b, t in zip(starts, ends, tail, strict=True))


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
            X = numeric_matrix(chunk, tails_names, src, first=n_rows + 1)
            scores, flags, probs, idx, vals = score_block(det, X, groups, tails_names, tails.k)
        else:
            missing.update(chunk)
            X = chunk.set_axis(range(n_rows + 1, n_rows + 1 + len(chunk)))
            scores, flags, probs, idx, vals = _score_located(
                det, X, groups, tails_names, tails.k, src, "row"
            )
        if args.anomalies_only:
            rows = np.flatnonzero(flags)
            sub = (None if a is None else a[rows] for a in (idx, vals))
            fields = tails.fields(scores[rows], flags[rows], probs[rows], *sub)
            out = original.iloc[rows].assign(**fields)
        else:
            out = original.assign(**tails.fields(scores, flags, probs, idx, vals))
        buf = io.StringIO()
        out.to_csv(buf, header=n_rows == 0, index=False, lineterminator="\n", na_rep=unset)
        fout.write(buf.getvalue().encode("utf-8"))
        n_rows += len(chunk)
        n_anom += int(flags.sum())
    if n_rows == 0:
        raise DataError(src, "no data rows")
    return n_rows, n_anom


# ---------------------------------------------------------------------- JSON lines


def _write_batch(fout, batch, args) -> None:
    """A batch's records (every record, or the alerts with ``--anomalies-only``)."""
    records = batch.alerts if args.anomalies_only else batch.records
    if args.anomalies_only and batch.suppressed:  # suppressed alerts too, for audit
        records = batch.audit
    fout.write(b"".join(encode_record(r) for r in records))


def _jsonl_csv_stream(det, src, fout, factory, args, missing) -> tuple[int, int]:
    """Stream a comma-separated CSV file into JSON lines (alerts numbered by line)."""
    header, _ = read_csv_header(src)
    check_columns(det, header, src)
    missing.columns(header)
    used = [c for c in used_columns(det) if c in header]
    cols = list(dict.fromkeys(used + [c for c in factory.passthrough_columns if c in header]))
    reader = CsvBlockReader(
        src, [], args.chunksize, args.client_column, frame_columns=cols, infinity=args.infinity
    )
    n_anom = 0
    for block in _read_ahead(reader):
        missing.update(block.frame)
        batch = factory.score(
            block.frame, gateway=None, source=str(src), first_line=block.first_line,
            gateways=block.ids, all_records=not args.anomalies_only,
        )  # fmt: skip
        _write_batch(fout, batch, args)
        n_anom += int(batch.flagged.sum())
    return reader.n_rows, n_anom


def _jsonl_chunks(det, src, fout, factory, args, missing) -> tuple[int, int]:
    """Any other format: read_table chunks into JSON lines (alerts numbered by line in
    a Zeek TSV log, else by data row)."""
    n_rows = n_anom = 0
    # a Zeek TSV log's records are numbered by line, as fedep watch numbers them
    fmt = args.format if args.format != "auto" else detect_format(src)
    head, where = (zeek_header_lines(src), "line") if fmt == "zeek" else (0, "row")
    for _, chunk in chunks_with_originals(src, args.chunksize, **read_kwargs(args)):
        if n_rows == 0:
            cols = [str(c) for c in chunk.columns]
            check_columns(det, cols, src)
            missing.columns(cols)
            if args.client_column is not None and args.client_column not in cols:
                raise DataError(
                    src, f"client column {args.client_column!r} is not a column",
                    column=args.client_column,
                )  # fmt: skip
        missing.update(chunk)
        batch = factory.score(
            chunk, gateway=None, source=str(src), first_line=head + n_rows + 1, where=where,
            all_records=not args.anomalies_only,
        )  # fmt: skip
        _write_batch(fout, batch, args)
        n_rows += len(chunk)
        n_anom += int(batch.flagged.sum())
    if n_rows == 0:
        raise DataError(src, "no data rows")
    return n_rows, n_anom

"""Read raw flow-record files (Zeek logs, flow-exporter CSVs, Parquet, Arrow) into DataFrames.

:func:`read_table` reads one file into a :class:`pandas.DataFrame` (or, with ``chunksize``,
an iterator of DataFrames for streaming scoring); :func:`detect_format` says how a file
would be read; :func:`gateway_files` and :func:`read_many` turn a directory or a list of
files into one table per gateway (the gateway id is the file stem).

Supported formats (``format=``):

``"csv"`` / ``"tsv"``
    Delimited text with a header line; the delimiter is sniffed from the header line
    (the most frequent of ``,`` tab ``;`` ``|``) unless given. Parsed by ``pyarrow.csv``
    (multi-threaded; a whole uncompressed file of plain numbers by pandas' C parser,
    faster on few cores, falling back to pyarrow for anything it would read
    differently); column types are inferred over the whole file, so a column mixing
    numbers and text is kept as a string column (never dropped). Empty fields and the
    usual missing markers (``NA``, ``NaN``, ``null`` ...) are missing values; a column
    with no value at all is float64 NaN. Blank lines carry no data and are ignored. Text
    that is not UTF-8 is decoded as Windows-1252 (CIC-IDS2017's labels hold byte ``0x96``)
    or, failing that, Latin-1.
``"zeek"``
    Zeek ASCII (TSV) logs with their ``#separator``, ``#set_separator``, ``#empty_field``,
    ``#unset_field``, ``#path``, ``#open``, ``#fields``, ``#types`` header and ``#close``
    trailer. The unset marker (``-``) is a missing value; the empty marker (``(empty)``)
    is an empty string. Dtypes come from ``#types``: ``count`` / ``int`` / ``port`` ->
    nullable ``Int64``; ``double`` / ``interval`` / ``time`` -> float64 (``time`` in
    seconds since the epoch); ``bool`` (``T`` / ``F``) -> nullable ``boolean``; anything
    else (``string``, ``addr``, ``subnet``, ``enum``, ``set[...]``, ``vector[...]``,
    ``table[...]``) -> string. **Set and vector fields are kept as one string, the
    elements joined with the log's set separator** (``"dns,http"``); Zeek's ``\\xHH``
    escapes are kept as written.
``"zeek-json"``
    Zeek JSON logs (one object per line, dotted keys such as ``id.orig_h``). Same dtype
    conventions as ``"zeek"`` where the JSON allows: integers -> ``Int64``, JSON arrays
    (sets, vectors) -> strings joined with ``,``; ``ts`` (a number or an ISO 8601 string)
    -> float64 seconds since the epoch. A key absent from a line is a missing value.
``"json"``
    Generic JSON Lines (or one JSON array of objects).
``"parquet"``, ``"feather"``
    Parquet, and Arrow IPC files (Feather v1/v2, ``.arrow``) or streams.

Compressed files (gzip, bzip2, xz, zstd) are recognised by their magic bytes (and a
``.gz`` / ``.bz2`` / ``.xz`` / ``.zst`` name must hold what it says); they are
decompressed on the fly (zstd through pyarrow's codec, so no extra dependency).

Column names are stripped of surrounding whitespace (CICFlowMeter writes ``" Flow Bytes/s"``).

Infinity policy (``infinity=``), for CICFlowMeter-style ``Infinity`` / ``-Infinity`` /
``inf`` values in floating-point columns: ``"nan"`` (the default) turns them into missing
values (NaN), ``"clip"`` replaces ``+inf`` with the column's largest finite value and
``-inf`` with its smallest (over the whole file, also when streaming: a first pass finds
the range; a column with no finite value is an error), ``"error"`` raises
:class:`ReadError` naming the file, the 1-based line (the header is line 1; the data row
for Parquet, Arrow and JSON) and the column.

Every failure is a :class:`ReadError` (a :class:`~fedep.data.errors.DataError`, hence a
:class:`ValueError`) whose one-line message names the file and, where known, the line and
the column. Nothing is silently dropped: a row with the wrong number of fields is an error.
"""

from __future__ import annotations

from fedep.data.readers.detect import detect_format
from fedep.data.readers.per_gateway import (
    check_distinct_gateways,
    gateway_files,
    gateway_id,
    read_many,
)
from fedep.data.readers.source import FORMATS, INFINITY_POLICIES, ReadError
from fedep.data.readers.table import read_table

__all__ = [
    "FORMATS",
    "INFINITY_POLICIES",
    "ReadError",
    "detect_format",
    "check_distinct_gateways",
    "gateway_files",
    "gateway_id",
    "read_many",
    "read_table",
]

"""The fields of an alert: the record's identifying fields passed through, and their
Elastic Common Schema (ECS) names.

An alert keeps a record's own identifiers (:data:`ID_FIELDS`: Zeek ``conn.log``'s
``ts``, ``uid``, 5-tuple, ``proto`` and ``service``, and the common flow exporters'
names for the same), so that an analyst can find the flow in the log it came from. With
ECS (``ecs=True``) they are written under the ECS names of :data:`ECS_NAMES`
(``source.ip``, ``destination.port``, ``zeek.session_id`` ...: ECS 8, the names
Filebeat's Zeek module gives ``conn.log``), nested as JSON objects, so that Filebeat,
Fluent Bit or Vector ship the lines to Elasticsearch or OpenSearch without a parser.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "ID_FIELDS", "ECS_NAMES", "ECS_VERSION", "json_value", "json_column", "put", "iso_time",
]  # fmt: skip

#: The ECS version whose field names :data:`ECS_NAMES` and the alerts use.
ECS_VERSION = "8.11.0"

#: Identifying fields of a flow record, passed through into its alert when the input has
#: them: Zeek ``conn.log`` first, then other exporters' names for the same things
#: (TON_IoT and most CSV exports; UNSW-NB15 (Argus); CICFlowMeter; NetFlow v9 / the
#: NF-* datasets).
ID_FIELDS: tuple[str, ...] = (
    # Zeek conn.log
    "ts", "uid", "id.orig_h", "id.orig_p", "id.resp_h", "id.resp_p", "proto", "service",
    # TON_IoT, generic CSV exports
    "src_ip", "src_port", "dst_ip", "dst_port",
    # UNSW-NB15 (Argus)
    "stime", "srcip", "sport", "dstip", "dsport",
    # CICFlowMeter
    "Flow ID", "Timestamp", "Src IP", "Src Port", "Dst IP", "Dst Port", "Protocol",
    # NetFlow v9 field names (NF-* datasets)
    "IPV4_SRC_ADDR", "L4_SRC_PORT", "IPV4_DST_ADDR", "L4_DST_PORT", "PROTOCOL",
)  # fmt: skip

#: The ECS name of each identifying field that has one (the others are written under
#: ``fedep.record.<name>``). ``@timestamp`` is written as ISO 8601 UTC from epoch
#: seconds; a textual protocol (``tcp``) is ``network.transport``, a number (6) is
#: ``network.iana_number``.
ECS_NAMES: dict[str, str] = {
    "ts": "@timestamp",
    "stime": "@timestamp",
    "Timestamp": "@timestamp",
    "uid": "zeek.session_id",
    "id.orig_h": "source.ip",
    "id.orig_p": "source.port",
    "id.resp_h": "destination.ip",
    "id.resp_p": "destination.port",
    "proto": "network.transport",
    "service": "network.protocol",
    "src_ip": "source.ip",
    "src_port": "source.port",
    "dst_ip": "destination.ip",
    "dst_port": "destination.port",
    "srcip": "source.ip",
    "sport": "source.port",
    "dstip": "destination.ip",
    "dsport": "destination.port",
    "Src IP": "source.ip",
    "Src Port": "source.port",
    "Dst IP": "destination.ip",
    "Dst Port": "destination.port",
    "Protocol": "network.transport",
    "IPV4_SRC_ADDR": "source.ip",
    "L4_SRC_PORT": "source.port",
    "IPV4_DST_ADDR": "destination.ip",
    "L4_DST_PORT": "destination.port",
    "PROTOCOL": "network.transport",
}

_PATHS = {t: tuple(t.split(".")) for t in ECS_NAMES.values()}

#: Fields whose values are port numbers: a whole float (a column with a missing value
#: reads as float) is written as an integer.
PORT_FIELDS = frozenset(k for k, v in ECS_NAMES.items() if v.endswith(".port"))


def json_value(v: Any, integer: bool = False) -> Any:
    """A value read from a table as a plain JSON value: NumPy scalars to Python, a
    missing value (None, NaN, NaT, ``pd.NA``) to None, NaN/inf to None; with
    ``integer``, a whole float to int."""
    if v is None:
        return None
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float):
        if not math.isfinite(v):
            return None
        if integer and v.is_integer():
            return int(v)
        return v
    if isinstance(v, (bool, int, str)):
        return v
    try:  # NaT is not equal to itself; pd.NA's comparison has no truth value
        if v != v:
            return None
    except (TypeError, ValueError):
        return None
    return str(v)


def json_column(s: pd.Series, integer: bool = False) -> list:
    """A column's values as :func:`json_value` makes them, converted a column at a
    time (missing -> None; with ``integer``, whole floats -> int)."""
    kind = s.dtype.kind
    if kind == "f":
        v = s.to_numpy(dtype=np.float64)
        ok = np.isfinite(v)
        if integer and bool(np.all(v[ok] == np.round(v[ok]))):
            out = np.where(ok, v, 0).astype(np.int64).tolist()
        else:
            out = v.tolist()
        if not ok.all():
            for i in np.flatnonzero(~ok).tolist():
                out[i] = None
        return out
    if kind in "iub" and not s.hasnans:
        return s.to_numpy().tolist()
    vals = s.astype(object).where(s.notna(), None).tolist()
    return [v if v is None or type(v) is str else json_value(v, integer) for v in vals]


def iso_time(seconds: float) -> str | None:
    """Epoch seconds as ISO 8601 UTC with microseconds (``2026-11-27T21:56:18.250000Z``);
    None when not a finite number in datetime's range."""
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
        return None
    if not math.isfinite(seconds):
        return None
    try:
        t = datetime.fromtimestamp(seconds, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def ecs_time(value: Any) -> str | None:
    """An identifying time field's value as ECS ``@timestamp``: epoch seconds, or text
    in ISO 8601 (``2026-11-27T21:56:18Z``); None for anything else (the value then
    stays under ``fedep.record``)."""
    if isinstance(value, str):
        try:
            t = datetime.fromisoformat(value.strip())
        except ValueError:
            return None
        if t.tzinfo is None:
            t = t.replace(tzinfo=UTC)
        return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return iso_time(value)


def put(doc: dict, dotted: str, value: Any) -> None:
    """Set ``doc[a][b][c] = value`` for ``dotted = "a.b.c"`` (``@timestamp`` stays one
    key), creating the nested objects."""
    parts = dotted.split(".")
    for p in parts[:-1]:
        doc = doc.setdefault(p, {})
    doc[parts[-1]] = value


def ecs_fields(record: dict[str, Any], skip=frozenset()) -> tuple[dict, dict]:
    """Identifying fields (name -> JSON value; the keys in ``skip`` ignored) as ECS: the
    nested ECS fields, and the fields without an ECS name (for ``fedep.record``). A
    missing value is left out."""
    doc: dict = {}
    rest: dict = {}
    for name, v in record.items():
        if v is None or name in skip:
            continue
        target = ECS_NAMES.get(name)
        if target is None:
            rest[name] = v
            continue
        if target == "@timestamp":
            t = ecs_time(v)
            if t is None or "@timestamp" in doc:
                rest[name] = v
            else:
                doc["@timestamp"] = t
            continue
        if target == "network.transport" and isinstance(v, (int, float)):
            target = "network.iana_number"  # a protocol number (6), not a name (tcp)
            v = str(int(v)) if float(v).is_integer() else str(v)
        elif target == "network.transport" or target == "network.protocol":
            v = str(v).lower()  # ECS: lowercase
        parts = _PATHS.get(target) or tuple(target.split("."))
        node = doc
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = v
    return doc, rest

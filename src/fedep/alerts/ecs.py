"""Records of the alert stream under Elastic Common Schema names.

:func:`to_ecs` maps every record fedep writes (``alert``, ``alert_group``,
``window_summary``, ``threshold_changed``) from its default field names to ECS 8, as
nested JSON objects. The content is the same; what ECS has no name for is kept under
``fedep.*``. The default record is the one definition; the ECS one is derived from it.

============================  =============================================================
default                       ECS
============================  =============================================================
``event: "alert"``            ``event.kind: "alert"``, ``event.module: "fedep"``,
                              ``event.dataset: "fedep.alerts"``, ``event.category:
                              ["network"]``, ``event.type: ["connection"]``
``ts`` (epoch seconds)        ``@timestamp`` (ISO 8601 UTC)
``uid``                       ``zeek.session_id``
5-tuple, ``proto``,           ``source.ip/port``, ``destination.ip/port``,
``service``                   ``network.transport`` (``network.iana_number`` for a number),
                              ``network.protocol``
``score``                     ``event.risk_score`` and ``fedep.score``
``probability``               ``event.risk_score_norm`` (0-100), ``event.severity``
                              (0-100, rounded) and ``fedep.probability``
``threshold``,                ``fedep.threshold``, ``fedep.top_features``
``top_features``
``gateway``                   ``observer.name`` and ``fedep.gateway``
``model.id``, ``model.digest``  ``rule.id``, ``rule.version`` (and ``fedep.model``)
``log.file``                  ``log.file.path``
``log.offset`` (bytes)        ``log.offset``
``log.line`` / ``log.row``    ``fedep.log.line`` / ``fedep.log.row``
other identifying fields      ``fedep.record.<name>``
============================  =============================================================

A record of ``fedep score --output-format jsonl`` that is not flagged (``event:
"score"``) is the same with ``event.kind: "event"`` and ``event.action: "score"``.
Summaries are ``event.kind: "metric"``, threshold changes ``event.kind: "event"``, groups
``event.kind: "alert"`` with ``event.count``; each has ``event.action`` set to its
default ``event`` value and its content under ``fedep.*``.
"""

from __future__ import annotations

from typing import Any

from fedep.alerts.fields import ECS_VERSION, ecs_fields, iso_time, put

__all__ = ["to_ecs", "DEFAULT_ONLY"]

#: Keys of a default alert that are not identifying fields.
DEFAULT_ONLY = frozenset(
    {
        "event",
        "score",
        "threshold",
        "probability",
        "top_features",
        "gateway",
        "model",
        "log",
        "suppressed_by",
    }
)

_RULE_NAME = "fedep: residual energy above the threshold"


def _base(kind: str, action: str) -> dict:
    return {
        "ecs": {"version": ECS_VERSION},
        "event": {"kind": kind, "module": "fedep", "dataset": "fedep.alerts", "action": action},
    }


def _rule(model: dict | None) -> dict:
    if not model:
        return {}
    return {
        "id": model.get("id"),
        "version": model.get("digest"),
        "name": _RULE_NAME,
        "ruleset": "fedep",
    }


def _alert(a: dict) -> dict:
    flagged = a.get("event") == "alert"
    action = "anomaly" if flagged else str(a.get("event"))  # "score" or "suppressed"
    doc = _base("alert" if flagged else "event", action)
    fields, rest = ecs_fields(a, DEFAULT_ONLY)
    ts = fields.pop("@timestamp", None)
    if ts is not None:
        doc = {"@timestamp": ts, **doc}
    for k, v in fields.items():
        if isinstance(v, dict):
            doc.setdefault(k, {}).update(v)
        else:
            doc[k] = v
    ev = doc["event"]
    ev["category"] = ["network"]
    ev["type"] = ["connection"]
    p = a.get("probability")
    ev["risk_score"] = a.get("score")
    if isinstance(p, (int, float)):
        ev["risk_score_norm"] = 100.0 * p
        ev["severity"] = int(round(100.0 * p))
    if a.get("gateway") is not None:
        doc["observer"] = {"name": a["gateway"]}
    rule = _rule(a.get("model"))
    if rule:
        doc["rule"] = rule
    log = a.get("log") or {}
    fed: dict[str, Any] = {
        "score": a.get("score"),
        "threshold": a.get("threshold"),
        "probability": p,
        "top_features": a.get("top_features"),
        "gateway": a.get("gateway"),
        "model": a.get("model"),
    }
    if a.get("suppressed_by") is not None:
        fed["suppressed_by"] = a["suppressed_by"]
    if log.get("file") is not None:
        put(doc, "log.file.path", log["file"])
    if log.get("offset") is not None:
        put(doc, "log.offset", log["offset"])
    where = {k: log[k] for k in ("line", "row") if log.get(k) is not None}
    if where:
        fed["log"] = where
    if rest:
        fed["record"] = rest
    doc["fedep"] = fed
    return doc


def _other(r: dict, kind: str) -> dict:
    doc = _base(kind, str(r.get("event")))
    t = None
    for key in ("end", "last_seen", "time"):
        if isinstance(r.get(key), (int, float)):
            t = iso_time(r[key])
            break
    if t is not None:
        doc = {"@timestamp": t, **doc}
    if r.get("event") == "alert_group":
        doc["event"]["count"] = r.get("count")
        if isinstance(r.get("max_score"), (int, float)):
            doc["event"]["risk_score"] = r["max_score"]
    if r.get("gateway") is not None:
        doc["observer"] = {"name": r["gateway"]}
    rule = _rule(r.get("model"))
    if rule:
        doc["rule"] = rule
    fed = {k: v for k, v in r.items() if k != "event"}
    if "top" in fed:  # the group's alerts, as the stream writes alerts
        fed["top"] = [to_ecs(x) if x.get("event") == "alert" else x for x in fed["top"]]
    doc["fedep"] = fed
    return doc


def to_ecs(record: dict) -> dict:
    """A record of the alert stream (default names) under ECS names.

    Parameters
    ----------
    record : dict
        An ``alert``, ``alert_group``, ``window_summary`` or ``threshold_changed``
        record with the default names; a record already in ECS (a nested ``event``
        object) is returned as it is.

    Returns
    -------
    dict
        A new JSON-ready dict, nested by the dots of the ECS names.
    """
    ev = record.get("event")
    if isinstance(ev, dict):
        return record
    if ev in ("alert", "score", "suppressed"):
        return _alert(record)
    kind = {"alert_group": "alert", "window_summary": "metric"}.get(str(ev), "event")
    return _other(record, kind)

"""Column-name hints: which names say a column is a label, timestamp, address, port or id.

Read by the gateway summary (:mod:`fedep.features.summaries`: such a column's values
never leave the gateway) and by the decision (:mod:`fedep.features.decide`: such a
column is excluded).
"""

from __future__ import annotations

import re

__all__ = ["NAME_HINTS", "name_hint", "normalize_name"]

#: Column-name hints: kind -> (exact normalised names, regular expressions).
NAME_HINTS: dict[str, tuple[frozenset[str], tuple[str, ...]]] = {
    "label": (
        frozenset(
            "label labels attack attack_cat attack_type attack_category type class "
            "category subcategory detailed_label target difficulty difficulty_level "
            "is_attack malicious".split()
        ),
        (),
    ),
    "timestamp": (
        frozenset(
            "ts timestamp time date datetime stime ltime start_time end_time starttime "
            "endtime first_seen last_seen flow_start flow_end".split()
        ),
        (r".*timestamp.*", r".*_ts", r"ts_.*", r".*_date", r"date_.*"),
    ),
    "address": (
        frozenset(
            "ip src dst srcip dstip saddr daddr src_ip dst_ip source_ip destination_ip "
            "id_orig_h id_resp_h mac src_mac dst_mac host".split()
        ),
        (r".*_ip", r"ip_.*", r".*addr.*", r".*_mac", r"id_.*_h"),
    ),
    "port": (
        frozenset("sport dport spt dpt id_orig_p id_resp_p".split()),
        # The name must END in a port word: "ct_src_dport_ltm" (a count), "transport"
        # (a protocol) or "is_sm_ips_ports" (a flag) are not endpoint ports.
        (
            r"(.*_)?(src|dst|s|d|source|dest|destination|orig|resp|local|remote)?_?port",
            r"id_.*_p",
        ),
    ),
    "identifier": (
        frozenset("uid id uuid fuid flow_id conn_id session_id row_id index unnamed_0".split()),
        (r".*_id", r".*_uid", r"unnamed_\d+"),
    ),
}


def normalize_name(name: str) -> str:
    """Lower-cased name with runs of non-alphanumerics as ``_`` (``id.orig_h`` -> ``id_orig_h``)."""
    return re.sub(r"[^0-9a-z]+", "_", str(name).lower()).strip("_")


def name_hint(name: str) -> str | None:
    """Which :data:`NAME_HINTS` kind a column name matches, if any."""
    n = normalize_name(name)
    for kind, (exact, patterns) in NAME_HINTS.items():
        if n in exact or any(re.fullmatch(p, n) for p in patterns):
            return kind
    return None

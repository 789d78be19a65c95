"""What the server accepts from a gateway: every reply checked against what was asked.

A gateway is not trusted to be honest. Each phase's reply is read by one of the
functions here, which raises ``ValueError`` (one line) on anything outside what an
honest gateway can send: a count other than the one it declared at first contact,
an array of another shape, a value that is not finite, a list longer than the
pipeline allows. The transport turns the error into a refusal naming the gateway and
the phase, and drops that gateway (:meth:`fedep.flower.transport.Roster.drop`).
"""

from __future__ import annotations

import json
import re

import numpy as np
from flwr.app import Message

from fedep.core.stats import Moments
from fedep.features import ColumnSummaries
from fedep.flower.messages import arrays_of

__all__ = [
    "LABEL_PATTERN",
    "check_gram",
    "check_label",
    "read_count",
    "read_moments",
    "read_summaries",
    "summary_text_cap",
]

#: A gateway's label: printable, no control character, bounded length.
LABEL_PATTERN = re.compile(r"[A-Za-z0-9._:@-]{1,128}")
#: Per column of a summary: the fixed fields, the distinct-count sketch and the
#: histogram (a few KiB honest), plus per top-list entry (value text and count).
_COLUMN_BYTES = 64 * 1024
_TOP_ENTRY_BYTES = 1024
#: Most columns a raw table may declare.
MAX_COLUMNS = 100_000
#: Relative rounding allowed in symmetry (Gram) and orthonormality (bases).
_SYM_TOL = 1e-8


def check_label(label: object) -> str | None:
    """Why ``label`` is refused (None when it is safe to print and to use as a name)."""
    if not isinstance(label, str) or LABEL_PATTERN.fullmatch(label) is None:
        return f"unsafe client label {ascii(label)[:200]} (allowed: [A-Za-z0-9._:@-]{{1,128}})"
    return None


def read_count(value: object, what: str = "count") -> int:
    """A non-negative integer sent by a gateway (an int, or a float holding one)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{what} is a {type(value).__name__}, not an integer")
    if not np.isfinite(value) or value != int(value) or value < 0:
        raise ValueError(f"{what} {value!r} is not a non-negative integer")
    return int(value)


#: Most records a gateway may declare at first contact: a count is exact in float64
#: (the moments' arithmetic) only up to 2**53.
MAX_DECLARED_COUNT = 2**53
#: Most a gateway's declared record count may exceed the median of the gateways'
#: declared counts (with three gateways or more): the shared scaling weighs each
#: gateway's moments by its count, and honest gateways differ by their traffic, not by
#: orders of magnitude.
COUNT_SPREAD = 100


def outsized_counts(counts: dict[str, int]) -> dict[str, str]:
    """The gateways whose declared count is out of bounds, and why (one line each).

    A count is refused above :data:`MAX_DECLARED_COUNT`, and (three gateways or more)
    above :data:`COUNT_SPREAD` times the median of the declared counts: a gateway that
    claims a huge count would otherwise own the merged moments (the shared mean and
    scale) and every later check that binds its replies to its enrolment.
    """
    out = {}
    med = float(np.median(list(counts.values()))) if len(counts) >= 3 else None
    for lab, c in counts.items():
        if c > MAX_DECLARED_COUNT:
            out[lab] = f"declared {c} records, more than {MAX_DECLARED_COUNT}"
        elif med is not None and c > COUNT_SPREAD * max(med, 1.0):
            out[lab] = (
                f"declared {c} records, more than {COUNT_SPREAD} times the gateways' "
                f"median ({med:.0f})"
            )
    return out


def _array(a, name: str, shape: tuple[int, ...]) -> np.ndarray:
    # the size first: a reply cannot make the server convert more than it asked for
    size = getattr(a, "size", None)
    if size is not None and size != int(np.prod(shape)):
        raise ValueError(f"{name} of {size} values, expected shape {shape}")
    x = np.asarray(a, dtype=float)
    if x.shape != shape:
        raise ValueError(f"{name} of shape {x.shape}, expected {shape}")
    if not np.isfinite(x).all():
        raise ValueError(f"{name} holds NaN or inf")
    return x


def read_moments(rep: Message, *, count: int | None, n_features: int | None) -> Moments:
    """The moments in ``rep``: count equal to ``count`` (the gateway's declared record
    count; None: any non-negative), ``mean`` and ``m2`` finite of shape
    ``(n_features,)``, ``m2 >= 0``."""
    n = read_count(rep.content["count"]["count"])
    if count is not None and n != count:
        raise ValueError(f"moments of {n} records, but it declared {count}")
    a = arrays_of(rep.content["moments"])
    if n_features is None:
        n_features = int(np.asarray(a["mean"]).size)
    mean = _array(a["mean"], "mean", (n_features,))
    m2 = _array(a["m2"], "m2", (n_features,))
    if (m2 < 0).any():
        raise ValueError("m2 < 0")
    return Moments(n, mean, m2)


def check_gram(G, n: int, count: int, declared: int | None) -> np.ndarray:
    """A gateway's Gram matrix ``Z^T Z``: (n, n), finite, symmetric, diagonal >= 0; its
    count equal to the declared one."""
    if declared is not None and count != declared:
        raise ValueError(f"a Gram matrix of {count} records, but it declared {declared}")
    G = _array(G, "G", (n, n))
    scale = max(float(np.abs(G).max()), 1e-300)
    if float(np.abs(G - G.T).max()) > _SYM_TOL * scale:
        raise ValueError("a Gram matrix that is not symmetric")
    if (np.diag(G) < 0).any():
        raise ValueError("a Gram matrix with a negative diagonal")
    return G


def check_subset_sums(count: int, total, gram, n: int, declared: int | None):
    """A gateway's count, sum (n,) and Gram matrix (n, n) of a subset of its records
    (``TrimRecords.sums``): :func:`check_gram`, a finite sum, and each feature's
    ``(sum x)^2 <= count * sum x^2`` (Cauchy-Schwarz: a sum no records could give is a
    lie); ``declared`` the count it must equal (its training records), if known."""
    if count < 0:
        raise ValueError(f"a count of {count}")
    G = check_gram(gram, n, count, declared)
    total = _array(total, "total", (n,))
    if (total**2 > count * np.diag(G) * (1 + _SYM_TOL) + 1e-9).any():
        raise ValueError("a sum of records larger than their sum of squares allows")
    return count, total, G


def summary_text_cap(n_columns: int, max_categories: int) -> int:
    """Most characters an honest summary of ``n_columns`` columns can take."""
    per_column = _COLUMN_BYTES + 4 * max_categories * _TOP_ENTRY_BYTES
    return 64 * 1024 + max(n_columns, 1) * per_column


def read_summaries(
    text: object, *, count: int | None, n_columns: int | None, max_categories: int
) -> ColumnSummaries:
    """A gateway's column summaries: bounded text (checked before parsing), one gateway's
    summary of exactly its ``count`` declared records, counts non-negative integers with
    ``n_null <= n_rows``, top lists at most ``4 * max_categories`` long."""
    if not isinstance(text, str):
        raise TypeError(f"summary is a {type(text).__name__}, not text")
    cap = summary_text_cap(n_columns or 1, max_categories)
    if len(text) > cap:
        raise ValueError(f"summary of {len(text)} characters, over the cap of {cap}")
    cs = ColumnSummaries.from_dict(json.loads(text))
    if count is not None and cs.n_rows != count:
        raise ValueError(f"summary of {cs.n_rows} rows, but it declared {count}")
    if cs.n_rows < 0 or cs.n_gateways != 1:
        raise ValueError(f"summary of {cs.n_rows} rows from {cs.n_gateways} gateways")
    if n_columns is not None and len(cs.columns) > n_columns:
        raise ValueError(f"summary of {len(cs.columns)} columns, but it declared {n_columns}")
    for name, c in cs.columns.items():
        col = f"column {ascii(name)[:80]}"
        ints = (
            "n_null n_token n_absent n_num n_zero n_one n_nonneg n_posinf n_neginf n_junk "
            "other_count n_address n_uid n_time n_bool_token"
        ).split()
        for k in ints:
            if getattr(c, k) < 0:
                raise ValueError(f"{col}: {k} < 0")
        if c.n_rows != cs.n_rows or c.n_gateways != 1:
            raise ValueError(f"{col}: {c.n_rows} rows of the summary's {cs.n_rows}")
        if c.n_null + c.n_token > c.n_rows or c.n_num > c.n_rows:
            raise ValueError(f"{col}: more null or numeric values than rows")
        if len(c.top) > 4 * max_categories:
            raise ValueError(f"{col}: a top list of {len(c.top)} values")
        if any(v < 0 for v in c.top.values()) or sum(c.top.values()) > c.n_rows:
            raise ValueError(f"{col}: top-list counts outside [0, {c.n_rows}]")
        if not (np.isfinite(c.mean) and (np.isfinite(c.m2) or c.m2 == np.inf) and c.m2 >= 0):
            raise ValueError(f"{col}: mean or m2 not finite or m2 < 0")
    return cs

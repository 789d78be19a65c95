"""Packing clients' records into padded 3-D blocks so per-client work is batched.

Clients are sorted by size and grouped so that each group is one array
``(k, m, n)`` (k clients, m = largest client in the group, zero rows as padding).
Zero rows are a fixed point of every FedEP/FedPG update (soft-thresholding, the
U-step and the duals map 0 to 0, and they add nothing to a Gram matrix), so the
padding never changes a result; grouping keeps Python overhead per *group*, not per
client, which is what makes hundreds of clients cheap.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["ClientGroup", "make_groups"]


@dataclass
class ClientGroup:
    """Clients sharing one padded block.

    Attributes
    ----------
    clients : ndarray of shape (k,)
        Positions of the clients in the federation's client list.
    lengths : ndarray of shape (k,)
        Real number of rows of each client (the rest of ``X`` is padding).
    X : ndarray of shape (k, m, n) or None
        Zero-padded records (None once a cohort needs only their Gram matrices); for
        a client alone (k = 1), a view of its block. Read only.
    U, A : ndarray of shape (k, m, n) or None
        FedEP's auxiliary ``U = X - S`` and scaled dual ``A = Lam / mu`` of the same
        rows, when the cohort models ``S`` (else None). ``A`` is None, with ``U`` kept,
        for clients of many rows, whose duals are recomputed from ``U``
        (:mod:`fedep.core.large_clients`).
    dual_basis : ndarray of shape (k, n, r) or None
        Those clients' bases at their last data step.
    dual_scale : ndarray of shape (k,) or None
        ``2/mu`` for a client that took a data step, else 0 (``A = 0``).
    """

    clients: np.ndarray
    lengths: np.ndarray
    X: np.ndarray | None
    U: np.ndarray | None = None
    A: np.ndarray | None = None
    dual_basis: np.ndarray | None = None
    dual_scale: np.ndarray | None = None


def make_groups(
    blocks: list[np.ndarray], *, max_rows: int = 16384, max_waste: float = 0.25
) -> list[ClientGroup]:
    """Group clients into padded blocks.

    Parameters
    ----------
    blocks : list of ndarray, each (n_i, n_features)
        Every client's records.
    max_rows : int, default=16384
        Target padded rows (``k * m``) per group; a larger client gets a group alone.
    max_waste : float, default=0.25
        Largest fraction of padding rows allowed in a group.

    Returns
    -------
    list of ClientGroup
        Every client appears in exactly one group.
    """
    sizes = np.array([b.shape[0] for b in blocks])
    order = np.argsort(-sizes, kind="stable")
    groups: list[list[int]] = []
    cur: list[int] = []
    for c in order:
        if cur:
            m = sizes[cur[0]]  # largest in the group (sorted descending)
            k = len(cur) + 1
            used = sizes[cur].sum() + sizes[c]
            if k * m > max_rows or 1.0 - used / (k * m) > max_waste:
                groups.append(cur)
                cur = []
        cur.append(int(c))
    if cur:
        groups.append(cur)
    out = []
    n = blocks[0].shape[1]
    for g in groups:
        lengths = sizes[g]
        if len(g) == 1:
            # a client alone needs no padding: a (1, N_i, n) view of its block (the
            # groups' X is only read), not a copy of the largest clients' records
            X = np.ascontiguousarray(blocks[g[0]], dtype=np.float64)[None]
        else:
            X = np.zeros((len(g), int(lengths.max()), n))
            for j, c in enumerate(g):
                X[j, : lengths[j]] = blocks[c]
        out.append(ClientGroup(np.array(g), lengths, X))
    return out

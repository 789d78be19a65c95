"""A federated round under secure aggregation: the server sees the gateways' summed
round (:func:`fedep.federation.server.round_sums`) and nothing of one gateway.

:func:`secure_round` is the secure counterpart of ``RemoteClients.local_round``: one
SecAgg+ sum (:func:`fedep.flower.secagg.secure_sum`) whose values each gateway computes
by running its local round; the server step then runs on the sums
(:func:`fedep.federation.server.server_round_from_sums`).
"""

from __future__ import annotations

import json

import numpy as np
from flwr.app import ConfigRecord, RecordDict

from fedep.core.fedep import RoundReport
from fedep.federation.rounds import TooFewClients
from fedep.federation.server import ROUND_SCALARS
from fedep.flower.secagg import SECSUM, secure_sum

__all__ = ["factor", "secure_round"]


def factor(BB: np.ndarray) -> np.ndarray:
    """``L`` (n, n) with ``L L^T = BB`` (symmetric PSD; negative round-off clipped).

    The one-shot merge of ``L`` spans the top of ``sum_i B_i B_i^T``, as the merge of
    the sketches ``B_i`` side by side does (the sum of sketch Gram matrices is what a
    secure sum can give).
    """
    w, U = np.linalg.eigh(0.5 * (BB + BB.T))
    return U * np.sqrt(np.maximum(w, 0.0))


def secure_round(clients, targets: list[str], contents: dict[int, RecordDict]) -> RoundReport:
    """One round of the ``RemoteClients`` ``clients`` as a secure sum of the targets'
    round sums.

    Parameters
    ----------
    clients : RemoteClients
        Its grid, roster, timeout, round number and miss counts (updated here).
    targets : list of str
        The gateways asked this round.
    contents : dict of node id -> RecordDict
        Each target's round message (``V``, its start when it has none yet, re-merge
        options), to which the query is added.

    Returns
    -------
    RoundReport
        Empty ``W``, ``Pi``, ``nu``; ``sums`` the summed round sums; ``sketch`` one
        factor of the summed sketch Gram matrices when the round asked for sketches.
    """
    gw, n, r = clients.gw, clients.n_features, clients.r
    if not targets:
        raise TooFewClients(f"round {clients.rnd}: no gateway to ask")
    shapes = {"nuW": (n, r), "Pi": (n, r), "W": (n, r), "s": (len(ROUND_SCALARS),)}
    if int(contents[gw.node_of[targets[0]]]["round"].get("sketch-rank", 0)):
        shapes["BB"] = (n, n)
    query = ConfigRecord({"json": json.dumps({"what": "round"})})
    per = {}
    for lab in targets:
        rd = RecordDict(dict(contents[gw.node_of[lab]].items()))
        rd[SECSUM] = query
        per[lab] = rd
    try:
        out = secure_sum(
            clients.grid,
            gw,
            per,
            shapes,
            phase="secure_round",
            timeout=clients.timeout,
            min_clients=clients.min_clients,
            labels=targets,
            group_id=str(clients.rnd),
        )
    except RuntimeError as exc:
        clients.account(targets, [], dict.fromkeys(targets, str(exc)))
        raise TooFewClients(f"round {clients.rnd}: {exc}") from None
    clients.account(targets, out.labels, out.failed)
    sums = {k: v for k, v in out.sums.items() if k != "BB"}
    k = len(out.labels)
    if abs(float(sums["s"][0]) - k) > 0.5:
        raise RuntimeError(
            f"secure aggregation: round {clients.rnd} sums {sums['s'][0]:.2f} gateways' "
            f"values for {k} contributors (a gateway sent a malformed round)"
        )
    sums["s"][0] = float(k)
    empty = np.zeros((0, n, r))
    rep = RoundReport(W=empty, Pi=empty, nu=np.zeros(0), sums=sums)
    if "BB" in out.sums:
        rep.sketch = factor(out.sums["BB"])[None]
    rep.info = {
        "participants": list(out.labels),
        "failed": dict(out.failed),
        "bytes_sent": out.bytes_sent,
        "bytes_received": out.bytes_received,
    }
    return rep

"""The aggregation side: a Flower ServerApp around :func:`fedep.federation.server.server_round`.

A round sends the consensus ``V`` to the participating gateways, waits (at most
``round-timeout-s``) for their ``(W_i, Pi_i, nu_i, metrics)``, drops replies that are
errors or fail :func:`~fedep.federation.server.validate_report`, and aggregates the
rest in client-label order -- the order of the in-process cohort -- so that both
runners give the same basis. A round with fewer than ``min-clients`` valid replies ends
the run (``stop_reason = "too_few_clients"``); a gateway that misses ``max-misses``
rounds in a row is left out of later ones.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from logging import INFO, WARNING
from pathlib import Path

import numpy as np
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid, ServerApp

from fedep.core.baselines import oneshot_merge
from fedep.core.fedep import RoundReport
from fedep.core.stats import Moments, combine_moments, standardization_from_moments
from fedep.core.stiefel import polar, random_stiefel
from fedep.federation.flower.protocol import (
    DEFAULT_RUN_CONFIG,
    FlowerRunResult,
    arrays_of,
    bool_cfg,
    message_nbytes,
    sort_labels,
    to_array_record,
)
from fedep.federation.inprocess import converged
from fedep.federation.server import merge_reports, server_round, validate_report

__all__ = ["app", "run_federation", "exchange"]

app = ServerApp()

_SETTING_KEYS = (
    "method",
    "n-components",
    "alpha",
    "beta",
    "mu",
    "nu",
    "sparse-corruption",
    "penalty-scaling",
    "consensus-weights",
    "inner-max-iter",
    "lr",
    "rho",
    "local-epochs",
    "n-rounds",
    "tol",
    "client-fraction",
    "init",
    "standardize",
    "contamination",
    "random-state",
)


def exchange(
    grid: Grid,
    contents: dict[int, RecordDict],
    message_type: str,
    group_id: str,
    timeout: float,
) -> tuple[dict[int, Message], dict[int, str], dict[int, int], dict[int, int]]:
    """Send one message per node and collect the replies that arrive in time.

    Returns
    -------
    replies : dict node_id -> Message
        Replies without error.
    failed : dict node_id -> str
        Why a node gave no usable reply (error reply or timeout).
    sent, received : dict node_id -> int
        Serialised bytes of each message and reply.
    """
    msgs, sent = [], {}
    for nid, content in contents.items():
        m = Message(
            content,
            dst_node_id=nid,
            message_type=message_type,
            group_id=group_id,
            ttl=max(float(timeout), 1.0) + 30.0,
        )
        sent[nid] = message_nbytes(m)
        msgs.append(m)
    ids = list(grid.push_messages(msgs))
    id_to_node = {i: m.metadata.dst_node_id for i, m in zip(ids, msgs, strict=True)}
    pending = set(ids)
    replies: dict[int, Message] = {}
    failed: dict[int, str] = {}
    received: dict[int, int] = {}
    deadline = time.monotonic() + float(timeout)
    poll = 0.01
    while pending:
        for rep in grid.pull_messages(list(pending)):
            mid = rep.metadata.reply_to_message_id
            if mid not in pending:
                continue
            pending.discard(mid)
            nid = id_to_node[mid]
            received[nid] = message_nbytes(rep)
            if rep.has_error():
                failed[nid] = f"error {rep.error.code}: {rep.error.reason}"
            else:
                replies[nid] = rep
        if not pending or time.monotonic() >= deadline:
            break
        # Back off from 10 ms to 250 ms: every pull is a request to the SuperLink.
        time.sleep(poll)
        poll = min(0.25, poll * 1.5)
    for mid in pending:
        failed[id_to_node[mid]] = f"no reply within {timeout:g} s"
    return replies, failed, sent, received


def _wait_for_nodes(grid: Grid, n: int, wait_s: float) -> list[int]:
    deadline = time.monotonic() + wait_s
    while True:
        nodes = sorted(grid.get_node_ids())
        if len(nodes) >= n or time.monotonic() >= deadline:
            return nodes
        time.sleep(0.2)


def _report_from(rep: Message) -> RoundReport:
    a = arrays_of(rep.content["local"])
    m = dict(rep.content["metrics"])
    return RoundReport(
        W=np.asarray(a["W"], dtype=float),
        Pi=np.asarray(a["Pi"], dtype=float),
        nu=np.asarray(a["nu"], dtype=float).reshape(-1),
        metrics={k: np.array([float(v)]) for k, v in m.items()},
    )


def run_federation(
    grid: Grid,
    run_config: dict | None = None,
    *,
    callback: Callable[[int, dict], None] | None = None,
) -> FlowerRunResult:
    """Drive a whole FedEP/FedPG fit over a Flower grid.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
        The ServerApp's grid (deployment or :class:`~fedep.federation.flower.LocalGrid`).
    run_config : dict, optional
        Keys of :data:`~fedep.federation.flower.protocol.DEFAULT_RUN_CONFIG`.
    callback : callable, optional
        ``callback(round, record)`` after each round.
    """
    cfg = {**DEFAULT_RUN_CONFIG, **(run_config or {})}
    method = str(cfg["method"])
    if method not in ("fedep", "fedpg"):
        raise ValueError(f"method must be 'fedep' or 'fedpg'; got {method!r}")
    r = int(cfg["n-components"])
    timeout = float(cfg["round-timeout-s"])
    min_clients = max(1, int(cfg["min-clients"]))
    nodes = _wait_for_nodes(grid, int(cfg["min-nodes"]), float(cfg["node-wait-s"]))
    log(INFO, "fedep: %d gateways connected", len(nodes))

    # 1. Moments -> global standardisation.
    replies, failed, s_b, r_b = exchange(
        grid, {n: RecordDict() for n in nodes}, "query.moments", "moments", timeout
    )
    label_of = {nid: str(rep.content["client"]["label"]) for nid, rep in replies.items()}
    if len(set(label_of.values())) != len(label_of):
        raise RuntimeError(f"two gateways share a client label: {sorted(label_of.values())}")
    order = sort_labels(list(label_of.values()))
    node_of = {lab: nid for nid, lab in label_of.items()}
    setup_bytes = {
        label_of[n]: {"moments_sent": s_b[n], "moments_received": r_b.get(n, 0)} for n in label_of
    }
    parts = []
    for lab in order:
        rep = replies[node_of[lab]]
        a = arrays_of(rep.content["moments"])
        parts.append(Moments(int(rep.content["count"]["count"]), a["mean"], a["m2"]))
    if len(order) < min_clients:
        raise RuntimeError(f"only {len(order)} gateways answered; min-clients={min_clients}")
    pooled = combine_moments(parts)
    mean, scale, constant = standardization_from_moments(pooled)
    if not bool_cfg(cfg["standardize"]):
        scale = np.ones_like(scale)
    n_features = mean.shape[0]
    if r > n_features:
        raise ValueError(f"n-components={r} must be <= n_features={n_features}")

    # 2. Setup: standardisation and settings to every gateway (sketches for oneshot).
    settings = {k: cfg[k] for k in _SETTING_KEYS}
    sk = r if str(cfg["init"]) == "oneshot" else 0
    setup_content = {
        node_of[lab]: RecordDict(
            {
                "std": to_array_record(mean=mean, scale=scale, constant=constant),
                "settings": ConfigRecord({"json": json.dumps(settings), "sketch-rank": sk}),
            }
        )
        for lab in order
    }
    replies, failed, s_b, r_b = exchange(grid, setup_content, "train.setup", "setup", timeout)
    for nid in setup_content:
        setup_bytes[label_of[nid]].update(setup_sent=s_b[nid], setup_received=r_b.get(nid, 0))
    order = [lab for lab in order if node_of[lab] in replies]
    if len(order) < min_clients:
        raise RuntimeError(f"only {len(order)} gateways set up; min-clients={min_clients}")
    rng = np.random.default_rng(int(cfg["random-state"]))
    if sk:
        V0 = oneshot_merge(
            [arrays_of(replies[node_of[lab]].content["sketch"])["B"] for lab in order], r
        )
    elif str(cfg["init"]) == "random":
        V0 = random_stiefel(n_features, r, rng)
    else:
        raise ValueError(f"init must be 'random' or 'oneshot'; got {cfg['init']!r}")

    # 3. Rounds.
    V = np.array(V0, dtype=float)
    d = len(order)
    k = max(1, int(round(float(cfg["client-fraction"]) * d)))
    misses = dict.fromkeys(order, 0)
    initialised: set[str] = set()
    active = list(order)
    history: list[dict] = []
    stop_reason = "max_rounds"
    tol = float(cfg["tol"])
    for rnd in range(int(cfg["n-rounds"])):
        t0 = time.perf_counter()
        chosen = (
            order if k >= d else [order[i] for i in np.sort(rng.choice(d, size=k, replace=False))]
        )
        targets = [lab for lab in chosen if lab in active]
        contents = {}
        for lab in targets:
            rd = {"global": to_array_record(V=V), "round": ConfigRecord({"round": rnd + 1})}
            if lab not in initialised:
                rd["init"] = to_array_record(V0=V0)
            contents[node_of[lab]] = RecordDict(rd)
        replies, failed, s_b, r_b = exchange(grid, contents, "train", str(rnd + 1), timeout)
        reports, answered = [], []
        for lab in targets:
            nid = node_of[lab]
            if nid in replies:
                try:
                    rep = _report_from(replies[nid])
                    validate_report(rep, n_features, r)
                except (KeyError, ValueError, TypeError) as exc:
                    failed[nid] = f"invalid reply: {exc}"
                    continue
                reports.append(rep)
                answered.append(lab)
        initialised.update(targets)
        for lab in targets:
            if lab in answered:
                misses[lab] = 0
            else:
                misses[lab] += 1
                log(
                    WARNING,
                    "fedep: gateway %s failed round %d: %s",
                    lab,
                    rnd + 1,
                    failed.get(node_of[lab]),
                )
                if misses[lab] >= int(cfg["max-misses"]):
                    active.remove(lab)
        if len(reports) < min_clients:
            stop_reason = "too_few_clients"
            log(
                WARNING,
                "fedep: round %d has %d replies < min-clients=%d; stopping",
                rnd + 1,
                len(reports),
                min_clients,
            )
            break
        V_new, rec = server_round(method, merge_reports(reports), V)
        rec["round"] = rnd + 1
        rec["participants"] = answered
        rec["failed"] = {label_of[n]: why for n, why in failed.items()}
        rec["bytes_sent"] = {label_of[n]: b for n, b in s_b.items()}
        rec["bytes_received"] = {label_of[n]: b for n, b in r_b.items()}
        rec["time_s"] = time.perf_counter() - t0
        V = V_new
        history.append(rec)
        if callback is not None:
            callback(rnd + 1, rec)
        log(
            INFO,
            "fedep: round %d objective %.6g from %d gateways (%.3f s)",
            rnd + 1,
            rec["objective"],
            len(answered),
            rec["time_s"],
        )
        if tol > 0 and converged(rec, tol, method) and k >= d:
            stop_reason = "converged"
            break

    # 4. Finalize: every gateway still active writes its personalised model.
    comps = polar(V).T.copy()
    final = {"history": history, "n_rounds": len(history), "stop_reason": stop_reason}
    fin = {
        node_of[lab]: RecordDict(
            {
                "global": to_array_record(V=V, components=comps),
                "final": ConfigRecord({"json": json.dumps(final)}),
            }
        )
        for lab in active
        if lab in initialised
    }
    replies, failed, s_b, r_b = exchange(grid, fin, "evaluate.finalize", "finalize", timeout)
    result = FlowerRunResult(
        V=V,
        components=comps,
        history=history,
        stop_reason=stop_reason,
        n_rounds=len(history),
        clients=order,
        mean=mean,
        scale=scale,
        setup_bytes=setup_bytes,
        finalized=sorted(label_of[n] for n in replies),
    )
    path = str(cfg.get("result-path") or "")
    if path:
        out = result.to_json()
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(out))
    return result


@app.main()
def main(grid: Grid, context: Context) -> None:
    """ServerApp entry point: the run config comes from ``[tool.flwr.app.config]``."""
    run_federation(grid, dict(context.run_config))

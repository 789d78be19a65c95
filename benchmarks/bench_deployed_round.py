"""Seconds and CPU-seconds of a deployed round (run by hand).

A real deployment on this machine (:class:`fedep.flower.deployment.LocalDeployment`:
1 SuperLink + N SuperNodes, separate processes on loopback), the same fit twice in one
run: SuperNodes with Flower's default ``--isolation subprocess`` (one ``flwr-clientapp``
process per message), then with ``--isolation process`` beside fedep's long-running
executor (:mod:`fedep.flower.executor`). Gateways hold IID synthetic records as raw CSV
files (the feature pipeline runs, as for a user's files) or, with ``--dataset``, a
partition of an official dataset.

Reports per variant: seconds per round (the ServerApp's own clock, ``history``), the
seconds of each exchange by phase (the ``fedep: exchange`` lines of the run's log), the
run's wall time, and the CPU-seconds of every process of the deployment by kind
(SuperLink, SuperNode, SuperExec, ClientApp processes, ServerApp, executor), sampled
from ``/proc`` every 50 ms (a process that lives less than that is missed; the last
<= 50 ms of each is not counted), and per message. Load (``os.getloadavg``) before and
after.

Usage::

    PYTHONPATH=src python benchmarks/bench_deployed_round.py --out deployed_round.json \\
        [--gateways 3] [--rows 200] [--n-rounds 5] [--variants subprocess,process]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
from _common import write_json

from fedep import load
from fedep.data import make_federated_data
from fedep.flower.deployment import MARKER_ENV, LocalDeployment

TICK = os.sysconf("SC_CLK_TCK")


def _kind(cmdline: str) -> str:
    for key, name in (
        ("flwr-clientapp", "clientapp"),
        ("flwr-serverapp", "serverapp"),
        ("flower-superexec", "superexec"),
        ("fedep.flower.executor", "executor"),
        ("flower-superlink", "superlink"),
        ("flower-supernode", "supernode"),
        ("flwr run", "flwr-run"),
    ):
        if key in cmdline:
            return name
    return "other"


class CpuSampler(threading.Thread):
    """CPU-seconds of every process carrying the deployment's marker, by kind."""

    def __init__(self, marker: str, every: float = 0.05):
        super().__init__(daemon=True)
        self.needle = f"{MARKER_ENV}={marker}".encode()
        self.every, self.seen, self.kind = every, {}, {}
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set():
            for e in os.listdir("/proc"):
                if not e.isdigit():
                    continue
                try:
                    if e not in self.kind:
                        with open(f"/proc/{e}/environ", "rb") as fh:
                            if self.needle not in fh.read().split(b"\0"):
                                continue
                        with open(f"/proc/{e}/cmdline", "rb") as fh:
                            self.kind[e] = _kind(fh.read().replace(b"\0", b" ").decode())
                    with open(f"/proc/{e}/stat") as fh:
                        f = fh.read().rsplit(")", 1)[1].split()
                    self.seen[e] = (int(f[11]) + int(f[12])) / TICK
                except OSError:
                    continue
            time.sleep(self.every)

    def by_kind(self) -> dict:
        out, n = defaultdict(float), defaultdict(int)
        for pid, cpu in self.seen.items():
            out[self.kind[pid]] += cpu
            n[self.kind[pid]] += 1
        return {k: {"cpu_s": round(v, 2), "processes": n[k]} for k, v in sorted(out.items())}


def _phases(log: str) -> dict:
    rows = re.findall(r"fedep: exchange (\S+) (\S+): (\d+) replies in ([\d.]+) s", log)
    out = defaultdict(list)
    for mtype, group, _, sec in rows:
        out["round" if group.isdigit() else f"{mtype} {group}"].append(float(sec))
    return {
        k: {"n": len(v), "median_s": round(statistics.median(v), 3), "total_s": round(sum(v), 3)}
        for k, v in out.items()
    }


def one(variant: str, nodes: list[dict], workdir: Path, rc: dict, poll: float) -> dict:
    dep = LocalDeployment(nodes, workdir, poll_interval=poll, isolation=variant)
    load0 = os.getloadavg()
    t0 = time.monotonic()
    with dep:
        sampler = CpuSampler(dep.marker)
        sampler.start()
        res = dep.run(rc, timeout=1800)
        wall = time.monotonic() - t0
        sampler.done.set()
        sampler.join()
    log = dep.log("flwr-run")
    phases = _phases(log)
    n_msgs = sum(p["n"] for p in phases.values()) * len(nodes)
    cpu = sampler.by_kind()
    per_msg_kinds = ("clientapp", "superexec") if variant == "subprocess" else ("executor",)
    gw_cpu = sum(cpu.get(k, {}).get("cpu_s", 0.0) for k in per_msg_kinds)
    execs = [
        tuple(map(float, m))
        for i in range(len(nodes))
        for m in re.findall(
            r"fedep executor: \S+ \S+ in ([\d.]+) s, ([\d.]+) CPU-s "
            r"\(pull ([\d.]+) s, app ([\d.]+) s, push ([\d.]+) s\)",
            dep.log(f"executor-{i}"),
        )
    ]
    rounds = [h["time_s"] for h in res.history]
    return {
        "variant": variant,
        "rounds": len(rounds),
        "round_s": [round(r, 3) for r in rounds],
        "median_round_s": round(statistics.median(rounds), 3),
        "median_round_s_after_first": round(statistics.median(rounds[1:] or rounds), 3),
        "run_wall_s": round(wall, 1),
        "phases": phases,
        "messages": n_msgs,
        "cpu_by_kind": cpu,
        "gateway_cpu_s_per_message": round(gw_cpu / max(n_msgs, 1), 3),
        # per message in the executor: wall, CPU, and the wall of its three steps
        # (pulling the message and context from the SuperNode, the ClientApp, pushing)
        "executor_task_median": {
            k: round(statistics.median([e[j] for e in execs]), 4)
            for j, k in enumerate(("wall_s", "cpu_s", "pull_s", "app_s", "push_s"))
        }
        if execs
        else None,
        "loadavg_before": load0,
        "loadavg_after": os.getloadavg(),
        "failed": res.failed,
    }


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--gateways", type=int, default=3)
    ap.add_argument("--rows", type=int, default=200, help="synthetic rows per gateway")
    ap.add_argument("--n-rounds", type=int, default=5)
    ap.add_argument("--n-components", type=int, default=3)
    ap.add_argument("--poll-interval", type=float, default=0.2)
    ap.add_argument("--variants", default="subprocess,process")
    a = ap.parse_args(argv)
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    work = Path(tempfile.mkdtemp(prefix="bench-deployed-"))
    fed = make_federated_data(n_clients=a.gateways, n_samples=a.rows, random_state=0)
    nodes = []
    for i in range(a.gateways):
        X = fed.X_train[fed.groups_train == i]
        path = work / f"gw{i}.csv"
        pd.DataFrame(X, columns=[f"f{j}" for j in range(X.shape[1])]).to_csv(path, index=False)
        nodes.append({"data-path": str(path), "client-label": str(i)})
    rc = {
        "n-components": a.n_components,
        "n-rounds": a.n_rounds,
        "tol": 0.0,
        "random-state": 0,
        "round-timeout-s": 300,
    }
    out = {
        "gateways": a.gateways,
        "rows_per_gateway": a.rows,
        "n_rounds": a.n_rounds,
        "poll_interval_s": a.poll_interval,
        "cpus": os.cpu_count(),
        "variants": [],
    }
    bases = {}
    for v in a.variants.split(","):
        vn = [
            {**c, "model-path": str(work / v / f"gateway-{i}.fedep")} for i, c in enumerate(nodes)
        ]
        r = one(v, vn, work / v, rc, a.poll_interval)
        out["variants"].append(r)
        bases[v] = load(vn[0]["model-path"]).components_
        print(json.dumps(r, indent=1), flush=True)
    if len(bases) == 2:
        b1, b2 = bases.values()
        out["basis_max_abs_diff"] = float(np.max(np.abs(b1 - b2)))
    write_json(a.out, out)
    return out


if __name__ == "__main__":
    main()

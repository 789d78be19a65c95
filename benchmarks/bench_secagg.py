"""Cost of secure aggregation (SecAgg+) per round: plain vs secure, in one run.

The same FedEP fit over the real ServerApp and ClientApp in this process
(:func:`fedep.flower.run_local`, every message serialised as on the network), once
plain and once with ``secure-aggregation``; gateways hold IID partitions of a real
dataset's normal training rows (``--dataset``) or synthetic ones (``--dataset
synthetic``). Reports, per run: seconds per round (median of the rounds' ``time_s``),
bytes per round (sent + received, all gateways, median over the rounds), the bytes of
the setup phases, the subspace distance between the two global bases and the largest
difference of the standardisation, with the machine's load.

Usage::

    PYTHONPATH=src nice -n 10 python benchmarks/bench_secagg.py --out secagg.json \\
        [--dataset synthetic] [--gateways 3 10] [--max-rows 2000] [--n-rounds 8]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
from _common import write_json


def _per_round(history: list[dict]) -> dict:
    secs = [h["time_s"] for h in history]
    nbytes = [sum(h["bytes_sent"].values()) + sum(h["bytes_received"].values()) for h in history]
    return {
        "seconds_per_round": float(np.median(secs)),
        "bytes_per_round": int(np.median(nbytes)),
        "rounds": len(history),
    }


def _setup_bytes(res) -> int:
    return int(sum(sum(v.values()) for v in res.setup_bytes.values()))


def run(dataset: str, gateways: int, max_rows: int, n_rounds: int, n_components: int) -> dict:
    from fedep.core.stiefel import projector_distance
    from fedep.flower import run_local

    if dataset == "synthetic":
        cfgs = [{"partition-id": i, "synthetic-seed": 3} for i in range(gateways)]
    else:
        cfgs = [
            {"partition-id": i, "num-partitions": gateways, "dataset": dataset,
             "max-rows": max_rows, "feature-set": "rich"}
            for i in range(gateways)
        ]  # fmt: skip
    rc = {"n-components": n_components, "n-rounds": n_rounds, "tol": 0.0, "random-state": 0}
    out = {"dataset": dataset, "gateways": gateways}
    results = {}
    for mode, extra in (("plain", {}), ("secagg", {"secure-aggregation": True})):
        t0 = time.perf_counter()
        res, _ = run_local(cfgs, {**rc, **extra})
        wall = time.perf_counter() - t0
        results[mode] = res
        out[mode] = {
            **_per_round(res.history),
            "setup_bytes": _setup_bytes(res) - (
                # a secure round's bytes are counted in setup_bytes too (its phase)
                sum(sum(h["bytes_sent"].values()) + sum(h["bytes_received"].values())
                    for h in res.history) if mode == "secagg" else 0
            ),
            "wall_s": wall,
        }  # fmt: skip
    p, s = results["plain"], results["secagg"]
    out["subspace_distance"] = float(
        projector_distance(p.components.T, s.components.T) / np.sqrt(n_components)
    )
    out["max_mean_diff"] = float(np.abs(p.mean - s.mean).max())
    out["max_rel_scale_diff"] = float(np.abs(p.scale / s.scale - 1).max())
    out["ratio_seconds"] = out["secagg"]["seconds_per_round"] / out["plain"]["seconds_per_round"]
    out["ratio_bytes"] = out["secagg"]["bytes_per_round"] / out["plain"]["bytes_per_round"]
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--dataset", default="synthetic")
    ap.add_argument("--gateways", type=int, nargs="+", default=[3, 10])
    ap.add_argument("--max-rows", type=int, default=2000)
    ap.add_argument("--n-rounds", type=int, default=8)
    ap.add_argument("--n-components", type=int, default=3)
    a = ap.parse_args(argv)
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    import logging

    logging.getLogger("flwr").setLevel(logging.WARNING)
    report = {"load_before": os.getloadavg(), "runs": []}
    for k in a.gateways:
        report["runs"].append(run(a.dataset, k, a.max_rows, a.n_rounds, a.n_components))
        print(json.dumps(report["runs"][-1]))
    report["load_after"] = os.getloadavg()
    write_json(a.out, report, indent=1)
    return report


if __name__ == "__main__":
    main()

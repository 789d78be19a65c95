"""Record trimming over Flower against the in-process fit (run by hand).

Gateways hold IID partitions of a real dataset's normal training rows (node config
``dataset``, ``max-rows``, ``feature-set``), driven through the real ServerApp and
ClientApp in this process (:func:`fedep.flower.run_local`, messages
serialised as on the network). Reports the projector distance between the two global
bases, the kept counts of each concentration step, the ``query.trim`` exchanges per
operation, the bytes they moved, and the wall and process time of both runs.

Usage::

    PYTHONPATH=src python benchmarks/bench_flower_trimming.py --out flower_trim.json \\
        [--dataset nsl-kdd] [--gateways 5] [--max-rows 5000] [--n-components 10] \\
        [--n-rounds 20] [--trim-steps 3] [--trim-start median] [--trim-share 0.25]
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from collections import Counter

import numpy as np
from _common import write_json


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--dataset", default="nsl-kdd")
    ap.add_argument("--feature-set", default="rich")
    ap.add_argument("--gateways", type=int, default=5)
    ap.add_argument("--max-rows", type=int, default=5000)
    ap.add_argument("--n-components", type=int, default=10)
    ap.add_argument("--n-rounds", type=int, default=20)
    ap.add_argument("--trim-steps", type=int, default=3)
    ap.add_argument("--trim-start", default="median")
    ap.add_argument("--trim-share", default="0.25")
    ap.add_argument("--contamination", default="0.05")
    a = ap.parse_args(argv)
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

    from fedep import FedEP
    from fedep.core.stiefel import projector_distance
    from fedep.flower import run_local
    from fedep.flower.gateway_data import load_gateway_data

    cfgs = [
        {
            "partition-id": i,
            "num-partitions": a.gateways,
            "dataset": a.dataset,
            "max-rows": a.max_rows,
            "feature-set": a.feature_set,
        }
        for i in range(a.gateways)
    ]
    share = None if a.trim_share == "none" else float(a.trim_share)
    contamination = a.contamination if a.contamination == "auto" else float(a.contamination)
    params = {
        "n_components": a.n_components,
        "n_rounds": a.n_rounds,
        "tol": 0.0,
        "random_state": 0,
        "features": "numeric",
        "trim_steps": a.trim_steps,
        "trim_start": a.trim_start,
        "trim_share": share,
        "contamination": contamination,
    }
    rc = {k.replace("_", "-"): ("none" if v is None else v) for k, v in params.items()}
    Xs = [load_gateway_data(c)[0] for c in cfgs]
    X = np.vstack(Xs)
    groups = np.repeat(np.arange(len(Xs)), [len(x) for x in Xs])

    warnings.simplefilter("ignore")
    t0, c0 = time.perf_counter(), time.process_time()
    det = FedEP(**params).fit(X, groups=groups)
    t_in, c_in = time.perf_counter() - t0, time.process_time() - c0
    t0, c0 = time.perf_counter(), time.process_time()
    res, grid = run_local(cfgs, rc)
    t_fl, c_fl = time.perf_counter() - t0, time.process_time() - c0

    ops = Counter(
        m.metadata.group_id for _, m in grid.sent if m.metadata.message_type == "query.trim"
    )
    trim_bytes = {
        k: sum(v.get(f"trim_{k}", 0) for v in res.setup_bytes.values())
        for k in ("sent", "received")
    }
    out = {
        "params": params,
        "dataset": a.dataset,
        "gateways": a.gateways,
        "n_records": int(X.shape[0]),
        "n_features": int(X.shape[1]),
        "projector_distance": float(projector_distance(res.components.T, det.components_.T)),
        "n_kept_inprocess": [h["n_kept"] for h in det.trim_history_],
        "n_kept_flower": [h["n_kept"] for h in res.trim_history],
        "trim_exchanges_per_gateway": {k: v // a.gateways for k, v in sorted(ops.items())},
        "trim_exchanges_total": sum(ops.values()) // a.gateways,
        "trim_bytes_all_gateways": trim_bytes,
        "wall_s": {"inprocess": t_in, "flower_local_grid": t_fl},
        "process_s": {"inprocess": c_in, "flower_local_grid": c_fl},
    }
    write_json(a.out, out)
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()

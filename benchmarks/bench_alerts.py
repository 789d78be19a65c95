"""What making alerts costs beside scoring: ``AlertFactory.score`` against the bare
``score_block`` it wraps, on the same blocks, in one process.

Run by hand (not a test)::

    python benchmarks/bench_alerts.py --out benchmarks/results/alerts.json

Fits a default FedEP (the feature pipeline, personalised per gateway) on ``--train-rows``
Zeek-like records (:func:`bench_score.flows`), then scores ``--rows`` more in blocks of
``--block`` rows, ``--repeats`` times each, alternating the variants so that the
machine's load falls on all of them alike:

- ``score_block``: scores, flags, probabilities and top-3 features (what the CSV
  output of ``fedep score`` computes);
- ``alerts``: ``AlertFactory.score``: the same, plus one alert per flagged record (the
  identifying fields, shares, gateway, model, line);
- ``alerts_ecs``: the same under ECS names;
- ``every_record``: ``all_records=True`` (``fedep score --output-format jsonl`` without
  ``--anomalies-only``);
- ``encode``: the alerts to JSON lines (``encode_record``), per alert.

Reported: the median seconds per block and records/s of each, the ratio to
``score_block``, the share flagged, and ``os.getloadavg()`` before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_json
from bench_score import flows  # noqa: E402 - a sibling script, not a package

import fedep  # noqa: E402
from fedep.alerts import AlertFactory, encode_record, model_identity  # noqa: E402
from fedep.alerts.scoring import score_block  # noqa: E402
from fedep.detectors.columns import client_ids, output_feature_names  # noqa: E402


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train-rows", type=int, default=20_000)
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--block", type=int, default=50_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    load_before = os.getloadavg()
    train = flows(a.train_rows, 0)
    det = fedep.FedEP(random_state=0).fit(
        train.drop(columns="gateway"), groups=train["gateway"].to_numpy()
    )
    path = a.out.with_suffix(".fedep")
    path.parent.mkdir(parents=True, exist_ok=True)
    fedep.save(det, path)
    det = fedep.load(path)
    path.unlink()
    mid, digest = model_identity(det)
    plain = AlertFactory(det, model_id=mid, model_digest=digest, client_column="gateway")
    ecs = AlertFactory(det, model_id=mid, model_digest=digest, client_column="gateway", ecs=True)
    data = flows(a.rows, 1)
    blocks = [data.iloc[i : i + a.block] for i in range(0, a.rows, a.block)]
    names = output_feature_names(det)
    times: dict[str, list[float]] = {
        k: [] for k in ("score_block", "alerts", "alerts_ecs", "every_record", "encode")
    }
    n_flagged = 0
    n_alerts = 0
    for _ in range(a.repeats):
        for i, b in enumerate(blocks):
            t = time.perf_counter()
            g = client_ids(b["gateway"].to_numpy(str), det)
            X = b.set_axis(range(2 + i * a.block, 2 + i * a.block + len(b)))
            score_block(det, X, g, names, 3)
            times["score_block"].append(time.perf_counter() - t)
            t = time.perf_counter()
            batch = plain.score(b, gateway=None, source="conn.log", first_line=2 + i * a.block)
            times["alerts"].append(time.perf_counter() - t)
            t = time.perf_counter()
            ecs.score(b, gateway=None, source="conn.log", first_line=2 + i * a.block)
            times["alerts_ecs"].append(time.perf_counter() - t)
            t = time.perf_counter()
            plain.score(b, gateway=None, source="x", first_line=2, all_records=True)
            times["every_record"].append(time.perf_counter() - t)
            t = time.perf_counter()
            b"".join(encode_record(r) for r in batch.alerts)
            times["encode"].append((time.perf_counter() - t) / max(len(batch.alerts), 1))
            n_flagged += int(batch.flagged.sum())
            n_alerts += len(batch.alerts)
    med = {k: statistics.median(v) for k, v in times.items()}
    base = med["score_block"]
    result = {
        "rows_per_block": a.block,
        "blocks": len(blocks),
        "repeats": a.repeats,
        "share_flagged": n_flagged / (a.rows * a.repeats),
        "median_s_per_block": {k: v for k, v in med.items() if k != "encode"},
        "records_per_s": {k: a.block / v for k, v in med.items() if k != "encode"},
        "ratio_to_score_block": {k: v / base for k, v in med.items() if k != "encode"},
        "encode_us_per_alert": med["encode"] * 1e6,
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "fedep": fedep.__version__,
    }
    write_json(a.out, result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

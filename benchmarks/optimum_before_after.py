"""Before/after table of two ``bench_optimum.py`` runs over the same cells (same rows).

Usage::

    PYTHONPATH=/path/to/old/src python benchmarks/bench_optimum.py ... --candidates \\
        --out before.json        # the default fits only, old code
    python benchmarks/bench_optimum.py ... --out after.json    # with its candidates
    python benchmarks/optimum_before_after.py --before before.json --after after.json

The best known objective of a cell is the after run's (the lowest of its candidates and
its default fit) and, where the before run's default fit is lower, that one; each run's
gap is its default objective's distance to it. Prints a JSON summary (medians and
worst of gaps, rounds and fit seconds, per start and in all) and writes it with
``--out``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from _common import write_json


def _cells(paths: list[str]) -> dict[str, dict]:
    out = {}
    for p in paths:
        for c in json.loads(Path(p).read_text())["cells"]:
            if "error" not in c and c.get("default"):
                out[c["key"]] = c
    return out


def _stats(v: list[float]) -> dict:
    a = np.asarray(v, dtype=float)
    if not a.size:
        return {}
    return {"median": float(np.median(a)), "max": float(a.max()), "n": int(a.size)}


def compare(before: dict[str, dict], after: dict[str, dict]) -> dict:
    """Per start ("cold", "warm", "all"): gaps, rounds, seconds before and after."""
    rows = []
    for key, a in after.items():
        b = before.get(key)
        if b is None:
            continue
        objs = [a["best"]["objective"], a["default"]["objective"], b["default"]["objective"]]
        best = min(o for o in objs if o is not None)
        ob, oa = b["default"]["objective"], a["default"]["objective"]
        rows.append({
            "key": key, "start": a["start"],
            "gap_before": (ob - best) / abs(best), "gap_after": (oa - best) / abs(best),
            "rounds_before": b["default"]["rounds"], "rounds_after": a["default"]["rounds"],
            "fit_s_before": b["default"]["fit_cpu_s"], "fit_s_after": a["default"]["fit_cpu_s"],
            "auc_before": b["default"].get("roc_auc"), "auc_after": a["default"].get("roc_auc"),
        })  # fmt: skip
    out = {}
    for start in ("cold", "warm", "all"):
        sel = [r for r in rows if start == "all" or r["start"] == start]
        out[start] = {
            k: _stats([r[k] for r in sel])
            for k in ("gap_before", "gap_after", "rounds_before", "rounds_after",
                      "fit_s_before", "fit_s_after")
        }  # fmt: skip
        out[start]["over_1pct_before"] = sum(r["gap_before"] > 0.01 for r in sel)
        out[start]["over_1pct_after"] = sum(r["gap_after"] > 0.01 for r in sel)
        out[start]["worst_after"] = sorted(
            ((r["key"], round(r["gap_after"], 4)) for r in sel), key=lambda t: -t[1]
        )[:8]
    out["cells"] = rows
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", nargs="+", required=True)
    p.add_argument("--after", nargs="+", required=True)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    res = compare(_cells(a.before), _cells(a.after))
    print(json.dumps({k: v for k, v in res.items() if k != "cells"}, indent=1))
    if a.out:
        write_json(Path(a.out), res, indent=1)


if __name__ == "__main__":
    main()

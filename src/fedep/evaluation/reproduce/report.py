"""The markdown report of a reproduction, one function per section.

:func:`render_report` joins the sections; every section reads ``results.json``'s
dict only, so a report regenerated from the cell cache is the same as the first.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedep.evaluation.metrics import format_metrics_table
from fedep.evaluation.reproduce.config import PAPER_NUMBERS
from fedep.evaluation.reproduce.contaminated import contaminated_section
from fedep.evaluation.reproduce.figures import (
    COINCIDE_TOL,
    TOP_FEATURES,
    below_diagonal,
    coincident_pairs,
)
from fedep.evaluation.reproduce.format import num, one, pm, short_table, split_lines

__all__ = ["render_report", "write_report", "roc_notes"]


def best_section(res: dict, figures: dict) -> list[str]:
    """The headline: best honest configuration per dataset and method."""
    b = res.get("best")
    if not b or not b["table"]:
        return []
    c = b["config"]
    L = ["## Best honest configuration (headline)\n"]
    L.append(
        f'`feature_set="{c["feature_set"]}"` (z-scores of log1p heavy-tailed counts, '
        f"one-hot categoricals, flags), {c['n_clients']} non-IID clients (training rows "
        "sorted by `dst_bytes`, contiguous chunks; clean fallback where a chunk has no "
        "normal rows), clean protocol. Hyper-parameters chosen ONLY by ROC AUC on the "
        "validation split carved from training (`selection.grid_search`, first seed), "
        f"each method on its own, same rank grid {c['ranks']}; FedEP also alpha in "
        f'{c["alphas"]}. FedEP and FedPG start from `init="oneshot"` (merged client '
        "SVDs: one extra federated round, no raw data moved), at most "
        f"{c['n_rounds']} rounds, tol {c['tol']}"
        f"; FedEP inner_max_iter {c['inner_max_iter']}. Selection on "
        + (f"at most {c['max_train_rows']}" if c.get("max_train_rows") else "all")
        + " training rows; the selected configuration is then fitted on "
        + (
            f"at most {c['refit_train_rows']} training rows"
            if c.get("refit_train_rows")
            else "all training rows"
        )
        + f", {c['max_val_rows']} validation rows"
        + (f", {c['max_test_rows']} test rows" if c.get("max_test_rows") else ", all test rows")
        + ". Threshold: 95 % quantile of validation-normal scores (honest). "
        + (
            "SYNTHETIC scenario: the generated features are used (`feature_set` applies "
            "to the real datasets only). "
            if res.get("data", {}).get("source") == "synthetic"
            else ""
        )
        + f"Mean ± std over seeds {c['seeds']}. PooledPCA pools all records: the "
        "centralised reference, not a federated method.\n"
    )
    rows = []
    for e in b["table"]:
        mn, sd = e["mean"], e["std"]
        rows.append(
            {
                "dataset": e["dataset"],
                "method": e["method"],
                "rank": e["rank"],
                "alpha": "" if e["alpha"] is None else f"{e['alpha']:g}",
                "ROC AUC": pm(mn["roc_auc"], sd["roc_auc"], False),
                "PR AUC": pm(mn["pr_auc"], sd["pr_auc"], False),
                "F1 %": pm(mn["f1"], sd["f1"], True),
                "FPR %": pm(mn["fpr"], sd["fpr"], True),
                "Acc %": pm(mn["acc"], sd["acc"], True),
                "val ROC AUC": one(e["val_roc_auc"], False),
                "paper FedEP AUC": one(e["paper_fedep_roc_auc"], False)
                if e["paper_fedep_roc_auc"] is not None
                else "-",
                "fit s": f"{e['fit_time_s']:.1f}",
            }
        )
    L.append(format_metrics_table(rows))
    L.append(
        "\nThe paper's FedEP AUC was obtained with thresholds and hyper-parameters tuned "
        "on the test set; ROC AUC itself does not depend on the threshold.\n"
    )
    notes = []
    for name in dict.fromkeys(e["dataset"] for e in b["table"]):
        by = {e["method"]: e["mean"]["roc_auc"] for e in b["table"] if e["dataset"] == name}
        ep, pg, pool = by.get("FedEP"), by.get("FedPG"), by.get("PooledPCA")
        t = b["trivial"].get(name)
        line = (
            f"- {name}: FedEP {one(ep, False)}, FedPG {one(pg, False)}, "
            f"PooledPCA {one(pool, False)}"
        )
        if ep is not None and pg is not None:
            line += "; FedEP >= FedPG" if ep >= pg else f"; FedEP BELOW FedPG by {pg - ep:.4f}"
        if ep is not None and pool is not None:
            gap = pool - ep
            line += (
                "; within 0.01 of PooledPCA"
                if gap <= 0.01
                else f"; {gap:.4f} BELOW PooledPCA (more than 0.01)"
            )
        paper = PAPER_NUMBERS.get(name, {}).get("FedEP", {}).get("roc_auc")
        if paper is not None and ep is not None:
            line += (
                f"; above the paper's FedEP ({paper})"
                if ep > paper
                else f"; NOT above the paper's FedEP ({paper})"
            )
        if t:
            line += f". Trivial flag-all: F1 {one(t['f1'], True)} %, FPR 100 %"
        notes.append(line + ".")
    L.append("\n".join(notes) + "\n")
    L.extend(split_lines(b.get("splits", {}), "rich features, clean protocol"))
    for f in figures.get("best", []):
        L.append(f"![{f}](figures/{f})\n")
    L.append(roc_notes(b.get("roc", {})))
    L += feature_sets_section(res)
    L.append(
        "\n# Paper setting (paper feature set, rank 5): secondary tables\n\n"
        "Everything below uses the paper's feature set and rank 5, as in the paper.\n"
    )
    return L


def feature_sets_section(res: dict) -> list[str]:
    """The headline protocol on every feature set, and the generic path's scaling."""
    fs = res.get("feature_sets")
    if not fs or len(fs.get("sets", [])) < 2:
        return []
    sets = fs["sets"]
    L = ["## Feature sets: the same protocol on the paper's, the rich and the generic features\n"]
    L.append(
        "Same protocol as the headline (validation-only selection of the rank and FedEP's "
        "alpha, same splits and rows, honest threshold). `paper`: the paper's columns. "
        "`rich`: the hand-written per-dataset specification. `generic`: the raw tables as "
        "a user's files (only the label and attack-class columns removed) through the "
        'automatic federated feature pipeline (`features="auto"`, the path of '
        "`fedep fit --train FILE`), with its scaling rule chosen on the validation split "
        "(below). Test ROC AUC (mean ± std over seeds), FPR % at the honest threshold in "
        "brackets.\n"
    )
    rows = []
    by = {(e["dataset"], e["method"], e["feature_set"]): e for e in fs["table"]}
    for name in dict.fromkeys(e["dataset"] for e in fs["table"]):
        for method in dict.fromkeys(e["method"] for e in fs["table"]):
            row = {"dataset": name, "method": method}
            for s in sets:
                e = by.get((name, method, s))
                if e is None:
                    row[s] = "-"
                    continue
                mn, sd = e["mean"], e["std"]
                row[s] = (
                    f"{pm(mn['roc_auc'], sd['roc_auc'], False)} ({one(mn['fpr'], True)}) "
                    f"r={e['rank']}, {e['n_features']} f."
                )
            rows.append(row)
    L.append(format_metrics_table(rows))
    if fs.get("scaling"):
        L.append(
            "\nGeneric path, numeric transform and scaling of the encoded features "
            "(`transform/rule:parameter`: `FeaturePipeline(numeric_transform, scale_rule, "
            "scale_floor)`, transform `log` when omitted, `quantile` = normal scores from "
            "the merged sketches; see `fedep.features.federated_scale`): validation ROC AUC of "
            "PooledPCA at its best rank for each rule; the rule with the best validation "
            "ROC AUC (marked) is used by every method. Test data play no part.\n"
        )
        rules = list(dict.fromkeys(r for v in fs["scaling"].values() for r in v["by_scaling"]))
        srows = []
        for name, v in fs["scaling"].items():
            row = {"dataset": name}
            for r in rules:
                e = v["by_scaling"].get(r)
                mark = " *" if r == v["chosen"] else ""
                auc = "-" if e is None else f"{one(e['val_roc_auc'], False)} (r={e['rank']})"
                row[r] = auc + mark
            srows.append(row)
        L.append(format_metrics_table(srows))
    L.append("")
    return L


def roc_notes(roc: dict) -> str:
    """Per dataset: the honest operating point of each curve and which curves coincide
    (max |TPR difference| < :data:`COINCIDE_TOL` on a common FPR grid)."""
    lines = []
    for name, curves in roc.items():
        ops = []
        for m, c in curves.items():
            op = c.get("operating_point")
            if op and op.get("fpr") is not None and op.get("tpr") is not None:
                ops.append(f"{m} FPR {100 * op['fpr']:.1f} % / TPR {100 * op['tpr']:.1f} %")
        line = f"- {name}: honest operating point (large marker) " + (
            "; ".join(ops) if ops else "not recorded"
        )
        same = coincident_pairs(curves)
        if same:
            line += ". Coinciding curves (one hides the other): " + "; ".join(
                f"{a} and {b} (max |TPR difference| {d:.4f} < {COINCIDE_TOL})" for a, b, d in same
            )
        below = below_diagonal(curves)
        if below:
            line += (
                ". Curves BELOW the chance diagonal (share of the FPR range): "
                + ", ".join(
                    f"{m} {100 * share:.0f} %"
                    + (f" (ROC AUC {auc:.3f} < 0.5)" if auc < 0.5 else "")
                    for m, share, auc in below
                )
                + "; there the detector ranks these attacks as more normal than the "
                "normal records"
            )
        lines.append(line + ".")
    return ("\n".join(lines) + "\n") if lines else ""


def header_section(res: dict) -> list[str]:
    """Title, wall time, command, versions, data source."""
    d = res["data"]
    L = [f"# FedEP reproduction report ({res['mode']} mode)\n"]
    L.append(
        f"Started {res['started']}; wall time **{res['wall_time_s']:.1f} s** "
        f"({res['cells']['computed']} cells computed, {res['cells']['cached']} "
        "reused from `cells/`).\n"
    )
    L.append("Command: `" + (res["command"] or "run_reproduce(...)") + "`\n")
    L.append(
        "Versions: "
        + ", ".join(f"{k} {v}" for k, v in res["versions"].items())
        + f"; {res['platform']}.\n"
    )
    if d["source"] == "synthetic":
        L.append(
            "> **No real dataset was found** "
            + (f"in `{d['data_dir']}`" if d["data_dir"] else "(no data directory given)")
            + ": this report shows the SYNTHETIC scenario (planted subspace, sparse "
            "corruption, planted anomalies; validation = half of the generated labelled "
            "hold-out, test = the other half). To run on the paper's datasets, put the "
            "official files in a directory and pass `--data-dir DIR` (or "
            "`run_reproduce(..., data_dir=DIR)`) or set `FEDEP_DATA_DIR=DIR`; "
            "`fedep data verify` lists the expected files.\n"
        )
    if d["missing"]:
        L.append(
            "Missing datasets: " + "; ".join(f"{k}: {v}" for k, v in d["missing"].items()) + "\n"
        )
    return L


def setup_section(res: dict) -> list[str]:
    """Paper-setting protocol and the per-dataset split sizes."""
    cfg = res["config"]
    L = ["## Setup\n"]
    L.append(
        f"- {cfg['n_clients']} non-IID clients: training rows sorted by `dst_bytes`, cut "
        f"into contiguous chunks; rank {cfg['rank']}; global z-scores from per-client "
        "moments; seeds "
        f"{cfg['seeds']}; at most {cfg['max_train_rows']} training rows (same share per "
        f"client), {cfg['max_val_rows']} validation rows"
        + (f", {cfg['max_test_rows']} test rows" if cfg.get("max_test_rows") else "")
        + f"; FedEP/FedPG at most {cfg['n_rounds']} rounds.\n"
        "- Protocols: `clean` (clients train on their normal rows), `contaminated` "
        "(all rows, no labels in training).\n"
        "- **Honest threshold**: 95 % quantile of validation-normal scores (validation "
        "carved from each client's training rows; target FPR 5 %). "
        "**Test-tuned (as in the paper)**: best-F1 threshold on the TEST labels, "
        "optimistic, for comparison with the paper's numbers only.\n"
        "- `honest-personalised`: each test record scored by the personalised basis of the "
        "client whose `dst_bytes` range covers it, threshold from validation the same way.\n"
        "- Trivial detector: flags every record as an attack.\n"
    )
    L.extend(split_lines(res["data"].get("splits", {})))
    return L


def selection_section(res: dict) -> list[str]:
    """Grid-search results, or the fixed defaults."""
    cfg = res["config"]
    if not any(res["selection"].values()):
        return [
            f"\nHyper-parameters: fixed defaults (FedEP {cfg['fedep']}, FedPG "
            f"{cfg['fedpg'] or 'library defaults'}); no grid search in quick mode.\n"
        ]
    rows = []
    for name, by_m in res["selection"].items():
        for m, sel in by_m.items():
            rows.append(
                {
                    "dataset": name,
                    "method": m,
                    "chosen": ", ".join(
                        f"{k}={v}"
                        for k, v in sel["best_params"].items()
                        if k in cfg["grid"].get(m, {})
                    ),
                    "val ROC AUC": sel["best_score"],
                    "grid points": len(sel["results"]),
                }
            )
    return [
        "\n## Hyper-parameters (grid search on validation ROC AUC)\n",
        format_metrics_table(rows),
    ]


_TABLE2_COLS = [
    "method",
    "threshold",
    "Acc %",
    "Pre %",
    "Rec %",
    "FNR %",
    "F1 %",
    "FPR %",
    "ROC AUC",
    "PR AUC",
    "fit s",
]


def _paper_rows(name: str) -> list[dict]:
    rows = []
    for m in ("FedPG", "FedEP"):
        p = PAPER_NUMBERS[name][m]
        rows.append(
            {
                "method": f"{m} (paper)",
                "threshold": "paper (test-tuned)",
                "Acc %": one(p["acc"], True),
                "Pre %": one(p["pre"], True),
                "Rec %": one(p["rec"], True),
                "FNR %": one(p["fnr"], True),
                "F1 %": one(p["f1"], True),
                "ROC AUC": one(p["roc_auc"], False),
            }
        )
    return rows


def _metric_cells(mn: dict, sd: dict | None) -> dict:
    sd = sd or {}
    nan = float("nan")
    out = {
        "Acc %": pm(mn["acc"], sd.get("acc", nan), True),
        "Pre %": pm(mn["pre"], sd.get("pre", nan), True),
        "Rec %": pm(mn["rec"], sd.get("rec", nan), True),
        "FNR %": pm(mn["fnr"], sd.get("fnr", nan), True),
    }
    out.update(
        {
            "F1 %": pm(mn["f1"], sd.get("f1", nan), True),
            "FPR %": pm(mn["fpr"], sd.get("fpr", nan), True),
            "ROC AUC": pm(mn["roc_auc"], sd.get("roc_auc", nan), False),
            "PR AUC": pm(mn["pr_auc"], sd.get("pr_auc", nan), False),
        }
    )
    return out


def table2_section(res: dict) -> list[str]:
    """Detection results per dataset and protocol: paper, honest, personalised,
    test-tuned, trivial."""
    cfg, d = res["config"], res["data"]
    L = ["\n## Table 2: detection results (mean ± std over seeds)\n"]
    for name in d["datasets"]:
        for prot in cfg["protocols"]:
            L.append(f"\n### {name}, protocol `{prot}`\n")
            rows = _paper_rows(name) if prot == "clean" and name in PAPER_NUMBERS else []
            for thr in ("honest", "honest-personalised", "test-tuned"):
                for e in res["main"]:
                    if e["dataset"] != name or e["protocol"] != prot or e["threshold"] != thr:
                        continue
                    if thr == "honest-personalised" and e["method"] not in ("FedEP", "FedPG"):
                        continue
                    label = "test-tuned (as in the paper)" if thr == "test-tuned" else thr
                    rows.append(
                        {
                            "method": e["method"],
                            "threshold": label,
                            **_metric_cells(e["mean"], e["std"]),
                            "fit s": f"{e['fit_time_s']:.2f}",
                        }
                    )
            t = res["trivial"].get(name, {}).get(prot)
            if t:
                rows.append(
                    {"method": "trivial (flag all)", "threshold": "-", **_metric_cells(t, None)}
                )
            L.append(format_metrics_table(rows, _TABLE2_COLS))
    return L


def per_class_section(res: dict) -> list[str]:
    if not res["per_class"]:
        return []
    L = [
        "\n## Detection rate per test category (clean, first seed, honest "
        "threshold; the `normal` column is the FPR)\n"
    ]
    for name, by_m in res["per_class"].items():
        cats = list(next(iter(by_m.values())).keys())
        rows = [{"method": m, **{c: one(v.get(c), True) for c in cats}} for m, v in by_m.items()]
        L.append(f"\n{name} (%)\n\n" + format_metrics_table(rows, ["method", *cats]))
    return L


def roc_section(res: dict, figures: dict) -> list[str]:
    L = ["\n## ROC curves (clean protocol, first seed, global basis)\n"]
    L.append(
        "A colour, line style and marker per method; the false-positive rate on a log "
        "axis (the operating points lie at FPR of a few %, the left 5 % of a linear "
        "axis); the large marker on each curve is its operating point at the honest "
        "threshold, labelled with the method's name; the grey dashed line is the target "
        "FPR of 5 %. A curve below the dotted chance diagonal is named under its plot "
        "and below.\n"
    )
    for f in figures["roc"]:
        L.append(f"![{f}](figures/{f})\n")
    L.append(roc_notes(res["roc"]))
    return L


def rounds_section(res: dict, figures: dict) -> list[str]:
    L = ["\n## Accuracy and objective vs communication round\n"]
    L.append(
        "One fit per method with the table's parameters, initialisation and client "
        f"sampling ({res['config']['curve_rounds']} rounds, tol 0); after each round the "
        "orthonormalised consensus scores validation and test, the honest threshold "
        "re-derived from validation at that round. Accuracy, ROC AUC and each method's "
        "objective have their own axes (the objective on a log scale when it spans a "
        "decade or more). FedPG's axes show no objective but two reconstruction errors "
        "of the training records: its consensus's (the global model that scores; a "
        "round's record measures the consensus it started from, drawn at the round that "
        "produced it, 0 being the start) and the clients' own bases' (dotted, what its "
        "local steps decrease). With the paper's rho = 0.01 the consensus is not "
        "enforced: each gateway fits its own records, so the clients' errors fall while "
        "the consensus's error rises. A quantity whose range is below 1 % of its value is drawn in "
        'a window of 5 % of its value and marked "flat: range x..y" (accuracy in a '
        "window of at least 5 points, ROC AUC of at least 0.05), so that a change of a "
        "fraction of a point is not drawn as a steep decline.\n"
    )
    rows = []
    for name, by_m in res["rounds"].items():
        for m, rr in by_m.items():
            if not rr:
                continue
            accs = [num(r["acc"]) for r in rr]
            best = int(np.nanargmax(accs)) if np.isfinite(accs).any() else 0
            rows.append(
                {
                    "dataset": name,
                    "method": m,
                    "acc round 1": one(accs[0], True),
                    "best acc": one(accs[best], True),
                    "at round": rr[best]["round"],
                    "acc last": one(accs[-1], True),
                    "ROC AUC last": one(rr[-1]["roc_auc"], False),
                    "time to last round s": f"{rr[-1]['cumulative_time_s']:.2f}",
                }
            )
    L.append(format_metrics_table(rows))
    for f in figures["rounds"]:
        L.append(f"![{f}](figures/{f})\n")
    return L


def contributions_section(res: dict, figures: dict) -> list[str]:
    L = ["\n## What makes attacks anomalous (mean residual contribution per feature)\n"]
    L.append(
        "Each record's anomaly score (residual energy) is a sum over features of the "
        "squared residual outside the global basis; the bars show the mean of that "
        "per-feature contribution over the TEST ATTACKS (clean protocol, first seed; "
        f"`feature_contributions`), for the top {TOP_FEATURES} paper features by the "
        "largest mean contribution of any method, largest first; on a log axis when "
        "the values span more than 3 decades.\n"
    )
    for f in figures.get("contributions", []):
        L.append(f"![{f}](figures/{f})\n")
    return L


def ablation_ties(rows: list[dict]) -> str:
    """Per dataset, the ablation cases whose honest ROC AUC, accuracy, F1 and FPR are
    equal to 4 decimals (said, so that equal rows are not read as a copying error)."""
    keys = ("roc_auc", "acc", "f1", "fpr")
    out = []
    for name in dict.fromkeys(r["dataset"] for r in rows):
        groups: dict[tuple, list[str]] = {}
        for r in rows:
            if r["dataset"] == name and "note" not in r:
                k = tuple(round(float(r[c]), 4) for c in keys)
                groups.setdefault(k, []).append(str(r["case"]))
        same = [" = ".join(g) for g in groups.values() if len(g) > 1]
        if same:
            out.append(
                f"- {name}: cases {' and '.join(same)} give the same ROC AUC, accuracy, "
                "F1 and FPR to 4 decimals (the component that differs between them "
                "changes nothing visible in this run)."
            )
    return ("\n" + "\n".join(out) + "\n") if out else ""


def ablation_rank_sections(res: dict) -> list[str]:
    cfg = res["config"]
    L = ["\n## Ablation (clean, first seed, honest threshold)\n"]
    L.append("Case I: no S, beta = 0; II: S, beta = 0; III: no S, beta > 0; IV: FedEP.\n\n")
    L.append(short_table(res["ablation"], "case"))
    L.append(ablation_ties(res["ablation"]))
    L.append("\n## Rank (clean, first seed, honest threshold)\n")
    L.append(
        "Rounds per rank: "
        + ", ".join(f"r={k}: {v}" for k, v in cfg["rank_rounds"].items())
        + ". Ranks >= the number of features are skipped.\n\n"
    )
    L.append(short_table(res["rank"], "method", "rank"))
    return L


def scalability_section(res: dict, figures: dict) -> list[str]:
    L = ["\n## Training time per round vs number of clients\n"]
    rows = [
        {
            "dataset": r["dataset"],
            "method": r["method"],
            "clients": r["n_clients"],
            "train rows": r.get("n_train"),
            "s / round": f"{r['time_per_round_s']:.3f}",
        }
        for r in res["scalability"]
    ]
    L.append(format_metrics_table(rows))
    for f in figures["scalability"]:
        L.append(f"![{f}](figures/{f})\n")
    return L


def reading_section() -> list[str]:
    return [
        "\n## Reading these numbers\n",
        "- The paper's thresholds were tuned on the test set; compare its numbers with the "
        "`test-tuned` rows, and judge the methods by ROC AUC, FPR and the honest rows.\n"
        "- Test sets are attack-heavy: compare F1 with the trivial detector's.\n"
        "- PooledPCA moves all records to one place: an upper reference, not a federated "
        "method.\n",
    ]


def render_report(res: dict, figures: dict) -> str:
    """The whole report as markdown."""
    L: list[str] = []
    L += header_section(res)
    L += best_section(res, figures)
    L += setup_section(res)
    L += selection_section(res)
    L += table2_section(res)
    L += per_class_section(res)
    L += roc_section(res, figures)
    L += rounds_section(res, figures)
    L += contributions_section(res, figures)
    L += ablation_rank_sections(res)
    L += scalability_section(res, figures)
    L += contaminated_section(res)
    L += reading_section()
    return "\n".join(L)


def write_report(res: dict, figures: dict, path) -> Path:
    """Write :func:`render_report` to ``path``; returns the path."""
    path = Path(path)
    path.write_text(render_report(res, figures))
    return path

"""Training on traffic that holds attacks, with a trusted reference or analyst feedback.

Normal training rows of a real dataset (rich features) with attack rows of its
training split injected at 0/5/10/20 % of the training set, 20 IID gateways, rank 10,
tested on the full test split. Settings per method:

- ``none``: the defaults, no reference (``contamination=0.05``);
- ``ref1`` / ``ref2``: ``contamination="auto"`` with a reference of 1 % / 2 % of each
  gateway's *normal training* rows (a boolean mask of training rows);
- ``fb50`` / ``fb200``: the defaults with 50 / 200 analyst labels per federation: the
  highest-scoring training records of the ``none`` fit, labelled with their *training*
  labels (simulated triage: confirmed attacks and the records near them leave the fit,
  confirmed false positives are never trimmed);
- ``fball``: every attack row of the training set labelled ``attack`` (the ceiling of
  feedback that only decides which training records the fit sees).

Test labels are used for the final measurement only. Reports ROC AUC, FPR and recall at
the model's own threshold, the estimated share (``contamination_``) against the
injected one, and the trimming steps.

Usage::

    PYTHONPATH=src nice -n 10 python benchmarks/bench_reference.py --out ref.json \\
        [--datasets nsl-kdd unsw-nb15 ton-iot] [--methods fedep pca fedpg] [--seeds 2]
    python benchmarks/bench_reference.py --summarize ref.json ...   # the docs' table
    python benchmarks/bench_reference.py --feedback-table ref.json ...   # feedback's
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

import numpy as np
from _common import write_rows
from sklearn.metrics import roc_auc_score

from fedep import FedEP, FedPG, PooledPCA
from fedep.data import load_dataset
from fedep.detectors.suppression import modes_of, suppressed_scores
from fedep.evaluation.reproduce.contaminated import training_rows

METHODS = {
    "fedep": lambda r, s, **kw: FedEP(r, random_state=s, **kw),
    "fedpg": lambda r, s, **kw: FedPG(r, random_state=s, **kw),
    "pca": lambda r, s, **kw: PooledPCA(r, **kw),
}
SETTINGS = ("none", "ref1", "ref2", "fb50", "fb200", "fball", "fbw2", "fbw3")


def _reference(y, groups, frac, rng):
    """``frac`` of each gateway's normal training rows (at least one)."""
    mask = np.zeros(y.size, dtype=bool)
    for g in np.unique(groups):
        rows = np.flatnonzero((groups == g) & (y == 0))
        k = max(1, int(round(frac * rows.size)))
        mask[rng.choice(rows, k, replace=False)] = True
    return mask


def _measure(est, X_test, y_test, recall=None):
    """ROC AUC, FPR and recall at the model's threshold; with ``recall`` (the ``none``
    model's), also the FPR at the threshold that gives that recall (equal recall).
    Scores with the model's suppression rules applied (``suppressed_scores``: benign
    modes from feedback); ``*_plain``: the residual energy alone, where they differ."""
    s = suppressed_scores(est, X_test)
    pred = est.predict(X_test).astype(bool)
    out = measure_scores(s, pred, y_test, recall)
    if modes_of(est) is not None:
        plain = est.decision_function(X_test)
        flags = plain > est.row_thresholds(None, plain.shape[0])
        for k, v in measure_scores(plain, flags, y_test, recall).items():
            out[f"{k}_plain"] = v
        out["n_modes"] = int(est.benign_centres_.shape[0])
        held = flags & ~pred  # alerts the rules suppressed
        out["suppressed_attacks"] = round(float(held[y_test == 1].mean()), 4)
        out["suppressed_normal"] = round(float(held[y_test == 0].mean()), 4)
    return out


def _triage(est, X, y, labels, k):
    """Weekly triage: the ``k`` highest-scoring unlabelled training records under the
    model's own ranking (suppressed alerts are not triaged again), labelled with their
    training labels, added to ``labels`` (object array, "" = unlabelled)."""
    s = suppressed_scores(est, X)
    s = np.where(labels == "", s, -np.inf)
    top = np.argsort(-s, kind="stable")[:k]
    out = labels.copy()
    out[top] = np.where(y[top] == 1, "attack", "benign")
    return out


def measure_scores(s, pred, y_test, recall=None):
    """:func:`_measure` from test scores ``s`` and flags ``pred`` (bool, same shape)."""
    out = {
        "roc_auc": round(float(roc_auc_score(y_test, s)), 4),
        "fpr": round(float(pred[y_test == 0].mean()), 4),
        "recall": round(float(pred[y_test == 1].mean()), 4),
    }
    if recall is not None:
        t = np.quantile(s[y_test == 1], 1.0 - recall)
        out["fpr_at_base_recall"] = round(float((s[y_test == 0] >= t).mean()), 4)
    return out


def run(args) -> list[dict]:
    out = []
    for name in args.datasets:
        d = load_dataset(name, args.data_dir, feature_set="rich")
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            for share in args.shares:
                rng = np.random.default_rng(seed)
                idx, true_share = training_rows(d.y_train, share, args.n_normal, rng)
                X, y = d.X_train[idx], d.y_train[idx]
                groups = rng.integers(0, args.n_clients, X.shape[0])
                for m in args.methods:
                    base = base_recall = None
                    fitted: dict = {}
                    for setting in args.settings:
                        kw: dict = {}
                        if setting.startswith("ref"):
                            kw["contamination"] = "auto"
                        if setting.startswith("fb"):  # the opt-in rules, as measured
                            kw["suppression_rules"] = args.suppression_rules
                        fit_kw: dict = {}
                        if setting.startswith("ref"):
                            frac = float(setting[3:]) / 100
                            fit_kw["reference"] = _reference(y, groups, frac, rng)
                        if setting == "fball":  # every training attack confirmed
                            fit_kw["feedback"] = np.where(y == 1, "attack", "")
                        elif setting.startswith("fbw"):
                            # repeated weekly triage: fit, triage 200, refit, ...
                            fb = np.full(X.shape[0], "", dtype=object)
                            prev = base
                            for week in range(int(setting[3:]) - 1):
                                fb = _triage(prev, X, y, fb, 200)
                                if week == 0 and "fb200" in fitted:  # that week's fit
                                    prev = fitted["fb200"]
                                    continue
                                prev = METHODS[m](args.rank, seed, **kw)
                                with warnings.catch_warnings():
                                    warnings.simplefilter("ignore")
                                    prev.fit(X, groups=groups, feedback=fb)
                            fit_kw["feedback"] = _triage(prev, X, y, fb, 200)
                        elif setting.startswith("fb"):
                            # triage of the `none` model's highest-scoring training rows
                            k = int(setting[2:])
                            top = np.argsort(-base.decision_scores_, kind="stable")[:k]
                            fb = np.full(X.shape[0], "", dtype=object)
                            fb[top] = np.where(y[top] == 1, "attack", "benign")
                            fit_kw["feedback"] = fb
                        est = METHODS[m](args.rank, seed, **kw)
                        t0 = time.perf_counter()
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore")
                            est.fit(X, groups=groups, **fit_kw)
                        fit_s = time.perf_counter() - t0
                        fitted[setting] = est
                        if setting == "none":
                            base = est
                            base_recall = None
                        row = {
                            "dataset": name,
                            "seed": seed,
                            "share": share,
                            "true_share": round(true_share, 4),
                            "method": m,
                            "setting": setting,
                            **(m_ := _measure(est, d.X_test, d.y_test, base_recall)),
                            "contamination_": round(float(est.contamination_), 4),
                            "n_trim_steps_": est.n_trim_steps_,
                            "n_reference": (est.trust_ or {}).get("n_reference", 0),
                            "feedback_": est.feedback_,
                            "fit_s": round(fit_s, 1),
                            "load": os.getloadavg()[0],
                        }
                        if setting == "none":
                            base_recall = m_["recall"]
                        out.append(row)
                        print(json.dumps(row), flush=True)
                        write_rows(args.out, args, out)
    return out


def summarize(paths) -> str:
    """Markdown: the table (ROC AUC, estimated share, FPR/recall at the model's
    threshold; mean over seeds) and the issue's figures checked cell by cell."""
    rows = [r for p in paths for r in json.load(open(p))["rows"]]
    key = lambda r: (r["dataset"], r["method"], r["share"], r["setting"])  # noqa: E731
    cells: dict = {}
    for r in rows:
        cells.setdefault(key(r), []).append(r)

    def mean(k, f):
        v = [r[f] for r in cells.get(k, []) if r.get(f) is not None]
        return float(np.mean(v)) if v else float("nan")

    out = ["| dataset | method | attacks | setting | seeds | ROC AUC | share est. | FPR | recall "
           "| FPR at `none`'s recall |", "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for k in sorted(cells):
        n = len(cells[k])
        out.append(
            f"| {k[0]} | {k[1]} | {100 * k[2]:.0f} % | {k[3]} | {n} | {mean(k, 'roc_auc'):.4f} "
            f"| {100 * mean(k, 'contamination_'):.1f} % | {mean(k, 'fpr'):.4f} "
            f"| {mean(k, 'recall'):.4f} | {mean(k, 'fpr_at_base_recall'):.4f} |"
        )
    checks = []
    for ds, m in sorted({(k[0], k[1]) for k in cells}):
        clean = mean((ds, m, 0.0, "none"), "roc_auc")
        for share, limit in ((0.05, 0.01), (0.1, 0.02), (0.2, 0.04)):
            loss = clean - mean((ds, m, share, "ref2"), "roc_auc")
            ok = "reached" if loss <= limit else "NOT reached"
            checks.append(f"- {ds} {m}: ref2 loss at {share:.0%}: {loss:+.4f} (<= {limit}) {ok}")
        for s in ("ref1", "ref2", "fb200"):
            if (ds, m, 0.0, s) not in cells:
                continue
            cost = clean - mean((ds, m, 0.0, s), "roc_auc")
            ok = "reached" if cost <= 0.005 else "NOT reached"
            checks.append(f"- {ds} {m}: clean cost of {s}: {cost:+.4f} (<= 0.005) {ok}")
        for share in (0.05, 0.1, 0.2) if (ds, m, 0.05, "fb200") in cells else ():
            base = mean((ds, m, share, "none"), "fpr")
            fb = mean((ds, m, share, "fb200"), "fpr_at_base_recall")
            ok = "reached" if fb <= base * 2 / 3 else "NOT reached"
            checks.append(
                f"- {ds} {m}: fb200 FPR at equal recall at {share:.0%}: {base:.4f} -> {fb:.4f} "
                f"(cut by >= 1/3) {ok}"
            )
            if (ds, m, share, "fball") in cells:  # the ceiling: every training attack labelled
                top = mean((ds, m, share, "fball"), "fpr_at_base_recall")
                cut = "a third or more" if top <= base * 2 / 3 else "less than a third"
                checks.append(
                    f"- {ds} {m}: fball (ceiling) FPR at equal recall at {share:.0%}: "
                    f"{base:.4f} -> {top:.4f} (cut by {cut})"
                )
    within = [
        abs(r["contamination_"] - r["true_share"]) <= 0.03
        for r in rows
        if r["setting"] in ("ref1", "ref2")
    ]
    checks.append(
        f"- share within 3 points in {sum(within)} of {len(within)} reference fits "
        f"({100 * np.mean(within):.0f} %)"
    )
    ref_cells = [k for k in cells if k[3] in ("ref1", "ref2")]
    close = [
        abs(mean(k, "contamination_") - mean(k, "true_share")) <= 0.03 for k in sorted(ref_cells)
    ]
    checks.append(
        f"- share (mean over seeds) within 3 points in {sum(close)} of {len(close)} cells with "
        f"a reference ({100 * np.mean(close):.0f} %, >= 80 % asked)"
    )
    return "\n".join(out + [""] + checks)


def feedback_table(paths) -> str:
    """Markdown: the feedback settings, one row per dataset, method and share (mean over
    seeds): ROC AUC and FPR / recall at the model's own threshold of ``none`` and
    ``fb200`` (with its suppression rules), the FPR at ``none``'s recall of ``fb200``
    without the rules (``*_plain``: the fit's exclusions alone) and with them, and of
    ``fbw2`` / ``fball`` where run, the test attacks the rules suppressed, and whether
    ``fb200`` cut ``none``'s FPR by a third at that recall. Only the seeds with every
    setting of their cell count (a run cut short leaves some out)."""
    rows = [r for p in paths for r in json.load(open(p))["rows"]]
    # files of different settings share their `none` rows (the same fit): once each
    key = lambda r: (r["dataset"], r["method"], r["share"], r["seed"], r["setting"])  # noqa: E731
    rows = list({key(r): r for r in reversed(rows)}.values())
    runs: dict = {}
    for r in rows:
        runs.setdefault((r["dataset"], r["method"], r["share"]), {}).setdefault(r["seed"], [])
        runs[(r["dataset"], r["method"], r["share"])][r["seed"]].append(r)
    cells: dict = {}
    for k, seeds in runs.items():
        settings = {r["setting"] for rs in seeds.values() for r in rs}
        for rs in seeds.values():
            if {r["setting"] for r in rs} == settings:
                for r in rs:
                    cells.setdefault((*k, r["setting"]), []).append(r)

    def mean(k, f):
        v = [r[f] for r in cells.get(k, []) if r.get(f) is not None]
        return float(np.mean(v)) if v else float("nan")

    def show(v, fmt=".4f"):
        return "-" if v != v else format(v, fmt)

    out = [
        "| dataset | method | attacks | seeds | ROC AUC none / fb200 | FPR / recall none "
        "| FPR / recall fb200 | FPR at equal recall fb200 without / with rules "
        "| fbw2 / fbw3 / fball | attacks suppressed | cut by a third |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for ds, m, share in sorted({k[:3] for k in cells}):
        none, fb = (ds, m, share, "none"), (ds, m, share, "fb200")
        eq = mean(fb, "fpr_at_base_recall")
        plain = mean(fb, "fpr_at_base_recall_plain")
        plain = eq if plain != plain else plain  # no rule learned: the same model
        more = [mean((ds, m, share, s), "fpr_at_base_recall") for s in ("fbw2", "fbw3", "fball")]
        ok = "yes" if eq <= mean(none, "fpr") * 2 / 3 else "no"
        out.append(
            f"| {ds} | {m} | {100 * share:.0f} % | {len(cells.get(none, []))} "
            f"| {show(mean(none, 'roc_auc'))} / {show(mean(fb, 'roc_auc'))} "
            f"| {show(mean(none, 'fpr'))} / {show(mean(none, 'recall'), '.3f')} "
            f"| {show(mean(fb, 'fpr'))} / {show(mean(fb, 'recall'), '.3f')} "
            f"| {show(plain)} / {show(eq)} | {' / '.join(show(v) for v in more)} "
            f"| {show(mean(fb, 'suppressed_attacks'), '.3f')} | {ok if share else '-'} |"
        )
    return "\n".join(out)


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--summarize":
        print(summarize(sys.argv[2:]))
        return 0
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--feedback-table":
        print(feedback_table(sys.argv[2:]))
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=["nsl-kdd", "unsw-nb15", "ton-iot"])
    p.add_argument("--data-dir", default=os.environ.get("FEDEP_DATA_DIR", "/work/shared/data"))
    p.add_argument("--shares", nargs="+", type=float, default=[0.0, 0.05, 0.1, 0.2])
    p.add_argument("--methods", nargs="+", default=["fedep", "pca", "fedpg"])
    p.add_argument("--settings", nargs="+", default=list(SETTINGS))
    p.add_argument("--n-normal", type=int, default=5000, help="normal training rows")
    p.add_argument("--n-clients", type=int, default=20)
    p.add_argument("--rank", type=int, default=10)
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--out", default=None, help="JSON file (rewritten after every row)")
    p.add_argument(
        "--no-suppression-rules",
        dest="suppression_rules",
        action="store_false",
        help="feedback fits without suppression rules (default: with, suppression_rules=True)",
    )
    run(p.parse_args(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

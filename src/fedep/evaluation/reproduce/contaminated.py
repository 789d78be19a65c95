"""Training on traffic that already holds attacks: the contaminated-training table.

For each real dataset (``feature_set="rich"``), ``n_normal`` normal rows of the
training split with attack rows of the training split injected at each share of
``MODES[mode]["contaminated"]["shares"]`` of the training set (0 = clean), spread over
``n_clients`` IID gateways; NO labels are used for fitting, and every detector is
fitted with ``contamination="auto"`` (threshold at the estimated share). Tested on
the test split (at most ``max_test_rows``). Per cell: ROC AUC, FPR and F1 at the
detector's own threshold, the estimated contamination against the injected share,
and the fit time.

Methods (:data:`CONTAMINATED_METHODS`, the rows of the table):

``FedEP (trimmed)``
    FedEP with record trimming from the robust start (``trim_steps``, ``trim_share``,
    ``trim_start="median"``: trimmed PPCA by federated concentration steps,
    :mod:`fedep.core.trimming`).
``FedEP (paper S)``
    The paper's model, Case IV: entry-wise sparse ``S`` only, no trimming.
``FedPG``, ``PooledPCA``
    As elsewhere, without trimming.
``MCD (centralised)``
    A robust centralised reference: scikit-learn's ``MinCovDet`` on the pooled
    standardised training rows (a subsample of ``mcd_rows``, non-constant features),
    squared Mahalanobis distance as the score, flagged above the 95 % quantile of its
    training distances (no estimate of the share: ``contamination_`` is None).

Every seed of the mode draws its own training rows, gateways and fits (the record
trimming's fixed point depends on them: on UNSW-NB15 at 10 %, trimmed pooled PCA gave
ROC AUC 0.39, 0.80 and 0.40 on seeds 0-2); the report gives the mean, its standard
deviation and the lowest seed.

The cells live here (:func:`contaminated_cells`), with their collection
(:func:`collect_contaminated`) and report section (:func:`contaminated_section`).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from fedep.detectors import make_estimator
from fedep.evaluation.metrics import format_metrics_table
from fedep.evaluation.reproduce.cells import Cell

__all__ = [
    "CONTAMINATED_METHODS",
    "MCDReference",
    "training_rows",
    "training_set",
    "contaminated_cells",
    "collect_contaminated",
    "contaminated_section",
]

#: The table's methods (row labels and cache-key parts): detectors with this table's
#: settings, and a centralised robust reference.
CONTAMINATED_METHODS = (
    "FedEP (trimmed)",
    "FedEP (paper S)",
    "FedPG",
    "PooledPCA",
    "MCD (centralised)",
)


def training_rows(y, share: float, n_normal: int, rng) -> tuple[np.ndarray, float]:
    """Indices of ``n_normal`` normal rows, then of attack rows making ``share`` of them.

    Parameters
    ----------
    y : ndarray of shape (n_samples,)
        0 normal, 1 attack.
    share : float
        The attacks' share of the result, in [0, 1).
    n_normal : int
        Normal rows drawn (all of them when there are fewer).
    rng : numpy.random.Generator

    Returns
    -------
    idx : ndarray of shape (n_normal + n_attack,)
        Distinct rows: the normal ones first.
    true_share : float
        ``n_attack / n`` (the share actually injected: there may be fewer attacks).
    """
    normal = np.flatnonzero(y == 0)
    attack = np.flatnonzero(y == 1)
    rows = rng.choice(normal, min(n_normal, normal.size), replace=False)
    n_att = int(round(share / (1.0 - share) * rows.size))
    att = rng.choice(attack, min(n_att, attack.size), replace=False)
    return np.concatenate([rows, att]), att.size / (rows.size + att.size)


def training_set(X, y, share: float, n_normal: int, rng):
    """The rows of ``X`` that :func:`training_rows` draws.

    Returns
    -------
    X : ndarray of shape (n_normal + n_attack, n_features)
    true_share : float
        ``n_attack / n`` (the share actually injected: there may be fewer attacks).
    """
    idx, true_share = training_rows(y, share, n_normal, rng)
    return X[idx], true_share


class MCDReference:
    """``MinCovDet`` on standardised non-constant features, squared Mahalanobis score."""

    def __init__(self, max_rows: int, seed: int):
        self.max_rows, self.seed = max_rows, seed

    def fit(self, X, groups=None):
        from sklearn.covariance import MinCovDet

        rng = np.random.default_rng(self.seed)
        self.mean_, sd = X.mean(0), X.std(0)
        self.cols_ = sd > 1e-9
        self.sd_ = sd[self.cols_]
        Z = (X[:, self.cols_] - self.mean_[self.cols_]) / self.sd_
        sub = Z[rng.choice(len(Z), min(self.max_rows, len(Z)), replace=False)]
        sub = sub + 1e-6 * rng.standard_normal(sub.shape)  # break exact collinearity
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.mcd_ = MinCovDet(random_state=self.seed).fit(sub)
        # No estimate of the share: the chi-square 0.975 rule flagged 30-55 % of the
        # training rows on these (far from Gaussian) features, the detectors' log-score
        # rule 35-50 %; the threshold is the training distances' 95 % quantile.
        self.contamination_ = None
        self.threshold_ = float(np.quantile(self.decision_function(X), 0.95))
        return self

    def decision_function(self, X):
        Z = (X[:, self.cols_] - self.mean_[self.cols_]) / self.sd_
        return self.mcd_.mahalanobis(Z)

    def predict(self, X):
        return (self.decision_function(X) > self.threshold_).astype(int)


def _make(method: str, c: dict, seed: int):
    """The estimator of a row of the table with the settings ``c`` of the mode: the
    detectors by :func:`fedep.detectors.make_estimator`, all with
    ``contamination="auto"``."""
    if method == "MCD (centralised)":
        return MCDReference(int(c["mcd_rows"]), seed)
    common = {"n_components": int(c["rank"]), "contamination": "auto"}
    rounds = {"n_rounds": int(c["n_rounds"]), "random_state": seed}
    if method == "FedEP (trimmed)":
        trim = {k: c[k] for k in ("trim_steps", "trim_share")}
        return make_estimator("FedEP", {**common, **rounds, "trim_start": "median", **trim})
    if method == "FedEP (paper S)":
        return make_estimator("FedEP", {**common, **rounds})
    if method == "FedPG":
        return make_estimator("FedPG", {**common, **rounds})
    if method == "PooledPCA":
        return make_estimator("PooledPCA", common)
    raise ValueError(f"unknown method {method!r}")  # pragma: no cover - a plan bug


def _cell(data, name: str, share: float, method: str, c: dict, seed: int):
    def compute(values) -> dict:
        from sklearn.metrics import f1_score, roc_auc_score

        d = data.dataset(name)
        rng = np.random.default_rng(seed)
        X, true_share = training_set(d.X_train, d.y_train, share, int(c["n_normal"]), rng)
        groups = rng.integers(0, int(c["n_clients"]), X.shape[0])  # IID gateways
        test = np.arange(len(d.y_test))
        if c.get("max_test_rows") and test.size > c["max_test_rows"]:
            test = np.sort(rng.choice(test, int(c["max_test_rows"]), replace=False))
        Xt, yt = d.X_test[test], d.y_test[test]
        est = _make(method, c, seed)
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the round cap is reported, not warned
            est.fit(X, groups=groups)
        fit_s = time.perf_counter() - t0
        pred = est.predict(Xt)
        return {
            "roc_auc": float(roc_auc_score(yt, est.decision_function(Xt))),
            "fpr": float(pred[yt == 0].mean()),
            "f1": float(f1_score(yt, pred)),
            "contamination_": None if est.contamination_ is None else float(est.contamination_),
            "true_share": float(true_share),
            "n_train": int(X.shape[0]),
            "n_test": int(yt.size),
            "fit_time_s": fit_s,
            "n_trim_steps": getattr(est, "n_trim_steps_", None),
            "n_iter": getattr(est, "n_iter_", None),
        }

    return compute


def _key(name: str, share, method: str, seed: int) -> str:
    """The cache key of one cell (the same in the plan and the collection)."""
    return f"contam-{name}-{float(share):g}-{method}-s{seed}"


def contaminated_cells(ctx, name: str) -> list[Cell]:
    """One cell per share, method and seed; none for the synthetic fallback."""
    c = ctx.cfg["contaminated"]
    if ctx.best_data.dataset(name) is None:
        return []
    sec = f"{name} (contaminated training)"
    return [
        Cell(
            _key(name, share, method, seed),
            sec,
            _cell(ctx.best_data, name, float(share), method, c, seed),
        )
        for seed in ctx.cfg["seeds"]
        for share in c["shares"]
        for method in CONTAMINATED_METHODS
    ]


def collect_contaminated(values: dict[str, Any], cfg: dict, names: list[str]) -> dict:
    """``results.json["contaminated"]``: the settings and one row per cell (and seed)."""
    c = cfg["contaminated"]
    rows = []
    for name in names:
        for share in c["shares"]:
            for method in CONTAMINATED_METHODS:
                for seed in cfg["seeds"]:
                    key = _key(name, share, method, seed)
                    if key in values:
                        rows.append({"dataset": name, "share": float(share),
                                     "method": method, "seed": seed, **values[key]})  # fmt: skip
    return {"config": {**c, "seeds": list(cfg["seeds"])}, "rows": rows}


def _by_cell(rows: list[dict]) -> dict[tuple, list[dict]]:
    """The rows grouped by (dataset, share, method), seeds together, in first-seen order."""
    out: dict[tuple, list[dict]] = {}
    for r in rows:
        out.setdefault((r["dataset"], r["share"], r["method"]), []).append(r)
    return out


def _mean(group: list[dict], key: str) -> float | None:
    vals = [r[key] for r in group if r.get(key) is not None]
    return float(np.mean(vals)) if vals else None


def _loss_lines(rows: list[dict]) -> list[dict]:
    """ROC AUC lost against the same method's clean fit (means over the seeds), per
    dataset/method/share."""
    cells = _by_cell(rows)
    clean = {(d, m): _mean(g, "roc_auc") for (d, sh, m), g in cells.items() if sh == 0}
    out = []
    for (d, sh, m), g in cells.items():
        base = clean.get((d, m))
        if sh > 0 and base is not None:
            out.append(
                {
                    "dataset": d,
                    "method": m,
                    "attacks %": f"{100 * sh:.0f}",
                    "AUC lost": f"{base - _mean(g, 'roc_auc'):+.4f}",
                }
            )
    return out


def contaminated_section(res: dict, fmt: Callable[[list[dict]], str] = format_metrics_table):
    """The report's contaminated-training section (empty without real data)."""
    ct = res.get("contaminated")
    if not ct or not ct["rows"]:
        return []
    c = ct["config"]
    seeds = c["seeds"]
    many = len(seeds) > 1
    L = ["\n## Training on traffic that already holds attacks (no labels)\n"]
    L.append(
        f'`feature_set="rich"`; {c["n_normal"]} normal training rows with attack rows of '
        f"the training split injected at {', '.join(f'{100 * s:g} %' for s in c['shares'])}"
        f" of the training set, {c['n_clients']} IID gateways, rank {c['rank']}, "
        + (
            f"seeds {', '.join(str(s) for s in seeds)} (each seed draws its own rows and "
            "fits; the means are shown, the ROC AUC with its standard deviation and its "
            "lowest seed)"
            if many
            else f"seed {seeds[0]}"
        )
        + '; no labels used. Every PCA detector uses `contamination="auto"`: '
        "FPR and F1 are at its own threshold (the estimated share), `est. %` is that "
        "estimate. FedEP (trimmed): `trim_steps="
        f'{c["trim_steps"]}, trim_share={c["trim_share"]}, trim_start="median"`; FedEP '
        "(paper S): the paper's model (Case IV), no trimming. FedEP/FedPG at most "
        f"{c['n_rounds']} rounds. MCD: scikit-learn's MinCovDet on {c['mcd_rows']} pooled "
        "rows (centralised reference; threshold at the 95 % quantile of its training "
        "distances, no estimate). Test rows: "
        + (f"at most {c['max_test_rows']}" if c.get("max_test_rows") else "all")
        + ".\n\n"
    )
    table = []
    for (d, _sh, m), g in _by_cell(ct["rows"]).items():
        aucs = np.array([r["roc_auc"] for r in g], dtype=float)
        est = _mean(g, "contamination_")
        row = {
            "dataset": d,
            "attacks %": f"{100 * _mean(g, 'true_share'):.1f}",
            "method": m,
            "ROC AUC": f"{aucs.mean():.4f}" + (f" ± {aucs.std():.4f}" if many else ""),
        }
        if many:
            row["lowest"] = f"{aucs.min():.4f}"
        row.update(
            {
                "FPR %": f"{100 * _mean(g, 'fpr'):.2f}",
                "F1 %": f"{100 * _mean(g, 'f1'):.2f}",
                "est. %": "-" if est is None else f"{100 * est:.1f}",
                "fit s": f"{_mean(g, 'fit_time_s'):.1f}",
            }
        )
        table.append(row)
    L.append(fmt(table))
    loss = _loss_lines(ct["rows"])
    if loss:
        L.append("\nROC AUC lost against the same method's clean fit (means over the seeds):\n\n")
        L.append(fmt(loss))
    return L

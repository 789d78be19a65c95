"""Building blocks of the evaluation: splits, detectors, one evaluated fit, curves.

Everything that sets a threshold or picks a model looks at training/validation data
only; test labels are used for the reported metrics and, separately labelled, for the
paper-style test-tuned best-F1 row.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from typing import Any

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import roc_curve

from fedep import FedEP, FedPG, LocalPCA, OneShotPCA, PooledPCA
from fedep.core.fedep import FedEPCohort
from fedep.core.fedpg import FedPGCohort, FedPGSettings
from fedep.core.scoring import residual_energy
from fedep.core.stiefel import polar, random_stiefel
from fedep.data import ClientSplit, Dataset, make_client_split
from fedep.evaluation.metrics import (
    best_f1_threshold,
    detection_metrics,
    per_class_recall,
)
from fedep.evaluation.thresholds import DEFAULT_TARGET_FPR, threshold_from_validation
from fedep.federation.server import server_round

__all__ = [
    "METHODS",
    "make_detector",
    "prepare_split",
    "subsample_split",
    "evaluate_detector",
    "per_round_curve",
]

METHODS = {
    "FedEP": FedEP,
    "FedPG": FedPG,
    "PooledPCA": PooledPCA,
    "LocalPCA": LocalPCA,
    "OneShotPCA": OneShotPCA,
}


def make_detector(method: str, params: dict | None = None, random_state: int = 0):
    """A detector by name with ``params`` and a seed."""
    cls = METHODS[method]
    return cls(**(params or {}), random_state=random_state)


def _subset_train(ds: Dataset, mask: np.ndarray) -> Dataset:
    return dataclasses.replace(
        ds,
        X_train=ds.X_train[mask],
        y_train=ds.y_train[mask],
        category_train=ds.category_train[mask],
        raw_train=ds.raw_train.loc[mask],
    )


def prepare_split(
    ds: Dataset,
    n_clients: int = 20,
    protocol: str = "clean",
    random_state: int = 0,
    *,
    partition_key: str = "dst_bytes",
    validation_size: float = 0.2,
) -> ClientSplit:
    """The paper's non-IID split (training rows sorted by ``partition_key``, contiguous
    chunks) via :func:`fedep.data.make_client_split`.

    Fallback (``protocol="clean"`` only): when sorting all training rows leaves a client
    without normal rows (UNSW-NB15: whole ``dbytes`` ranges are attacks), the NORMAL
    training rows are sorted and cut into ``n_clients`` chunks instead, and a
    ``validation_size`` share of the training attacks (seeded) joins the validation
    split, each assigned to the client whose key range covers it. ``info["fallback"]``
    says which path was taken.
    """
    try:
        sp = make_client_split(
            ds,
            n_clients,
            partition="sorted",
            partition_key=partition_key,
            protocol=protocol,
            validation_size=validation_size,
            random_state=random_state,
        )
        sp.info["fallback"] = None
        return sp
    except ValueError:
        if protocol != "clean":
            raise
    normal = ds.y_train == 0
    sp = make_client_split(
        _subset_train(ds, normal),
        n_clients,
        partition="sorted",
        partition_key=partition_key,
        protocol="clean",
        validation_size=validation_size,
        random_state=random_state,
    )
    rng = np.random.default_rng(random_state)
    att = np.flatnonzero(~normal)
    att = rng.permutation(att)[: int(round(validation_size * att.size))]
    key_n = ds.raw_train[partition_key].to_numpy(dtype=float)[normal]
    # Upper key bound of each normal chunk, in client order.
    groups_n = np.empty(normal.sum(), dtype=np.int64)
    groups_n[sp.info["train_row_index"]] = sp.groups_train
    groups_n[sp.info["val_row_index"]] = sp.groups_val
    upper = np.array([key_n[groups_n == k].max() for k in range(n_clients)])
    key_a = ds.raw_train[partition_key].to_numpy(dtype=float)[att]
    g_att = np.searchsorted(upper[:-1], key_a, side="left").astype(np.int64)
    sp.X_val = np.vstack([sp.X_val, ds.X_train[att]])
    sp.y_val = np.concatenate([sp.y_val, np.ones(att.size, dtype=sp.y_val.dtype)])
    sp.groups_val = np.concatenate([sp.groups_val, g_att])
    sp.info["fallback"] = (
        f"normal training rows sorted by {partition_key} and cut into {n_clients} chunks; "
        f"{att.size} training attacks ({validation_size:.0%}) added to validation"
    )
    return sp


def subsample_split(
    sp: ClientSplit,
    max_train_rows: int | None,
    max_val_rows: int | None = None,
    random_state: int = 0,
) -> ClientSplit:
    """Keep at most ``max_train_rows`` training rows (same share from every client,
    at least ``min(rows, 20)`` per client) and ``max_val_rows`` validation rows."""
    rng = np.random.default_rng(random_state)
    out = dataclasses.replace(sp, info=dict(sp.info))
    n = len(sp.X_train)
    if max_train_rows is not None and n > max_train_rows:
        frac = max_train_rows / n
        keep = []
        for g in np.unique(sp.groups_train):
            rows = np.flatnonzero(sp.groups_train == g)
            k = min(rows.size, max(20, int(round(frac * rows.size))))
            keep.append(np.sort(rng.choice(rows, size=k, replace=False)))
        keep = np.concatenate(keep)
        out.X_train, out.groups_train = sp.X_train[keep], sp.groups_train[keep]
        out.y_train = sp.y_train[keep]
    nv = len(sp.X_val)
    if max_val_rows is not None and nv > max_val_rows:
        keep = np.sort(rng.choice(nv, size=max_val_rows, replace=False))
        out.X_val, out.y_val, out.groups_val = sp.X_val[keep], sp.y_val[keep], sp.groups_val[keep]
    out.info["n_train_used"] = len(out.X_train)
    out.info["n_val_used"] = len(out.X_val)
    return out


def _roc_points(y, s, max_points: int = 200) -> dict[str, list[float]]:
    if len(np.unique(y)) < 2:
        return {"fpr": [], "tpr": []}
    fpr, tpr, _ = roc_curve(y, s)
    if fpr.size > max_points:
        grid = np.linspace(0.0, 1.0, max_points)
        tpr = np.interp(grid, fpr, tpr)
        fpr = grid
    return {"fpr": [float(v) for v in fpr], "tpr": [float(v) for v in tpr]}


def evaluate_detector(
    det,
    sp: ClientSplit,
    *,
    target_fpr: float = DEFAULT_TARGET_FPR,
    personalised: bool = False,
    with_roc: bool = False,
    with_importance: bool = False,
) -> dict[str, Any]:
    """Fit ``det`` on the split's training rows and evaluate it.

    Returns a dict: ``honest`` (test metrics at the threshold from validation-normal
    scores, quantile ``1 - target_fpr``), ``test_tuned`` (test metrics at the best-F1
    threshold ON THE TEST SET, as in the paper; for comparison only), ``val_roc_auc``,
    ``per_class`` (share flagged per test category at the honest threshold),
    ``fit_time_s``, ``n_iter``, ``personalised`` (honest metrics when every record is
    scored by its client's personalised basis, when the split gives test clients),
    optionally ``roc`` (test ROC points) and
    ``importance`` (sum of |weights| per feature of the global basis).
    """
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        det.fit(sp.X_train, groups=sp.groups_train)
    fit_wall = time.perf_counter() - t0
    gv = sp.groups_val if personalised else None
    gt = sp.groups_test if personalised else None
    s_val = det.decision_function(sp.X_val, gv)
    s_test = det.decision_function(sp.X_test, gt)
    thr = threshold_from_validation(s_val, sp.y_val, target_fpr)
    honest = detection_metrics(sp.y_test, s_test, thr)
    tuned = detection_metrics(sp.y_test, s_test, best_f1_threshold(sp.y_test, s_test))
    val_auc = detection_metrics(sp.y_val, s_val, thr)["roc_auc"]
    out: dict[str, Any] = {
        "honest": honest,
        "test_tuned": tuned,
        "val_roc_auc": val_auc,
        "per_class": per_class_recall(sp.category_test, (s_test > thr).astype(int)),
        "fit_time_s": float(getattr(det, "fit_time_", fit_wall)),
        "fit_wall_s": fit_wall,
        "n_iter": int(getattr(det, "n_iter_", 0)),
    }
    if not personalised and sp.groups_test is not None and hasattr(det, "client_components_"):
        pv = det.decision_function(sp.X_val, sp.groups_val)
        pt = det.decision_function(sp.X_test, sp.groups_test)
        pthr = threshold_from_validation(pv, sp.y_val, target_fpr)
        out["personalised"] = detection_metrics(sp.y_test, pt, pthr)
    hist = getattr(det, "history_", None)
    if hist:
        out["time_per_round_s"] = float(np.mean([h["time_s"] for h in hist]))
    if with_roc:
        out["roc"] = _roc_points(sp.y_test, s_test)
    if with_importance:
        out["importance"] = [float(v) for v in np.abs(det.components_).sum(axis=0)]
    return out


def per_round_curve(
    method: str,
    params: dict,
    sp: ClientSplit,
    n_rounds: int,
    *,
    random_state: int = 0,
    target_fpr: float = DEFAULT_TARGET_FPR,
) -> list[dict[str, float]]:
    """Test accuracy / ROC AUC / objective of the global basis after each round.

    Runs the same federated algorithm as :class:`fedep.FedEP` / :class:`fedep.FedPG`
    (their cohorts and :func:`fedep.federation.server.server_round`, all clients per
    round, random initial basis from the same seed) in a loop that scores the
    orthonormalised consensus after every round, with the threshold from validation
    normal scores at that round. One fit instead of ``n_rounds`` refits.
    """
    det = make_detector(method, {**params, "n_rounds": 1, "tol": 0.0}, random_state)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        det.fit(sp.X_train, groups=sp.groups_train)  # standardisation statistics
    mean, scale = det.mean_, det.scale_
    labels = np.unique(sp.groups_train)
    blocks = [(sp.X_train[sp.groups_train == g] - mean) / scale for g in labels]
    Zv = (sp.X_val - mean) / scale
    Zt = (sp.X_test - mean) / scale
    rng = np.random.default_rng(random_state)
    r = det.n_components
    V = random_stiefel(blocks[0].shape[1], r, rng)
    if method == "FedEP":
        cohort = FedEPCohort(blocks, V, det.beta, det.nu, det.settings())
        key = "fedep"
    elif method == "FedPG":
        st = FedPGSettings(
            lr=None if det.lr is None else float(det.lr),
            rho=float(det.rho),
            local_epochs=int(det.local_epochs),
        )
        cohort = FedPGCohort(blocks, V, st)
        key = "fedpg"
    else:
        raise ValueError("per_round_curve supports FedEP and FedPG")
    out = []
    t_cum = 0.0
    for rnd in range(1, n_rounds + 1):
        t0 = time.perf_counter()
        rep = cohort.local_round(V, None)
        V, rec = server_round(key, rep, V)
        t_cum += time.perf_counter() - t0
        B = polar(V)
        sv, st_ = residual_energy(Zv, B), residual_energy(Zt, B)
        thr = threshold_from_validation(sv, sp.y_val, target_fpr)
        m = detection_metrics(sp.y_test, st_, thr)
        out.append(
            {
                "round": rnd,
                "acc": m["acc"],
                "f1": m["f1"],
                "roc_auc": m["roc_auc"],
                "objective": float(rec["objective"]),
                "cumulative_time_s": t_cum,
            }
        )
    return out

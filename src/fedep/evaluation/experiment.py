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

from fedep.core.scoring import residual_energy
from fedep.core.stiefel import polar
from fedep.data import ClientSplit, Dataset, make_client_split
from fedep.detectors import make_estimator
from fedep.evaluation.evaluate import evaluate_fitted
from fedep.evaluation.metrics import detection_metrics
from fedep.evaluation.thresholds import DEFAULT_TARGET_FPR, threshold_from_validation

__all__ = [
    "prepare_split",
    "subsample_split",
    "evaluate_detector",
    "per_round_curve",
]


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


def evaluate_detector(
    det,
    sp: ClientSplit,
    *,
    target_fpr: float = DEFAULT_TARGET_FPR,
    personalised: bool = False,
    with_roc: bool = False,
    with_contributions: bool = False,
) -> dict[str, Any]:
    """Fit ``det`` on the split's training rows, then :func:`evaluate_fitted` it with
    the honest threshold (policy ``"validation"``).

    Returns a dict: ``honest`` (test metrics at the threshold from validation-normal
    scores, quantile ``1 - target_fpr``), ``test_tuned`` (test metrics at the best-F1
    threshold ON THE TEST SET, as in the paper; for comparison only), ``val_roc_auc``,
    ``per_class`` (share flagged per test category at the honest threshold),
    ``fit_time_s``, ``n_iter``, ``personalised`` (honest metrics when every record is
    scored by its client's personalised basis, when the split gives test clients),
    optionally ``roc`` (test ROC points and the honest operating point) and
    ``contributions`` (mean residual contribution per feature over the test ATTACKS,
    global basis: what makes the attacks anomalous).
    """
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        det.fit(sp.X_train, groups=sp.groups_train)
    fit_wall = time.perf_counter() - t0
    ev = evaluate_fitted(
        det,
        sp.X_test,
        sp.y_test,
        groups=sp.groups_test if personalised else None,
        categories=sp.category_test,
        threshold_policy="validation",
        X_val=sp.X_val,
        y_val=sp.y_val,
        groups_val=sp.groups_val if personalised else None,
        target_fpr=target_fpr,
        with_roc=with_roc,
    )
    out: dict[str, Any] = {
        "honest": ev["honest"],
        "test_tuned": ev["test_tuned"],
        "val_roc_auc": ev["val_roc_auc"],
        "per_class": ev["per_class"],
        "fit_time_s": float(getattr(det, "fit_time_", fit_wall)),
        "fit_wall_s": fit_wall,
        "n_iter": int(getattr(det, "n_iter_", 0)),
    }
    if not personalised and sp.groups_test is not None and hasattr(det, "client_components_"):
        pers = evaluate_fitted(
            det,
            sp.X_test,
            sp.y_test,
            groups=sp.groups_test,
            threshold_policy="validation",
            X_val=sp.X_val,
            y_val=sp.y_val,
            groups_val=sp.groups_val,
            target_fpr=target_fpr,
        )
        out["personalised"] = pers["honest"]
    hist = getattr(det, "history_", None)
    if hist:
        out["time_per_round_s"] = float(np.mean([h["time_s"] for h in hist]))
    if with_roc:
        out["roc"] = ev["roc"]
    if with_contributions:
        attacks = sp.X_test[np.asarray(sp.y_test) == 1]
        if len(attacks):
            contrib = det.feature_contributions(attacks).mean(axis=0)
            out["contributions"] = [float(v) for v in contrib]
    return out


def _opt_float(v) -> float | None:
    return None if v is None else float(v)


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

    Fits ``make_estimator(method, params)`` (:func:`fedep.detectors.make_estimator`,
    seeded with ``random_state``) ONCE, with ``n_rounds`` rounds and
    ``tol=0`` (every round runs), and a ``callback(round, V, record)`` that scores the
    orthonormalised consensus ``polar(V)`` after every round of that fit: same
    parameters, initialisation and client sampling as the detector's own fit. The
    threshold is re-derived from validation-normal scores at each round.
    ``cumulative_time_s`` sums the rounds' own ``time_s`` (scoring excluded).
    ``objective`` and ``local_fit`` are the round record's (see
    :func:`fedep.federation.server.server_round`): FedPG's ``objective`` is the
    reconstruction error of the consensus the round STARTED from (the previous
    round's, the start's in round 1), its ``local_fit`` that of the clients' own bases
    after the round.
    """
    if method not in ("FedEP", "FedPG"):
        raise ValueError("per_round_curve supports FedEP and FedPG")
    out: list[dict[str, float]] = []
    std: dict[str, np.ndarray] = {}

    def on_round(rnd: int, V: np.ndarray, record: dict) -> None:
        if not std:  # the detector's standardisation is set before the rounds
            std["val"] = (sp.X_val - det.mean_) / det.scale_
            std["test"] = (sp.X_test - det.mean_) / det.scale_
        B = polar(V)
        sv = residual_energy(std["val"], B)
        st = residual_energy(std["test"], B)
        thr = threshold_from_validation(sv, sp.y_val, target_fpr)
        m = detection_metrics(sp.y_test, st, thr)
        t_prev = out[-1]["cumulative_time_s"] if out else 0.0
        out.append(
            {
                "round": int(rnd),
                "acc": m["acc"],
                "f1": m["f1"],
                "roc_auc": m["roc_auc"],
                "objective": float(record["objective"]),
                "local_fit": _opt_float(record.get("local_fit")),
                "cumulative_time_s": t_prev + float(record.get("time_s", 0.0)),
            }
        )

    det = make_estimator(
        method,
        {
            **params,
            "n_rounds": int(n_rounds),
            "tol": 0.0,
            "callback": on_round,
            "random_state": random_state,
        },
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        det.fit(sp.X_train, groups=sp.groups_train)
    return out

"""Reproduce the paper's experiments with honest thresholds: ``run_reproduce``.

Writes, under ``out_dir``:

``report.md``
    Tables and embedded figures, the exact command, package versions, wall time, and
    where the data came from.
``results.json``
    Machine-readable results (schema below).
``figures/*.png``
    ROC curves (with the honest operating points), accuracy / ROC AUC / objective vs
    round, mean residual contribution per feature on test attacks, scalability.
``cells/*.json``
    One cached result per experiment cell, named by mode, a hash of the mode's
    settings (seeds excluded: they are part of each cell's key) and the cell key.
    Re-running with the same ``out_dir`` and settings skips every cell whose file
    exists, so an interrupted run resumes. Delete ``cells/`` to recompute.

Headline: "Best honest configuration" (top of ``report.md``, ``results.json["best"]``).
``feature_set="rich"`` (:func:`fedep.data.load_dataset`: log1p of heavy-tailed counts,
one-hot categoricals, flags), the same 20 non-IID clients and clean protocol as below,
and hyper-parameters chosen ONLY by ROC AUC on the validation split carved from
training (:func:`select_best_config` -> :func:`fedep.evaluation.selection.grid_search`,
first seed; test rows are never passed to it). Each of FedEP, FedPG and PooledPCA gets
its own selection over the same rank grid (``MODES[mode]["best"]["ranks"]``), FedEP also
over ``alphas``. FedEP and FedPG start from ``init="oneshot"`` (one-shot merged client
SVDs: a legitimate federated initialisation, one extra round, no records moved). The
honest threshold and mean +- std over the mode's seeds are as below.

Paper setting (secondary tables). Each dataset's training rows are sorted by
``dst_bytes`` and cut into 20 contiguous client chunks (the paper's non-IID split, see
:func:`fedep.evaluation.experiment.prepare_split`), rank 5, global z-scores from
per-client moments. A validation split is carved from each client's TRAINING rows.
The honest threshold is the 95 % quantile of validation-normal scores (target FPR 5 %);
hyper-parameters (full mode) maximise validation ROC AUC. The "test-tuned (as in the
paper)" rows use the best-F1 threshold on the TEST set: optimistic, for comparison
with the paper's numbers only. When no real dataset is found the synthetic scenario
(:func:`fedep.data.make_federated_data`) is run instead.

results.json schema (``schema_version`` 5; version 2 added ``best``, version 3
replaced ``importance`` by ``contributions`` and added ROC ``operating_point``,
version 4 added ``feature_sets``, version 5 ``contaminated``)::

    {
      "schema_version": 5,
      "mode": "quick" | "full",
      "command": str, "versions": {package: version}, "platform": str,
      "started": ISO time, "wall_time_s": float,
      "data": {"source": "real" | "synthetic", "data_dir": str,
               "datasets": [name], "missing": {name: message},
               "splits": {name: {protocol: info}}},
      "config": {...mode settings...},
      "paper": {dataset: {"FedPG": {acc, pre, rec, fnr, f1, roc_auc}, "FedEP": {...}}},
      "selection": {dataset: {method: {"best_params", "best_score", "results"}}},
      "main": [ {"dataset", "protocol", "method", "threshold": "honest" |
                 "honest-personalised" | "test-tuned",
                 "mean": {metric: float}, "std": {metric: float}, "n_seeds": int,
                 "fit_time_s": float} ],
      "trivial": {dataset: {protocol: metrics}},
      "per_class": {dataset: {method: {category: share flagged}}},
      "roc": {dataset: {method: {"fpr": [..], "tpr": [..], "roc_auc": float,
                                 "operating_point": {"fpr", "tpr"} (honest threshold)}}},
      "rounds": {dataset: {method: [{"round", "acc", "f1", "roc_auc", "objective",
                                     "local_fit", "cumulative_time_s"}]}} (FedPG's
                 "objective": the error of the consensus the round started from),
      "contributions": {dataset: {"features": [..], method: [..]}} (mean residual
                       contribution per feature over the test attacks, global basis),
      "ablation": [{"dataset", "case", "roc_auc", "acc", "f1", "fpr", "test_tuned_f1"}],
      "rank": [{"dataset", "method", "rank", "roc_auc", "acc", "f1", "fpr",
                "test_tuned_f1"} or with "note" when rank > n_features],
      "scalability": [{"dataset", "method", "n_clients", "time_per_round_s",
                       "cumulative_time_s": [..]}],
      "best": {"config": {feature_set, ranks, alphas, n_rounds, tol, inner_max_iter,
                          max_train_rows, max_val_rows, max_test_rows, n_clients, seeds},
               "splits": {dataset: split info (first seed)},
               "selection": {dataset: {method: {"best_params", "best_score", "grid",
                                                "results": [{"params", "val_roc_auc",
                                                             "fit_time_s"}]}}},
               "table": [{"dataset", "method", "params", "rank", "alpha" (FedEP, else
                          null), "val_roc_auc", "mean": {metric}, "std": {metric}
                          (honest threshold), "test_tuned_mean", "test_tuned_std",
                          "n_seeds", "fit_time_s", "n_iter", "paper_fedep_roc_auc"}],
               "roc": {dataset: {method: {"fpr", "tpr", "roc_auc", "operating_point"}}}
                      (first seed),
               "trivial": {dataset: metrics of the flag-all detector}},
               "splits": {dataset: split info (first seed)}},
      "feature_sets": {"sets": ["rich", "paper", "generic"] (headline set first),
                       "table": [{"dataset", "feature_set", "method", "rank", "params",
                                  "val_roc_auc", "n_features" (encoded), "mean", "std",
                                  "n_seeds", "fit_time_s"}],
                       "scaling": {dataset: {"chosen": rule, "by_scaling": {rule:
                                   {"val_roc_auc", "rank"}}}} (generic path, validation)},
      "contaminated": {"config": {shares, n_normal, n_clients, rank, n_rounds,
                                  trim_steps, trim_share, mcd_rows, max_test_rows, seeds},
                       "rows": [{"dataset", "share", "method", "seed", "roc_auc", "fpr", "f1",
                                 "contamination_" (estimated), "true_share", "n_train",
                                 "n_test", "fit_time_s", "n_trim_steps", "n_iter"}]}
                      (training on traffic with injected attacks, no labels: see
                      :mod:`.contaminated`; no rows for the synthetic scenario),
      "cells": {"computed": int, "cached": int}
    }

Metrics are fractions (acc, pre, rec, fnr, fpr, f1 in [0, 1]); the report prints rates
in percent like the paper, AUCs as fractions.

Modules: :mod:`.config` (modes, the paper's numbers, schema version), :mod:`.cells`
(a cell, the cell cache, progress), :mod:`.data` (datasets, splits, synthetic fallback),
:mod:`.contaminated` (the contaminated-training cells, collection and section),
:mod:`.plan` (every cell of a run, named up front), :mod:`.collect` (cells ->
``results.json``), :mod:`.figures`, :mod:`.report`, :mod:`.run` (``run_reproduce``).
"""

from fedep.evaluation.reproduce.config import (
    BEST_METHODS,
    DATASETS,
    METHOD_ORDER,
    MODES,
    PAPER_NUMBERS,
    ROUND_METHODS,
    SCHEMA_VERSION,
    best_base_params,
    best_grid,
)
from fedep.evaluation.reproduce.data import synthetic_split
from fedep.evaluation.reproduce.plan import select_best_config
from fedep.evaluation.reproduce.run import run_reproduce

#: Former private name, kept for existing callers.
_synthetic_split = synthetic_split

__all__ = [
    "run_reproduce",
    "PAPER_NUMBERS",
    "MODES",
    "DATASETS",
    "METHOD_ORDER",
    "BEST_METHODS",
    "ROUND_METHODS",
    "SCHEMA_VERSION",
    "select_best_config",
    "best_base_params",
    "best_grid",
    "synthetic_split",
]

"""``fedep evaluate``: detection metrics of a saved model on labelled test data, at the
model's own thresholds (learnt from training data), by
:func:`fedep.evaluation.evaluate.evaluate_fitted`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from fedep._json import jsonable
from fedep.cli._common import (
    UsageError,
    add_data_source,
    add_model_options,
    check_columns,
    check_dataset,
    command_parser,
    load_model,
    model_features,
    read_kwargs,
)
from fedep.cli.training import client_ids_of
from fedep.data import DataError, load_dataset
from fedep.data.labels import labels_of
from fedep.data.readers import read_table
from fedep.detectors.columns import client_ids, numeric_matrix


def register(sub) -> None:
    p = command_parser(
        sub,
        "evaluate",
        description="Acc, Pre, Rec, FNR, FPR, F1, ROC AUC, PR AUC and per-attack-class "
        "recall at the model's threshold (learnt from training data).",
    )
    add_model_options(p)
    add_data_source(p, test=True)
    p.add_argument(
        "--category-column",
        help="attack-class column of --test (default: the label values when "
        "--normal-label is given)",
    )
    p.add_argument(
        "--client-column",
        help="client id column of --test: rows of a known client are scored with its "
        "personalised basis and flagged at its own threshold (as fedep score)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(func=cmd_evaluate)


def test_data(args, names, det=None):
    """X_test (a DataFrame of the model's columns), y_test, categories, clients, source."""
    check_dataset(args.dataset)
    if args.dataset is not None:
        if args.label_column or args.normal_label or args.category_column or args.client_column:
            raise UsageError(
                "--label-column / --normal-label / --category-column / --client-column "
                "apply to --test"
            )
        generic = args.feature_set == "generic"
        if generic and getattr(det, "features_", None) is None:
            raise UsageError(
                "--feature-set generic needs a model with a feature pipeline; this one was "
                "fitted on a numeric feature set: pass the --feature-set it was trained with"
            )
        ds = load_dataset(
            args.dataset, args.data_dir, feature_set="paper" if generic else args.feature_set
        )
        if generic:
            X = ds.raw_inputs()[1].reset_index(drop=True)
            check_columns(det, [str(c) for c in X.columns], f"{ds.name} test set")
            cats = np.asarray(ds.category_test).astype(str)
            return X, ds.y_test, cats, None, f"{ds.name} test set (generic features)"
        if list(ds.feature_names) != names:
            raise UsageError(
                f"the model's {len(names)} features do not match {ds.name} with feature set "
                f"{args.feature_set!r} ({len(ds.feature_names)} features); pass the dataset "
                "and --feature-set the model was trained with"
            )
        X = pd.DataFrame(ds.X_test, columns=names, copy=False)
        cats = np.asarray(ds.category_test).astype(str)
        return X, ds.y_test, cats, None, f"{ds.name} test set"
    if not args.label_column:
        raise UsageError("--test needs --label-column")
    return _table_test_data(args, det)


def _table_test_data(args, det):
    """The test table read by :func:`~fedep.data.readers.read_table` (any format)."""
    path = Path(args.table)
    df = read_table(path, **read_kwargs(args))
    cols = [str(c) for c in df.columns]
    roles = (
        ("--label-column", args.label_column),
        ("--client-column", args.client_column),
        ("--category-column", args.category_column),
    )
    for opt, c in roles:
        if c is not None and c not in cols:
            raise DataError(path, f"{opt} {c!r} is not a column (columns: {cols})", column=c)
    check_columns(det, cols, path)
    y = labels_of(df[args.label_column], args.normal_label, path, args.label_column)
    if args.category_column is not None:
        cats = df[args.category_column].astype(str).str.strip().to_numpy(dtype=str)
    elif args.normal_label is not None:
        cats = df[args.label_column].astype(str).str.strip().to_numpy(dtype=str)
    else:
        cats = np.where(y == 0, "normal", "attack")
    cats = np.where(y == 0, "normal", cats)
    groups = None
    if args.client_column is not None:
        groups = client_ids_of(df[args.client_column], path, args.client_column)
    if getattr(det, "features_", None) is not None:
        # The pipeline reads its own columns by name; the label / category / client
        # columns are never features (they were not in the training frame).
        special = [c for _, c in roles if c is not None]
        X = df.drop(columns=special)
    else:
        names = [str(c) for c in det.feature_names_in_]
        X = pd.DataFrame(numeric_matrix(df, names, path), columns=names, copy=False)
    return X, y, cats, groups, path.name


def cmd_evaluate(args) -> int:
    # start-up time: every fedep command imports this module; fedep.evaluation (rich,
    # fractions...) loads for `fedep evaluate` only
    from fedep.evaluation.evaluate import evaluate_fitted

    det = load_model(args.model, args.verify_key, args.require_signature)
    names = model_features(det, args.model)
    X, y, cats, groups, source = test_data(args, names, det)
    if groups is not None and det.clients_.dtype.kind in "iu":
        groups = client_ids(groups, det)
    res = evaluate_fitted(det, X, y, groups=groups, categories=cats, threshold_policy="model")
    personal = None
    if res["clients"] is not None:
        personal = {"client_column": args.client_column, **res["clients"]}
    result = {
        "model_file": str(args.model),
        "detector": type(det).__name__,
        "test": source,
        "personalised": personal,
        "n_test": res["n_test"],
        "n_attack": res["n_attack"],
        "threshold": res["threshold"],
        "model": res["model"],
        "trivial": res["trivial"],
        "test_tuned": res["test_tuned"],
        "per_class_recall": res["per_class"],
    }
    if args.json:
        print(json.dumps(jsonable(result), indent=2))
        return 0
    _print_tables(det, result, res["labels"], source, args.client_column)
    return 0


def _print_tables(det, result, labels, source, client_column) -> None:
    from fedep.evaluation.metrics import format_metrics_table  # start-up time (see above)

    print(
        f"{type(det).__name__} on {source}: {result['n_test']} records, {result['n_attack']} "
        f"attacks; threshold {result['threshold']:.6g} (from training data)"
    )
    personal = result["personalised"]
    if personal is not None:
        print(
            f"personalised by column {client_column!r}: "
            f"{personal['rows_of_known_clients']} rows scored by their gateway's basis and "
            f"threshold, {personal['rows_scored_globally']} rows of unknown clients by the "
            "global ones"
        )
    rows = [{"detector": labels[k], **result[k]} for k in ("model", "trivial", "test_tuned")]
    cols = ["detector", "acc", "pre", "rec", "fnr", "fpr", "f1", "roc_auc", "pr_auc"]
    print(format_metrics_table(rows, columns=cols))
    print()
    print(
        "per-class detection rate (share flagged at the training threshold; "
        "recall for attack classes, FPR for normal):"
    )
    recall = result["per_class_recall"]
    width = max((len(str(k)) for k in recall), default=5)
    for k, v in recall.items():
        print(f"  {str(k):<{width}}  {v:.4f}" if isinstance(v, float) else f"  {k}  {v}")

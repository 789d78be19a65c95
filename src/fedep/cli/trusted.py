"""``fedep fit``'s options for what operators know: a trusted reference, analyst feedback.

- ``--reference PATH ...``: trusted records (normal traffic each gateway vouches for),
  in the training files' columns: one file per gateway in the order of ``--train``, or
  files with the ``--client-column``;
- ``--reference-column COL``: a column of the training files marking trusted rows
  (``1``/``true``/``yes`` or ``0``/``false``/``no``/empty); never a feature;
- ``--feedback FILE [KEY]``: an analyst's labels (:mod:`fedep.data.feedback`), by the
  values of the training column ``KEY`` (e.g. Zeek's ``uid``) or by row numbers of the
  training table as read (0-based, files concatenated in order).

The records and labels stay in this process's fit as on a gateway: the fit uses them
from aggregates only (``docs/reference.md``).
"""

from __future__ import annotations

import argparse
import copy

import numpy as np
import pandas as pd

from fedep.cli.training import load_training
from fedep.core.benign import MIN_MODE_RECORDS
from fedep.data.errors import DataError
from fedep.data.feedback import read_feedback

__all__ = ["add_trust_options", "trust_inputs", "reference_columns", "describe_trust"]

_TRUE = {"1", "true", "yes", "trusted"}
_FALSE = {"0", "false", "no", ""}


def add_trust_options(p: argparse.ArgumentParser) -> None:
    """``--reference``, ``--reference-column``, ``--feedback``."""
    p.add_argument("--reference", nargs="+", metavar="PATH", help="trusted traffic per gateway")
    p.add_argument("--reference-column", metavar="COL", help="column marking trusted rows (1/0)")
    p.add_argument(
        "--feedback",
        nargs="+",
        metavar=("FILE", "KEY"),
        help="analyst labels, by row or by a KEY column",
    )


def _mask_of(values, data, column: str) -> np.ndarray:
    text = [str(v).strip().lower() if v == v and v is not None else "" for v in values]
    out = np.zeros(len(text), dtype=bool)
    for i, t in enumerate(text):
        if t in _TRUE:
            out[i] = True
        elif t not in _FALSE:
            path, row = data.origin(i) or (data.desc.split(",")[0], i)
            raise DataError(
                path,
                f"--reference-column {column!r}: {t!r} is not 1/true/yes or 0/false/no",
                row=row + 1,
                column=column,
            )
    return out


def trust_inputs(args, data, seed: int) -> tuple[dict, list[str]]:
    """``fit``'s ``reference``/``reference_groups``/``feedback`` from the options, and
    lines to print (feedback rows matching no record). Drops the reference column from
    ``data.X``."""
    kw: dict = {}
    lines: list[str] = []
    col = getattr(args, "reference_column", None)
    if col is not None:
        if col not in data.X.columns:
            raise DataError(
                data.desc.split(",")[0], f"--reference-column {col!r} is not a column", column=col
            )
        kw["reference"] = _mask_of(data.X[col].tolist(), data, col)
        data.X = data.X.drop(columns=[col])
    if getattr(args, "reference", None):
        if col is not None:
            raise ValueError("give --reference or --reference-column, not both")
        ref_args = copy.copy(args)
        ref_args.table, ref_args.label_column = list(args.reference), None
        ref_args.clients = ref_args.partition = None
        ref = load_training(ref_args, None, seed=seed, apply_protocol=False)
        if args.client_column is None:
            n_files, n_train = len(args.reference), len(np.unique(data.groups))
            if n_files != n_train:
                raise ValueError(
                    f"--reference: {n_files} file(s) for {n_train} gateway(s): give one per "
                    "--train file, in the same order, or use --client-column"
                )
            ids = np.unique(data.groups)  # the training gateways, in --train's order
            kw["reference_groups"] = ids[np.unique(ref.groups, return_inverse=True)[1]]
        else:
            kw["reference_groups"] = ref.groups
        kw["reference"] = ref.X
    if getattr(args, "feedback", None):
        if len(args.feedback) > 2:
            raise ValueError("--feedback takes FILE and at most one KEY column")
        path, key = args.feedback[0], (args.feedback[1:] or [None])[0]
        if key is not None:
            if key not in data.X.columns:
                raise ValueError(f"--feedback key {key!r} is not a training column")
            fb = read_feedback(path, len(data.X), data.X[key].to_numpy())
            labels = fb.labels
        else:
            n_table = int(data.bounds[-1]) if data.bounds is not None else len(data.X)
            fb = read_feedback(path, n_table)
            labels = fb.labels if data.kept is None else fb.labels[data.kept]
        kw["feedback"] = labels
        lines.append(fb.describe(path))
    return kw, lines


def reference_columns(ref, columns):
    """The trusted records with the training columns ``columns``: a column they lack
    (an id such as ``uid``) is missing values, which the feature pipeline handles; a
    numeric fit needs every one."""
    missing = [c for c in columns if c not in ref.columns]
    if missing:
        nan = pd.DataFrame(np.nan, index=ref.index, columns=missing)
        ref = pd.concat([ref, nan], axis=1)
    return ref[list(columns)], missing


def describe_trust(det) -> list[str]:
    """Lines on what the reference and the feedback did in the fit."""
    trust = getattr(det, "trust_", None)
    out = []
    if det.contamination == "auto" or trust is not None:
        out.append(
            f"contamination: {100 * det.contamination_:.2f} % of the training records: "
            f"{det.contamination_reason_}"
        )
    if trust is not None:
        out.append(
            f"reference: {trust['n_reference']} trusted records; "
            f"{trust['decision'] or 'trimming as given'}; threshold: "
            f"{100 * det.reference_fpr:.2f} % of them score above it"
        )
    fb = getattr(det, "feedback_", None) or {}
    if fb.get("attack_labels") or fb.get("benign_labels"):
        out.append(
            f"feedback: {fb['attack_labels']} attack labels excluded {fb.get('excluded', 0)} "
            f"records from the fit; {fb['benign_labels']} benign labels kept their records "
            "from trimming"
        )
    counts = getattr(det, "benign_counts_", None)
    if counts is not None:
        out.append(
            f"feedback: {len(counts)} suppression rules (benign modes of "
            f"{', '.join(str(int(c)) for c in counts)} confirmed false positives): alerts "
            "within one are suppressed and name it (docs/reference.md)"
        )
    elif fb.get("benign_labels") and getattr(det, "suppression_rules", False):
        out.append(
            f"feedback: no suppression rule: {fb['benign_labels']} benign labels, fewer than "
            f"{MIN_MODE_RECORDS} in a mode"
        )
    return out

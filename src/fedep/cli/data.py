"""``fedep data verify`` (official dataset files) and ``fedep data summary``
(per-client summary of a partition)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from fedep.cli._common import (
    HelpFormatter,
    UsageError,
    add_clients,
    add_data_source,
    command_parser,
)
from fedep.cli.training import load_training, numeric_columns
from fedep.data import (
    format_partition_summary,
    format_verify_report,
    partition_summary,
    resolve_data_dir,
    verify_data_dir,
)
from fedep.features import FeaturePipeline


def register(sub) -> None:
    p = command_parser(sub, "data")
    dsub = p.add_subparsers(dest="data_command", metavar="SUBCOMMAND")
    dsub.required = True
    q = dsub.add_parser(
        "verify", help="check the official dataset files (SHA-256)", formatter_class=HelpFormatter
    )
    q.add_argument(
        "--data-dir",
        metavar="DIR",
        help="directory of the official datasets (default: $FEDEP_DATA_DIR)",
    )
    q.set_defaults(func=cmd_data_verify)
    q = dsub.add_parser(
        "summary",
        help="per-client summary of a partition",
        description="Rows, attack share and feature shift of every client.",
        formatter_class=HelpFormatter,
    )
    add_data_source(q)
    add_clients(q, random_state=True)
    q.set_defaults(func=cmd_data_summary)


def cmd_data_verify(args) -> int:
    root = resolve_data_dir(args.data_dir)
    records = verify_data_dir(root)
    print(format_verify_report(records, str(root)))
    bad = [r for r in records if r.status == "altered" or (r.required and r.status == "missing")]
    return 1 if bad else 0


def cmd_data_summary(args) -> int:
    if args.dataset is not None and args.clients is None:
        raise UsageError("data summary needs --clients D")
    data = load_training(args, "contaminated", seed=args.random_state, apply_protocol=False)
    names = numeric_columns(data.X)
    dropped = _dropped_by_fit(args, data)
    names = [c for c in names if c not in dropped]
    X = data.X[names].to_numpy(dtype=np.float64, na_value=np.nan) if names else None
    df = partition_summary(data.groups, data.y, X, names or None)
    print(data.desc.replace(", protocol contaminated", ", all training rows"))
    print(format_partition_summary(df))
    if dropped:
        shown = ", ".join(dropped[:10]) + (" ..." if len(dropped) > 10 else "")
        print(f"not ranked, fit drops them (feature pipeline): {shown}")
    return 0


def _dropped_by_fit(args, data) -> list[str]:
    """Columns ``fedep fit`` (default ``--features auto``) would drop: the decisions of its
    feature pipeline over the same clients; none for a hand-written feature set."""
    if args.dataset is not None and args.feature_set != "generic":
        return []  # fit uses those numeric features as they are
    pipe = FeaturePipeline()
    codes, _ = pd.factorize(data.groups)
    parts = [data.X.iloc[codes == j] for j in range(int(codes.max()) + 1)]
    pipe.fit_from_summaries([pipe.summarize(part) for part in parts])
    return [d.name for d in pipe.decisions_ if not d.used]

"""``fedep reproduce``: rerun the paper's experiments."""

from __future__ import annotations

from pathlib import Path

from fedep._names import DATASETS as DATASET_NAMES
from fedep.cli._common import check_dataset, command_parser, dataset_name


def register(sub) -> None:
    p = command_parser(
        sub,
        "reproduce",
        description="Rerun the paper's experiments and write their tables and figures to DIR.",
        epilog="example:\n  fedep reproduce --out results --quick --datasets nsl-kdd --seeds 0",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    p.add_argument("--quick", action="store_true", help="a small, fast configuration")
    p.add_argument(
        "--data-dir",
        metavar="DIR",
        help="directory of the official datasets (default: $FEDEP_DATA_DIR)",
    )
    p.add_argument(
        "--datasets",
        nargs="+",
        type=dataset_name,
        metavar="NAME",
        help=f"the datasets to run: {', '.join(DATASET_NAMES)} (default: all)",
    )
    p.add_argument(
        "--seeds",
        nargs="+",
        type=int,
        metavar="SEED",
        help="random seeds, one run each (default: 0 1 2 3 4; 0 with --quick)",
    )
    p.set_defaults(func=cmd_reproduce)


def cmd_reproduce(args) -> int:
    # start-up time: every fedep command imports this module; the reproduction
    # (fedep.evaluation: rich, matplotlib's settings...) loads for `fedep reproduce` only
    from fedep.evaluation.reproduce import run_reproduce

    for name in args.datasets or ():
        check_dataset(name)
    out = run_reproduce(
        Path(args.out),
        quick=args.quick,
        data_dir=args.data_dir,
        datasets=args.datasets,
        seeds=args.seeds,
        log=lambda msg: print(msg, flush=True),
    )
    print(f"results written to {out}")
    return 0

"""``fedep reproduce``: rerun the paper's experiments."""

from __future__ import annotations

from pathlib import Path

from fedep.cli._common import check_dataset, dataset_name


def register(sub) -> None:
    p = sub.add_parser(
        "reproduce",
        help="rerun the paper's experiments",
        description="Rerun the paper's experiments and write tables and figures to DIR.",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    p.add_argument("--quick", action="store_true", help="small, fast configuration")
    p.add_argument("--data-dir", help="directory of the official datasets")
    p.add_argument("--datasets", nargs="+", type=dataset_name, metavar="NAME")
    p.add_argument("--seeds", nargs="+", type=int, metavar="SEED")
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

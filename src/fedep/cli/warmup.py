"""``fedep warmup``: compile the numerical kernels now instead of in the first fit."""

from __future__ import annotations

from fedep.cli._common import command_parser
from fedep.core.warmup import warm_up


def register(sub) -> None:
    p = command_parser(
        sub,
        "warmup",
        description="Compile fedep's numerical kernels (numba) and keep them in numba's "
        "on-disk cache, so that the first fit does not pay the compilation (about "
        "35-50 CPU-seconds, once per machine and fedep version). Run it after "
        "installing, e.g. when building a container image. The cache is "
        "NUMBA_CACHE_DIR when set, else beside the installed package, else "
        "~/.cache/numba.",
    )
    p.add_argument("--quiet", action="store_true", help="print nothing")
    p.set_defaults(func=cmd_warmup)


def cmd_warmup(args) -> int:
    seconds = warm_up()
    if not args.quiet:
        if not seconds:
            print("numba is not installed: fedep runs its NumPy kernels, nothing to compile")
        else:
            done = ", ".join(f"{name} {s:.1f} s" for name, s in seconds.items())
            print(f"kernels ready ({done})")
    return 0

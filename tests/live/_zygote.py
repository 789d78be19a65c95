"""A parent that imports ``fedep watch`` once and forks a fresh watcher process per
command (``kill -9`` tests restart the watcher 20 times; a fresh interpreter would spend
seconds importing the library each time).

Reads one JSON argv per stdin line; for each, forks a child that starts a session of its
own (its process group is killed with ``os.killpg``) and runs ``fedep.cli.main(argv)``;
prints ``PID`` when it starts and ``exit PID STATUS`` when it has ended (killed or not).
"""

from __future__ import annotations

import json
import os
import sys

import fedep.cli.watch  # noqa: F401 - the library, imported once before the forks
import fedep.live  # noqa: F401
from fedep.cli import main

for line in sys.stdin:
    argv = json.loads(line)
    pid = os.fork()
    if pid == 0:  # the watcher
        os.setsid()
        rc = 99
        try:
            rc = main(argv)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(rc)
    print(pid, flush=True)
    _, status = os.waitpid(pid, 0)
    print(f"exit {pid} {status}", flush=True)

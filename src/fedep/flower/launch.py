"""Start a local Flower deployment (1 SuperLink + N SuperNodes) and run FedEP on it.

One line::

    python -m fedep.flower.launch --gateways 3 --dataset nsl-kdd \\
        --max-rows 3000 --n-rounds 10 --out runs/flower

starts ``flower-superlink`` and ``flower-supernode`` processes on 127.0.0.1
(``--insecure``: loopback only), submits the app with ``flwr run``, waits for the
ServerApp's ``result.json``, and stops every process it started. Gateway ``i`` gets
``--node-config "partition-id=i num-partitions=N dataset=... data-dir=...
feature-set=... model-path=..."`` (``--feature-set``, default ``generic``: the raw
table through the feature pipeline; or ``data-path=...`` with ``--csv``) and writes
``gateway-<i>.fedep``, a model file ``fedep score`` reads.

Everything is checked before any process starts (an error is one line on stderr and
exit status 2): ``--gateways``, the dataset name and its files in the data directory
(``--data-dir``, else ``FEDEP_DATA_DIR``, else :func:`fedep.data.resolve_data_dir`,
made absolute because the gateways run in the output folder), the ``--csv`` files,
the estimator parameters (one option per parameter of the estimator, the estimator's
own validation) and the output folder (refused if it holds an earlier run's
``result.json`` / ``gateway-*.fedep``, unless ``--overwrite``).

Exit status: 0 when every gateway took part to the end; 1 when the run failed or any
gateway failed (listed in ``result.json["failed"]``, with the gateway's own error from
its ``supernode-<i>.log``; ``--allow-failures`` makes that 0); 2 for bad arguments;
130 / 143 on SIGINT / SIGTERM, after every process it started is stopped (their
process groups and every process that inherited this run's environment marker) and
this run's partial results are removed (the logs stay).

Compiled kernels: numba caches them (``cache=True``) in the package's ``__pycache__``;
where that is read-only (a system-wide install) numba 0.68 falls back to the user-wide
cache ``~/.cache/numba`` (``$XDG_CACHE_HOME/numba``), so each kernel compiles once per
user, not once per ClientApp process. Set ``NUMBA_CACHE_DIR`` (inherited by every
process of the deployment) to put the cache elsewhere, e.g. when ``HOME`` is not
writable.

For a real network, run the same commands on the machines themselves, with TLS
(``flower-superlink --ssl-ca-certfile --ssl-certfile --ssl-keyfile``,
``flower-supernode --root-certificates``) and node authentication
(``--enable-supernode-auth`` on the SuperLink, ``flwr supernode register`` of every
gateway's public key, ``--auth-supernode-private-key`` on the SuperNode), never
``--insecure``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fedep._errors import one_line
from fedep._names import DATASET_FEATURE_SETS, DEFAULT_FEATURE_SET

if TYPE_CHECKING:  # imported when used: bad arguments are answered before scikit-learn loads
    from fedep.federation.rounds import FederationResult

__all__ = ["LocalDeployment", "RunFailed", "UsageError", "Interrupted", "write_app", "main"]

APP_PYPROJECT = """\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "fedep-flower"
version = "0.1.0"
description = "FedEP personalised robust federated PCA over Flower"
license = "BSD-3-Clause"
# fedep[flower] must be installed where the apps run; nothing is installed at run time.
dependencies = []

[tool.flwr.app]
publisher = "fedep"

[tool.flwr.app.components]
serverapp = "fedep.flower.server_app:app"
clientapp = "fedep.flower.client_app:app"

[tool.flwr.app.config]
{config}
"""

#: Environment variable set in every process of a deployment (inherited by the
#: SuperExecs, ServerApp and ClientApp processes Flower starts), to find them all.
MARKER_ENV = "FEDEP_LAUNCH_ID"

#: ``flower-supernode`` with its idle wait between two pulls from the SuperLink (3 s,
#: fixed in Flower 1.42) and its wait for a ClientApp reply (0.5 s) capped at
#: ``argv[1]`` seconds; loopback only. Falls back to the plain SuperNode if Flower's
#: internals differ.
_SUPERNODE_SHIM = """\
import sys, time, types
cap = float(sys.argv.pop(1))
try:
    import flwr.supernode.start_client_internal as sci
    if getattr(sci, "time", None) is time:
        fast = types.ModuleType("time")
        fast.__dict__.update(vars(time))
        fast.sleep = lambda s: time.sleep(min(s, cap))
        sci.time = fast
except Exception:
    pass
from flwr.supernode.cli import flower_supernode
sys.argv[0] = "flower-supernode"
sys.exit(flower_supernode())
"""


class UsageError(Exception):
    """A bad argument: one line on stderr, exit status 2, no process started."""


class RunFailed(RuntimeError):
    """The run ended without a result (the ServerApp's error is the message)."""


class Interrupted(BaseException):  # noqa: N818 - like KeyboardInterrupt
    """SIGINT or SIGTERM reached the launcher."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v))


def write_app(app_dir, run_config: dict | None = None) -> Path:
    """Write the Flower App project (``pyproject.toml``) that ``flwr run`` submits.

    The app code is the installed :mod:`fedep.flower`; the project only
    names its components and the default run config.
    """
    from fedep.flower.server_app import DEFAULT_RUN_CONFIG

    app_dir = Path(app_dir)
    app_dir.mkdir(parents=True, exist_ok=True)
    cfg = {**DEFAULT_RUN_CONFIG, **(run_config or {})}
    body = "\n".join(f"{k} = {_toml_value(v)}" for k, v in cfg.items())
    (app_dir / "pyproject.toml").write_text(APP_PYPROJECT.format(config=body))
    return app_dir


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node_config(cfg: dict) -> str:
    return " ".join(f"{k}={_toml_value(v)}" for k, v in cfg.items())


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def log_error(text: str) -> list[str]:
    """The lines of a Flower log that hold its last error.

    The last traceback's exception line, after the ``File ...`` line where it was
    raised; else the last line logged at ``ERROR``; ``[]`` when there is none.
    """
    lines = [_ANSI.sub("", ln).rstrip() for ln in text.splitlines()]
    lines = [ln for ln in lines if ln.strip()]
    tb = [i for i, ln in enumerate(lines) if ln.startswith("Traceback (most recent call last)")]
    if tb:
        block = lines[tb[-1] + 1 :]
        exc = [i for i, ln in enumerate(block) if re.match(r"^[A-Za-z_][\w.]*(: |$)", ln)]
        if exc:
            end = exc[0]
            files = [ln.strip() for ln in block[:end] if ln.lstrip().startswith("File ")]
            return [*files[-1:], block[end].strip()]
    errors = [ln for ln in lines if re.match(r"^\s*ERROR\b", ln)]
    if errors:
        return [re.sub(r"^\s*ERROR\s*:?\s*", "", errors[-1])]
    return []


def _scan_marked(marker: str) -> list[int]:
    """PIDs of the processes whose environment holds ``FEDEP_LAUNCH_ID=marker`` (Linux)."""
    needle = f"{MARKER_ENV}={marker}".encode()
    me = os.getpid()
    out = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for e in entries:
        if not e.isdigit() or int(e) == me:
            continue
        try:
            with open(f"/proc/{e}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
        except OSError:
            continue
        if needle in env:
            out.append(int(e))
    return out


def _signal_pids(pids, sig) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


@dataclass
class LocalDeployment:
    """A SuperLink and N SuperNodes on 127.0.0.1, each a separate process.

    Use as a context manager: every process started is stopped on exit.

    Parameters
    ----------
    node_configs : list of dict
        One node config per gateway (SuperNode).
    workdir : path
        Logs, Flower home (``FLWR_HOME``), app project and results.
    poll_interval : float, optional
        Longest idle wait of a SuperNode between two pulls from the SuperLink (Flower's
        default is 3 s, which adds up to 3 s to every message round); ``None`` keeps
        Flower's own.
    """

    node_configs: list[dict]
    workdir: Path
    poll_interval: float | None = 0.2
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    env: dict = field(default_factory=dict)

    def __post_init__(self):
        self.workdir = Path(self.workdir).resolve()
        self.workdir.mkdir(parents=True, exist_ok=True)
        bindir = str(Path(sys.executable).parent)
        self.marker = uuid.uuid4().hex
        self.env = {
            **os.environ,
            MARKER_ENV: self.marker,
            "FLWR_TELEMETRY_ENABLED": "0",
            # SuperExec polls for ClientApp/ServerApp tasks (default every 1 s).
            "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": os.environ.get(
                "FLWR_SUPEREXEC_TASK_POLL_INTERVAL", "0.1"
            ),
            "FLWR_HOME": str(self.workdir / "flwr-home"),
            "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
        }
        self.bindir = Path(bindir)
        # Flower 1.42 serves the Fleet, Control and Runtime APIs on one HTTP port.
        self.port = free_port()

    # ------------------------------------------------------------------ processes
    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen:
        log = open(self.workdir / f"{name}.log", "wb")  # noqa: SIM115 - closed by the child
        try:
            p = subprocess.Popen(
                args,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # own process group: its children are stopped with it
                cwd=self.workdir,
            )
        finally:
            log.close()
        self.procs[name] = p
        return p

    def _exe(self, name: str) -> str:
        p = self.bindir / name
        return str(p) if p.exists() else (shutil.which(name) or name)

    def _supernode_cmd(self) -> list[str]:
        if self.poll_interval is None:
            return [self._exe("flower-supernode")]
        return [sys.executable, "-c", _SUPERNODE_SHIM, f"{float(self.poll_interval):g}"]

    def start(self) -> LocalDeployment:
        Path(self.env["FLWR_HOME"]).mkdir(parents=True, exist_ok=True)
        (Path(self.env["FLWR_HOME"]) / "config.toml").write_text(
            '[superlink]\ndefault = "fedep-local"\n\n'
            f'[superlink.fedep-local]\naddress = "127.0.0.1:{self.port}"\ninsecure = true\n'
        )
        self._spawn(
            "superlink",
            [
                self._exe("flower-superlink"),
                "--insecure",
                "--disable-runtime-dependency-installation",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
            ],
        )
        self._wait_port(self.port, "superlink")
        for i, cfg in enumerate(self.node_configs):
            self._spawn(
                f"supernode-{i}",
                [
                    *self._supernode_cmd(),
                    "--insecure",
                    "--superlink",
                    f"127.0.0.1:{self.port}",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(free_port()),
                    "--node-config",
                    _node_config(cfg),
                ],
            )
        return self

    def _wait_port(self, port: int, name: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.procs[name].poll() is not None:
                raise RunFailed(f"{name} exited: {' | '.join(log_error(self.log(name)))}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.1)
        raise TimeoutError(f"{name} did not open port {port} in {timeout} s")

    def log(self, name: str) -> str:
        p = self.workdir / f"{name}.log"
        return p.read_text(errors="replace") if p.exists() else ""

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Stop one process (and its process group) by its PID."""
        p = self.procs.get(name)
        if p is None or p.poll() is not None:
            return
        try:
            os.killpg(p.pid, sig)  # the group this process leads (start_new_session)
        except (ProcessLookupError, PermissionError):
            pass

    def running(self) -> list[int]:
        """PIDs of the processes of this deployment still alive (started or descended)."""
        alive = {p.pid for p in self.procs.values() if p.poll() is None}
        return sorted(alive | set(_scan_marked(self.marker)))

    def stop(self, grace: float = 5.0) -> None:
        """Stop every process this deployment started (SIGTERM, then SIGKILL).

        Each started process leads its own process group; the SuperExecs Flower starts
        in sessions of their own (and orphans re-parented away) are found by the
        environment marker every process of the deployment inherits.
        """
        for name in reversed(list(self.procs)):
            self.kill(name, signal.SIGTERM)
        _signal_pids(_scan_marked(self.marker), signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            for p in self.procs.values():
                p.poll()
            if not self.running():
                break
            time.sleep(0.05)
        for p in self.procs.values():
            try:
                os.killpg(p.pid, signal.SIGKILL)  # stragglers of the group
            except (ProcessLookupError, PermissionError):
                pass
        for _ in range(3):  # processes may have been forked while the others stopped
            pids = _scan_marked(self.marker)
            if not pids:
                break
            _signal_pids(pids, signal.SIGKILL)
            time.sleep(0.05)
        for p in self.procs.values():
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass

    def __enter__(self) -> LocalDeployment:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ runs
    def submit(self, run_config: dict, result_path=None) -> Path:
        """``flwr run`` the app with ``run_config``; returns the result path to wait for."""
        result = Path(result_path or self.workdir / f"result-{time.time_ns()}.json").resolve()
        cfg = {"min-nodes": len(self.node_configs), **run_config, "result-path": str(result)}
        app_dir = write_app(self.workdir / "app", cfg)
        # --stream keeps the ServerApp's log in flwr-run.log; the process ends with the run.
        self._spawn("flwr-run", [self._exe("flwr"), "run", str(app_dir), "fedep-local", "--stream"])
        return result

    def run_error(self) -> str:
        """Why the run ended without a result: the ServerApp's last error (one line)."""
        lines = log_error(self.log("flwr-run"))
        return lines[-1] if lines else "the run ended without a result (see flwr-run.log)"

    def wait_result(self, path: Path, timeout: float = 600.0, on_wait=None) -> FederationResult:
        deadline = time.monotonic() + timeout
        while not Path(path).exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"no result after {timeout:g} s (see {self.workdir}/*.log)")
            if self.procs["superlink"].poll() is not None:
                raise RunFailed(f"superlink exited: {' | '.join(log_error(self.log('superlink')))}")
            run = self.procs.get("flwr-run")
            if run is not None and run.poll() is not None and not Path(path).exists():
                time.sleep(0.5)
                if not Path(path).exists():
                    raise RunFailed(self.run_error())
            if on_wait is not None:
                on_wait()
            time.sleep(0.1)
        from fedep.federation.rounds import FederationResult

        return FederationResult.load(path)  # written whole (renamed into place)

    def run(self, run_config: dict, timeout: float = 600.0) -> FederationResult:
        return self.wait_result(self.submit(run_config), timeout)


# ---------------------------------------------------------------------- command line
class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage block
        raise UsageError(message)


def _iterative_methods() -> dict[str, type]:
    """Methods with rounds to federate, and their estimator classes."""
    from fedep.detectors import METHODS, make_estimator

    out = {}
    for m in METHODS:
        est = make_estimator(m, validate=False)
        if hasattr(est, "_make_cohort"):
            out[m] = type(est)
    return out


def _base_parser(methods) -> _Parser:
    ap = _Parser(prog="python -m fedep.flower.launch", description=__doc__.split("\n")[0])
    ap.add_argument("--gateways", type=int, required=True, help="number of SuperNodes (>= 1)")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--dataset", help="nsl-kdd, unsw-nb15 or ton-iot: partitioned by gateway")
    src.add_argument("--csv", nargs="+", help="one CSV per gateway (data-path)")
    ap.add_argument("--max-rows", type=int, help="subsample of normal training rows")
    ap.add_argument(
        "--feature-set",
        choices=DATASET_FEATURE_SETS,
        default=DEFAULT_FEATURE_SET,
        help="features of --dataset: generic = its raw table through the feature pipeline "
        "(as your own files), rich / paper = the hand-written specifications "
        "(default: generic)",
    )
    ap.add_argument(
        "--data-dir", help="dataset directory (default FEDEP_DATA_DIR, then ../shared/data)"
    )
    ap.add_argument("--method", default="fedep", choices=methods)
    ap.add_argument("--min-clients", type=int, default=1)
    ap.add_argument("--round-timeout", type=float, default=120.0, help="seconds per message")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds for the whole run")
    ap.add_argument(
        "--poll-interval",
        type=float,
        default=0.2,
        help="longest idle wait of a SuperNode between pulls (Flower's is 3 s); 0: Flower's",
    )
    ap.add_argument("--out", default=None, help="output folder (models, logs, result.json)")
    ap.add_argument(
        "--overwrite",
        action="store_true",
        help="remove an earlier run's result.json and gateway-*.fedep from --out",
    )
    ap.add_argument(
        "--allow-failures",
        action="store_true",
        help="exit 0 even when some gateways failed (they are listed in result.json)",
    )
    return ap


def build_parser():
    """The launcher's parser and the estimator parameter table it exposes.

    ``--method`` offers the methods with rounds to federate; one option per
    parameter of their estimators (:func:`fedep.params.add_param_options`).
    """
    from fedep.params import add_param_options, param_table, pipeline_table

    methods = _iterative_methods()
    table = param_table(list(dict.fromkeys(methods.values())))
    ap = _base_parser(list(methods))
    add_param_options(ap, pipeline_table(), "feature pipeline (gateways with raw tables)")
    add_param_options(ap, table)
    return ap, table


def _option(name: str) -> str:
    from fedep.params import option_name

    return f"--{option_name(name)}"


def resolve_data_dir(arg: str | None) -> Path:
    """The data directory, absolute: ``--data-dir``, ``FEDEP_DATA_DIR``, the default."""
    from fedep.data.dataset_files import resolve_data_dir as _resolve

    return _resolve(arg or None).expanduser().resolve()


def _check_dataset(name: str, root: Path) -> None:
    from fedep.data.dataset_files import DATASET_URLS, KNOWN_FILES

    if name not in DATASET_URLS:
        raise UsageError(f"unknown --dataset {name!r}; choose from {', '.join(DATASET_URLS)}")
    needed = [rel for rel, (ds, req) in KNOWN_FILES.items() if ds == name and req]
    missing = [rel for rel in needed if not (root / rel).is_file()]
    if missing:
        raise UsageError(
            f"dataset {name}: missing {', '.join(missing)} in {root} "
            f"(set --data-dir or FEDEP_DATA_DIR; download: {DATASET_URLS[name]})"
        )


def _stale(out: Path) -> list[Path]:
    names = ["result.json", "result.json.tmp"]
    found = [out / n for n in names if (out / n).exists()]
    return found + sorted(out.glob("gateway-*.fedep")) + sorted(out.glob("result-*.json"))


def _prepare_out(arg: str | None, overwrite: bool) -> Path:
    if arg is None:
        return Path(tempfile.mkdtemp(prefix="fedep-flower-")).resolve()
    out = Path(arg).expanduser().resolve()
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is not a directory")
    stale = _stale(out) if out.is_dir() else []
    if stale and not overwrite:
        names = ", ".join(p.name for p in stale[:4]) + (" ..." if len(stale) > 4 else "")
        raise UsageError(
            f"--out {out} holds an earlier run ({names}); pass --overwrite or another --out"
        )
    for p in stale:
        p.unlink()
    return out


def parse(argv=None):
    """Parse and validate every argument; nothing is started. Raises :class:`UsageError`."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not {"-h", "--help"} & set(argv):
        # The checks that need no estimator first: answered before scikit-learn loads.
        _check_run_args(_base_parser(None).parse_known_args(argv)[0])
    from fedep.detectors import make_estimator
    from fedep.params import make_pipeline, params_from_args, pipeline_table

    ap, table = build_parser()
    a = ap.parse_args(argv)
    _check_run_args(a)
    params = params_from_args(a, table)
    ptable = pipeline_table()
    pipe = params_from_args(a, ptable)
    try:
        est = make_estimator(a.method, params)
        make_pipeline(pipe, est.features, spell=_option, needs="--features auto")
    except ValueError as exc:
        raise UsageError(one_line(exc)) from None
    a.params, a.table = params, table
    # Lists travel as comma-separated text (run-config values are TOML scalars).
    a.pipeline_config = {
        ptable[k].key: ",".join(v) if isinstance(v, list) else ("none" if v is None else v)
        for k, v in pipe.items()
    }
    a.out = _prepare_out(a.out, a.overwrite)
    return a


def _check_run_args(a) -> None:
    if a.gateways < 1:
        raise UsageError(f"--gateways must be >= 1; got {a.gateways}")
    if a.min_clients < 1 or a.min_clients > a.gateways:
        raise UsageError(f"--min-clients must be in [1, {a.gateways}]; got {a.min_clients}")
    if a.round_timeout <= 0 or a.timeout <= 0:
        raise UsageError("--round-timeout and --timeout must be > 0")
    if a.csv:
        if len(a.csv) != a.gateways:
            raise UsageError(
                f"--csv needs one file per gateway: {len(a.csv)} files for {a.gateways} gateways"
            )
        a.csv = [Path(c).expanduser().resolve() for c in a.csv]
        missing = [str(c) for c in a.csv if not c.is_file()]
        if missing:
            raise UsageError(f"--csv: no such file: {', '.join(missing)}")
        if len(set(a.csv)) != len(a.csv):
            raise UsageError("--csv: the same file is given to two gateways")
    else:
        a.data_dir = resolve_data_dir(a.data_dir)
        _check_dataset(a.dataset, a.data_dir)
        if a.max_rows is not None and a.max_rows < a.gateways:
            raise UsageError(f"--max-rows must be >= --gateways ({a.gateways}); got {a.max_rows}")


def _node_configs(a) -> list[dict]:
    nodes = []
    for i in range(a.gateways):
        if a.csv:
            cfg = {"data-path": str(a.csv[i]), "client-label": str(i)}
        else:
            cfg = {
                "partition-id": i,
                "num-partitions": a.gateways,
                "dataset": a.dataset,
                "data-dir": str(a.data_dir),
                "feature-set": a.feature_set,
            }
            if a.max_rows:
                cfg["max-rows"] = a.max_rows
        cfg["model-path"] = str(a.out / f"gateway-{i}.fedep")
        nodes.append(cfg)
    return nodes


def _run_config(a, table) -> dict:
    rc = {
        "method": a.method,
        "min-clients": a.min_clients,
        "round-timeout-s": a.round_timeout,
    }
    for name, value in a.params.items():
        rc[table[name].key] = "none" if value is None else value
    rc.update(getattr(a, "pipeline_config", {}))
    return rc


class _SignalGuard:
    """SIGINT/SIGTERM raise :class:`Interrupted` once; later ones are only recorded."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.received: int | None = None
        self.armed = True
        self._old = {}

    def _handle(self, signum, frame):
        first = self.received is None
        if first:
            self.received = signum
        if first and self.armed:
            raise Interrupted(signum)

    def __enter__(self):
        for s in self.SIGNALS:
            self._old[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc):
        for s, h in self._old.items():
            signal.signal(s, h)


def _gateway_index(label: str, n: int) -> int | None:
    return int(label) if label.isdigit() and int(label) < n else None


def _report_failures(dep: LocalDeployment, failed: dict, n: int) -> None:
    """Each failed gateway, the reason the server recorded and its node's own error.

    A gateway that failed before its first reply has no label on the server
    ("node <id>"); its SuperNode is the one whose log holds the reason.
    """
    logs = [dep.log(f"supernode-{i}") for i in range(n)]
    for label, why in failed.items():
        print(f"gateway {label} failed: {why}", file=sys.stderr)
        i = _gateway_index(str(label), n)
        if i is None:
            detail = re.sub(r"^.*?error \d+: ", "", str(why))
            i = next((j for j, text in enumerate(logs) if detail and detail in text), None)
        if i is None:
            continue
        for line in log_error(logs[i]):
            print(f"  supernode-{i}.log: {line}", file=sys.stderr)


def _nodes_with_errors(dep: LocalDeployment, n: int) -> None:
    for i in range(n):
        for line in log_error(dep.log(f"supernode-{i}")):
            print(f"  supernode-{i}.log: {line}", file=sys.stderr)


def _run(a, table, guard: _SignalGuard) -> int:
    dep = LocalDeployment(
        _node_configs(a), a.out, poll_interval=a.poll_interval if a.poll_interval > 0 else None
    )
    result_path = a.out / "result.json"
    res = error = None
    try:
        dep.start()
        dep.submit(_run_config(a, table), result_path)
        res = dep.wait_result(result_path, timeout=a.timeout)
    except (RunFailed, TimeoutError) as exc:
        error = one_line(exc)
    finally:
        guard.armed = False  # from here on a signal cannot cut the clean-up short
        try:
            dep.stop()
        finally:
            if guard.received is not None or res is None:
                for p in _stale(a.out):  # this run's partial results
                    p.unlink(missing_ok=True)
    if guard.received is not None:
        raise Interrupted(guard.received)
    if res is None:
        print(f"run failed: {error}", file=sys.stderr)
        _nodes_with_errors(dep, a.gateways)
        print(f"logs in {a.out}", file=sys.stderr)
        return 1
    if res.rank_reason:
        print(f"rank {res.components.shape[0]} ({res.rank_reason})")
    for rec in res.history:
        print(
            f"round {rec['round']:3d}  objective {rec['objective']:.6g}  "
            f"gateways {len(rec['participants'])}  {rec['time_s'] * 1e3:.1f} ms"
        )
    if res.trim_history:
        from fedep.core.trimming import describe_trimming

        print(describe_trimming(res.trim_history))
    print(f"{res.stop_reason} after {res.n_rounds} rounds; models and logs in {a.out}")
    if res.failed:
        _report_failures(dep, res.failed, a.gateways)
        if not a.allow_failures:
            print(
                f"{len(res.failed)} of {a.gateways} gateways failed (--allow-failures to accept)",
                file=sys.stderr,
            )
            return 1
    return 0


def main(argv=None) -> int:
    """Run the launcher; returns the exit status (see the module docstring)."""
    prog = "launch"
    with _SignalGuard() as guard:
        try:
            try:
                a = parse(argv)
            except UsageError as exc:
                print(f"{prog}: error: {one_line(exc)}", file=sys.stderr)
                return 2
            return _run(a, a.table, guard)
        except Interrupted as exc:
            name = signal.Signals(exc.signum).name
            print(f"{prog}: {name}: stopped every process it started", file=sys.stderr)
            return 128 + exc.signum


if __name__ == "__main__":
    raise SystemExit(main())

"""A Flower deployment on this machine: 1 SuperLink + N SuperNodes, each a process.

:class:`LocalDeployment` starts ``flower-superlink`` and one ``flower-supernode`` per
gateway on 127.0.0.1 (``--insecure``: loopback only), submits the app with ``flwr run``
(:func:`write_app` writes its project), waits for the ServerApp's ``result.json`` and
stops every process it started: their process groups, and every process that inherited
the deployment's environment marker (:data:`MARKER_ENV`), such as the SuperExecs,
ServerApp and ClientApp processes Flower starts in sessions of their own.

:func:`gateway_node_configs` and :func:`run_config` write what the gateways and the
ServerApp read; :func:`run_local_federation` runs one federation from start to clean-up,
with SIGINT / SIGTERM stopping every process and removing the run's partial results
(:class:`SignalGuard`). The ``fedep federate`` command (:mod:`fedep.cli.federate`)
checks its arguments and prints; this module starts and stops processes.

Compiled kernels: numba caches them (``cache=True``) in the package's ``__pycache__``;
where that is read-only (a system-wide install) numba 0.68 falls back to the user-wide
cache ``~/.cache/numba`` (``$XDG_CACHE_HOME/numba``), so each kernel compiles once per
user, not once per ClientApp process. Set ``NUMBA_CACHE_DIR`` (inherited by every
process of the deployment) to put the cache elsewhere, e.g. when ``HOME`` is not
writable.

Each SuperNode runs with ``--isolation process`` beside a long-running ClientApp
executor (:mod:`fedep.flower.executor`, :func:`executor_cmd`) by default; ``isolation=
"subprocess"`` is Flower's own process per message.

Across machines (TLS, SuperNode authentication, never ``--insecure``):
:mod:`fedep.flower.roles` and ``docs/deployment.md``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from fedep._atomic import atomic_write
from fedep._procs import signal_group
from fedep.federation.rounds import FederationResult

__all__ = [
    "MARKER_ENV",
    "FederationPlan",
    "GatewayFailure",
    "Interrupted",
    "LocalDeployment",
    "RunFailed",
    "RunOutcome",
    "SignalGuard",
    "gateway_node_configs",
    "log_error",
    "run_config",
    "run_local_federation",
    "stale_results",
    "write_app",
    "write_auth_secret",
]

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
#: fixed in Flower 1.42) adaptive: 20 ms after a message (the next one of a run follows
#: within a round trip), growing by half at each empty pull up to ``argv[1]`` seconds;
#: and its wait for a ClientApp reply (0.5 s between two looks at its own in-memory
#: state) capped at 10 ms. Falls back to the plain SuperNode if Flower's internals differ.
_SUPERNODE_SHIM = """\
import sys, time, types
cap = float(sys.argv.pop(1))
idle = [min(cap, 0.02)]
def sleep(s):
    if s >= 1:  # an empty pull: back off
        time.sleep(idle[0])
        idle[0] = min(cap, idle[0] * 1.5)
    else:  # waiting for the reply to a message just pulled: look again soon
        idle[0] = min(cap, 0.02)
        time.sleep(min(s, cap, 0.01))
try:
    import flwr.supernode.start_client_internal as sci
    if getattr(sci, "time", None) is time:
        fast = types.ModuleType("time")
        fast.__dict__.update(vars(time))
        fast.sleep = sleep
        sci.time = fast
except Exception:
    pass
from flwr.supernode.cli import flower_supernode
sys.argv[0] = "flower-supernode"
sys.exit(flower_supernode())
"""


class RunFailed(RuntimeError):
    """The run ended without a result (the ServerApp's error is the message)."""


class Interrupted(BaseException):  # noqa: N818 - like KeyboardInterrupt
    """SIGINT or SIGTERM reached a run (raised once every process it started is stopped)."""

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
    # start-up time: every fedep command imports this module (to build its parser);
    # Flower and the ServerApp load only when a run starts
    from fedep.flower.server_app import DEFAULT_RUN_CONFIG

    app_dir = Path(app_dir)
    app_dir.mkdir(parents=True, exist_ok=True)
    cfg = {**DEFAULT_RUN_CONFIG, **(run_config or {})}
    body = "\n".join(f"{k} = {_toml_value(v)}" for k, v in cfg.items())
    (app_dir / "pyproject.toml").write_text(APP_PYPROJECT.format(config=body))
    return app_dir


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def executor_cmd(
    runtime_port: int, parent_pid: int, root_certificates=None, auth_secret_file=None
) -> list[str]:
    """The command of the long-running ClientApp executor (:mod:`fedep.flower.executor`)
    of a SuperNode in ``--isolation process`` mode serving its Runtime API on
    ``127.0.0.1:runtime_port`` (its task claims signed with ``auth_secret_file``'s
    secret: :func:`write_auth_secret`)."""
    cmd = [sys.executable, "-m", "fedep.flower.executor"]
    cmd += ["--runtime-api-address", f"127.0.0.1:{runtime_port}"]
    cmd += ["--parent-pid", str(parent_pid)]
    if auth_secret_file is not None:
        cmd += ["--superexec-auth-secret-file", str(auth_secret_file)]
    if root_certificates is not None:
        cmd += ["--root-certificates", str(root_certificates)]
    return cmd


def write_auth_secret(path: Path) -> Path:
    """A fresh 32-byte random secret at ``path``, readable by this user only (``0600``):
    the SuperExec authentication secret a SuperNode and its executor share
    (``--superexec-auth-secret-file``; :mod:`fedep.flower.executor`)."""
    with atomic_write(path, "wb", perm=0o600) as fh:
        fh.write(secrets.token_bytes(32))
    return Path(path)


def node_config_text(cfg: dict) -> str:
    return " ".join(f"{k}={_toml_value(v)}" for k, v in cfg.items())


#: ANSI colour codes in Flower's logs.
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def log_error(text: str) -> list[str]:
    """The lines of a Flower log that hold its last error.

    The last traceback's exception line, after the ``File ...`` line where it was
    raised; else the last line logged at ``ERROR``; ``[]`` when there is none.
    """
    lines = [ANSI.sub("", ln).rstrip() for ln in text.splitlines()]
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


#: The Flower programs a local deployment runs.
FLOWER_EXECUTABLES = ("flower-superlink", "flower-supernode", "flwr")


def flower_executable(name: str) -> str | None:
    """The path of a Flower program: beside this Python (its virtual environment's
    ``bin``), else on ``PATH``; None when neither has it."""
    p = Path(sys.executable).parent / name
    return str(p) if p.exists() else shutil.which(name)


def missing_flower() -> str | None:
    """Why a local deployment cannot start (``flwr`` not importable, or one of
    :data:`FLOWER_EXECUTABLES` not found), or None when Flower is there."""
    if importlib.util.find_spec("flwr") is None:
        return "no flwr package"
    for name in FLOWER_EXECUTABLES:
        if flower_executable(name) is None:
            return f"no {name} program beside {sys.executable} nor on PATH"
    return None


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
    isolation : {"process", "subprocess"}, default "process"
        ``"process"``: each SuperNode runs with ``--isolation process`` beside one
        long-running executor (:mod:`fedep.flower.executor`) that runs every message
        in one process; ``"subprocess"``: Flower's default, a ClientApp process per
        message.
    """

    node_configs: list[dict]
    workdir: Path
    poll_interval: float | None = 0.2
    isolation: str = "process"
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
        return flower_executable(name) or name

    def _runtime_auth(self, name: str) -> list[str]:
        """The SuperNode's ``--superexec-auth-secret-file`` of executor ``name`` (a fresh
        secret, ``0600``, in the work folder): only a process that reads it claims the
        SuperNode's tasks; none with Flower's own process per message."""
        if self.isolation != "process":
            return []
        path = write_auth_secret(self.workdir / f"{name}.secret")
        return ["--superexec-auth-secret-file", str(path)]

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
            self._start_node(i, cfg, f"127.0.0.1:{self.port}", ["--insecure"])
        return self

    def _start_node(self, i: int, cfg: dict, superlink: str, tls: list[str]) -> None:
        """Start SuperNode ``i`` (node config ``cfg``) connected to ``superlink`` with
        the transport options ``tls``, and its executor in ``--isolation process``."""
        runtime_port = free_port()
        node = self._spawn(
            f"supernode-{i}",
            [
                *self._supernode_cmd(),
                *tls,
                "--superlink",
                superlink,
                "--isolation",
                self.isolation,
                # the Runtime API that serves the ClientApp never leaves this machine
                "--host",
                "127.0.0.1",
                "--port",
                str(runtime_port),
                "--node-config",
                node_config_text(cfg),
                *self._runtime_auth(f"executor-{i}"),
            ],  # fmt: skip
        )
        if self.isolation == "process":
            secret = self.workdir / f"executor-{i}.secret"
            self._spawn(f"executor-{i}", executor_cmd(runtime_port, node.pid, None, secret))

    def _wait_port(
        self, port: int, name: str, timeout: float = 30.0, host: str = "127.0.0.1"
    ) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.procs[name].poll() is not None:
                raise RunFailed(f"{name} exited: {' | '.join(log_error(self.log(name)))}")
            with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
                if s.connect_ex((host, port)) == 0:
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
        signal_group(p.pid, sig)  # the group this process leads (start_new_session)

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
            signal_group(p.pid, signal.SIGKILL)  # stragglers of the group
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
        for secret in self.workdir.glob("executor-*.secret"):  # worthless once stopped
            secret.unlink(missing_ok=True)

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
            if "superlink" in self.procs and self.procs["superlink"].poll() is not None:
                raise RunFailed(f"superlink exited: {' | '.join(log_error(self.log('superlink')))}")
            # a gateway that dies is the server's to record; no executor left is no run
            execs = [n for n in self.procs if n.startswith("executor-")]
            if execs and all(self.procs[n].poll() is not None for n in execs):
                why = " | ".join(log_error(self.log(execs[0])))
                raise RunFailed(f"every gateway's executor exited ({execs[0]}: {why})")
            run = self.procs.get("flwr-run")
            if run is not None and run.poll() is not None and not Path(path).exists():
                time.sleep(0.5)
                if not Path(path).exists():
                    raise RunFailed(self.run_error())
            if on_wait is not None:
                on_wait()
            time.sleep(0.1)
        return FederationResult.load(path)  # written whole (renamed into place)

    def run(self, run_config: dict, timeout: float = 600.0) -> FederationResult:
        return self.wait_result(self.submit(run_config), timeout)


# ---------------------------------------------------------------------- one federation
@dataclass
class FederationPlan:
    """What one local federation runs.

    Parameters
    ----------
    node_configs : list of dict
        One node config per gateway (:func:`gateway_node_configs`).
    run_config : dict
        The ServerApp's run config (:func:`run_config`).
    out : Path
        Output folder: models, logs, ``result.json``.
    """

    node_configs: list[dict]
    run_config: dict
    out: Path

    @property
    def gateways(self) -> int:
        """The number of gateways (SuperNodes)."""
        return len(self.node_configs)


def gateway_node_configs(
    out: Path,
    *,
    files: list[Path] | None = None,
    dataset: str | None = None,
    gateways: int | None = None,
    data_dir: Path | None = None,
    feature_set: str = "generic",
    max_rows: int | None = None,
    table_options: dict | None = None,
) -> list[dict]:
    """One node config per gateway (what :mod:`fedep.flower.gateway_data` reads).

    Parameters
    ----------
    out : Path
        Output folder; gateway ``i`` writes its model to ``out / "gateway-<i>.fedep"``.
    files : list of Path, optional
        One file per gateway (``data-path``), labelled by its gateway id (the file name
        without suffixes, :func:`fedep.data.readers.gateway_id`) as ``fedep fit`` and a
        ``--role gateway`` label it, so that a warm start matches its gateways.
    dataset : str, optional
        An official dataset, split into ``gateways`` partitions (``partition-id``,
        ``num-partitions``), read from ``data_dir`` as ``feature_set``, cut to
        ``max_rows`` normal training rows when given.
    gateways, data_dir, feature_set, max_rows
        The partition settings of ``dataset``.
    table_options : dict, optional
        Node-config keys for the files (``label-column``, ``normal-label``, ``format``,
        ``delimiter``, ``infinity``); ``None`` values are left out.

    Returns
    -------
    list of dict
    """
    extra = {k: v for k, v in (table_options or {}).items() if v is not None}
    nodes = []
    n = len(files) if files is not None else int(gateways or 0)
    for i in range(n):
        if files is not None:
            cfg = {"data-path": str(files[i]), **extra}
        else:
            cfg = {
                "partition-id": i,
                "num-partitions": n,
                "dataset": dataset,
                "data-dir": str(data_dir),
                "feature-set": feature_set,
            }
            if max_rows:
                cfg["max-rows"] = max_rows
        cfg["model-path"] = str(Path(out) / f"gateway-{i}.fedep")
        nodes.append(cfg)
    return nodes


def run_config(method: str, min_clients: int, round_timeout_s: float, settings: dict) -> dict:
    """The ServerApp's run config: the method, the run's own keys, and ``settings``
    (estimator and feature-pipeline parameters by run-config key; ``None`` is written
    ``"none"``, a list comma-separated: run-config values are TOML scalars)."""
    rc = {"method": method, "min-clients": min_clients, "round-timeout-s": round_timeout_s}
    for key, value in settings.items():
        if isinstance(value, list):
            value = ",".join(map(str, value))
        rc[key] = "none" if value is None else value
    return rc


def stale_results(out: Path) -> list[Path]:
    """An earlier run's results in ``out``: ``result.json``, gateway models, results of
    submitted runs (the logs are not results)."""
    out = Path(out)
    names = ["result.json", "result.json.tmp"]
    found = [out / n for n in names if (out / n).exists()]
    return found + sorted(out.glob("gateway-*.fedep")) + sorted(out.glob("result-*.json"))


class SignalGuard:
    """SIGINT/SIGTERM raise :class:`Interrupted` once; later ones are only recorded.

    Set ``armed`` to False before a clean-up that a signal must not cut short; the
    handlers are installed in the main thread only (elsewhere Python refuses them).
    """

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

    def __enter__(self) -> SignalGuard:
        if threading.current_thread() is threading.main_thread():
            for s in self.SIGNALS:
                self._old[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)


@dataclass
class GatewayFailure:
    """A gateway that failed: its label on the server, the reason the server recorded,
    its SuperNode (index, ``None`` when no log names it) and that node's own error."""

    label: str
    reason: str
    node: int | None
    node_error: list[str]


@dataclass
class RunOutcome:
    """How a federation ended: its result, or why there is none (``error``)."""

    result: FederationResult | None
    error: str | None
    deployment: LocalDeployment

    def node_errors(self) -> dict[int, list[str]]:
        """Each SuperNode's last error in its log (nodes without one left out)."""
        n = len(self.deployment.node_configs)
        errors = {i: log_error(self.deployment.log(f"supernode-{i}")) for i in range(n)}
        return {i: lines for i, lines in errors.items() if lines}

    def failures(self) -> list[GatewayFailure]:
        """The gateways the result lists as failed, each with its node's own error.

        A gateway that failed before its first reply has no label on the server
        ("node <id>"); its SuperNode is the one whose log holds the reason.
        """
        if self.result is None:
            return []
        n = len(self.deployment.node_configs)
        logs = [self.deployment.log(f"supernode-{i}") for i in range(n)]
        out = []
        for label, why in self.result.failed.items():
            label = str(label)
            i = int(label) if label.isdigit() and int(label) < n else None
            if i is None:
                detail = re.sub(r"^.*?error \d+: ", "", str(why))
                i = next((j for j, text in enumerate(logs) if detail and detail in text), None)
            out.append(GatewayFailure(label, str(why), i, [] if i is None else log_error(logs[i])))
        return out


def run_local_federation(
    plan: FederationPlan,
    *,
    poll_interval: float | None = 0.2,
    timeout: float = 3600.0,
    isolation: str = "process",
) -> RunOutcome:
    """Start the deployment, run the federation, stop every process.

    Parameters
    ----------
    plan : FederationPlan
    poll_interval : float or None, default 0.2
        Longest idle wait of a SuperNode between pulls (:class:`LocalDeployment`).
    timeout : float, default 3600
        Seconds for the whole run.
    isolation : {"process", "subprocess"}, default "process"
        How the SuperNodes run their ClientApp (:class:`LocalDeployment`).

    Returns
    -------
    RunOutcome
        With the result, or the one-line reason the run ended without one (its partial
        results then removed; the logs stay in ``plan.out``).

    Raises
    ------
    Interrupted
        SIGINT or SIGTERM arrived; every process was stopped and this run's partial
        results removed first.
    """
    with SignalGuard() as guard:
        dep = LocalDeployment(
            plan.node_configs, plan.out, poll_interval=poll_interval, isolation=isolation
        )
        result_path = Path(plan.out) / "result.json"
        res = error = None
        try:
            dep.start()
            dep.submit(plan.run_config, result_path)
            res = dep.wait_result(result_path, timeout=timeout)
        except (RunFailed, TimeoutError) as exc:
            error = " ".join(str(exc).split()) or type(exc).__name__
        finally:
            guard.armed = False  # from here on a signal cannot cut the clean-up short
            try:
                dep.stop()
            finally:
                if guard.received is not None or res is None:
                    for p in stale_results(plan.out):  # this run's partial results
                        p.unlink(missing_ok=True)
        if guard.received is not None:
            raise Interrupted(guard.received)
    return RunOutcome(res, error, dep)

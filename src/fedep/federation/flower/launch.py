"""Start a local Flower deployment (1 SuperLink + N SuperNodes) and run FedEP on it.

One line::

    python -m fedep.federation.flower.launch --gateways 3 --dataset nsl-kdd \\
        --max-rows 3000 --rounds 10 --out runs/flower

starts ``flower-superlink`` and ``flower-supernode`` processes on 127.0.0.1
(``--insecure``: loopback only), submits the app with ``flwr run``, waits for the
ServerApp's result file, and stops every process it started, by PID (each in its own
process group, so the SuperExec / ClientApp children they spawn go too). Gateway ``i``
gets ``--node-config "partition-id=i num-partitions=N dataset=... model-path=..."``
(or ``data-path=...`` with ``--csv``) and writes ``gateway-<i>.fedep``, a model file
``fedep score`` reads.

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
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from fedep.federation.flower.server_app import DEFAULT_RUN_CONFIG
from fedep.federation.rounds import FederationResult

__all__ = ["LocalDeployment", "write_app", "main"]

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
serverapp = "fedep.federation.flower.server_app:app"
clientapp = "fedep.federation.flower.client_app:app"

[tool.flwr.app.config]
{config}
"""


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v))


def write_app(app_dir, run_config: dict | None = None) -> Path:
    """Write the Flower App project (``pyproject.toml``) that ``flwr run`` submits.

    The app code is the installed :mod:`fedep.federation.flower`; the project only
    names its components and the default run config.
    """
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
    """

    node_configs: list[dict]
    workdir: Path
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    env: dict = field(default_factory=dict)

    def __post_init__(self):
        self.workdir = Path(self.workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        bindir = str(Path(sys.executable).parent)
        self.env = {
            **os.environ,
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
        p = subprocess.Popen(
            args,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # own process group: its children are stopped with it
            cwd=self.workdir,
        )
        log.close()
        self.procs[name] = p
        return p

    def _exe(self, name: str) -> str:
        p = self.bindir / name
        return str(p) if p.exists() else (shutil.which(name) or name)

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
                    self._exe("flower-supernode"),
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
                raise RuntimeError(f"{name} exited: {self.log(name)[-2000:]}")
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
        except ProcessLookupError:
            pass

    def stop(self) -> None:
        """Stop every process this deployment started (SIGTERM, then SIGKILL)."""
        for name in reversed(list(self.procs)):
            self.kill(name, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for p in self.procs.values():
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for name in self.procs:
            self.kill(name, signal.SIGKILL)
            try:
                os.killpg(self.procs[name].pid, signal.SIGKILL)  # stragglers of the group
            except (ProcessLookupError, PermissionError):
                pass
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
    def submit(self, run_config: dict) -> Path:
        """``flwr run`` the app with ``run_config``; returns the result path to wait for."""
        result = self.workdir / f"result-{time.time_ns()}.json"
        cfg = {"min-nodes": len(self.node_configs), **run_config, "result-path": str(result)}
        app_dir = write_app(self.workdir / "app", cfg)
        # --stream keeps the ServerApp's log in flwr-run.log; the process ends with the run.
        self._spawn("flwr-run", [self._exe("flwr"), "run", str(app_dir), "fedep-local", "--stream"])
        return result

    def wait_result(self, path: Path, timeout: float = 600.0, on_wait=None) -> FederationResult:
        deadline = time.monotonic() + timeout
        while not Path(path).exists():
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"no result after {timeout} s; superlink log:\n{self.log('superlink')[-4000:]}"
                )
            if self.procs["superlink"].poll() is not None:
                raise RuntimeError(f"superlink exited: {self.log('superlink')[-4000:]}")
            run = self.procs.get("flwr-run")
            if run is not None and run.poll() is not None and not Path(path).exists():
                time.sleep(0.5)
                if not Path(path).exists():
                    raise RuntimeError(
                        f"the run ended without a result:\n{self.log('flwr-run')[-4000:]}"
                    )
            if on_wait is not None:
                on_wait()
            time.sleep(0.1)
        time.sleep(0.05)
        return FederationResult.load(path)

    def run(self, run_config: dict, timeout: float = 600.0) -> FederationResult:
        return self.wait_result(self.submit(run_config), timeout)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m fedep.federation.flower.launch", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--gateways", type=int, required=True, help="number of SuperNodes")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--dataset", help="nsl-kdd, unsw-nb15 or ton-iot: partitioned by gateway")
    src.add_argument("--csv", nargs="+", help="one CSV per gateway (data-path)")
    ap.add_argument("--max-rows", type=int, help="subsample of normal training rows")
    ap.add_argument("--data-dir", help="dataset directory (default FEDEP_DATA_DIR)")
    ap.add_argument("--method", default="fedep", choices=["fedep", "fedpg"])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--components", type=int, default=5)
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--min-clients", type=int, default=1)
    ap.add_argument("--round-timeout", type=float, default=120.0)
    ap.add_argument("--out", default=None, help="output folder (models, logs, result.json)")
    a = ap.parse_args(argv)
    out = Path(a.out or tempfile.mkdtemp(prefix="fedep-flower-")).resolve()
    nodes = []
    for i in range(a.gateways):
        if a.csv:
            if len(a.csv) != a.gateways:
                ap.error("--csv needs one file per gateway")
            cfg = {"data-path": str(Path(a.csv[i]).resolve()), "client-label": str(i)}
        else:
            cfg = {"partition-id": i, "num-partitions": a.gateways, "dataset": a.dataset}
            if a.max_rows:
                cfg["max-rows"] = a.max_rows
            if a.data_dir:
                cfg["data-dir"] = str(Path(a.data_dir).resolve())
        cfg["model-path"] = str(out / f"gateway-{i}.fedep")
        nodes.append(cfg)
    rc = {
        "method": a.method,
        "n-rounds": a.rounds,
        "n-components": a.components,
        "tol": a.tol,
        "random-state": a.seed,
        "min-clients": a.min_clients,
        "round-timeout-s": a.round_timeout,
    }
    with LocalDeployment(nodes, out) as dep:
        res = dep.run(rc)
    (out / "result.json").write_text(json.dumps(res.to_json()))
    for rec in res.history:
        print(
            f"round {rec['round']:3d}  objective {rec['objective']:.6g}  "
            f"gateways {len(rec['participants'])}  {rec['time_s'] * 1e3:.1f} ms"
        )
    print(f"{res.stop_reason} after {res.n_rounds} rounds; models and logs in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A federation across machines, on loopback: docs/deployment.md run as written.

The recipe's commands (keys, a TLS SuperLink with SuperNode authentication, two
authenticated gateways, scoring) run in order, with ``server.example.org`` read as
``localhost``, ``0.0.0.0`` as ``127.0.0.1`` and a free port for 9093; a gateway whose
key was not registered is refused; ``--insecure`` off loopback is refused with one line.
Every process started leads its own process group and is stopped on every path.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import select
import shlex
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402

from fedep._procs import stop_group  # noqa: E402
from fedep.cli import main  # noqa: E402
from fedep.core.stiefel import projector_distance  # noqa: E402
from fedep.federation.rounds import FederationResult  # noqa: E402
from fedep.flower import run_local  # noqa: E402
from fedep.flower.deployment import free_port  # noqa: E402
from fedep.flower.roles import check_insecure, exit_reason, is_loopback  # noqa: E402
from fedep.flower.tls import write_node_key, write_server_files  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "deployment.md").read_text()


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "FEDEP_DATA_DIR"}
    env.update(FLWR_TELEMETRY_ENABLED="0", PYTHONPATH=str(ROOT / "src"))
    return env


def _argv(line: str) -> list[str]:
    argv = shlex.split(line)
    assert argv[0] == "fedep", line
    return [sys.executable, "-m", "fedep", *argv[1:]]


def _start(line: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        _argv(line),
        cwd=cwd,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: stopped with it
    )


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the command's group (it stops its own processes), SIGKILL after 30 s."""
    stop_group(proc, grace=30)


def _sweep(root: Path) -> list[int]:
    """Kill every process whose environment names a Flower home under ``root`` (the
    roles' SuperLink, SuperNodes, executors and apps); the PIDs found."""
    needle = f"FLWR_HOME={root}".encode()
    found = []
    for e in os.listdir("/proc"):
        if not e.isdigit() or int(e) == os.getpid():
            continue
        try:
            with open(f"/proc/{e}/environ", "rb") as fh:
                if not any(v.startswith(needle) for v in fh.read().split(b"\0")):
                    continue
            os.kill(int(e), signal.SIGKILL)
            found.append(int(e))
        except (OSError, ProcessLookupError):
            continue
    return found


@contextlib.contextmanager
def _processes(root: Path):
    """A list to put started commands in: on the way out, on every path, each is
    stopped and every Flower process of ``root`` swept; none may have been left."""
    started: list[subprocess.Popen] = []
    try:
        yield started
    finally:
        for p in started:
            _stop(p)
        leftover = _sweep(root)
    assert leftover == [], f"processes left running: {leftover}"


def _succeed(procs, timeout: float) -> None:
    """Wait for each command; each must exit 0 (its stderr's tail if not)."""
    for p in procs:
        err = p.communicate(timeout=timeout)[1]
        assert p.returncode == 0, (p.args, err[-3000:])


def _run(line: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    proc = _start(line, cwd)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        _stop(proc)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _csv(path: Path, seed: int, rows: int = 200, n: int = 6) -> None:
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(np.random.default_rng(0).normal(size=(n, 2)))[0]
    X = rng.normal(size=(rows, 2)) @ basis.T * 3.0 + 0.2 * rng.normal(size=(rows, n))
    header = ",".join(f"f{j}" for j in range(n))
    np.savetxt(path, X, delimiter=",", header=header, comments="", fmt="%.6f")


def _recipe(port: int) -> list[str]:
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", DOC, flags=re.S):
        lines += [ln.strip() for ln in block.splitlines() if ln.strip()]
    return [
        ln.replace("server.example.org", "localhost")
        .replace("0.0.0.0", "127.0.0.1")
        .replace(":9093", f":{port}")
        for ln in lines
    ]


def _wait_ready(server: subprocess.Popen, timeout: float = 180) -> str:
    """The server role's stderr up to its ``server ready`` line (its keys registered:
    a gateway started earlier could be refused)."""
    deadline, seen = time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([server.stderr], [], [], 1.0)
        if ready:
            line = server.stderr.readline()
            seen += line
            if "server ready" in line:
                return seen
            if not line:  # the server exited
                break
    raise AssertionError(f"the server never said it was ready: {seen[-2000:]}")


def test_the_recipe_runs_with_tls_and_authenticated_gateways(tmp_path):
    port = free_port()
    lines = _recipe(port)
    kinds = [ln.split()[1:4] for ln in lines]
    assert kinds == [
        ["federate", "--role", "keys"],
        ["federate", "--role", "keys"],
        ["federate", "--role", "keys"],
        ["federate", "--role", "server"],
        ["federate", "--role", "gateway"],
        ["federate", "--role", "gateway"],
        ["score", "--model", "runs/site-a/gateway-site-a.fedep"],
    ], lines
    for i, site in enumerate(("site-a", "site-b")):
        _csv(tmp_path / f"{site}.csv", seed=i)
    keys = [*lines[:3], "fedep federate --role keys --node-key rogue.key"]
    procs = [_start(line, tmp_path) for line in keys]  # independent: side by side
    try:
        for line, p in zip(keys, procs, strict=True):
            err = p.communicate(timeout=120)[1]
            assert p.returncode == 0, (line, err[-2000:])
    finally:
        for p in procs:
            _stop(p)
    with _processes(tmp_path) as started:
        server = _start(lines[3], tmp_path)
        started.append(server)
        _wait_ready(server)
        # beside the two gateways, one whose key was not registered: the SuperLink
        # refuses its SuperNode, and the command says so
        rogue = lines[4].replace("site-a.key", "rogue.key").replace("runs/site-a", "runs/rogue")
        intruder = _start(rogue, tmp_path)
        gateways = [_start(line, tmp_path) for line in lines[4:6]]
        started += [intruder, *gateways]
        err = intruder.communicate(timeout=120)[1]
        assert intruder.returncode == 1, err[-2000:]
        assert "Failed to activate SuperNode" in err and "Traceback" not in err, err[-2000:]
        _succeed([*gateways, server], timeout=240)
    result = json.loads((tmp_path / "runs/server/result.json").read_text())
    assert sorted(result["finalized"]) == ["site-a", "site-b"]
    assert result["failed"] == {}
    assert all(sorted(h["participants"]) == ["site-a", "site-b"] for h in result["history"])
    for site in ("site-a", "site-b"):
        assert (tmp_path / f"runs/{site}/gateway-{site}.fedep").is_file()
    proc = _run(lines[6], tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    scored = (tmp_path / "site-a-scored.csv").read_text().splitlines()
    assert len(scored) == 201 and "anomaly_score" in scored[0]
    # the server's SuperLink ran with TLS and node authentication
    log = (tmp_path / "runs/server/superlink.log").read_text()
    assert "--insecure" not in log and "Flower SuperLink" in log


def test_keys_are_a_ca_a_server_certificate_and_ec_node_keys(tmp_path):
    files = write_server_files(tmp_path / "certs", ["server.example.org", "10.0.0.5"])
    ca = x509.load_pem_x509_certificate(files.ca_cert.read_bytes())
    cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
    cert.verify_directly_issued_by(ca)  # raises if the signature does not check
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(san.get_values_for_type(x509.DNSName)) == {"server.example.org", "localhost"}
    assert {str(a) for a in san.get_values_for_type(x509.IPAddress)} == {
        "10.0.0.5",
        "127.0.0.1",
        "::1",
    }
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    for private in (files.key, tmp_path / "certs" / "ca.key"):
        assert stat.S_IMODE(private.stat().st_mode) == 0o600
    key, pub = write_node_key(tmp_path / "gw.key")
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    public = serialization.load_ssh_public_key(pub.read_bytes())
    assert isinstance(public, ec.EllipticCurvePublicKey) and public.curve.name == "secp384r1"
    private = serialization.load_ssh_private_key(key.read_bytes(), password=None)
    assert private.public_key().public_numbers() == public.public_numbers()


@pytest.mark.parametrize(
    "argv",
    [
        ["--role", "gateway", "--superlink", "10.1.2.3:9093", "--insecure", "--train", "x.csv"],
        ["--role", "server", "--superlink", "0.0.0.0:9093", "--insecure", "--gateways", "2"],
        ["--role", "gateway", "--superlink", "gw.example.org:9093", "--insecure"],
    ],
)
def test_insecure_off_loopback_is_refused_in_one_line(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _csv(tmp_path / "x.csv", seed=0)
    if "--train" not in argv:
        argv = [*argv, "--train", "x.csv"] if "gateway" in argv else argv
    rc = main(["federate", *argv, "--out", "run"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 1
    assert len(lines) == 1 and "--insecure is for loopback only" in lines[0], lines
    assert not (tmp_path / "run" / "superlink.log").exists()


def test_loopback_and_refusal_rules():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.1")
    assert not is_loopback("gw.example.org")
    check_insecure(True, "127.0.0.1", "localhost")
    check_insecure(False, "10.0.0.1")
    with pytest.raises(ValueError, match="loopback only, not 10.0.0.1"):
        check_insecure(True, "127.0.0.1", "10.0.0.1")
    log = (
        "\x1b[91mERROR \x1b[0m:     Exit Code: 305\nFailed to initialize the connection.\n"
        "[code: 2004] Failed to activate SuperNode.\nFor more information, visit: x\n"
    )
    assert exit_reason(log) == [
        "Exit Code: 305 Failed to initialize the connection. "
        "[code: 2004] Failed to activate SuperNode."
    ]


@pytest.mark.slow  # a SuperLink, three SuperNodes and their executors, SecAgg+ rounds
def test_the_server_role_runs_secagg_with_tls_and_authenticated_gateways(tmp_path):
    # --role server --secure-aggregation, TLS and three authenticated gateways: the fit
    # equals the plain run's (the same gateways' files, in-process Flower grid) within
    # SecAgg+'s quantisation, and every reply the ServerApp received held masked
    # vectors and exponents only (its log names each exchange's array records)
    port = free_port()
    write_server_files(tmp_path / "certs", ["localhost"])
    sites = ["site-a", "site-b", "site-c"]
    for i, site in enumerate(sites):
        _csv(tmp_path / f"{site}.csv", seed=i, rows=120)
        write_node_key(tmp_path / f"{site}.key")
    fit = "--features numeric --n-components 2 --n-rounds 3 --tol 0 --random-state 5"
    keys = " ".join(f"{s}.key.pub" for s in sites)
    server_line = (
        f"fedep federate --role server --superlink 127.0.0.1:{port} --certs certs "
        f"--gateways 3 --gateway-keys {keys} {fit} --secure-aggregation --out runs/server"
    )
    with _processes(tmp_path) as started:
        server = _start(server_line, tmp_path)
        started.append(server)
        _wait_ready(server)
        for site in sites:
            started.append(_start(
                f"fedep federate --role gateway --superlink localhost:{port} --certs certs "
                f"--node-key {site}.key --train {site}.csv --once --out runs/{site}",
                tmp_path,
            ))  # fmt: skip
        _succeed([*started[1:], server], timeout=300)
    secure = FederationResult.load(tmp_path / "runs/server/result.json")
    assert secure.failed == {} and sorted(secure.finalized) == sites
    cfgs = [{"data-path": str(tmp_path / f"{s}.csv"), "client-label": s} for s in sites]
    rc = {"features": "numeric", "n-components": 2, "n-rounds": 3, "tol": 0.0,
          "random-state": 5}  # fmt: skip
    plain, _ = run_local(cfgs, rc)
    assert projector_distance(secure.components.T, plain.components.T) <= 1e-6
    np.testing.assert_allclose(secure.mean, plain.mean, rtol=1e-6, atol=1e-7)
    for a, b in zip(plain.history, secure.history, strict=True):
        assert b["objective"] == pytest.approx(a["objective"], rel=1e-5, abs=1e-6)
    log = (tmp_path / "runs/server/flwr-run.log").read_text()
    held = re.findall(r"fedep: replies to (\S+) (\S+) held arrays \[([^\]]*)\]", log)
    # four SecAgg+ stages a round; Flower's log stream may stop when the run ends, before
    # its last lines (seen on a loaded CI machine): rounds 1 and 2 whole, round 3 begun
    per_round = collections.Counter(g for k, g, _ in held if k == "train" and g.isdigit())
    assert per_round["1"] == per_round["2"] == 4 and 1 <= per_round["3"] <= 4, per_round
    for _, _, names in held:
        assert set(filter(None, names.split(", "))) <= {"fedep.exponents"}, names
    assert {"secure_moments", "secure_m2", "secure_sketch"} <= {g for _, g, _ in held}

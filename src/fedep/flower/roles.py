"""A federation across machines: the server's processes and a gateway's.

:class:`ServerRole` starts a SuperLink (or joins a running one), registers the
gateways' public keys and runs the ServerApp with ``flwr run``; :class:`GatewayRole`
runs one SuperNode over the gateway's own file, with its ClientApp executor
(:mod:`fedep.flower.executor`) beside it. Both are :class:`LocalDeployment`\\ s with
other processes: every process they start leads its own process group, carries the
deployment's marker, and is stopped on exit.

Transport security is Flower 1.42's: TLS (the SuperLink's certificate, signed by a CA
the gateways trust) and SuperNode authentication (``--enable-supernode-auth``; only the
registered public keys connect). ``insecure=True`` (plain HTTP, no authentication) is
refused unless every address is loopback (:func:`check_insecure`).
"""

from __future__ import annotations

import ipaddress
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from fedep.flower.deployment import (
    ANSI,
    LocalDeployment,
    RunFailed,
    log_error,
)
from fedep.flower.tls import ServerFiles

__all__ = [
    "GatewayRole",
    "ServerRole",
    "check_insecure",
    "exit_reason",
    "is_loopback",
    "split_address",
]

#: The name of the SuperLink connection in the roles' Flower configuration.
CONNECTION = "fedep-local"


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` for IPv6) as ``(host, port)``.

    Raises
    ------
    ValueError
        Not ``host:port`` with a port in 1..65535 (one line).
    """
    host, sep, port = str(address).rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{address!r} is not HOST:PORT")
    return host, int(port)


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_insecure(insecure: bool, *hosts: str) -> None:
    """Refuse plain, unauthenticated connections that leave this machine.

    Raises
    ------
    ValueError
        ``insecure`` with a host that is not loopback (one line).
    """
    if insecure:
        off = [h for h in hosts if not is_loopback(h)]
        if off:
            raise ValueError(
                f"--insecure is for loopback only, not {off[0]}: use TLS and node keys "
                "(fedep federate --role keys; docs/deployment.md)"
            )


def _flwr_config(home: Path, address: str, root_certificates: Path | None) -> None:
    """The Flower CLI's connection to the SuperLink (``FLWR_HOME/config.toml``)."""
    home.mkdir(parents=True, exist_ok=True)
    tls = (
        f'root-certificates = "{Path(root_certificates).resolve()}"\n'
        if root_certificates is not None
        else "insecure = true\n"
    )
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "{CONNECTION}"\n\n'
        f'[superlink.{CONNECTION}]\naddress = "{address}"\n{tls}'
    )


@dataclass
class ServerRole(LocalDeployment):
    """The server of a federation across machines: a SuperLink and the ServerApp.

    Parameters
    ----------
    address : str
        ``host:port`` the SuperLink listens on (its Fleet, Control and Runtime APIs share
        one port in Flower 1.42), or, with ``join``, the running SuperLink to use.
    tls : ServerFiles, optional
        CA certificate, server certificate and key; None only with ``insecure``.
    insecure : bool
        Plain HTTP, no node authentication: loopback only.
    join : bool
        Use the SuperLink already running at ``address`` (its operator started it with
        TLS and ``--enable-supernode-auth``); only ``tls.ca_cert`` is read.
    node_keys : list of Path
        Public keys of the gateways to register (``flwr supernode register``).
    """

    address: str = "127.0.0.1:9093"
    tls: ServerFiles | None = None
    insecure: bool = False
    join: bool = False
    node_keys: list[Path] = field(default_factory=list)

    def __post_init__(self):
        super().__post_init__()
        self.host, self.port = split_address(self.address)
        check_insecure(self.insecure, self.host)
        if not self.insecure and self.tls is None:
            raise ValueError("the server needs TLS files (--certs) or --insecure on loopback")
        # the server's own flwr commands dial it here (its certificate names loopback)
        local = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        self.dial = f"[{local}]:{self.port}" if ":" in local else f"{local}:{self.port}"

    def start(self) -> ServerRole:
        home = Path(self.env["FLWR_HOME"])
        _flwr_config(home, self.dial, None if self.insecure else self.tls.ca_cert)
        if not self.join:
            tls = ["--insecure"]
            if not self.insecure:
                tls = [
                    "--ssl-ca-certfile", str(self.tls.ca_cert),
                    "--ssl-certfile", str(self.tls.cert),
                    "--ssl-keyfile", str(self.tls.key),
                    "--enable-supernode-auth",
                ]  # fmt: skip
            self._spawn(
                "superlink",
                [
                    self._exe("flower-superlink"),
                    *tls,
                    "--disable-runtime-dependency-installation",
                    "--host",
                    self.host,
                    "--port",
                    str(self.port),
                ],  # fmt: skip
            )
            try:
                self._wait_port(self.port, "superlink", host=split_address(self.dial)[0])
            except RunFailed:
                why = " ".join(exit_reason(self.log("superlink")))
                raise RunFailed(f"superlink exited: {why}") from None
        for key in self.node_keys:
            self.register(Path(key))
        return self

    def flwr(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
        """A ``flwr`` command against this SuperLink (its output captured)."""
        return subprocess.run(
            [self._exe("flwr"), *args],
            env=self.env,
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=timeout,
            start_new_session=True,
        )

    def register(self, public_key: Path) -> None:
        """Register a gateway's public key (``flwr supernode register``).

        Raises
        ------
        RunFailed
            Flower refused it (one line: the key file and Flower's reason).
        """
        proc = self.flwr("supernode", "register", str(public_key), CONNECTION)
        if proc.returncode != 0:
            lines = [ln.strip(" │╭╮╰╯─") for ln in (proc.stdout + proc.stderr).splitlines()]
            why = [ln for ln in lines if ln and "Using SuperLink" not in ln]
            raise RunFailed(f"registering {public_key}: {' '.join(why[-2:]) or 'refused'}")


#: Seconds a ``--once`` gateway stays connected after sending its last reply (see
#: :meth:`GatewayRole.wait_model`).
FINALIZE_LINGER_S = 5.0


@dataclass
class GatewayRole(LocalDeployment):
    """One gateway: a SuperNode over its own file, connected to the server's SuperLink.

    Parameters
    ----------
    node_configs : list of one dict
        The gateway's node config (``data-path``, ``model-path``, ...).
    superlink : str
        The server's SuperLink, ``host:port``.
    root_certificates : Path, optional
        The CA certificate the SuperLink's certificate is checked against.
    node_key : Path, optional
        The gateway's private key (OpenSSH EC), registered on the server.
    insecure : bool
        Plain HTTP, no authentication: loopback only.
    """

    superlink: str = "127.0.0.1:9093"
    root_certificates: Path | None = None
    node_key: Path | None = None
    insecure: bool = False

    def __post_init__(self):
        super().__post_init__()
        host, _ = split_address(self.superlink)
        check_insecure(self.insecure, host)
        if not self.insecure and (self.root_certificates is None or self.node_key is None):
            raise ValueError(
                "a gateway needs the CA certificate (--certs) and its key (--node-key), "
                "or --insecure on loopback"
            )

    def start(self) -> GatewayRole:
        Path(self.env["FLWR_HOME"]).mkdir(parents=True, exist_ok=True)
        tls = ["--insecure"]
        if not self.insecure:
            tls = ["--root-certificates", str(self.root_certificates)]
            tls += ["--auth-supernode-private-key", str(self.node_key)]
        self._start_node(0, self.node_configs[0], self.superlink, tls)
        return self

    def wait_model(self, timeout: float, once: bool = True, on_wait=None) -> Path | None:
        """Serve until the gateway has written its model (``once``) or until stopped.

        Returns
        -------
        Path or None
            The model file written (``once``); None when ``timeout`` passed first.

        Raises
        ------
        RunFailed
            The SuperNode or its executor exited (one line: its last error, e.g. an
            unregistered key: "Failed to activate SuperNode").
        """
        path = Path(str(self.node_configs[0]["model-path"]))
        before = path.stat().st_mtime_ns if path.exists() else None
        deadline = time.monotonic() + timeout
        sent_at = None
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    lines = exit_reason(self.log(name)) or [f"exit status {proc.returncode}"]
                    raise RunFailed(f"{name} exited: {' | '.join(lines)}")
            if once and path.exists() and path.stat().st_mtime_ns != before:
                if sent_at is None and self._finalize_sent():
                    sent_at = time.monotonic()
                # Flower's SuperLink answers the ServerApp's pull with an error for a
                # node gone offline, even when its reply is stored: linger until the
                # ServerApp (polling every <= 0.25 s) has had time to pull it
                lingered = sent_at is not None and time.monotonic() - sent_at >= FINALIZE_LINGER_S
                if lingered or time.monotonic() > deadline - 1:
                    return path
            if on_wait is not None:
                on_wait()
            time.sleep(0.2)
        return None

    def _finalize_sent(self) -> bool:
        """Whether the SuperNode has sent its reply to the run's last message
        (``evaluate.finalize``): only then may a ``--once`` gateway stop."""
        log = self.log("supernode-0")
        at = log.rfind("Sending: evaluate.finalize")
        return at >= 0 and "Sent successfully" in log[at:]


def exit_reason(text: str) -> list[str]:
    """Why a Flower process exited: the lines after its last ``Exit Code`` line (e.g.
    "[code: 2004] Failed to activate SuperNode." for an unregistered key), else
    :func:`log_error`, else the log's last line."""
    lines = [ANSI.sub("", ln).strip() for ln in text.splitlines()]
    at = [i for i, ln in enumerate(lines) if re.search(r"ERROR\b.*Exit Code: \d+", ln)]
    if at:
        out = []
        for ln in lines[at[-1] :]:
            if ln.startswith("For more information"):
                break
            if ln:
                out.append(re.sub(r"^ERROR\s*:?\s*", "", ln))
        return [" ".join(out)]
    last = [ln for ln in lines if ln]
    return log_error(text) or last[-1:]

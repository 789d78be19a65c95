"""``fedep federate --role``: one machine's part of a federation across machines.

- ``--role keys``: the CA and the SuperLink's certificate (``--certs DIR
  --server-name HOST ...``) and/or a gateway's key pair (``--node-key PATH``), made
  with ``cryptography`` (:mod:`fedep.flower.tls`);
- ``--role server``: a SuperLink with TLS and SuperNode authentication on
  ``--superlink HOST:PORT`` (or ``--join`` a running one), the gateways' public keys
  registered (``--gateway-keys``), the federation run for ``--gateways N`` gateways;
  ``result.json`` in ``--out``;
- ``--role gateway``: a SuperNode over this gateway's ``--train FILE``, connected to
  the server with TLS (``--certs DIR``: its ``ca.crt``) and its ``--node-key``; it
  writes ``gateway-<label>.fedep`` in ``--out`` and, with ``--once``, stops.

``--insecure`` (plain HTTP, no authentication) is refused off loopback with one line.
The recipe for three machines is ``docs/deployment.md``.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from types import SimpleNamespace

from fedep.cli._common import UsageError, err, finite_float
from fedep.data.readers import gateway_id
from fedep.flower.deployment import (
    Interrupted,
    RunFailed,
    RunOutcome,
    SignalGuard,
    gateway_node_configs,
    run_config,
)
from fedep.flower.roles import GatewayRole, ServerRole, check_insecure, split_address
from fedep.flower.tls import server_files, write_node_key, write_server_files

__all__ = ["add_role_options", "check_local_only", "run_role"]

ROLES = ("local", "server", "gateway", "keys")


def add_role_options(p) -> None:
    """The options of a federation across machines (docs/deployment.md)."""
    g = p.add_argument_group("across machines (docs/deployment.md)")
    g.add_argument(
        "--role",
        choices=ROLES,
        default="local",
        help="local (default): everything on this machine; server: the SuperLink and the "
        "run; gateway: this gateway's SuperNode; keys: make TLS files and node keys",
    )
    g.add_argument(
        "--superlink",
        metavar="HOST:PORT",
        help="server: address to listen on (default 0.0.0.0:9093); gateway: the server's",
    )
    g.add_argument(
        "--certs",
        type=Path,
        metavar="DIR",
        help="TLS files: ca.crt (every role), server.pem and server.key (server); "
        "--role keys writes them there",
    )
    g.add_argument(
        "--server-name",
        nargs="+",
        metavar="HOST",
        help="keys: the server's host names or IP addresses, as gateways dial it",
    )
    g.add_argument(
        "--node-key",
        type=Path,
        metavar="KEY",
        help="gateway: its private key; keys: where to write a key pair (KEY, KEY.pub)",
    )
    g.add_argument(
        "--gateway-keys",
        nargs="+",
        type=Path,
        default=[],
        metavar="PUB",
        help="server: the gateways' public keys (KEY.pub) to admit",
    )
    g.add_argument(
        "--join",
        action="store_true",
        help="server: use the SuperLink running at --superlink instead of starting one",
    )
    g.add_argument(
        "--client-label",
        metavar="NAME",
        help="gateway: its name in the federation (default: the --train file's name)",
    )
    g.add_argument(
        "--dp-max-epsilon",
        type=finite_float,
        metavar="X",
        help="gateway: take part only in differentially private runs of epsilon <= X",
    )
    g.add_argument(
        "--once",
        action="store_true",
        help="gateway: stop once its model is written (default: serve until stopped)",
    )
    g.add_argument(
        "--insecure",
        action="store_true",
        help="plain HTTP, no authentication: on loopback (127.0.0.1) only",
    )


_ROLE_ONLY = ("superlink", "certs", "server_name", "node_key", "join", "once", "insecure")


def check_local_only(args) -> None:
    """The options of the other roles are refused without ``--role``."""
    for name in _ROLE_ONLY + ("client_label", "dp_max_epsilon"):
        if getattr(args, name):
            raise UsageError(f"--{name.replace('_', '-')} needs --role server, gateway or keys")
    if args.gateway_keys:
        raise UsageError("--gateway-keys needs --role server")


#: Where the server's SuperLink listens by default: every interface, Flower's port.
DEFAULT_LISTEN = "0.0.0.0:9093"


def _check_address(address: str, insecure: bool) -> None:
    """``--superlink`` is ``HOST:PORT``, and ``--insecure`` only on loopback."""
    try:
        host, _ = split_address(address)
        check_insecure(insecure, host)
    except ValueError as exc:
        raise UsageError(f"--superlink: {exc}") from None


def _need(path: Path, what: str) -> Path:
    if not path.is_file():
        raise UsageError(f"{what} {path}: no such file")
    return path.resolve()


def _keys(args) -> int:
    if args.certs is None and args.node_key is None:
        raise UsageError("--role keys needs --certs DIR --server-name HOST, or --node-key KEY")
    if args.certs is not None:
        if not args.server_name:
            raise UsageError("--role keys --certs needs --server-name (how gateways dial it)")
        files = write_server_files(args.certs, list(args.server_name))
        print(
            f"CA {files.ca_cert} (copy to every gateway), key {args.certs / 'ca.key'} "
            "(keep offline)"
        )
        print(
            f"server certificate {files.cert} and key {files.key} for {', '.join(args.server_name)}"
        )
    if args.node_key is not None:
        key, pub = write_node_key(args.node_key)
        print(f"gateway key {key} (stays on the gateway), public key {pub} (send to server)")
    return 0


def _server(args, hooks) -> int:
    if args.train is not None or args.dataset is not None:
        raise UsageError("--role server reads no data: each gateway runs --role gateway")
    if args.gateways is None:
        raise UsageError("--role server needs --gateways N (how many gateways to wait for)")
    if args.dp_max_epsilon is not None:
        raise UsageError(
            "--dp-max-epsilon is a gateway's (--role gateway); the server sets --dp-epsilon"
        )
    _check_address(args.superlink or DEFAULT_LISTEN, args.insecure)
    if args.certs is None and not args.insecure:
        raise UsageError("--role server needs --certs DIR (fedep federate --role keys)")
    tls = None
    if args.certs is not None:
        tls = server_files(args.certs.expanduser().resolve())  # the SuperLink runs in --out
        if args.join:  # only the CA is needed to reach a running SuperLink
            _need(tls.ca_cert, "--certs")
        else:
            for f in (tls.ca_cert, tls.cert, tls.key):
                _need(f, "--certs")
    keys = [_need(k, "--gateway-keys") for k in args.gateway_keys]
    if args.min_clients > args.gateways:
        raise UsageError(f"--min-clients must be in [1, {args.gateways}]; got {args.min_clients}")
    settings = hooks.run_settings(args)
    if args.secure_aggregation:  # every gateway holds a --train file
        hooks.check_secure(args, args.gateways, True)
    rc = run_config(args.method, args.min_clients, args.round_timeout, settings)
    rc.update({"min-nodes": args.gateways, "node-wait-s": args.timeout})
    if args.secure_aggregation:
        rc["secure-aggregation"] = True
    try:
        server = ServerRole(
            [],
            hooks.output_folder(args.out, args.overwrite),
            address=args.superlink or DEFAULT_LISTEN,
            tls=tls,
            insecure=args.insecure,
            join=args.join,
            node_keys=keys,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    result = server.workdir / "result.json"
    print(
        f"fedep federate: starting the server on {server.address}; logs in {server.workdir}",
        file=sys.stderr,
        flush=True,
    )

    def submit_and_wait():
        # the SuperLink is up and every key registered: a gateway may connect now (one
        # that activates before its key is registered is refused by the SuperLink)
        print(
            f"fedep federate: server ready on {server.address}: {len(keys)} gateway keys "
            f"registered, waiting for {args.gateways} gateways",
            file=sys.stderr,
            flush=True,
        )
        server.submit(rc, result)
        return server.wait_result(result, timeout=args.timeout)

    res, error, interrupted = _run_until_stopped(server, submit_and_wait, "server")
    if interrupted:
        return 130
    if res is None:
        err(f"run failed: {error}")
        return 1
    hooks.print_result(RunOutcome(res, None, server), server.workdir)
    for label, why in res.failed.items():
        print(f"gateway {label} failed: {why}", file=sys.stderr)
    if res.failed and not args.allow_failures:
        err(f"{len(res.failed)} gateways failed (--allow-failures to accept)")
        return 1
    return 0


def _run_until_stopped(role, work, what: str):
    """Start ``role``, run ``work()`` under a signal guard and stop ``role`` on every path.

    Returns
    -------
    value : object or None
        What ``work()`` returned (None on a failure or an interruption).
    error : str or None
        A failed run's or a timeout's message, on one line.
    interrupted : bool
        Stopped by SIGINT/SIGTERM (said on stderr).
    """
    value = error = None
    with SignalGuard() as guard:
        try:
            role.start()
            value = work()
        except (RunFailed, TimeoutError) as exc:
            error = " ".join(str(exc).split())
        except Interrupted:
            pass
        finally:
            guard.armed = False
            role.stop()
    if guard.received is not None:
        err(f"interrupted by {signal.Signals(guard.received).name}: stopped the {what}")
        return value, error, True
    return value, error, False


def _gateway(args, hooks) -> int:
    if args.superlink is None:
        raise UsageError("--role gateway needs --superlink HOST:PORT (the server's)")
    if args.train is None or args.dataset is not None:
        raise UsageError("--role gateway needs --train FILE (this gateway's own records)")
    if args.dp_max_epsilon is not None and not args.dp_max_epsilon > 0:
        raise UsageError(f"--dp-max-epsilon must be > 0; got {args.dp_max_epsilon:g}")
    _check_address(args.superlink, args.insecure)
    ca = key = None
    if not args.insecure:
        if args.certs is None or args.node_key is None:
            raise UsageError("--role gateway needs --certs DIR (its ca.crt) and --node-key KEY")
        ca = _need(server_files(args.certs).ca_cert, "--certs")
        key = _need(args.node_key, "--node-key")
    sources = hooks.sources(args)
    if len(sources["files"]) != 1:
        raise UsageError(f"--role gateway reads one file; got {len(sources['files'])}")
    out = hooks.output_folder(args.out, args.overwrite)
    (cfg,) = gateway_node_configs(out, **sources)
    label = args.client_label or gateway_id(sources["files"][0])
    cfg.update({"client-label": label, "model-path": str(out / f"gateway-{label}.fedep")})
    if args.dp_max_epsilon is not None:  # checked by the gateway's ClientApp at each run
        cfg["dp-max-epsilon"] = args.dp_max_epsilon
    try:
        gw = GatewayRole(
            [cfg],
            out,
            poll_interval=args.poll_interval or None,
            isolation=args.isolation,
            superlink=args.superlink,
            root_certificates=ca,
            node_key=key,
            insecure=args.insecure,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(
        f"fedep federate: gateway {label} connecting to {args.superlink}; logs in {out}",
        file=sys.stderr,
        flush=True,
    )
    path, error, interrupted = _run_until_stopped(
        gw, lambda: gw.wait_model(args.timeout, once=args.once), "gateway"
    )
    if interrupted:
        return 130
    if error is not None:
        err(f"gateway {label}: {error}")
        return 1
    if args.once and path is None:
        err(f"gateway {label}: no model after --timeout {args.timeout:g} s")
        return 1
    print(f"gateway {label}: model written to {path}")
    return 0


def run_role(args, run_settings, output_folder, print_result, sources, check_secure) -> int:
    """Run ``args.role`` (``server``, ``gateway`` or ``keys``); the exit status.

    The callables are ``fedep federate``'s own checks and printing, shared with the
    local deployment.
    """
    hooks = SimpleNamespace(
        run_settings=run_settings,
        output_folder=output_folder,
        print_result=print_result,
        sources=sources,
        check_secure=check_secure,
    )
    if args.role == "keys":
        return _keys(args)
    if args.role == "server":
        return _server(args, hooks)
    return _gateway(args, hooks)

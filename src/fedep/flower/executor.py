"""A long-running ClientApp executor for a SuperNode in ``--isolation process`` mode.

Under Flower 1.42's default ``--isolation subprocess`` a SuperNode starts a SuperExec
that starts one ``flwr-clientapp`` process per message: about 1.7 CPU-s of process
start and 1.1-1.3 CPU-s of imports for milliseconds of work, several times per round.
With ``flower-supernode --isolation process`` the SuperNode starts nothing and serves
its tasks on its Runtime API to an executor run beside it; :func:`serve` is that
executor, kept alive for the SuperNode's life: it claims each ClientApp task
(``AcquireTask``), pulls the message and the context, runs fedep's ClientApp
(:data:`fedep.flower.client_app.app`, imported once) in this process, and pushes the
reply and the updated context -- the same Runtime API calls ``flwr-clientapp`` makes,
minus the process start, the imports and the FAB install.

It runs fedep's ClientApp only: a task whose run's FAB is not fedep's app (its
``fab_id`` is not :data:`FAB_ID`) is answered with an error, never with code from the
FAB. The gateway's state still lives in ``context.state`` (kept by the SuperNode, as in
subprocess isolation); :mod:`fedep.flower.gateway_data` keeps its parsed records in
memory between messages when the file is unchanged.

**Who may claim a task.** The Runtime API is served on ``127.0.0.1`` only (checked:
:func:`check_loopback`). With ``--superexec-auth-secret-file`` (Flower 1.42's SuperExec
authentication, given to the SuperNode as well) every ``AcquireTask`` is signed with an
HMAC of that shared secret, a timestamp and a nonce (Flower's
``SuperExecAuthHttpInterceptor``), and the SuperNode hands a task, with the token that
pulls its message and context, only to a signed claim: another local user's process
that reaches the port but cannot read the secret file (``0600``) gets no task.
:class:`~fedep.flower.deployment.LocalDeployment` and the gateway role always give one.

Run as ``python -m fedep.flower.executor --runtime-api-address 127.0.0.1:PORT
[--superexec-auth-secret-file FILE] [--root-certificates CA] [--parent-pid PID]
[--poll-interval S]``; it stops when its parent process ends (``--parent-pid``), or on
SIGTERM / SIGINT.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from logging import ERROR, INFO

from flwr.app import Error, Message
from flwr.common.constant import ErrorCode, SubStatus
from flwr.common.logger import log
from flwr.proto.runtime_pb2 import AcquireTaskRequest  # pylint: disable=E0611
from flwr.supercore.auth import load_superexec_auth_secret
from flwr.supercore.constant import TaskType
from flwr.supercore.heartbeat import HeartbeatSender, make_task_heartbeat_fn_http
from flwr.supercore.interceptors import (
    RuntimeTokenHttpInterceptor,
    RuntimeVersionHttpInterceptor,
    SuperExecAuthHttpInterceptor,
)
from flwr.supercore.retry import make_simple_http_retry_invoker
from flwr.supercore.runtime import RuntimeHttpClient
from flwr.supernode.runtime.run_clientapp import (
    pull_task_input,
    push_message,
    push_task_output,
)

from fedep.flower.client_app import app

__all__ = ["FAB_ID", "check_loopback", "serve", "main"]

#: The ``fab_id`` of fedep's Flower app (publisher / name of its ``pyproject.toml``).
FAB_ID = "fedep/fedep-flower"
#: The Runtime API call that hands out a task: signed under SuperExec authentication
#: (as Flower's own SuperExec signs it).
AUTH_METHODS = frozenset({"/flwr.proto.Runtime/AcquireTask"})


def check_loopback(address: str) -> None:
    """Refuse (one line) a Runtime API address that is not on this machine's loopback:
    the executor's link is plain HTTP unless given root certificates."""
    host = address.rsplit(":", 1)[0].strip("[]")
    if host not in ("127.0.0.1", "::1", "localhost"):
        raise ValueError(
            f"--runtime-api-address {address}: the executor serves a SuperNode on this "
            "machine only (127.0.0.1)"
        )


def _client(address: str, certificates: bytes | None, *interceptors) -> RuntimeHttpClient:
    return RuntimeHttpClient.from_server_address(
        server_address=address,
        insecure=certificates is None,
        root_certificates=certificates,
        interceptors=list(interceptors),
        retry_invoker=make_simple_http_retry_invoker(),
    )


def run_task(address: str, token: str, certificates: bytes | None) -> str:
    """Run one claimed ClientApp task in this process; returns its final sub-status."""
    client = _client(
        address,
        certificates,
        RuntimeVersionHttpInterceptor(component_name="flwr-clientapp"),
        RuntimeTokenHttpInterceptor(token),
    )
    heartbeat = HeartbeatSender(make_task_heartbeat_fn_http(client))
    wall, cpu = time.monotonic(), time.process_time()
    t_pull = t_app = wall
    context = message = reply = None
    status, details = SubStatus.FAILED, "ClientApp task failed"
    try:
        heartbeat.start()
        message, context, run, _fab = pull_task_input(client)
        t_pull = time.monotonic()
        if run.fab_id != FAB_ID:
            raise ValueError(f"this executor runs fedep's app only ({FAB_ID}), not {run.fab_id}")
        reply = app(message=message, context=context)
        t_app = time.monotonic()
        status, details = SubStatus.COMPLETED, ""
    except Exception as exc:  # noqa: BLE001 - every failure is a reply, as flwr-clientapp does
        log(ERROR, "ClientApp raised an exception", exc_info=exc)
        details = f"{type(exc)}:<'{exc}'>"
        if message is not None:
            reply = Message(
                Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=details),
                reply_to=message,
            )
    finally:
        try:
            if reply is not None and context is not None:
                push_message(client, reply, context)
        finally:
            push_task_output(client, context, status, details)
            if heartbeat.is_running:
                heartbeat.stop()
            client.close()
            kind = message.metadata.message_type if message is not None else "?"
            end = time.monotonic()
            log(
                INFO,
                "fedep executor: %s %s in %.3f s, %.3f CPU-s (pull %.3f s, app %.3f s, "
                "push %.3f s)",
                kind,
                status,
                end - wall,
                time.process_time() - cpu,
                t_pull - wall,
                max(t_app - t_pull, 0.0),
                end - max(t_app, t_pull),
            )
    return status


def serve(
    address: str,
    *,
    certificates: bytes | None = None,
    poll_interval: float = 0.2,
    stop: threading.Event | None = None,
    auth_secret: bytes | None = None,
) -> None:
    """Claim and run the SuperNode's ClientApp tasks until ``stop`` is set.

    Parameters
    ----------
    address : str
        The SuperNode's Runtime API, ``host:port``.
    certificates : bytes, optional
        PEM root certificates of the Runtime API's TLS (None: plain HTTP, loopback).
    poll_interval : float, default 0.2
        Longest wait between two ``AcquireTask`` calls when no task is pending: 10 ms
        after a task, growing by half at each empty call up to this.
    stop : threading.Event, optional
        Set to end the loop (after the task in progress).
    auth_secret : bytes, optional
        The SuperExec authentication secret the SuperNode was given
        (``--superexec-auth-secret-file``): every task claim is signed with it.
    """
    stop = stop or threading.Event()
    interceptors = [RuntimeVersionHttpInterceptor(component_name="SuperExec")]
    if auth_secret:
        interceptors.append(
            SuperExecAuthHttpInterceptor(master_secret=auth_secret, protected_methods=AUTH_METHODS)
        )
    client = _client(address, certificates, *interceptors)
    request = AcquireTaskRequest(supported_task_types=[TaskType.CLIENT_APP.value])
    wait = min(0.01, poll_interval)
    try:
        while not stop.is_set():
            res = client.AcquireTask(request)
            if res.HasField("task") and res.token:
                run_task(address, res.token, certificates)
                wait = min(0.01, poll_interval)  # the run's next message follows soon
                continue
            stop.wait(wait)
            wait = min(poll_interval, wait * 1.5)
    finally:
        client.close()


def _watch_parent(pid: int, stop: threading.Event) -> None:
    """Set ``stop`` and exit once process ``pid`` is gone (the SuperNode died)."""

    def watch():
        while not stop.is_set():
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                stop.set()
                os._exit(0)
            except PermissionError:
                pass
            time.sleep(1.0)

    threading.Thread(target=watch, daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m fedep.flower.executor",
        description="Run fedep's ClientApp for a SuperNode started with --isolation process.",
    )
    p.add_argument("--runtime-api-address", required=True, metavar="HOST:PORT")
    p.add_argument("--root-certificates", metavar="PEM", help="CA of the Runtime API's TLS")
    p.add_argument(
        "--superexec-auth-secret-file",
        metavar="FILE",
        help="the SuperNode's SuperExec authentication secret: every task claim is signed",
    )
    p.add_argument("--parent-pid", type=int, help="stop when this process ends")
    p.add_argument("--poll-interval", type=float, default=0.2, metavar="SECONDS")
    args = p.parse_args(argv)
    try:
        check_loopback(args.runtime_api_address)
        secret = load_superexec_auth_secret(args.superexec_auth_secret_file)
    except ValueError as exc:
        p.error(" ".join(str(exc).split()))
    certs = None
    if args.root_certificates:
        with open(args.root_certificates, "rb") as fh:
            certs = fh.read()
    stop = threading.Event()

    def _stop(signum, frame):
        stop.set()

    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, _stop)
    if args.parent_pid:
        _watch_parent(args.parent_pid, stop)
    log(INFO, "fedep executor: serving %s", args.runtime_api_address)
    serve(
        args.runtime_api_address,
        certificates=certs,
        poll_interval=args.poll_interval,
        stop=stop,
        auth_secret=secret,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

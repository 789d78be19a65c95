"""The local Flower deployment as a user runs it: ``fedep federate``.

Bad arguments are answered in one line (exit 1; 2 for command-line syntax) before any
process starts; a gateway whose data is broken is reported in ``result.json["failed"]``
and fails the run (exit 1, 0 with ``--allow-failures``); SIGTERM / SIGINT stop every
process of the deployment and leave no partial result (exit 130); the README's
``fedep federate`` line runs from a fresh checkout layout.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

from fedep._procs import stop_group  # noqa: E402
from fedep.cli import (  # noqa: E402
    _federate_roles,  # noqa: E402
    build_parser,
    federate,  # noqa: E402
    main,
)
from fedep.cli._common import UsageError  # noqa: E402
from fedep.flower.deployment import log_error  # noqa: E402
from fedep.flower.gateway_data import (  # noqa: E402
    GatewayDataError,
    holds_table,
    load_gateway_data,
    load_gateway_table,
)

ROOT = Path(__file__).resolve().parents[2]
COMMAND = [sys.executable, "-m", "fedep", "federate"]


# ---------------------------------------------------------------------- helpers
def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "FEDEP_DATA_DIR"}
    env["FLWR_TELEMETRY_ENABLED"] = "0"
    env.update(extra)
    return env


def _start(args, *, cwd, env=None) -> subprocess.Popen:
    """``fedep federate args`` in a session of its own (see :func:`_stop`)."""
    return subprocess.Popen(
        [*COMMAND, *map(str, args)],
        cwd=cwd,
        env=env or _env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _stop(proc: subprocess.Popen, out: Path | None) -> None:
    """Stop a ``fedep federate`` still running and whatever its deployment left.

    SIGTERM first (the command then stops its deployment itself), SIGKILL to its
    process group after 30 s; then every process of the run in ``out`` (the
    deployment's processes lead sessions of their own).
    """
    stop_group(proc, grace=30)
    for entry in _processes_of(out) if out is not None else []:
        try:
            os.kill(int(entry.split(":")[0]), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _federate(args, *, cwd, out=None, env=None, timeout=120.0) -> subprocess.CompletedProcess:
    """Run ``fedep federate args``; on a timeout (or any other error) stop it and the
    processes of its run in ``out`` before raising."""
    proc = _start(args, cwd=cwd, env=env)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            _stop(proc, out)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def _write_csv(path: Path, seed: int, rows: int = 240, n: int = 6) -> Path:
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(np.random.default_rng(0).normal(size=(n, 2)))[0]
    X = rng.normal(size=(rows, 2)) @ basis.T * 3.0 + 0.2 * rng.normal(size=(rows, n))
    header = ",".join(f"f{j}" for j in range(n))
    np.savetxt(path, X, delimiter=",", header=header, comments="", fmt="%.6f")
    return path


def _garbage(path: Path) -> Path:
    path.write_bytes(b"\x00\x01garbage\xff\xfe\n\x89PNG\r\n\x1a\n")
    return path


def _processes_of(out: Path) -> list[str]:
    """Processes that belong to the run in ``out`` (cmdline, cwd or FLWR_HOME)."""
    out = str(out)
    found = []
    for e in os.listdir("/proc"):
        if not e.isdigit() or int(e) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{e}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            env = Path(f"/proc/{e}/environ").read_bytes().decode(errors="replace")
            cwd = os.readlink(f"/proc/{e}/cwd")
        except OSError:
            continue
        if out in cmd or cwd == out or f"FLWR_HOME={out}/flwr-home" in env:
            found.append(f"{e}: {cmd[:200]}")
    return found


def _one_line_error(stderr: str) -> str:
    """The one ``fedep: error:`` line of ``stderr`` (fails on anything else)."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("fedep: error: ") and "Traceback" not in stderr, stderr
    return lines[0]


def _syntax_error(stderr: str) -> str:
    """argparse's error line (after its usage block), without a traceback."""
    assert "Traceback" not in stderr, stderr
    last = stderr.strip().splitlines()[-1]
    assert "error: " in last, stderr
    return last


def _plan(argv):
    """The checked plan of ``fedep federate argv``; nothing is started."""
    return federate.plan(build_parser().parse_args(["federate", *map(str, argv)]))


def _readme_args() -> list[str]:
    """The arguments of the README's ``fedep federate`` line (after the command)."""
    text = (ROOT / "README.md").read_text()
    m = re.search(r"fedep federate (--gateways [^`\n]+)", text)
    assert m, "README.md has no `fedep federate` line"
    return shlex.split(m.group(1))


def _with(args: list[str], option: str, value) -> list[str]:
    """``args`` with ``option``'s value replaced (added when absent)."""
    out = list(args)
    if option in out:
        out[out.index(option) + 1] = str(value)
    else:
        out += [option, str(value)]
    return out


# ---------------------------------------------------------------------- bad arguments
def _answer(argv, tmp_path, monkeypatch, capsys):
    """Exit status, stderr and seconds of ``fedep federate argv --out run`` in
    ``tmp_path`` (the parser built beforehand: the answer is timed, not the imports)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FEDEP_DATA_DIR", raising=False)
    build_parser()
    capsys.readouterr()
    t0 = time.monotonic()
    rc = main(["federate", *map(str, argv), "--out", "run"])
    return rc, capsys.readouterr().err, time.monotonic() - t0


@pytest.mark.parametrize(
    "args, says",
    [
        (["--gateways", "2", "--dataset", "nsl-kddd"], "unknown dataset 'nsl-kddd'"),
        (["--gateways", "2", "--train", "nope-0.csv", "nope-1.csv"], "no such file"),
        (["--gateways", "3", "--train", "a.csv", "b.csv"], "one file per gateway"),
        (["--dataset", "nsl-kdd"], "--dataset needs --gateways"),
        (["--gateways", "2", "--dataset", "nsl-kdd", "--data-dir", "empty"], "missing nsl-kdd/"),
    ],
)
def test_bad_arguments_one_line_exit_1_fast(tmp_path, monkeypatch, capsys, args, says):
    (tmp_path / "empty").mkdir()
    for name in ("a.csv", "b.csv"):
        _write_csv(tmp_path / name, 0, rows=5)
    rc, stderr, elapsed = _answer(args, tmp_path, monkeypatch, capsys)
    assert rc == 1, stderr
    assert says in _one_line_error(stderr)
    assert elapsed < 5.0, f"{elapsed:.1f} s"
    assert not (tmp_path / "run").exists()  # nothing was started


def test_bad_syntax_exit_2_fast(tmp_path, monkeypatch, capsys):
    argv = ["--gateways", "0", "--dataset", "nsl-kdd"]
    rc, stderr, elapsed = _answer(argv, tmp_path, monkeypatch, capsys)
    assert rc == 2, stderr
    assert "argument --gateways: expected a positive integer, got '0'" in _syntax_error(stderr)
    assert elapsed < 5.0, f"{elapsed:.1f} s"
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "extra, code, says",
    [
        (["--n-components", "-1"], 1, "'n_components' parameter of FedEP"),
        (["--method", "pca"], 2, "invalid choice: 'pca'"),
        (["--rounds", "3"], 2, "unrecognized arguments: --rounds"),  # one spelling: --n-rounds
        (["--trim-share", "0.7"], 1, "'trim_share' parameter of FedEP"),
    ],
)
def test_bad_estimator_arguments_refused(tmp_path, monkeypatch, capsys, extra, code, says):
    csvs = [_write_csv(tmp_path / f"g{i}.csv", i, rows=5) for i in range(2)]
    rc, stderr, _ = _answer(
        ["--gateways", 2, "--train", *csvs, *extra], tmp_path, monkeypatch, capsys
    )
    assert rc == code, stderr
    line = _one_line_error(stderr) if code == 1 else _syntax_error(stderr)
    assert says in line
    assert not (tmp_path / "run").exists()


def test_the_command_answers_from_a_fresh_process(tmp_path):
    # As a user types it: `python -m fedep federate` (the console script is the same).
    proc = _federate(["--gateways", 2, "--dataset", "nsl-kddd", "--out", "run"], cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "unknown dataset 'nsl-kddd'" in _one_line_error(proc.stderr)
    assert not (tmp_path / "run").exists()


def test_parse_passes_estimator_options_as_run_config_keys(tmp_path):
    csvs = [_write_csv(tmp_path / f"g{i}.csv", i, rows=5) for i in range(2)]
    out = str(tmp_path / "o")
    opts = "--n-rounds 7 --n-components 3 --tol 0 --random-state 3 --method fedpg".split()
    fed = _plan(["--gateways", "2", "--train", *csvs, "--out", out, *opts])
    rc = fed.run_config
    assert rc["method"] == "fedpg"
    keys = ("n-rounds", "n-components", "tol", "random-state")
    assert [rc[k] for k in keys] == [7, 3, 0.0, 3]
    assert "include" not in rc and "scale-rule" not in rc  # only what was typed
    nodes = fed.node_configs
    assert [n["data-path"] for n in nodes] == [str(c) for c in csvs]
    assert all(Path(n["model-path"]).is_absolute() for n in nodes)


def test_parse_passes_trimming_options_as_run_config_keys(tmp_path):
    # Record trimming runs over Flower: its options reach the run config like any other.
    csvs = [_write_csv(tmp_path / f"g{i}.csv", i, rows=5) for i in range(2)]
    opts = "--trim-steps 2 --trim-start median --trim-share 0.2 --contamination auto".split()
    rc = _plan(["--gateways", "2", "--train", *csvs, "--out", tmp_path, *opts]).run_config
    keys = ("trim-steps", "trim-start", "trim-share", "contamination")
    assert [rc[k] for k in keys] == [2, "median", 0.2, "auto"]


def test_data_dir_resolved_absolute_from_a_fresh_checkout(tmp_path, monkeypatch):
    # The checkout layout: <root>/main is the working copy, <root>/shared/data the data.
    data = tmp_path / "shared" / "data" / "nsl-kdd"
    data.mkdir(parents=True)
    for name in ("KDDTrain+.txt", "KDDTrain+_20Percent.txt", "KDDTest+.txt"):
        (data / name).write_text("")
    (tmp_path / "main").mkdir()
    monkeypatch.chdir(tmp_path / "main")
    monkeypatch.delenv("FEDEP_DATA_DIR", raising=False)
    fed = _plan(["--gateways", "2", "--dataset", "nsl-kdd", "--out", "runs/flower"])
    nodes = fed.node_configs
    want = str((tmp_path / "shared" / "data").resolve())
    assert [n["data-dir"] for n in nodes] == [want, want]  # absolute: gateways run elsewhere
    # the feature set travels in the node config; generic (the raw table) by default
    assert [n["feature-set"] for n in nodes] == ["generic", "generic"]
    rich = _plan(["--gateways", "2", "--dataset", "nsl-kdd", "--feature-set", "rich", "--out", "r"])
    assert [n["feature-set"] for n in rich.node_configs] == ["rich", "rich"]
    assert fed.out == (tmp_path / "main" / "runs" / "flower").resolve()
    monkeypatch.setenv("FEDEP_DATA_DIR", "../shared/data")  # a relative env value too
    fed = _plan(["--gateways", "1", "--dataset", "nsl-kdd", "--out", "runs/flower"])
    assert fed.node_configs[0]["data-dir"] == want


def test_out_folder_with_an_earlier_run_is_refused_unless_overwrite(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "gateway-0.fedep").write_bytes(b"old")
    (out / "result.json").write_text("{}")
    (out / "notes.txt").write_text("keep")
    with pytest.raises(UsageError, match="holds an earlier run"):
        federate.output_folder(str(out), overwrite=False)
    assert federate.output_folder(str(out), overwrite=True) == out.resolve()
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    assert federate.output_folder(str(out), overwrite=False) == out.resolve()  # now clean


def test_log_error_finds_the_exception_of_a_node_log():
    text = (
        "\x1b[92mINFO \x1b[0m:      Received: train message\n"
        "Traceback (most recent call last):\n"
        '  File "/x/client_app.py", line 12, in train\n'
        "    boom()\n"
        "    ^^^^^^\n"
        "ValueError: the gateway broke\n"
        "\x1b[92mINFO \x1b[0m:      Sent reply\n"
    )
    assert log_error(text) == [
        'File "/x/client_app.py", line 12, in train',
        "ValueError: the gateway broke",
    ]
    assert log_error("\x1b[91mERROR \x1b[0m:   fedep: gateway data: x.csv: no such file\n") == [
        "fedep: gateway data: x.csv: no such file"
    ]
    assert log_error("INFO : fine\n") == []


# ---------------------------------------------------------------------- gateway data
def test_gateway_data_errors_are_one_line_naming_the_file(tmp_path):
    bad = _garbage(tmp_path / "bad.csv")
    cases = {
        "data-path": ({"data-path": str(bad)}, str(bad)),
        "missing": ({"data-path": str(tmp_path / "nope.csv")}, "nope.csv: no such file"),
        "dataset": (
            {
                "partition-id": 0,
                "num-partitions": 2,
                "dataset": "nsl-kdd",
                "data-dir": str(tmp_path),
                "feature-set": "paper",
            },  # fmt: skip
            "KDDTrain+",
        ),
        # the default feature set is the raw table, for the feature pipeline only
        "generic": (
            {"partition-id": 0, "num-partitions": 2, "dataset": "nsl-kdd"},
            "feature-set 'generic' is the raw table",
        ),
        "feature-set": (
            {"partition-id": 0, "num-partitions": 2, "feature-set": "fancy"},
            "feature-set must be one of paper, rich, generic; got 'fancy'",
        ),
        "config": ({"foo": 1}, "node config needs data-path"),
        "partition": ({"partition-id": 3, "num-partitions": 2}, "partition-id must be in"),
    }
    for name, (cfg, says) in cases.items():
        with pytest.raises(GatewayDataError) as info:
            load_gateway_data(cfg)
        msg = str(info.value)
        assert "\n" not in msg and msg.startswith("gateway data: "), (name, msg)
        assert says in msg, (name, msg)


def test_generic_partition_is_a_table_with_one_line_errors(tmp_path):
    cfg = {"partition-id": 0, "num-partitions": 2, "dataset": "nsl-kdd", "data-dir": str(tmp_path)}
    assert holds_table(cfg) and holds_table({**cfg, "feature-set": "generic"})
    assert not holds_table({**cfg, "feature-set": "rich"})
    assert not holds_table({"partition-id": 0, "synthetic-seed": 1})
    assert holds_table({"data-path": "gw.csv"})
    for bad, says in [
        (cfg, "KDDTrain+"),  # the dataset's files are not in data-dir
        ({**cfg, "partition-id": 2}, "partition-id must be in [0, 2); got 2"),
        ({"partition-id": 0, "dataset": "nsl-kdd"}, "partition-id needs num-partitions"),
    ]:
        with pytest.raises(GatewayDataError) as info:
            load_gateway_table(bad)
        msg = str(info.value)
        assert "\n" not in msg and msg.startswith("gateway data: ") and says in msg, msg


def test_client_app_imports_no_scikit_learn():
    code = (
        "import sys, fedep.flower.client_app as c; "
        "bad = [m for m in ('sklearn', 'scipy.stats', 'fedep.params') if m in sys.modules]; "
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_broken_gateway_is_in_failed_in_process(tmp_path):
    from fedep.flower import run_local

    nodes = [
        {"data-path": str(_write_csv(tmp_path / "g0.csv", 0)), "client-label": "0"},
        {"data-path": str(_garbage(tmp_path / "g1.csv")), "client-label": "1"},
    ]
    res, _ = run_local(nodes, {"n-components": 2, "n-rounds": 2, "tol": 0.0})
    assert res.clients == ["0"] and res.finalized == ["0"]
    (label, why), *_ = res.failed.items()
    assert len(res.failed) == 1 and label.startswith("node ")  # no label: it never answered
    assert why.startswith("moments: error 100: gateway data: ") and "g1.csv" in why


# ---------------------------------------------------------------------- deployments
@pytest.mark.slow
def test_broken_gateway_fails_the_run_unless_allowed(tmp_path):
    good = _write_csv(tmp_path / "good.csv", 0)
    bad = _garbage(tmp_path / "bad.csv")
    args = ["--gateways", 2, "--train", good, bad, "--n-components", 2, "--n-rounds", 1,
            "--tol", 0, "--round-timeout", 60, "--out", "run"]  # fmt: skip
    out = tmp_path / "run"
    proc = _federate(args, cwd=tmp_path, out=out, timeout=150)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    res = json.loads((tmp_path / "run" / "result.json").read_text())
    assert len(res["failed"]) == 1, res["failed"]
    why = next(iter(res["failed"].values()))
    assert "gateway data" in why and "bad.csv" in why
    assert "bad.csv" in proc.stderr and "failed" in proc.stderr
    assert res["finalized"] == ["good"] and (tmp_path / "run" / "gateway-0.fedep").exists()
    assert not (tmp_path / "run" / "gateway-1.fedep").exists()

    again = _federate(args, cwd=tmp_path, out=out, timeout=30)  # the folder holds that run now
    assert again.returncode == 1 and "--overwrite" in _one_line_error(again.stderr)

    (tmp_path / "run" / "gateway-1.fedep").write_bytes(b"stale model of an earlier run")
    proc = _federate([*args, "--overwrite", "--allow-failures"], cwd=tmp_path, out=out, timeout=150)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "bad.csv" in proc.stderr
    assert not (tmp_path / "run" / "gateway-1.fedep").exists()  # the stale one is gone
    assert json.loads((tmp_path / "run" / "result.json").read_text())["failed"]


def _wait_for(path: Path, pattern: str, proc, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and pattern in path.read_text(errors="replace"):
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    raise AssertionError(f"{pattern!r} never appeared in {path}")


@pytest.mark.slow
@pytest.mark.parametrize(
    "sig, code, wait_for",
    [
        (signal.SIGTERM, 130, ("flwr-run.log", "fedep: round 1 objective")),  # mid-run
        (signal.SIGINT, 130, ("supernode-1.log", "")),  # while starting
    ],
)
def test_signal_stops_every_process_and_leaves_no_result(tmp_path, sig, code, wait_for):
    csvs = [_write_csv(tmp_path / f"g{i}.csv", i) for i in range(2)]
    out = tmp_path / "run"
    args = ["--gateways", "2", "--train", *csvs, "--n-components", "2", "--n-rounds", "500",
            "--tol", "0", "--out", out]  # fmt: skip
    proc = _start(args, cwd=tmp_path)
    try:
        _wait_for(out / wait_for[0], wait_for[1], proc, timeout=120)
        assert _processes_of(out), "the deployment is not running"
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            _stop(proc, out)
    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr and signal.Signals(sig).name in stderr
    time.sleep(0.2)
    assert _processes_of(out) == []
    assert not (out / "result.json").exists()
    assert list(out.glob("gateway-*.fedep")) == [] and list(out.glob("*.tmp")) == []


# ---------------------------------------------------------------------- the README line
@pytest.mark.realdata
@pytest.mark.slow
@pytest.mark.parametrize("how", ["--data-dir", "FEDEP_DATA_DIR"])
def test_readme_federate_line_runs(tmp_path, real_data_dir, how):
    args = _readme_args()
    # As written, with a fresh output folder and one round (the line's own count is
    # for users; the run is the same).
    args = _with(_with(args, "--out", "runs/flower"), "--n-rounds", 1)
    cwd = tmp_path / "checkout"  # no ../shared/data here: the data dir must be given
    cwd.mkdir()
    if how == "--data-dir":  # relative: the command makes it absolute for the gateways
        env = _env()
        args += ["--data-dir", os.path.relpath(real_data_dir, cwd)]
    else:
        env = _env(FEDEP_DATA_DIR=str(real_data_dir))
    out = cwd / "runs" / "flower"
    proc = _federate(args, cwd=cwd, out=out, env=env, timeout=170)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = json.loads((out / "result.json").read_text())
    n = int(args[args.index("--gateways") + 1])
    assert res["failed"] == {} and res["n_rounds"] == 1
    assert res["finalized"] == [str(i) for i in range(n)]
    # No --n-components in the line: the rank is chosen from the gateways' Gram matrices.
    r = len(res["components"])
    assert res["rank_reason"].startswith(f"r={r}: ") and f"rank {r} (r={r}: " in proc.stdout
    assert sorted(p.name for p in out.glob("gateway-*.fedep")) == [
        f"gateway-{i}.fedep" for i in range(n)
    ]
    assert _processes_of(out) == []


def test_parse_passes_pipeline_options_as_run_config_keys(tmp_path):
    csvs = [_write_csv(tmp_path / f"g{i}.csv", i, rows=5) for i in range(2)]
    opts = "--exclude ts uid --scale-rule shrink --scale-floor 0.3".split()
    rc = _plan(["--gateways", "2", "--train", *csvs, "--out", tmp_path / "o", *opts]).run_config
    assert rc["exclude"] == "ts,uid" and rc["scale-rule"] == "shrink" and rc["scale-floor"] == 0.3
    with pytest.raises(ValueError, match="scale_floor"):
        _plan(["--gateways", "2", "--train", *csvs, "--scale-floor", "-1", "--out", tmp_path / "o"])


def test_the_launcher_takes_signing_keys(tmp_path, monkeypatch):
    # --sign-key reaches the ServerApp; every gateway gets the key it verifies with (an
    # HMAC secret itself; an Ed25519 PEM's public key, written to --out).
    from fedep.modelfile import generate_signing_key
    from fedep.modelfile.signing import sign_digest, verify_digest

    monkeypatch.delenv("FEDEP_SIGNING_KEY", raising=False)
    csvs = [_write_csv(tmp_path / f"g{i}.csv", i, rows=5) for i in range(2)]
    base = ["--gateways", "2", "--train", *csvs]
    secret = "hmac:" + "f" * 32
    fed = _plan([*base, "--out", tmp_path / "a", "--sign-key", secret])
    assert fed.run_config["sign-key"] == secret
    assert [n["verify-key"] for n in fed.node_configs] == [secret, secret]
    generate_signing_key(tmp_path / "k.pem", tmp_path / "k.pub")
    fed = _plan([*base, "--out", tmp_path / "b", "--sign-key", tmp_path / "k.pem"])
    pub = Path(fed.node_configs[0]["verify-key"])
    assert pub == tmp_path / "b" / "server-key.pub" and "PRIVATE" not in pub.read_text()
    verify_digest(sign_digest("ab" * 32, str(tmp_path / "k.pem")), "ab" * 32, str(pub))
    # From the environment, as fedep fit signs.
    monkeypatch.setenv("FEDEP_SIGNING_KEY", secret)
    assert _plan([*base, "--out", tmp_path / "c"]).run_config["sign-key"] == secret
    monkeypatch.delenv("FEDEP_SIGNING_KEY")
    assert "sign-key" not in _plan([*base, "--out", tmp_path / "d"]).run_config
    with pytest.raises(UsageError, match="key file .* does not exist"):
        _plan([*base, "--out", tmp_path / "e", "--sign-key", tmp_path / "nope.pem"])


@pytest.mark.parametrize(
    "n, extra, says",
    [
        (2, [], "--secure-aggregation needs at least 3 gateways"),
        (3, ["--aggregation", "median"], "aggregation='median' needs each one"),
        (3, ["--trim-steps", "1"], "cannot run record trimming"),
        (3, [], "--secure-aggregation with --train files needs --features numeric"),
    ],
)
def test_secure_aggregation_refusals(tmp_path, monkeypatch, capsys, n, extra, says):
    csvs = [_write_csv(tmp_path / f"g{i}.csv", i, rows=5) for i in range(n)]
    argv = ["--gateways", n, "--train", *csvs, "--secure-aggregation", *extra]
    rc, stderr, _ = _answer(argv, tmp_path, monkeypatch, capsys)
    assert rc == 1, stderr
    assert says in _one_line_error(stderr)
    assert not (tmp_path / "run").exists()  # nothing was started


def test_dp_options_reach_the_run_config_and_their_rules_are_checked_first(
    tmp_path, monkeypatch, capsys
):
    csvs = [_write_csv(tmp_path / f"g{i}.csv", i, rows=5) for i in range(2)]
    opts = "--dp-epsilon 2 --dp-clip 20 --tol 0 --n-components 2 --features numeric".split()
    rc = _plan(["--gateways", "2", "--train", *csvs, "--out", tmp_path / "o", *opts]).run_config
    assert (rc["dp-epsilon"], rc["dp-clip"]) == (2.0, 20.0)
    argv = ["--gateways", 2, "--train", *csvs, "--dp-epsilon", 2, "--n-components", 2]
    code, stderr, _ = _answer(argv, tmp_path, monkeypatch, capsys)
    assert code == 1 and "differential privacy needs dp_clip" in _one_line_error(stderr)
    assert not (tmp_path / "run").exists()  # nothing was started


def test_the_server_role_checks_secure_aggregation_first(tmp_path, monkeypatch, capsys):
    # --role server --secure-aggregation is checked as the local run is, before a SuperLink
    argv = ["--role", "server", "--superlink", "127.0.0.1:9093", "--insecure", "--gateways",
            2, "--secure-aggregation"]  # fmt: skip
    code, stderr, _ = _answer(argv, tmp_path, monkeypatch, capsys)
    assert code == 1 and "needs at least 3 gateways" in _one_line_error(stderr)
    argv[6] = 3
    code, stderr, _ = _answer(argv, tmp_path, monkeypatch, capsys)
    assert code == 1 and "needs --features numeric" in _one_line_error(stderr)
    assert not (tmp_path / "run").exists()


def test_a_gateways_dp_bound_reaches_its_node_config(tmp_path, monkeypatch, capsys):
    seen = {}

    class Stub:  # the gateway's SuperNode, not started: its node config is what counts
        def __init__(self, node_configs, out, **kw):
            seen.update(node_configs[0])
            raise ValueError("stub")

    monkeypatch.setattr(_federate_roles, "GatewayRole", Stub)
    csv = _write_csv(tmp_path / "g0.csv", 0, rows=5)
    base = ["--role", "gateway", "--superlink", "127.0.0.1:9093", "--insecure", "--train", csv]
    code, stderr, _ = _answer([*base, "--dp-max-epsilon", 2], tmp_path, monkeypatch, capsys)
    assert code == 1 and "stub" in stderr and seen["dp-max-epsilon"] == 2.0
    for argv, says in (
        ([*base, "--dp-max-epsilon", 0], "--dp-max-epsilon must be > 0"),
        (["--gateways", 2, "--train", csv, csv, "--dp-max-epsilon", 2], "needs --role"),
        ([*base[:5], "--role", "server", "--gateways", 3, "--dp-max-epsilon", 2],
         "is a gateway's"),
    ):  # fmt: skip
        code, stderr, _ = _answer(argv, tmp_path, monkeypatch, capsys)
        assert code == 1 and says in _one_line_error(stderr), stderr

"""``fedep watch`` on a growing Zeek conn.log: sustained throughput, alert latency,
memory over a long run, start-up time.

Run by hand (not a test)::

    python benchmarks/bench_watch.py --out benchmarks/results/watch.json

A model is fitted (``fedep fit``, default FedEP with the feature pipeline) on
``--train-rows`` Zeek-like flows (``tests/_zeek.py``'s generator, 2 % planted attacks in
the logs watched). Then, each with a fresh ``fedep watch`` process following the log
directory (``--pattern 'conn*'``, alerts to a file, default options otherwise):

- **throughput**: a writer appends ``--records`` records to ``conn.log`` as fast as it
  can (rotating it by rename every ``--rotate-every`` records, as Zeek does), ahead of
  the watcher; ``records_per_s`` is the committed lines (the position file) over the time
  from the first commit to the last, ``records_per_cpu_s`` the same over the watcher's
  CPU seconds (user + system, all threads), which the machine's load does not depress;
  the watcher's resident memory is sampled every 0.5 s (``rss_mb`` at each tenth of the
  run, ``peak_rss_mb`` = ``VmHWM``): flat when bounded by the batch, not the run length;
- **latency**: a writer appends records at ``--rate`` records/s (every 10 ms) for
  ``--latency-seconds``; for each alert, the time from its line being written to the
  alert being in the alert file (a reader polls the file every 5 ms): p50, p99, max;
- **start-up**: ``fedep watch --once`` on an empty directory, wall time (imports, model
  load; the compiled kernels' cache is ``speed``'s), median of 3.

``os.getloadavg()`` is recorded before and after each part: on a shared machine, wall
times are depressed by the load; the per-CPU-second figure is not.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from _common import ROOT, child_env, write_json

sys.path.insert(0, str(ROOT / "tests"))

from _zeek import FIELDS, TYPES, flows, write_zeek  # noqa: E402
from fedep._procs import stop_group  # noqa: E402

ENV = child_env()


def header(k: int = 0) -> bytes:
    """A Zeek conn.log header; ``k`` numbers the file (its ``#open`` time, as Zeek's
    differ from one rotated log to the next)."""
    return (
        "#separator \\x09\n#set_separator\t,\n#empty_field\t(empty)\n#unset_field\t-\n"
        f"#path\tconn\n#open\t2024-01-01-{k // 60 % 24:02d}-{k % 60:02d}-00\n#fields\t"
        + "\t".join(FIELDS) + "\n#types\t" + "\t".join(TYPES) + "\n"
    ).encode()  # fmt: skip


def lines(n: int, seed: int, uid_prefix: str = "C") -> list[bytes]:
    """``n`` Zeek TSV record lines (2 % attacks) with uids ``<prefix><i>``."""
    df = flows(n, seed=seed, attack_rate=0.02)
    df["uid"] = [f"{uid_prefix}{i:015d}" for i in range(n)]
    cells = df[FIELDS].astype(str)
    return [(s + "\n").encode() for s in cells.agg("\t".join, axis=1)]


def _start(args: list[str], **kw) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "fedep", *map(str, args)]
    return subprocess.Popen(cmd, env=ENV, start_new_session=True, **kw)


def _stop(proc: subprocess.Popen) -> None:
    stop_group(proc, grace=60)


def _proc_status(pid: int) -> dict[str, int]:
    out = {}
    try:
        for line in open(f"/proc/{pid}/status"):
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0])  # kB
    except OSError:
        pass
    return out


def _cpu_s(pid: int) -> float:
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _committed(pos: Path) -> int:
    """Data lines committed over every followed file (header lines not counted)."""
    try:
        state = json.loads(pos.read_text())
    except (OSError, ValueError):
        return 0
    return sum(max(0, f["line"] - f.get("header_line", 0)) for f in state["files"])


def fit_model(d: Path, train_rows: int) -> Path:
    write_zeek(flows(train_rows, seed=1), d / "train.conn.log")
    model = d / "model.fedep"
    cmd = [sys.executable, "-m", "fedep", "fit", "--train", str(d / "train.conn.log"),
           "--quiet", "--out", str(model)]  # fmt: skip
    subprocess.run(cmd, env=ENV, check=True)
    return model


def throughput(d: Path, model: Path, n: int, rotate_every: int) -> dict:
    logs = d / "tp"
    logs.mkdir()
    pool = lines(200_000, seed=2)
    log = logs / "conn.log"
    log.write_bytes(header(0))
    alerts, pos = d / "tp-alerts.json", d / "tp-alerts.json.position"
    proc = _start(["watch", logs, "--pattern", "conn*", "--model", model, "--alerts", alerts,
                   "--status-interval", "0"])  # fmt: skip
    written = 0
    stop = threading.Event()

    def write() -> None:
        nonlocal written
        fh = open(log, "ab")  # noqa: SIM115
        k, block = 0, 20_000
        while written < n and not stop.is_set():
            if rotate_every and written and written % rotate_every == 0:
                fh.close()
                k += 1
                os.rename(log, logs / f"conn.{k:04d}.log")
                log.write_bytes(header(k))
                fh = open(log, "ab")  # noqa: SIM115
            # keep at most ~2 M records ahead of the watcher (disk and page cache)
            while written - _committed(pos) > 2_000_000 and not stop.is_set():
                time.sleep(0.05)
            i = written % len(pool)
            take = min(block, n - written, len(pool) - i, rotate_every - written % rotate_every)
            fh.write(b"".join(pool[i : i + take]))
            fh.flush()
            written += take
        fh.close()

    writer = threading.Thread(target=write)
    load0 = os.getloadavg()
    writer.start()
    samples, t_first, c_first, cpu_first = [], None, 0, 0.0
    try:
        while True:
            c = _committed(pos)
            now = time.perf_counter()
            if t_first is None and c > 0:
                t_first, c_first, cpu_first = now, c, _cpu_s(proc.pid)
            samples.append((now, c, _proc_status(proc.pid).get("VmRSS", 0) / 1024))
            if c >= n or proc.poll() is not None:
                break
            time.sleep(0.5)
        t_last, c_last = samples[-1][0], samples[-1][1]
        cpu = _cpu_s(proc.pid) - cpu_first
        hwm = _proc_status(proc.pid).get("VmHWM", 0) / 1024
    finally:
        stop.set()
        writer.join()
        _stop(proc)
    load1 = os.getloadavg()
    rss_at = {}
    for frac in np.linspace(0.1, 1.0, 10):
        hit = next((s for s in samples if s[1] >= frac * n), samples[-1])
        rss_at[f"{frac:.1f}"] = round(hit[2], 1)
    done = c_last - c_first
    return {
        "records": n,
        "committed": c_last,
        "rotate_every": rotate_every,
        "records_per_s": round(done / (t_last - t_first), 1) if t_last > t_first else None,
        "records_per_cpu_s": round(done / cpu, 1) if cpu > 0 else None,
        "alerts": sum(1 for _ in open(alerts)) if alerts.exists() else 0,
        "peak_rss_mb": round(hwm, 1),
        "rss_mb_at_fraction_of_run": rss_at,
        "exit_status_after_sigterm": proc.returncode,
        "load_before": load0,
        "load_after": load1,
    }


def latency(d: Path, model: Path, rate: int, seconds: float) -> dict:
    logs = d / "lat"
    logs.mkdir()
    n = int(rate * seconds)
    pool = lines(n, seed=3, uid_prefix="L")
    log = logs / "conn.log"
    log.write_bytes(header(0))
    alerts = d / "lat-alerts.json"
    proc = _start(["watch", logs, "--pattern", "conn*", "--model", model, "--alerts", alerts,
                   "--status-interval", "0.5"], stderr=subprocess.PIPE)  # fmt: skip
    proc.stderr.readline()  # its first status line: the watcher is up
    threading.Thread(target=proc.stderr.read, daemon=True).start()  # drain the rest
    written_at: dict[str, float] = {}
    seen: dict[str, float] = {}
    stop = threading.Event()

    def read() -> None:
        pos = 0
        while not stop.is_set():
            if alerts.exists():
                with open(alerts, "rb") as fh:
                    fh.seek(pos)
                    data = fh.read()
                cut = data.rfind(b"\n") + 1
                now = time.perf_counter()
                for line in data[:cut].splitlines():
                    rec = json.loads(line)
                    if rec.get("event") == "alert":
                        seen[rec["uid"]] = now
                pos += cut
            time.sleep(0.005)

    reader = threading.Thread(target=read)
    reader.start()
    load0 = os.getloadavg()
    per_tick = max(1, rate // 100)
    t0 = time.perf_counter()
    try:
        with open(log, "ab") as fh:
            for k, i in enumerate(range(0, n, per_tick)):
                target = t0 + k * 0.01
                delay = target - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                chunk = pool[i : i + per_tick]
                fh.write(b"".join(chunk))
                fh.flush()
                now = time.perf_counter()
                for line in chunk:
                    written_at[line.split(b"\t", 2)[1].decode()] = now
        elapsed = time.perf_counter() - t0
        end = time.perf_counter() + 30
        want = None
        while time.perf_counter() < end:
            time.sleep(0.5)
            if want == len(seen):
                break  # nothing new for 0.5 s
            want = len(seen)
    finally:
        stop.set()
        reader.join()
        _stop(proc)
    load1 = os.getloadavg()
    lat = np.array([seen[u] - written_at[u] for u in seen if u in written_at])
    return {
        "rate_target": rate,
        "rate_written": round(n / elapsed, 1),
        "seconds": round(elapsed, 1),
        "alerts": int(lat.size),
        "latency_s": {
            "p50": round(float(np.percentile(lat, 50)), 3) if lat.size else None,
            "p99": round(float(np.percentile(lat, 99)), 3) if lat.size else None,
            "max": round(float(lat.max()), 3) if lat.size else None,
        },
        "load_before": load0,
        "load_after": load1,
    }


def startup(d: Path, model: Path, repeats: int = 3) -> dict:
    empty = d / "empty"
    empty.mkdir()
    times = []
    load0 = os.getloadavg()
    for i in range(repeats):
        t = time.perf_counter()
        proc = _start(["watch", empty, "--model", model, "--alerts", d / f"s{i}.json", "--once"])
        proc.wait(timeout=600)
        times.append(time.perf_counter() - t)
    return {"wall_s": [round(x, 2) for x in times], "median_s": round(statistics.median(times), 2),
            "load_before": load0, "load_after": os.getloadavg()}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--rotate-every", type=int, default=1_000_000)
    ap.add_argument("--rate", type=int, default=10_000)
    ap.add_argument("--latency-seconds", type=float, default=30.0)
    ap.add_argument("--train-rows", type=int, default=20_000)
    ap.add_argument("--parts", default="startup,latency,throughput")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    parts = args.parts.split(",")
    with tempfile.TemporaryDirectory(prefix="bench-watch-") as tmp:
        d = Path(tmp)
        model = fit_model(d, args.train_rows)
        result = {
            "machine": {
                "cpus": os.cpu_count(),
                "platform": platform.platform(),
                "python": platform.python_version(),
            },  # fmt: skip
        }
        runs = {
            "startup": lambda: startup(d, model),
            "latency": lambda: latency(d, model, args.rate, args.latency_seconds),
            "throughput": lambda: throughput(d, model, args.records, args.rotate_every),
        }
        for name in parts:
            result[name] = runs[name]()
            if args.out:  # after each part: a long run's earlier parts are kept
                write_json(args.out, result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

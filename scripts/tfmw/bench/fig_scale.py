"""Figure 8: the control path at 16 to 1,024 workers, measured (docs/contracts.md, "Request budget").

N real launchers (the entrypoint's own code, in as few processes as the machine allows: 128
launcher threads each, `scale_worker.py`) form one group against the API server double
(tfmw.devcluster.fakeapi: real HTTPS, the StatefulSet's scale, the status ConfigMap, the N
worker pods, Events), with a counting resolver, and a stub for the training command. Per N:
- start: every launcher up to its first attempt; DNS lookups of the workers' names;
- steady state (training): API requests per second for the whole release;
- a group restart: every worker's training exits as a broken group's does (75), restarts in
  place and stays stalled for longer than the lost-peer watch's threshold: DNS lookups of the
  restart and API requests per second while it lasts;
- the launchers' processes: resident memory and CPU per launcher in steady state.
The same for the committed base (BASE_REV, run from a `git worktree` of it), so the ratios come
from one run; the base at 1,024 is computed from its code's arithmetic (each launcher resolves
every name and polls its size; its lost-peer watch reads every pod one by one), since 1,024
launchers that each resolve 1,024 names in 32 threads do not fit this machine.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from entrypoint.peers import needed_peers
from tfmw.devcluster.fakeapi import FakeAPI, make_certificate

from . import plots
from .procs import PY, REPO, BenchError, base_env

FIGURE = "figure 8"
# The commit before the control path was made O(N): what "before" is measured from.
BASE_REV = "2f32168"
SIZES = (16, 64, 256, 1024)
BASE_SIZES = (16, 64, 256)
PER_PROCESS = 128  # launcher threads per process
LABELS = {"app.kubernetes.io/instance": "bench", "app.kubernetes.io/component": "worker"}
SELECTOR = ",".join(f"{k}={v}" for k, v in sorted(LABELS.items()))
STALLED_SECONDS = 10.0  # entrypoint.peerwatch's: the restart window lasts longer than it
HEADERS = [
    "code",
    "workers",
    "DNS lookups at start",
    "DNS lookups per restart",
    "API req/s steady",
    "API req/s in a restart",
    "MiB per launcher",
    "CPU ms/s per launcher",
]
NAN = float("nan")


@dataclass
class Point:
    code: str  # "now" or "base"
    workers: int
    dns_start: float = NAN
    dns_restart: float = NAN
    steady_rps: float = NAN
    restart_rps: float = NAN
    mib_per_launcher: float = NAN
    cpu_ms_per_s: float = NAN
    computed: bool = False  # from the code's arithmetic, not run
    requests: dict = field(default_factory=dict)  # (method, what) -> count in steady state


def needed(n: int, rank: int) -> list[str]:
    """The names worker `rank` of `n` resolves before training (entrypoint.peers.needed_peers)."""
    return needed_peers([f"train-{i}.train-headless.ml.svc.cluster.local" for i in range(n)], rank)


def what_of(method: str, path: str) -> str:
    """A request's kind, for the breakdown (pure)."""
    path = path.split("?", 1)[0]
    if path.endswith("/scale"):
        return f"{method} scale"
    if "/configmaps/" in path:
        return f"{method} configmap"
    if path.endswith("/pods"):
        return f"{method} pods (list)"
    if "/pods/" in path:
        return f"{method} pod"
    if path.endswith("/events"):
        return f"{method} event"
    return f"{method} other"


def base_arithmetic(n: int, steady_window: float, restart_window: float) -> Point:
    """The committed base's figures at `n`, from its code (pure): every launcher resolves every
    name at start and at each restart, polls its StatefulSet's scale every 5 s, and while the
    group is stalled the chief GETs each peer and every other launcher the chief every 5 s."""
    stalled = max(restart_window - STALLED_SECONDS, 0.0)
    restart_requests = 3 * n + (n / 5.0) * restart_window + ((n - 1) + (n - 1)) / 5.0 * stalled
    return Point(
        "base",
        n,
        dns_start=float(n * n),
        dns_restart=float(n * n),
        steady_rps=n / 5.0,
        restart_rps=restart_requests / restart_window,
        computed=True,
    )


def _worktree(rev: str, work: Path) -> Path:
    """The committed base's source tree (`git worktree`, removed by _drop_worktree)."""
    tree = work / "base"
    proc = subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), rev], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise BenchError(f"{FIGURE}: git worktree of {rev} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return tree


def _drop_worktree(tree: Path) -> None:
    subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], capture_output=True)


def _fake_api(work: Path, n: int) -> FakeAPI:
    cert, key = make_certificate(work)
    pods = {
        f"train-{i}": {
            "kind": "Pod",
            "metadata": {"name": f"train-{i}", "uid": f"00000000-0000-0000-0000-{i:012d}", "labels": dict(LABELS)},
            "spec": {"nodeName": f"node-{i % 8}"},
            "status": {
                "phase": "Running",
                "podIP": "127.0.0.1",
                "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}],
            },
        }
        for i in range(n)
    }
    return FakeAPI(
        api_dir=work / "api",
        cert=cert,
        key=key,
        configmaps={"train-status": {"data": {}, "rv": 1}},
        replicas={"train": n},
        pods=pods,
    )


def _counts(out: Path) -> dict:
    total = {"dns": 0, "started": 0, "attempts": 0}
    for path in out.glob("counts-*.json"):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # being replaced right now: the next read has it
        for key in total:
            total[key] += data.get(key, 0)
    return total


def _proc_usage(pids: list[int]) -> tuple[float, float]:
    """(resident MiB, CPU seconds) of these processes, summed, from /proc."""
    rss, cpu = 0.0, 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        rss += next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")) / 1024
        cpu += (int(stat[11]) + int(stat[12])) / ticks
    return rss, cpu


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise BenchError(f"{FIGURE}: {what} not within {timeout:.0f}s")


def _requests_between(fake: FakeAPI, start: float, end: float) -> list:
    with fake.lock:
        return [r for r in fake.requests if start <= r.at < end]


def measure_one(code: str, tree: Path, n: int, steady: float, restart: float, log=print) -> Point:
    """One group of `n` launchers of the source tree `tree`."""
    work = Path(tempfile.mkdtemp(prefix=f"tfmw-bench-scale-{code}-{n}-"))
    fake = _fake_api(work, n)
    ctl, out = work / "ctl", work / "out"
    ctl.mkdir()
    (out / "shared").mkdir(parents=True)
    (ctl / "gen").write_text("0\n")
    procs = []
    try:
        for first in range(0, n, PER_PROCESS):
            args = [
                PY, "-m", "tfmw.bench.scale_worker", "--code", str(tree), "--first", str(first),
                "--count", str(min(PER_PROCESS, n - first)), "--n", str(n), "--api-port", str(fake.port),
                "--api-dir", str(fake.api_dir), "--selector", SELECTOR, "--ctl", str(ctl), "--out", str(out),
            ]  # fmt: skip
            procs.append(
                subprocess.Popen(
                    args, env=base_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
                )
            )
        pids = [p.pid for p in procs]
        _wait(lambda: _counts(out)["started"] >= n, 120 + n * 0.2, f"{n} launchers of {code} training")
        dns_start = _counts(out)["dns"]
        time.sleep(2.0)  # the start's last writes
        rss, cpu0 = _proc_usage(pids)
        t0 = time.monotonic()
        time.sleep(steady)
        _, cpu1 = _proc_usage(pids)
        t1 = time.monotonic()
        steady_requests = _requests_between(fake, t0, t1)
        # a group restart: every worker's training exits as a broken group's, and the new
        # attempts stall for longer than the lost-peer watch's threshold
        before = _counts(out)
        (ctl / "stall").write_text("")
        r0 = time.monotonic()
        (ctl / "gen").write_text("1\n")
        _wait(lambda: _counts(out)["attempts"] >= before["attempts"] + n, 60 + n * 0.1, "every launcher restarted")
        time.sleep(max(r0 + restart - time.monotonic(), 0.0))
        r1 = time.monotonic()
        restart_requests = _requests_between(fake, r0, r1)
        dns_restart = _counts(out)["dns"] - before["dns"]
        (ctl / "stall").unlink()
        breakdown: dict[str, int] = {}
        for r in steady_requests:
            key = what_of(r.method, r.path)
            breakdown[key] = breakdown.get(key, 0) + 1
        point = Point(
            code,
            n,
            dns_start=float(dns_start),
            dns_restart=float(dns_restart),
            steady_rps=len(steady_requests) / (t1 - t0),
            restart_rps=len(restart_requests) / (r1 - r0),
            mib_per_launcher=rss / n,
            cpu_ms_per_s=(cpu1 - cpu0) * 1000 / (t1 - t0) / n,
            requests={k: v / (t1 - t0) for k, v in sorted(breakdown.items())},
        )
        log(
            f"  {FIGURE}: {code} at {n} workers: {point.dns_start:.0f} lookups at start, {point.dns_restart:.0f} "
            f"per restart; {point.steady_rps:.2f} req/s steady, {point.restart_rps:.1f} in a restart; "
            f"{point.mib_per_launcher:.1f} MiB and {point.cpu_ms_per_s:.2f} CPU ms/s per launcher"
        )
        return point
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        fake.close()
        shutil.rmtree(work, ignore_errors=True)


@dataclass
class Result:
    points: list
    steady_seconds: float
    restart_seconds: float
    base_rev: str


def measure(quick: bool, log=print) -> Result:
    steady, restart = (10.0, 25.0) if quick else (30.0, 40.0)
    points = [measure_one("now", REPO, n, steady, restart, log) for n in SIZES]
    work = Path(tempfile.mkdtemp(prefix="tfmw-bench-scale-base-"))
    tree = _worktree(BASE_REV, work)
    try:
        points += [measure_one("base", tree, n, steady, restart, log) for n in BASE_SIZES]
    finally:
        _drop_worktree(tree)
        shutil.rmtree(work, ignore_errors=True)
    points += [base_arithmetic(n, steady, restart) for n in SIZES if n not in BASE_SIZES]
    return Result(points, steady, restart, BASE_REV)


def _cell(value: float, digits: int = 2) -> str:
    return "-" if math.isnan(value) else f"{value:,.{digits}f}"


def table_rows(result: Result) -> list[list]:
    rows = []
    for p in sorted(result.points, key=lambda p: (p.code != "now", p.workers)):
        code = "this code" if p.code == "now" else f"base {result.base_rev}" + (" (computed)" if p.computed else "")
        rows.append(
            [
                code,
                f"{p.workers:,}",
                _cell(p.dns_start, 0),
                _cell(p.dns_restart, 0),
                _cell(p.steady_rps),
                _cell(p.restart_rps, 1),
                _cell(p.mib_per_launcher, 1),
                _cell(p.cpu_ms_per_s),
            ]
        )
    return rows


def plot(result: Result, path, subtitle: str) -> None:
    fig, axes = plots.subplots(1, 2, figsize=(11, 4))
    for code, style in (("now", "o-"), ("base", "s--")):
        points = sorted((p for p in result.points if p.code == code), key=lambda p: p.workers)
        xs = [p.workers for p in points]
        axes[0].plot(xs, [p.steady_rps for p in points], style, label=f"{code}: steady")
        axes[0].plot(xs, [p.restart_rps for p in points], style, alpha=0.5, label=f"{code}: in a restart")
        axes[1].plot(xs, [p.dns_restart for p in points], style, label=f"{code}: per restart")
    for ax, title in zip(axes, ("API requests per second", "DNS lookups per group restart"), strict=True):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("workers")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
    axes[1].plot([16, 1024], [64, 4096], ":", color="grey", label="4N (target)")
    fig.suptitle(subtitle, fontsize=8)
    plots.save(fig, path)

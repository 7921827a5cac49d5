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
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from entrypoint.peers import needed_peers
from tfmw.devcluster.fakeapi import FakeAPI, make_certificate

from . import plots
from .figure import BenchRun, measured
from .procs import PY, REPO, BenchError, base_env, proc_usage
from .report import image, paragraphs, settings_line, table

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
        rss, cpu0 = proc_usage(pids)
        t0 = time.monotonic()
        time.sleep(steady)
        _, cpu1 = proc_usage(pids)
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


# ---------------------------------------------------------------- the figure

TITLE = "Figure 8: the control path at 16 to 1,024 workers"


def run_figure(bench: BenchRun) -> str:
    return measured(bench, sys.modules[__name__], "Figure 8: the control path at scale", "fig8_scale.png", section)


def scale_text(result) -> str:
    """Figure 8's reading (pure): this code against the base, and against the targets."""
    now = {p.workers: p for p in result.points if p.code == "now"}
    base = {p.workers: p for p in result.points if p.code == "base"}
    top = max(now)
    big, small = now[top], now[min(now)]
    parts = [
        f"At {top:,} workers the whole release asks the API server {big.steady_rps:.2f} times a second while it "
        f"trains (target: at most 1, whatever N; {small.steady_rps:.2f} at {min(now)}): the chief reads the "
        "group's size every 5 s and writes the status at each checkpoint, nobody else asks anything. "
        f"A group restart costs {big.dns_restart:,.0f} DNS lookups (target 4N = {4 * top:,}): the chief "
        "resolves every name, each other worker the three it needs (entrypoint.peers.needed_peers). While the "
        f"restarted group stalls the release asks {big.restart_rps:.1f} times a second, the one-off reads of "
        "the restart (each launcher's status and size, once) spread over the window, then one list of the "
        "release's pods by the chief and the chief's pod by worker 1 and the last every 5 s."
    ]
    if top in base:
        b = base[top]
        parts.append(
            f"The base ({result.base_rev}) at {top:,}: {b.steady_rps:.0f} requests a second in steady state "
            f"({b.steady_rps / big.steady_rps:.0f}x), {b.dns_restart:,.0f} lookups per restart "
            f"({b.dns_restart / big.dns_restart:.0f}x)" + (", from its code's arithmetic." if b.computed else ".")
        )
    measured = sorted(n for n, p in base.items() if not p.computed)
    if measured:
        n = measured[-1]
        parts.append(
            f"Measured side by side at {n:,} workers: {base[n].steady_rps:.1f} against {now[n].steady_rps:.2f} "
            f"requests a second, {base[n].dns_restart:,.0f} against {now[n].dns_restart:,.0f} lookups per restart; "
            f"CPU per launcher {base[n].cpu_ms_per_s:.2f} against {now[n].cpu_ms_per_s:.2f} ms a second."
        )
    parts.append(
        f"Memory per launcher is the launchers' processes' resident memory over N ({big.mib_per_launcher:.1f} MiB "
        f"at {top:,}, an interpreter shared by {PER_PROCESS} launchers here); in a pod the launcher is a "
        "process of its own (about 30 MiB)."
    )
    return " ".join(parts)


def section(result, table_rows, headers, load: str) -> str:
    """Figure 8's section of docs/benchmarks.md (pure)."""
    return paragraphs(
        "## Figure 8: the control path at 16 to 1,024 workers",
        image("fig8_scale.png", "API requests per second and DNS lookups per restart against the group's size"),
        settings_line(
            "N real launchers (the entrypoint's own `Launcher`, 128 threads to a process, "
            "`scripts/tfmw/bench/scale_worker.py`) form one group against the API server double "
            "(`tfmw.devcluster.fakeapi`: real HTTPS, the StatefulSet's scale, the status ConfigMap, N worker "
            "pods, Events), with a resolver that counts each lookup of a worker's name and answers it with "
            "loopback, and a stub in sh for the training command (a heartbeat every 2 s, the chief's checkpoint "
            f"every 10 s). Steady state: {result.steady_seconds:.0f} s of training. A group restart: every "
            "worker's training exits 75 (a broken group), restarts in place and stays stalled for "
            f"{result.restart_seconds:.0f} s, past the lost-peer watch's 10 s. Before: the committed base "
            f"`{result.base_rev}` from a `git worktree`, the same harness.",
            load,
        ),
        table(headers, table_rows),
        "**Reading it.** " + scale_text(result),
    )

"""Figure 13: checkpoint cost. What a save stalls the step loop, synchronous against the trainer's
background save, for a checkpoint of about 340 MB; and the goodput of a local run with a fault
every FAULT_EVERY_SECONDS under a fixed 50-step interval against `checkpoint.interval: auto`,
back to back in each round.

Stall: scripts/tfmw/bench/checkpoint_save.py (the trainer's model builder and Adam state, one
process). Goodput: real 2-worker local runs (the launcher, the trainer, values/local.yaml's cnn on
make local's runner), the whole worker-1 pod SIGKILLed every FAULT_EVERY_SECONDS (the harness's
kill-worker); each run's goodput is the chief's own account (its `tfmw completed` line).
"""

from __future__ import annotations

import signal
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from entrypoint import loglines
from entrypoint.goodput import read_line_fields
from tfmw.faults import local as fault_local
from tfmw.localrun.kubelet import EXIT_TIMED_OUT, LocalCluster
from tfmw.localrun.run import base_env as local_env
from tfmw.localrun.run import choose_network

from . import fig_goodput, plots
from .fig_recovery import CHECKPOINT_RESULT
from .figure import BenchRun
from .machine import load_average
from .procs import ONE_THREAD, PY, REPO, BenchError, base_env
from .report import image, paragraphs, settings_line, table

TITLE = "Figure 13: checkpoint cost"
LARGE_MODEL = "mlp=28,28:hidden=2304,layers=6"  # 340 MB with its Adam state
STALL_ROUNDS = 5
STALL_TARGET = 0.1  # background stall <= 0.1x the synchronous one
FAULT_EVERY_SECONDS = 40.0
RUN_MINUTES = 1.5
ROUNDS = 2
FIXED = ["training.config.checkpoint.everySteps=50"]
# Scaled down to minutes: a failure every ~40 s makes Young/Daly's interval fall below the
# default 10 s floor, so the auto run's bounds are 1-120 s.
AUTO = [
    "training.config.checkpoint.interval=auto",
    "training.config.checkpoint.minSeconds=1",
    "training.config.checkpoint.maxSeconds=120",
]


@dataclass
class Stall:
    megabytes: float
    sync: list[float]
    background: list[float]
    written: list[float]


@dataclass
class RunResult:
    label: str
    round: int
    goodput: float = float("nan")
    wall: float = float("nan")
    faults: int = 0
    checkpoints: int = 0
    badput: dict = field(default_factory=dict)
    intervals: list[float] = field(default_factory=list)


def measure_stall(log=print, rounds: int = STALL_ROUNDS) -> Stall:
    proc = subprocess.run(
        [PY, "-m", "tfmw.bench.checkpoint_save", "--rounds", str(rounds), LARGE_MODEL],
        cwd=REPO,
        env=base_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    found = list(loglines.payloads(proc.stdout.splitlines(), loglines.BENCH, CHECKPOINT_RESULT))
    if proc.returncode != 0 or not found:
        raise BenchError(f"figure 13: checkpoint saves: exit {proc.returncode}: {(proc.stdout + proc.stderr)[-300:]}")
    r = found[0]
    stall = Stall(r["bytes"] / 1e6, r["sync_all"], r["async_return_all"], r["async_written_all"])
    log(
        f"  figure 13: {stall.megabytes:.0f} MB: sync {statistics.median(stall.sync):.3f}s, "
        f"background stall {statistics.median(stall.background):.4f}s"
    )
    return stall


def goodput_run(label: str, sets: list[str], round_: int, runs_dir: Path, log=print) -> RunResult:
    """One local run of about RUN_MINUTES with a kill of worker 1 every FAULT_EVERY_SECONDS."""
    result = RunResult(label, round_)
    steps = fig_goodput.steps_for(RUN_MINUTES)
    workload, pods = fault_local.scenario_pods(
        "kill-worker", [f"training.config.steps={steps}", *sets], runs_dir, f"ckpt-{label}-{round_}"
    )
    network, _ = choose_network("loopback", 2222, len(pods))
    cluster = LocalCluster(pods, network, dict(local_env(), **ONE_THREAD), grace_seconds=20, out=lambda line: None)
    log(f"  figure 13: round {round_} {label}: {steps} steps, worker 1 killed every {FAULT_EVERY_SECONDS:.0f}s")
    try:
        cluster.start()
        deadline = time.monotonic() + RUN_MINUTES * 60 * 5 + 300
        next_fault = time.monotonic() + FAULT_EVERY_SECONDS
        while time.monotonic() < deadline:
            outcome = cluster.wait(min(2.0, max(deadline - time.monotonic(), 0.1)))
            if outcome.exit_code != EXIT_TIMED_OUT:
                break
            if time.monotonic() >= next_fault and not cluster.states[0].completed:
                cluster.signal_pod(1, signal.SIGKILL)
                result.faults += 1
                next_fault = time.monotonic() + FAULT_EVERY_SECONDS
        outcome = cluster.wait(1)
    finally:
        cluster.shutdown()
    lines = cluster.states[0].lines
    ended = loglines.find(lines, loglines.COMPLETED)
    account = read_line_fields(ended[-1].fields) if ended else None
    if not outcome.ok or account is None:
        raise BenchError(f"figure 13: {label} round {round_}: {outcome.reason or 'no goodput on the chief'}")
    result.goodput, result.wall, result.badput = account
    saved = [p for p in loglines.find(lines, loglines.CHECKPOINT) if p.text.startswith("saved")]
    result.checkpoints = len(saved)
    chosen = [
        p.float_field("seconds") for p in loglines.find(lines, loglines.CHECKPOINT) if p.text.startswith("interval")
    ]
    result.intervals = [c for c in chosen if c is not None]
    log(
        f"  figure 13: round {round_} {label}: goodput {result.goodput:.1%} of {result.wall:.0f}s, "
        f"{result.faults} faults"
    )
    return result


def measure(quick: bool, log=print) -> dict:
    stall = measure_stall(log, 3 if quick else STALL_ROUNDS)
    runs = []
    with tempfile.TemporaryDirectory(prefix="tfmw-ckptcost-") as runs_dir:
        for round_ in range(1, (1 if quick else ROUNDS) + 1):
            runs.append(goodput_run("fixed-50", FIXED, round_, Path(runs_dir), log))
            runs.append(goodput_run("auto", AUTO, round_, Path(runs_dir), log))
    return {"stall": stall, "runs": runs}


HEADERS = ["round", "interval", "goodput", "wall (s)", "faults", "checkpoints", "checkpoint (s)", "lostWork (s)"]


def table_rows(result: dict) -> list[list]:
    return [
        [
            r.round,
            r.label + (f" (last {r.intervals[-1]:.1f} s)" if r.intervals else ""),
            f"{r.goodput:.1%}",
            round(r.wall),
            r.faults,
            r.checkpoints,
            round(r.badput.get("checkpoint", 0.0), 1),
            round(r.badput.get("lostWork", 0.0), 1),
        ]
        for r in result["runs"]
    ]


def stall_rows(stall: Stall) -> list[list]:
    med = statistics.median
    return [
        ["synchronous write", f"{med(stall.sync):.3f}", f"{min(stall.sync):.3f}-{max(stall.sync):.3f}"],
        [
            "background: stall",
            f"{med(stall.background):.4f}",
            f"{min(stall.background):.4f}-{max(stall.background):.4f}",
        ],
        [
            "background: files written",
            f"{med(stall.written):.3f}",
            f"{min(stall.written):.3f}-{max(stall.written):.3f}",
        ],
    ]


def plot(result: dict, path, subtitle: str) -> None:
    fig, ax = plots.subplots(1, 1, figsize=(7, 3.2))
    runs = result["runs"]
    rounds = sorted({r.round for r in runs})
    for offset, label in ((-0.2, "fixed-50"), (0.2, "auto")):
        values = [next((r.goodput for r in runs if r.round == n and r.label == label), 0) * 100 for n in rounds]
        bars = ax.bar([n + offset for n in rounds], values, width=0.4, label=label)
        ax.bar_label(bars, labels=[f"{v:.1f}" for v in values], fontsize=7)
    ax.set_xticks(rounds, [f"round {n}" for n in rounds])
    ax.set_ylabel("goodput (%)")
    ax.set_ylim(0, 110)
    ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"{TITLE}: a fault every {FAULT_EVERY_SECONDS:.0f} s\n{subtitle}", fontsize=10)
    plots.save(fig, path)


def run_figure(bench: BenchRun) -> str:
    load = load_average()
    result = measure(bench.quick, log=bench.log)
    rows = table_rows(result)
    bench.show(TITLE + ": stall", ["save", "median (s)", "range (s)"], stall_rows(result["stall"]))
    bench.show(TITLE + ": goodput", HEADERS, rows)
    plot(result, bench.plots / "fig13_checkpoint.png", bench.machine_line)
    return section(result, rows, load)


def verdicts(result: dict) -> tuple[str, str]:
    """(the stall target's sentence, the goodput target's sentence) (pure)."""
    stall = result["stall"]
    ratio = statistics.median(stall.background) / statistics.median(stall.sync)
    met = "met" if ratio <= STALL_TARGET else "missed"
    first = (
        f"Target background stall <= {STALL_TARGET}x the synchronous one: **{met}**, {ratio:.4f}x "
        f"(median of {len(stall.sync)} saves each way; worst background stall {max(stall.background):.4f} s "
        f"against the fastest synchronous save {min(stall.sync):.3f} s)."
    )
    runs = result["runs"]
    pairs = [
        (
            next(r for r in runs if r.round == n and r.label == "auto"),
            next(r for r in runs if r.round == n and r.label == "fixed-50"),
        )
        for n in sorted({r.round for r in runs})
    ]
    wins = sum(a.goodput >= f.goodput for a, f in pairs)
    diffs = ", ".join(f"{(a.goodput - f.goodput) * 100:+.1f} points" for a, f in pairs)
    second = (
        f"Target auto goodput >= fixed in every round: **{'met' if wins == len(pairs) else 'missed'}** "
        f"({wins} of {len(pairs)} rounds; auto minus fixed: {diffs})."
    )
    return first, second


def section(result: dict, rows: list[list], load: str) -> str:
    stall = result["stall"]
    first, second = verdicts(result)
    return paragraphs(
        f"## {TITLE}",
        image("fig13_checkpoint.png", "goodput with a fault every 40 s: fixed 50-step interval vs auto"),
        settings_line(
            f"Stall: `python -m tfmw.bench.checkpoint_save` on `{LARGE_MODEL}` ({stall.megabytes:.0f} MB with "
            f"its Adam state), one process, the first save of each way a warm-up. Goodput: 2-worker local runs "
            f"of values/local.yaml's cnn ({fig_goodput.steps_for(RUN_MINUTES)} steps, about {RUN_MINUTES} minutes "
            f"without faults; scaled down from hours to fit this machine), worker 1's pod SIGKILLed every "
            f"{FAULT_EVERY_SECONDS:.0f} s, fixed `everySteps: 50` then `interval: auto` (bounds 1-120 s, "
            "scaled down with the fault rate) back to back in each round; background saves in both.",
            load,
        ),
        table(["save", "median (s)", "range (s)"], stall_rows(stall)),
        table(HEADERS, rows),
        first,
        second,
        "**Reading it.** On this CPU-only machine TensorFlow's copy to host memory shares buffers with the "
        "variables (copy on write), so the stall is the dispatch, and the step after it pays for the copy of the "
        "variables it updates. The auto interval follows the launcher's failure-rate estimate: the prior (a day) "
        "until the first fault, then wall time / restarts, one fault behind with the warm standby.",
    )

"""Figure 3's goodput runs: where a run's wall time goes, with and without faults.

First `make local`'s own run as it ships (values/local.yaml: 40 steps), for its goodput and
the chief's end (its last progress line to its launcher's `tfmw completed`). Then two real
2-worker runs of values/local.yaml's model and data (the `cnn`, synthetic) with the trainer's
default checkpoint interval (values/local.yaml's 20 steps suits its 40-step demo, not a
10-minute run) on `make local`'s runner, sized to about
`minutes` each: one without faults, one with the whole worker-1 pod SIGKILLed every
`every_seconds` (the harness's kill-worker). Each run's goodput and badput by cause are the
chief's own account (entrypoint.goodput, its `tfmw completed` line). During the fault-free
run the chief's /metrics is scraped once a second (15-30x a usual Prometheus interval), and
each scrape's round trip is kept: an upper bound on what serving the metrics costs.
"""

from __future__ import annotations

import math
import signal
import statistics
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from entrypoint import loglines
from entrypoint.goodput import CAUSES, read_line_fields
from entrypoint.loglines import progress_step
from entrypoint.training.schema import DEFAULTS
from tfmw.faults import local as fault_local
from tfmw.localrun.kubelet import EXIT_TIMED_OUT, LocalCluster
from tfmw.localrun.run import base_env, choose_network

from . import plots, stats
from .figure import BenchRun
from .procs import ONE_THREAD, BenchError
from .report import image, table

# The cnn's step on this 2-core machine with its checkpoints, to size the runs: at a
# checkpoint every 50 steps 7,680 steps took 522 s without faults (0.068 s a step, the run
# short of the 10 minutes the figure wants); sized at 0.066 s a run is about 10 minutes.
STEP_SECONDS = 0.066
# The long runs checkpoint at the trainer's default interval, as a user's run does.
LONG_CHECKPOINT_EVERY = DEFAULTS["checkpoint"]["everySteps"]
TARGETS = {"without faults": 0.97, "with faults": 0.92}
LOCAL = "make local (values/local.yaml)"
END_TARGET_SECONDS = 1.0
LOCAL_ROUNDS = 3
PROMETHEUS_INTERVAL_SECONDS = 15.0


@dataclass
class GoodputRun:
    label: str
    steps: int
    faults: int = 0
    completed: bool = False
    reason: str = ""
    goodput: float = float("nan")
    wall_seconds: float = float("nan")
    badput: dict = field(default_factory=dict)
    scrape_ms: list = field(default_factory=list)
    end_seconds: float = float("nan")  # the chief's last progress line -> its launcher's `tfmw completed`


def chief_end(lines: list[str], times: list[float]) -> float:
    """Seconds from the chief's last progress line to its `tfmw completed` line (pure; NaN if
    either is missing)."""
    stepped = [t for line, t in zip(lines, times, strict=True) if progress_step(line) is not None]
    done = [t for line, t in zip(lines, times, strict=True) if loglines.parse_kind(line, loglines.COMPLETED)]
    return done[-1] - stepped[-1] if stepped and done else float("nan")


def steps_for(minutes: float) -> int:
    return max(int(minutes * 60 / STEP_SECONDS) // 20 * 20, 40)


def run(
    label: str, minutes: float | None, every_seconds: float | None, runs_dir: Path, log=print, scrape: bool = False
) -> GoodputRun:
    """One run of about `minutes` (None: values/local.yaml's own steps)."""
    steps = steps_for(minutes) if minutes is not None else 0  # 0: read from the chief's start line
    result = GoodputRun(label, steps)
    sets = (
        [f"training.config.steps={steps}", f"training.config.checkpoint.everySteps={LONG_CHECKPOINT_EVERY}"]
        if minutes is not None
        else []
    )
    workload, pods = fault_local.scenario_pods(
        "kill-worker", sets, runs_dir, f"goodput-{'f' if every_seconds else 'n'}"
    )
    network, _ = choose_network("loopback", 2222, len(pods), metrics=True)  # the host reaches /metrics
    cluster = LocalCluster(pods, network, dict(base_env(), **ONE_THREAD), grace_seconds=20, out=lambda line: None)
    stop = threading.Event()

    def scraper() -> None:
        url = f"http://127.0.0.1:{network.metrics_port}/metrics"
        while not stop.wait(1.0):
            started = time.monotonic()
            try:
                urllib.request.urlopen(url, timeout=5).read()
            except OSError:
                continue
            result.scrape_ms.append((time.monotonic() - started) * 1e3)

    log(
        f"  figure 3: goodput {label}: {steps or 'the values file'} steps"
        + (f", worker 1 killed every {every_seconds:.0f}s" if every_seconds else "")
    )
    try:
        cluster.start()
        if scrape:
            threading.Thread(target=scraper, daemon=True).start()
        deadline = time.monotonic() + (minutes or 1.0) * 60 * 4 + 300
        next_fault = time.monotonic() + every_seconds if every_seconds else None
        while time.monotonic() < deadline:
            outcome = cluster.wait(min(5.0, max(deadline - time.monotonic(), 0.1)))
            if outcome.exit_code != EXIT_TIMED_OUT:  # completed, or failed
                break
            if next_fault is not None and time.monotonic() >= next_fault and not cluster.states[0].completed:
                cluster.signal_pod(1, signal.SIGKILL)
                result.faults += 1
                next_fault = time.monotonic() + every_seconds
        outcome = cluster.wait(1)
        result.completed, result.reason = outcome.ok, outcome.reason
    finally:
        stop.set()
        cluster.shutdown()
    result.end_seconds = chief_end(cluster.states[0].lines, cluster.states[0].times)
    started = loglines.find(cluster.states[0].lines, loglines.START)
    if not result.steps and started:
        result.steps = started[-1].int_field("steps") or 0
    ended = loglines.find(cluster.states[0].lines, loglines.COMPLETED)
    account = read_line_fields(ended[-1].fields) if ended else None
    if account is not None:
        result.goodput, result.wall_seconds, result.badput = account
    if not result.completed or result.goodput != result.goodput:
        raise BenchError(f"figure 3: goodput {label}: {result.reason or 'no goodput on the chief'}")
    log(
        f"  figure 3: goodput {label}: {result.goodput:.1%} of {result.wall_seconds:.0f}s, {result.faults} faults, "
        f"badput {result.badput}"
    )
    return result


def measure(quick: bool, runs_dir: Path, log=print) -> list[GoodputRun]:
    """make local's own run (LOCAL_ROUNDS times: it is short and noisy), then two: 10 minutes
    each, one with a kill every 3 minutes (quick: 2 and 1)."""
    minutes, every = (2.0, 60.0) if quick else (10.0, 180.0)
    return [
        *(run(LOCAL, None, None, runs_dir, log) for _ in range(1 if quick else LOCAL_ROUNDS)),
        run("without faults", minutes, None, runs_dir, log, scrape=True),
        run("with faults", minutes, every, runs_dir, log),
    ]


HEADERS = [
    "run",
    "steps",
    "faults",
    "wall (s)",
    "goodput",
    "target",
    "chief's end (s)",
    *(f"{c} (s)" for c in CAUSES),
]


def rows(results: list[GoodputRun]) -> list[list]:
    return [
        [
            r.label,
            r.steps,
            r.faults,
            round(r.wall_seconds, 1),
            f"{r.goodput:.1%}",
            f"≥ {TARGETS[r.label]:.0%}" if r.label in TARGETS else "reported",
            round(r.end_seconds, 2),
            *(r.badput.get(c, 0.0) for c in CAUSES),
        ]
        for r in results
    ]


def metrics_cost(results: list[GoodputRun]) -> tuple[float, float, int] | None:
    """(median scrape ms, that as a share of a step's time at a 15 s scrape interval, scrapes)."""
    scrapes = [ms for r in results for ms in r.scrape_ms]
    if not scrapes:
        return None
    median = statistics.median(scrapes)
    return median, median / 1e3 / PROMETHEUS_INTERVAL_SECONDS, len(scrapes)


def plot(results: list[GoodputRun], path: Path, subtitle: str) -> None:
    """One stacked bar per run: productive seconds, then each cause of badput."""
    fig, ax = plots.subplots(figsize=(9, 2.4))
    names = ["productive", *CAUSES]
    for i, r in enumerate(results):
        productive = r.wall_seconds - sum(r.badput.values())
        left = 0.0
        for k, (name, seconds) in enumerate(
            zip(names, [productive, *(r.badput.get(c, 0.0) for c in CAUSES)], strict=True)
        ):
            if seconds <= 0:
                continue
            ax.barh(
                i,
                seconds,
                left=left,
                color=f"C{k}",
                label=name if i == 0 or name not in ax.get_legend_handles_labels()[1] else None,
            )
            left += seconds
        ax.text(left, i, f"  {r.goodput:.1%}", va="center", fontsize=8)
    ax.set_yticks(range(len(results)), [r.label for r in results], fontsize=8)
    ax.set_xlabel("seconds of the run's wall time (the chief's account)", fontsize=9)
    ax.legend(fontsize=7, loc="lower right", ncol=4)
    fig.suptitle(f"Figure 3b: goodput and badput by cause\n{subtitle}", fontsize=10)
    plots.save(fig, path)


# ---------------------------------------------------------------- figure 3b, within figure 3


def run_part(bench: BenchRun) -> list[GoodputRun]:
    """Figure 3b: its runs (in a folder of their own), their table shown, their plot drawn."""
    with tempfile.TemporaryDirectory(prefix="tfmw-goodput-") as runs_dir:
        goodput = measure(bench.quick, Path(runs_dir), log=bench.log)
    bench.show("Figure 3b: goodput", HEADERS, rows(goodput))
    plot(goodput, bench.plots / "fig3b_goodput.png", bench.machine_line)
    return goodput


def section_lines(goodput: list, quick: bool) -> list[str]:
    """Figure 3b's part of figure 3's section: what the runs were, their table, against the targets,
    and the metrics endpoint's cost (pure)."""
    cost = metrics_cost(goodput)
    lines = [
        "**Goodput over a long run** (figure 3b): the share of the run's wall time that produced training "
        'progress that was kept, and where the rest went (docs/contracts.md, "Goodput"; the chief\'s own '
        "account, its `tfmw completed` line). First `make local`'s own run as it ships (`values/local.yaml`: "
        f"the `cnn`, 40 steps), {1 if quick else LOCAL_ROUNDS} time(s): its goodput, reported, and "
        "the chief's end (its last progress line to its "
        f"launcher's `tfmw completed`: export, the barrier, COMPLETED, the exit), target ≤ "
        f"{END_TARGET_SECONDS:.0f} s. Then two real runs of `values/local.yaml`'s model "
        "(the `cnn`, synthetic data) at the trainer's default checkpoint interval (a checkpoint "
        f"every {LONG_CHECKPOINT_EVERY} steps; the values file's 20 suits its 40-step demo), "
        "one thread per process, sized to about "
        f"{'2' if quick else '10'} minutes each: one without faults, one with worker 1's whole pod SIGKILLed "
        f"every {'60' if quick else '180'} s, each run once (a 10-minute run is its own average over "
        "its faults). Targets: "
        + ", ".join(f"goodput ≥ {target:.0%} {label}" for label, target in TARGETS.items())
        + ".",
        "",
        image("fig3b_goodput.png", "goodput and badput by cause, with and without faults"),
        "",
        table(HEADERS, rows(goodput)),
        "",
        *verdicts(goodput),
    ]
    if cost is not None:
        lines += [
            f"**The metrics endpoint's cost**: the chief's `/metrics` was scraped once a second through "
            f"the fault-free run ({cost[2]} scrapes, median {cost[0]:.1f} ms a round trip, an upper bound on "
            f"the launcher's work). At a usual {PROMETHEUS_INTERVAL_SECONDS:.0f} s scrape interval "
            f"that is {cost[1]:.3%} of the time, so of every step's time (target ≤ 1 %); nothing is computed "
            "between scrapes (the collector reads the tracker when asked).",
            "",
        ]
    return lines


def verdicts(goodput: list) -> list[str]:
    """Each goodput run against its target, and the chief's end against its own (pure)."""
    said = []
    local = [r for r in goodput if r.label not in TARGETS]
    if local:
        shares = [r.goodput for r in local]
        said.append(
            f"{local[0].label} {stats.median(shares):.1%} of its {stats.median([r.wall_seconds for r in local]):.0f} s"
            + (f" (median of {len(local)} runs, {min(shares):.1%}-{max(shares):.1%})" if len(local) > 1 else "")
        )
    for r in goodput:
        if r.label in TARGETS:
            target = TARGETS[r.label]
            said.append(f"{r.label} {r.goodput:.1%} ({'met' if r.goodput >= target else 'MISSED'}, ≥ {target:.0%})")
    ends = [r.end_seconds for r in goodput if not math.isnan(r.end_seconds)]
    if ends:
        worst = max(ends)
        verdict = "met" if worst <= END_TARGET_SECONDS else "MISSED"
        said.append(
            f"the chief's end median {stats.median(ends):.2f} s, at most {worst:.2f} s in these {len(ends)} runs "
            f"({verdict} in every run, ≤ {END_TARGET_SECONDS:.0f} s)"
            if verdict == "met"
            else f"the chief's end median {stats.median(ends):.2f} s, at most {worst:.2f} s in these {len(ends)} runs "
            f"(MISSED in {sum(e > END_TARGET_SECONDS for e in ends)} of them, ≤ "
            f"{END_TARGET_SECONDS:.0f} s)"
        )
    return ["**Against the targets:** " + "; ".join(said) + ".", ""]

"""The faults on `make local`'s runner: each scenario is a real 2-worker run of the chart with
values/local.yaml, in network namespaces (root) or on loopback ports, the fault done to a
pod's processes or its link."""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

from entrypoint import loglines
from entrypoint.hangwatch import STEP_PHASE
from entrypoint.loglines import progress_step, said
from entrypoint.rundir import read_beat
from tfmw.chart import render
from tfmw.faults.analysis import FaultResult, fill_result
from tfmw.localrun.kubelet import LocalCluster
from tfmw.localrun.podspec import build_pods, find_workload
from tfmw.localrun.run import DEFAULT_RUNS, base_env, choose_network, metrics_enabled

SCENARIOS = ("kill-worker", "kill-chief", "hang-worker", "partition-worker", "kill-during-checkpoint")

# The chief's step after which the fault lands.
DEFAULT_FAULT_AFTER_STEP = 50
HANG_VICTIM = 1
# A stopped trainer is caught in seconds only while the launcher holds the adaptive bound: it
# says so (`tfmw launcher hang bound ...`) once it has 5 step samples, and the bound drops back
# to the static training.hangTimeoutSeconds (600 s) in every non-step phase. With a fast
# model and a checkpoint every 20 steps those phases are much of the run, so the harness
# checks the heartbeat the stopped trainer left and stops it again later when it was not a step.
HEARTBEAT_SETTLE_SECONDS = 1.0  # two of the launcher's 0.5 s polls of the heartbeat file


def _inject(cluster: LocalCluster, scenario: str, partition_seconds: float) -> None:
    if scenario == "kill-worker":
        cluster.signal_pod(1, signal.SIGKILL)
    elif scenario in ("kill-chief", "kill-during-checkpoint"):
        cluster.signal_pod(0, signal.SIGKILL)
    elif scenario == "partition-worker":
        cluster.set_link(1, up=False)
        time.sleep(partition_seconds)
        cluster.set_link(1, up=True)


def _signal_pids(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def heartbeat_file_of(pids: list[int]) -> str | None:
    """The TFMW_HEARTBEAT_FILE the launcher gave its training command (from /proc)."""
    for pid in pids:
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for item in environ:
            if item.startswith(b"TFMW_HEARTBEAT_FILE="):
                return item.split(b"=", 1)[1].decode()
    return None


def stop_while_stepping(
    cluster: LocalCluster, fault_after_step: int, timeout: float, adaptive: bool = True
) -> tuple[float, dict] | str:
    """SIGSTOP the victim's training once its heartbeat says it is stepping (and, with
    `adaptive` hang detection, once its launcher holds the adaptive bound: a static watchdog
    never says one); (when, each pod's line count then), else why not."""
    victim = cluster.states[HANG_VICTIM]
    deadline = time.monotonic() + timeout
    if adaptive:
        said_bound = lambda raw: bool(said(raw, loglines.LAUNCHER, "hang bound"))  # noqa: E731
        if cluster.wait_for_line(HANG_VICTIM, said_bound, timeout) is None:
            return f"worker {HANG_VICTIM}'s launcher never said its adaptive hang bound within {timeout:g}s"
    tries = 0
    while (left := deadline - time.monotonic()) > 0:
        past = lambda raw: (progress_step(raw) or 0) >= fault_after_step  # noqa: E731
        if cluster.wait_for_line(HANG_VICTIM, past, left, len(victim.lines)) is None:
            break
        pids = cluster.training_pids(HANG_VICTIM)
        fault_time, marks = time.monotonic(), {o: len(s.lines) for o, s in cluster.states.items()}
        _signal_pids(pids, signal.SIGSTOP)
        tries += 1
        time.sleep(HEARTBEAT_SETTLE_SECONDS)
        path = heartbeat_file_of(pids)
        beat = read_beat(path) if path else None
        if beat is not None and beat[1] == STEP_PHASE:
            return fault_time, marks
        _signal_pids(pids, signal.SIGCONT)  # stopped in a checkpoint or between phases: again later
    return f"worker {HANG_VICTIM} was never stopped while stepping ({tries} tries) within {timeout:g}s"


def hang_sets(hang_timeout_seconds: int | None) -> list[str]:
    """--set items for the watchdog: none for the chart's defaults (pure)."""
    return [] if hang_timeout_seconds is None else [f"training.hangTimeoutSeconds={hang_timeout_seconds}"]


def run_sets(
    steps: int, checkpoint_every: int, hang_timeout_seconds: int | None, extra_sets: tuple[str, ...] = ()
) -> list[str]:
    """The --set items of every faulted run, local or on a cluster: progress logged every step,
    the watchdog the chart's unless asked, then the caller's items (pure)."""
    return [
        f"training.config.steps={steps}",
        f"training.config.checkpoint.everySteps={checkpoint_every}",
        "training.config.logEverySteps=1",
        *hang_sets(hang_timeout_seconds),
        *extra_sets,
    ]


def scenario_pods(scenario: str, sets: list[str], runs_dir: Path, release: str) -> tuple:
    """(workload, pods) of the chart rendered with values/local.yaml and `sets`, each pod with
    its folder under a fresh run directory of this harness process."""
    rendered = render.prepare("local", sets, release=release, namespace="default")
    workload = find_workload(rendered.objects, "default")
    # One folder per harness process: two harness runs at once (a test and `make bench`)
    # must never share, or wipe, each other's shared storage.
    run_dir = (runs_dir / f"faults-{os.getpid()}" / release).resolve()
    shutil.rmtree(run_dir, ignore_errors=True)
    pods = build_pods(workload, run_dir)
    if scenario == "kill-during-checkpoint":
        # The chief pauses between writing a checkpoint's files and publishing it (a test
        # hook, docs/failure-model.md), so the kill lands mid-write rather than by luck.
        pods[0].env["TFMW_FAULT_CHECKPOINT_PAUSE_SECONDS"] = "3"
    return workload, pods


def fault_trigger(scenario: str, fault_after_step: int):
    """The chief's line after which the fault is injected: its progress past `fault_after_step`,
    or, to kill it mid-write, its `tfmw checkpoint writing` of a step past it (pure)."""
    if scenario == "kill-during-checkpoint":

        def writing(raw: str) -> bool:
            parsed = said(raw, loglines.CHECKPOINT, "writing")
            return parsed is not None and (parsed.int_field("step") or 0) >= fault_after_step

        return writing
    return lambda raw: (progress_step(raw) or 0) >= fault_after_step


def fault_and_recover(
    cluster: LocalCluster,
    result: FaultResult,
    fault_after_step: int,
    partition_seconds: float,
    timeout: float,
    adaptive: bool = True,
) -> None:
    """Start the cluster, wait for the trigger, inject the fault, wait for the run's end,
    and measure it into `result` (`adaptive`: the workers' hang detection is adaptive)."""
    started = time.monotonic()
    cluster.start()
    if cluster.wait_for_line(0, fault_trigger(result.scenario, fault_after_step), timeout=timeout) is None:
        result.reason = f"never reached step {fault_after_step} before the fault"
        return
    if result.scenario == "hang-worker":
        stopped = stop_while_stepping(cluster, fault_after_step, timeout, adaptive)
        if isinstance(stopped, str):
            result.reason = stopped
            return
        fault_time, marks = stopped
    else:
        fault_time = time.monotonic()
        marks = {o: len(s.lines) for o, s in cluster.states.items()}
        _inject(cluster, result.scenario, partition_seconds)
    outcome = cluster.wait(timeout)
    result.completed, result.reason = outcome.ok, outcome.reason
    result.seconds_total = time.monotonic() - started
    fill_result(result, cluster.states, marks, fault_time)
    chief = cluster.states[0]
    ended = [when for when, line in zip(chief.times, chief.lines, strict=True) if said(line, loglines.COMPLETED)]
    if ended:
        result.seconds_to_chief_end = ended[-1] - started
    result.log_tail = [f"[{s.pod.name}] {line}" for s in cluster.states.values() for line in s.lines[-15:]]


def run_scenario(
    scenario: str,
    runs_dir: Path = DEFAULT_RUNS,
    steps: int = 120,
    checkpoint_every: int = 20,
    fault_after_step: int | None = None,
    hang_timeout_seconds: int | None = None,
    partition_seconds: float = 15.0,
    extra_sets: tuple[str, ...] = (),
    timeout: float = 400,
    out=lambda line: None,
    env: dict | None = None,
) -> FaultResult:
    """One real 2-worker run with one fault; returns the measurements (never raises on a
    failed recovery: the result says what happened). `fault_after_step` None: 50 (a hang also waits
    for the adaptive bound: stop_while_stepping). `hang_timeout_seconds` None: the chart's
    default watchdog (training.hangTimeoutSeconds, training.hangDetection), as a user gets it.
    `env`: the pods' environment (default: make local's). Raises ToolError or
    LocalRunError when the chart cannot be run at all."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}")
    result = FaultResult(scenario, False, "", steps, checkpoint_every)
    release = f"fault-{scenario}"[:40]
    sets = run_sets(steps, checkpoint_every, hang_timeout_seconds, extra_sets)
    workload, pods = scenario_pods(scenario, sets, runs_dir, release)
    network, _ = choose_network(
        "auto", int(workload.env_value("TFMW_PORT") or 2222), len(pods), metrics_enabled(workload)
    )
    if scenario == "partition-worker" and not hasattr(network, "bridge"):
        result.reason = "needs network namespaces (root)"
        return result
    cluster = LocalCluster(pods, network, base_env() if env is None else env, grace_seconds=20, out=out)
    try:
        fault_step = DEFAULT_FAULT_AFTER_STEP if fault_after_step is None else fault_after_step
        adaptive = workload.env_value("TFMW_HANG_DETECTION") != "static"
        fault_and_recover(cluster, result, fault_step, partition_seconds, timeout, adaptive)
        return result
    finally:
        cluster.shutdown()

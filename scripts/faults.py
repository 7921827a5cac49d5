"""Fault injection on `make local`'s runner: kill, hang or cut off a worker mid-training and
measure what it costs. Used by tests/faults (assertions) and `make bench` (figures).

    python -m scripts.faults [--scenario NAME ...] [--steps 120] [--set k=v ...]

prints a table: time from fault to training resumed, steps lost, total steps, identical
weights. Every scenario is a real 2-worker MWMS run of the rendered chart (values/local.yaml)
in network namespaces (root) or on loopback ports.

What a fault means here (each is what a cluster does to a pod or a node):
  kill-worker / kill-chief   SIGKILL every process of pod 1 / pod 0 (OOM kill, node loss);
                             the local kubelet restarts the pod, as restartPolicy Always does.
  hang-worker                SIGSTOP pod 1's training process (a hung driver or collective);
                             the launcher's watchdog must notice and restart it.
  partition-worker           pod 1's network link down for `partition_seconds`, then up
                             (network namespaces only).
  kill-during-checkpoint     SIGKILL pod 0 (the chief, which writes the shared checkpoint)
                             while it is writing a checkpoint.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from scripts import render
from scripts.loglines import key_values, progress_step
from scripts.local_run import DEFAULT_RUNS, base_env, choose_network
from scripts.localrun.cluster import LocalCluster
from scripts.localrun.podspec import build_pods, find_workload

_START = re.compile(r"^tfmw start .*resume_step=(\d+)")

SCENARIOS = ("kill-worker", "kill-chief", "hang-worker", "partition-worker", "kill-during-checkpoint")


@dataclass
class FaultResult:
    scenario: str
    completed: bool
    reason: str
    total_steps: int
    checkpoint_every: int
    step_at_fault: int = -1
    resume_step: int = -1
    seconds_to_detect: float = float("nan")   # fault -> a worker's collective fails / watchdog fires
    seconds_to_resume: float = float("nan")
    seconds_total: float = float("nan")
    final_steps: set = field(default_factory=set)
    digests: set = field(default_factory=set)
    model: str = ""
    trainer_restarts: int = 0
    log_tail: list = field(default_factory=list)

    @property
    def steps_lost(self) -> int:
        return self.step_at_fault - self.resume_step if self.resume_step >= 0 else -1

    @property
    def identical_weights(self) -> bool:
        return len(self.digests) == 1


def _max_step(cluster: LocalCluster, until: float | None = None) -> int:
    best = 0
    for state in cluster.states.values():
        for when, line in zip(state.times, state.lines):
            if until is not None and when > until:
                break
            step = progress_step(line)
            if step is not None:
                best = max(best, step)
    return best


def _inject(cluster: LocalCluster, scenario: str, partition_seconds: float) -> None:
    if scenario == "kill-worker":
        cluster.signal_pod(1, signal.SIGKILL)
    elif scenario in ("kill-chief", "kill-during-checkpoint"):
        cluster.signal_pod(0, signal.SIGKILL)
    elif scenario == "hang-worker":
        for pid in cluster.training_pids(1):
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
    elif scenario == "partition-worker":
        cluster.set_link(1, up=False)
        time.sleep(partition_seconds)
        cluster.set_link(1, up=True)
    else:
        raise ValueError(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}")


def run_scenario(scenario: str, runs_dir: Path = DEFAULT_RUNS, steps: int = 120,
                 checkpoint_every: int = 20, fault_after_step: int = 50,
                 hang_timeout_seconds: int = 20, partition_seconds: float = 15.0,
                 extra_sets: tuple[str, ...] = (), timeout: float = 400,
                 out=lambda line: None) -> FaultResult:
    """One real 2-worker run with one fault; returns the measurements (never raises on a
    failed recovery: the result says what happened)."""
    release = f"fault-{scenario}"[:40]
    sets = [f"training.config.steps={steps}",
            f"training.config.checkpoint.everySteps={checkpoint_every}",
            "training.config.logEverySteps=1",
            f"training.hangTimeoutSeconds={hang_timeout_seconds}",
            *extra_sets]
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
    network, _ = choose_network("auto", int(workload.env_value("TFMW_PORT") or 2222), len(pods))
    if scenario == "partition-worker" and not hasattr(network, "bridge"):
        return FaultResult(scenario, False, "needs network namespaces (root)", steps, checkpoint_every)
    cluster = LocalCluster(pods, network, base_env(), grace_seconds=20, out=out)
    result = FaultResult(scenario, False, "", steps, checkpoint_every)
    started = time.monotonic()
    try:
        cluster.start()
        if scenario == "kill-during-checkpoint":
            trigger = lambda line: line.startswith("tfmw checkpoint writing") and \
                int(re.search(r"step=(\d+)", line).group(1)) >= fault_after_step  # noqa: E731
        else:
            trigger = lambda line: (progress_step(line) or 0) >= fault_after_step  # noqa: E731
        if cluster.wait_for_line(0, trigger, timeout=timeout) is None:
            result.reason = f"never reached step {fault_after_step} before the fault"
            return result
        fault_time = time.monotonic()
        result.step_at_fault = _max_step(cluster, until=fault_time)
        marks = {o: len(s.lines) for o, s in cluster.states.items()}
        _inject(cluster, scenario, partition_seconds)
        outcome = cluster.wait(timeout)
        result.completed, result.reason = outcome.ok, outcome.reason
        result.seconds_total = time.monotonic() - started
        chief = cluster.states[0]
        # The run that finished: the chief's last `tfmw start` after the fault.
        starts = [i for i in range(marks[0], len(chief.lines)) if _START.match(chief.lines[i])]
        if starts:
            first = starts[-1]
            result.resume_step = int(_START.match(chief.lines[first]).group(1))
            after = [i for i in range(first, len(chief.lines)) if progress_step(chief.lines[i]) is not None]
            if after:
                result.seconds_to_resume = chief.times[after[0]] - fault_time
        detected = [when for o, st in cluster.states.items()
                    for when, line in zip(st.times[marks[o]:], st.lines[marks[o]:])
                    # a surviving worker's failed collective, or a watchdog: the group knows
                    if line.startswith(("tfmw error ", "tfmw launcher watchdog"))]
        if detected:
            result.seconds_to_detect = min(detected) - fault_time
        # Steps reached before the group broke can exceed the step at the fault moment.
        broke = chief.times[starts[0]] if starts else None
        result.step_at_fault = max(result.step_at_fault, _max_step(cluster, until=broke))
        for state in cluster.states.values():
            done = [l for l in state.lines if l.startswith("tfmw done ")]
            if done:
                kv = key_values(done[-1])
                result.final_steps.add(int(kv["steps"]))
                result.digests.add(kv["weights_digest"])
                if state.pod.ordinal == 0:
                    result.model = kv.get("model", "")
            result.trainer_restarts += sum(l.startswith("tfmw launcher restarting training")
                                           for l in state.lines)
        result.log_tail = [f"[{s.pod.name}] {l}" for s in cluster.states.values() for l in s.lines[-15:]]
        return result
    finally:
        cluster.shutdown()


def table(results: list[FaultResult]) -> list[str]:
    rows = ["| fault | completed | fault at step | resumed from | steps lost | fault → detected (s) | "
            "fault → resumed (s) | trainer restarts | identical weights |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        rows.append(f"| {r.scenario} | {'yes' if r.completed else 'NO: ' + r.reason} | {r.step_at_fault} | "
                    f"{r.resume_step} | {r.steps_lost} (≤ {r.checkpoint_every}) | {r.seconds_to_detect:.1f} | "
                    f"{r.seconds_to_resume:.1f} | "
                    f"{r.trainer_restarts} | {'yes' if r.identical_weights else 'NO'} |")
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.faults", description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", action="append", choices=SCENARIOS,
                        help="run only these (repeatable); default: all")
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--set", dest="sets", action="append", default=[])
    parser.add_argument("--hang-timeout", type=int, default=20,
                        help="training.hangTimeoutSeconds for the run (the watchdog that ends a hang)")
    parser.add_argument("--verbose", action="store_true", help="stream every pod's log")
    args = parser.parse_args(argv)
    results = []
    for scenario in args.scenario or SCENARIOS:
        print(f"running {scenario} ...", flush=True)
        results.append(run_scenario(scenario, steps=args.steps, extra_sets=tuple(args.sets),
                                    hang_timeout_seconds=args.hang_timeout,
                                    out=print if args.verbose else (lambda line: None)))
    print("\n".join(table(results)))
    return 0 if all(r.completed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

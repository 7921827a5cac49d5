"""A worker lost with no room, on `make local`'s runner: elastic training off (the group waits for
it) or on (the others shrink and train on, and grow back when it returns). One real run of the
chart with values/local.yaml; what it measures is the bench's elastic figure and the e2e test's.

The lost worker is held (LocalCluster.hold: killed, and not started again) after the chief's
progress passes `hold_after_step`, and released `outage_seconds` later.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from entrypoint import loglines
from tfmw.chart import render
from tfmw.localrun.kubelet import LocalCluster
from tfmw.localrun.podspec import build_pods, find_workload
from tfmw.localrun.run import base_env, choose_network, metrics_enabled

WORKERS = 4
LOST = 3  # the ordinal held: its node is lost and no other has room
IDLE_GAP_SECONDS = 2.0  # a worker without a step this long (and more) is idle for the figure


@dataclass
class ElasticRun:
    elastic: bool
    ok: bool = False
    reason: str = ""
    held_at: float = 0.0  # monotonic
    released_at: float = 0.0
    step_at_hold: int = 0
    step_at_release: int = 0
    shrink_seconds: float | None = None  # hold -> the first step of the others after it
    grow_seconds: float | None = None  # release -> the lost worker's first step
    idle_worker_seconds: float = 0.0  # hold -> end, over the workers not held: gaps >= IDLE_GAP_SECONDS
    outage_seconds: float = 0.0
    final_loss: float | None = None
    digests: dict[str, str] = field(default_factory=dict)
    micro_batches_seen: set[str] = field(default_factory=set)
    lines: dict[int, list[str]] = field(default_factory=dict)

    @property
    def steps_per_hour_in_outage(self) -> float:
        return (self.step_at_release - self.step_at_hold) * 3600 / self.outage_seconds if self.outage_seconds else 0.0


def run_sets(elastic: bool, steps: int, grace_seconds: int, extra=()) -> list[str]:
    sets = [
        f"workers.replicas={WORKERS}",
        # the mlp: what is measured is the group's membership, not the model (4 workers on 2 cores)
        "training.config.model.name=mlp",
        f"training.config.steps={steps}",
        "training.config.checkpoint.everySteps=10",
        "training.config.logEverySteps=1",
        "training.config.gradientAccumulationSteps=3",
        "training.config.batchSizePerReplica=8",
        *extra,
    ]
    if elastic:
        sets += ["training.elastic.minReplicas=2", f"training.elastic.graceSeconds={grace_seconds}"]
    return sets


def _steps(lines: list[str], times: list[float]) -> list[tuple[float, int]]:
    found = []
    for raw, when in zip(lines, times, strict=False):
        step = loglines.progress_step(raw, prefixed=False)
        if step is not None:
            found.append((when, step))
    return found


def local_elastic_run(
    runs_dir: Path,
    *,
    elastic: bool,
    steps: int = 150,
    hold_after_step: int = 30,
    outage_seconds: float | None = None,
    grace_seconds: int = 5,
    timeout: float = 600,
    hold: bool = True,
    extra_sets=(),
    out=lambda line: None,
) -> ElasticRun:
    """One real 4-worker run; with `hold`, worker 3 is held after the chief passes
    `hold_after_step`, and released `outage_seconds` later (None: once the others trained 20
    steps without it when elastic, else after grace + 20 s)."""
    result = ElasticRun(elastic)
    release = f"elastic-{'on' if elastic else 'off'}"
    rendered = render.prepare(
        "local", run_sets(elastic, steps, grace_seconds, extra_sets), release=release, namespace="default"
    )
    workload = find_workload(rendered.objects, "default")
    run_dir = (runs_dir / f"elastic-{os.getpid()}" / release).resolve()
    shutil.rmtree(run_dir, ignore_errors=True)
    pods = build_pods(workload, run_dir)
    network, _ = choose_network(
        "auto", int(workload.env_value("TFMW_PORT") or 2222), len(pods), metrics_enabled(workload)
    )
    cluster = LocalCluster(pods, network, base_env(), grace_seconds=20, out=out)
    try:
        cluster.start()
        if hold:
            passed = lambda raw: (loglines.progress_step(raw, prefixed=False) or 0) >= hold_after_step  # noqa: E731
            if cluster.wait_for_line(0, passed, timeout) is None:
                result.reason = f"the chief never passed step {hold_after_step}"
                return result
            result.step_at_hold = hold_after_step
            result.held_at = time.monotonic()
            cluster.hold(LOST)
            if outage_seconds is None and elastic:
                # the others train 20 steps without it
                target = hold_after_step + 20
                resumed = lambda raw: (loglines.progress_step(raw, prefixed=False) or 0) >= target  # noqa: E731
                if cluster.wait_for_line(0, resumed, timeout) is None:
                    result.reason = "the group did not train on without the lost worker"
                    return result
            else:
                time.sleep(outage_seconds if outage_seconds is not None else grace_seconds + 20)
            result.released_at = time.monotonic()
            cluster.release(LOST)
            result.outage_seconds = result.released_at - result.held_at
        ended = cluster.wait(timeout)
        result.ok, result.reason = ended.ok, ended.reason
        _measure(cluster, result)
        return result
    finally:
        cluster.shutdown()


def _measure(cluster: LocalCluster, result: ElasticRun) -> None:
    for ordinal, state in cluster.states.items():
        result.lines[ordinal] = list(state.lines)
        for done in loglines.find(state.lines, loglines.DONE):
            result.digests[state.pod.name] = done.fields.get("weights_digest", "")
            if done.fields.get("final_loss") not in (None, "", "nan"):
                result.final_loss = float(done.fields["final_loss"])
        for line in loglines.find(state.lines, loglines.ELASTIC):
            result.micro_batches_seen.add(line.fields.get("micro_batches", ""))
    if not result.held_at:
        return
    chief = _steps(cluster.states[0].lines, cluster.states[0].times)
    before_release = [s for t, s in chief if t <= result.released_at]
    result.step_at_release = max(before_release) if before_release else result.step_at_hold
    after_hold = [t for t, s in chief if t > result.held_at and s > result.step_at_hold + 1]
    result.shrink_seconds = after_hold[0] - result.held_at if after_hold else None
    lost = [t for t, _ in _steps(cluster.states[LOST].lines, cluster.states[LOST].times) if t > result.released_at]
    result.grow_seconds = lost[0] - result.released_at if lost else None
    end = max((t for s in cluster.states.values() for t in s.times), default=result.released_at)
    idle = 0.0
    for ordinal, state in cluster.states.items():
        if ordinal == LOST:
            continue
        stamps = [result.held_at] + [t for t, _ in _steps(state.lines, state.times) if t > result.held_at] + [end]
        idle += sum(b - a for a, b in zip(stamps, stamps[1:], strict=False) if b - a >= IDLE_GAP_SECONDS)
    result.idle_worker_seconds = idle

"""Figure 10 (opt-in, `make bench PEERS=1`): the same run, the same faults, under the chart and
under its peers, on one local cluster.

On a cluster of its own (figure 6's: the control plane, CoreDNS and two real nodes running the
worker image; binaries, the image and the peers' managers built once beforehand and not timed),
with Kubeflow's training-operator (TFJob) and the JobSet controller installed from their own
manifests (tfmw.peers.install). Per round, for each fault, the three systems one after another
(the order rotating by round; a TFJob once with each restart policy its users set), each in
a fresh namespace: the run of values/local.yaml's model
(120 steps, a checkpoint every 20, 2 workers with values/local.yaml's resources), the fault to
worker 1 once the chief has a checkpoint and passed step 50 (tfmw.peers.run). Per run: install
-> the chief's first step; fault -> the group's first step after it; steps trained twice;
whether the run ended Succeeded by itself, and with the weights of the others. Ratios
peer / chart are paired per round; medians and spread over the rounds.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from tfmw.devcluster import controlplane
from tfmw.devcluster.build import KubeBuildError
from tfmw.faults.kube import Kube
from tfmw.image import build as image_build
from tfmw.peers import builds, install, run

from . import plots, stats
from .cluster_kit import cluster_down, cluster_parts, cluster_up
from .figure import BenchRun, measured
from .procs import REPO, BenchError
from .report import image, paragraphs, settings_line, table

FIGURE = "figure 10"
NAN = float("nan")
STEPS, CHECKPOINT_EVERY, FAULT_AFTER_STEP = 120, 20, 50
RUN_TIMEOUT = 420.0  # a run that has not ended by then is reported as such (no admin steps in)
HEADERS = [
    "fault",
    "system",
    "install -> first step s",
    "fault -> resumed s",
    "resumed / chart",
    "steps re-trained",
    "Succeeded by itself",
    "same weights",
]


@dataclass(frozen=True)
class Summary:
    runs: tuple  # run.PeerRun, every round
    rounds: int
    settings: tuple[str, ...]  # one line per peer: its version and what differs from upstream
    faults: tuple[str, ...] = run.FAULTS  # the table's and plot's rows, in order


@dataclass(frozen=True)
class Parts:
    """What the peers' figures build or read first, untimed."""

    bins: dict  # the cluster's binaries
    archive: Path  # the worker image's archive, for the nodes
    ref: str  # the worker image
    values: dict  # values/local.yaml: the run's model and resources
    resources: dict


def prepare(figure: str, log=print) -> Parts:
    """The cluster's binaries, the worker image and both peers' managers, built when not yet."""
    bins, archive = cluster_parts(log, figure)
    try:
        ref = image_build.ensure_image(variant="cpu", base="debian", progress=lambda line: log(f"  {figure}: {line}"))
        for spec in builds.PEERS.values():
            builds.ensure(spec, progress=lambda line: log(f"  {figure}: {line}"))
    except (image_build.ImageError, KubeBuildError) as err:
        raise BenchError(f"{figure}: {err}") from None
    values = yaml.safe_load((REPO / "values" / "local.yaml").read_text())
    return Parts(bins, archive, ref, values, values["workers"]["resources"])


def rotated(order: tuple[str, ...], index: int) -> tuple[str, ...]:
    """Round `index`'s order: each system goes first in turn, so none always has the cores'
    warmest or coldest turn (pure)."""
    turn = index % len(order)
    return tuple(order[turn:]) + tuple(order[:turn])


def measure(quick: bool, log=print) -> Summary:
    parts = prepare(FIGURE, log)
    rounds = 1 if quick else 3
    work = tempfile.mkdtemp(prefix="tfmw-bench-peers-")
    state_dir = os.path.join(work, "state")
    runs = []
    try:
        state, _ = cluster_up(controlplane, state_dir, parts.bins, parts.archive, log, FIGURE)
        try:
            for peer in install.PEERS.values():
                try:
                    install.install(state, peer, say=lambda line: log(f"  {FIGURE}: {line}"))
                except install.PeerError as err:
                    raise BenchError(f"{FIGURE}: {peer.key} could not be installed: {err}") from None
            kube = Kube(state.kubeconfig)
            for index in range(rounds):
                for fault in run.FAULTS:
                    for system in rotated(run.SYSTEMS, index):
                        runs.append(one(kube, state.kubeconfig, system, fault, parts, index, log))
        finally:
            cluster_down(controlplane, state_dir, log, FIGURE)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return Summary(tuple(runs), rounds, tuple(install.settings(peer) for peer in install.PEERS.values()))


def one(kube, kubeconfig: Path, system: str, fault: str, parts: Parts, index: int, log) -> run.PeerRun:
    log(f"  {FIGURE}: round {index + 1}: {fault} under {system}")
    if system == "chart":
        done = run.run_chart(kube, kubeconfig, fault, STEPS, CHECKPOINT_EVERY, FAULT_AFTER_STEP, RUN_TIMEOUT)
    else:
        done = peer_run(kube, system, fault, parts, RUN_TIMEOUT)
    return said(done, index, FIGURE, log)


def peer_run(kube, system: str, fault: str, parts: Parts, timeout: float, **options) -> run.PeerRun:
    """One run of a peer with the figures' image, values, steps and fault point."""
    return run.run_peer(
        kube,
        system,
        fault,
        parts.ref,
        parts.values,
        parts.resources,
        STEPS,
        CHECKPOINT_EVERY,
        FAULT_AFTER_STEP,
        timeout,
        **options,
    )


def said(done: run.PeerRun, index: int, figure: str, log) -> run.PeerRun:
    """`done`, after one line on it (and its last log lines when it did not complete)."""
    r = done.result
    log(
        f"  {figure}: round {index + 1}: {done.fault} under {done.system}: first step {r.seconds_to_first_step:.1f} s, "
        f"resumed {r.seconds_to_resume:.1f} s after the fault, {_retrained(r)} steps re-trained, "
        f"{done.phase or 'not ended'} ({r.reason})"
    )
    if not r.completed:
        for line in r.log_tail[-16:]:
            log(f"    {line}")
    return done


def _retrained(result) -> int | str:
    """Steps trained twice: the step reached before the group broke minus the step it resumed
    from ('-' when it never resumed)."""
    if result.resume_step < 0 or result.step_at_fault < 0:
        return "-"
    return max(result.step_at_fault - result.resume_step, 0)


def _weights(s: Summary) -> str:
    """The weights digest most runs that completed ended with (pure)."""
    digests = [d for r in s.runs if r.result.completed for d in r.result.digests]
    return max(set(digests), key=digests.count) if digests else ""


def _cell(values: list[float]) -> str:
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return "-"
    lo, hi = stats.spread(values)
    return f"{stats.median(values):.1f}" + (f" ({lo:.1f}-{hi:.1f})" if len(values) > 1 else "")


def ratios(s: Summary, system: str, fault: str) -> list[float]:
    """peer / chart of fault -> resumed, paired by round (pure)."""
    chart = [r.result.seconds_to_resume for r in s.runs if r.system == "chart" and r.fault == fault]
    peer = [r.result.seconds_to_resume for r in s.runs if r.system == system and r.fault == fault]
    return [v for v in stats.paired_ratios(peer, chart) if not math.isnan(v)]


def table_rows(s: Summary) -> list[list]:
    reference = _weights(s)
    rows = []
    for fault in s.faults:
        for system in run.SYSTEMS:
            mine = [r for r in s.runs if r.system == system and r.fault == fault]
            if not mine:
                continue
            ratio = ""
            if system != "chart":
                paired = ratios(s, system, fault)
                if paired:
                    lo, hi = stats.spread(paired)
                    ratio = f"{stats.median(paired):.2f}x" + (f" ({lo:.2f}-{hi:.2f})" if len(paired) > 1 else "")
                else:
                    ratio = "never resumed"
            rows.append(
                [
                    fault,
                    system,
                    _cell([r.result.seconds_to_first_step for r in mine]),
                    _cell([r.result.seconds_to_resume for r in mine]),
                    ratio,
                    " / ".join(str(_retrained(r.result)) for r in mine),
                    f"{sum(r.phase == 'Succeeded' for r in mine)} of {len(mine)}",
                    f"{sum(bool(reference) and r.result.digests == {reference} for r in mine)} of {len(mine)}",
                ]
            )
    return rows


def plot(s: Summary, path, subtitle: str) -> None:
    fig, ax = plots.subplots(1, 1, figsize=(9, 4))
    width = 0.8 / len(run.SYSTEMS)
    for offset, system in enumerate(run.SYSTEMS):
        values = []
        for fault in s.faults:
            mine = [r.result.seconds_to_resume for r in s.runs if r.system == system and r.fault == fault]
            mine = [v for v in mine if not math.isnan(v)]
            values.append(stats.median(mine) if mine else 0.0)
        shift = (offset - (len(run.SYSTEMS) - 1) / 2) * width
        ax.bar([i + shift for i in range(len(s.faults))], values, width, label=system)
    ax.set_xticks(range(len(s.faults)), s.faults)
    ax.set_ylabel("fault -> resumed, seconds (median)")
    ax.legend()
    ax.set_title(f"the same run under the chart, a TFJob (two restart policies) and a JobSet\n{subtitle}", fontsize=9)
    plots.save(fig, path)


# ---------------------------------------------------------------- the figure

TITLE = "Figure 10: the same run under the chart, a TFJob and a JobSet"


def run_figure(bench: BenchRun) -> str:
    return measured(
        bench, sys.modules[__name__], "Figure 10: the chart, a TFJob and a JobSet", "fig10_peers.png", section
    )


def section(s, table_rows, headers, load: str) -> str:
    """Figure 10: the chart beside a TFJob and a JobSet, the same run and faults."""
    settings = (
        f"a cluster of the figure's own (figure 6's), the worker image, and the peers installed from their own "
        f"manifests: {'; '.join(s.settings)}. The same run under each: `values/local.yaml`'s model and data "
        f"(the `cnn`, synthetic), {STEPS} steps, a checkpoint every {CHECKPOINT_EVERY}, a progress "
        "line every step, 2 workers with `values/local.yaml`'s resources, checkpoints on a ReadWriteMany claim. "
        "The chart: `helm install` with `values/local.yaml` (its launcher in front of the trainer). The peers run "
        "the built-in trainer itself (`python -m entrypoint.training`), as their users run a TensorFlow script: "
        "a TFJob of 2 `Worker` replicas, `cleanPodPolicy: Running`, the operator's TF_CONFIG, once with "
        "`restartPolicy: OnFailure` (`tfjob-onfailure`: the kubelet restarts a failed container in place) and "
        "once with `restartPolicy: ExitCode` (`tfjob-exitcode`: the operator recreates a pod whose exit code is "
        "128 or more, a signal, and fails the job on 1-127); a JobSet of one Indexed Job of 2 pods, "
        "`restartPolicy: OnFailure`, `backoffLimit` "
        f"{run.workloads.BACKOFF_LIMIT}, `failurePolicy.maxRestarts` {run.workloads.MAX_RESTARTS}, "
        "TF_CONFIG from the pod's index (`python -m entrypoint tf-config`). The fault to worker 1 once the "
        f"chief has a checkpoint and passed step {FAULT_AFTER_STEP}: `kill-trainer` (the training process "
        "SIGKILLed from the host; the pod stays), `delete-worker` (the pod deleted through the API server), "
        "`drain-worker` (its node cordoned, the pod evicted). A run not ended within "
        f"{RUN_TIMEOUT:.0f} s is left as it is: nobody steps in. {s.rounds} round(s), the systems' order "
        "rotating; medians (min-max), the ratios paired per round."
    )
    return paragraphs(
        "## Figure 10: the same run under the chart, a TFJob and a JobSet",
        settings_line(settings, load),
        image("fig10_peers.png", "fault to resumed under the chart, a TFJob and a JobSet"),
        table(headers, table_rows),
        "*Fault -> resumed*: the fault to the chief's first progress line of the group that re-formed "
        "after it; *steps re-trained*: the step reached before the group broke minus the step it resumed "
        "from, per round; *same weights*: the run's final weights digest equals the one most completed "
        "runs of this figure ended with (the runs are deterministic: same seed, same data order).",
    )

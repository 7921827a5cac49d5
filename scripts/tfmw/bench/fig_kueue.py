"""Figure 7: the chart under a real Kueue (the pinned sigs.k8s.io/kueue on `make cluster`).

On a cluster of its own (figure 6's: the control plane, CoreDNS and two real nodes running the
worker image; binaries, the image and Kueue built once beforehand and not timed), with Kueue
installed by scripts/tfmw/devcluster/kueue.py (its own chart, the `statefulset` integration, a
ClusterQueue of three local workers, two WorkloadPriorityClasses):

- per round, the same 2-worker release (values/local.yaml, figure 6's short run) twice, back
  to back, the order alternating: once plain (a namespace Kueue does not manage) and once
  `scheduling.gang=kueue` into the namespace's LocalQueue. Plain: `helm install` started -> the
  chief's first step. Queued: the same, split at the moment the Workload is Admitted (the API
  polled every 0.1 s); the ratio queued / plain per round, median and spread;
- once, a preemption: a long `tfmw-low` release trains until it has checkpoints, then a short
  `tfmw-high` one is installed, which does not fit beside it. Measured from the chart's and
  Kueue's own records: high installed -> low's group stopped (its status `Waiting`, "evicted by
  Kueue at step N") -> high's first step; high's end (its scale to 0) -> low admitted again ->
  low's first step after it (its new chief's log, stamped by the kubelet), and the steps low
  trained twice (the step it stopped at minus the step it resumed from; target 0). The
  readmission's cost is also given as a ratio to the plain rounds' install -> first step.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass

from entrypoint import loglines
from tfmw.devcluster import controlplane, kueue
from tfmw.k8s.api import ApiError, ns_path, time_seconds

from . import cluster_kit, plots, stats
from .figure import BenchRun, measured
from .procs import BenchError
from .report import image, judged, paragraphs, settings_line, table

FIGURE = "figure 7"
POLL = 0.1
LOW_SETS = (
    "training.config.model.name=mlp",  # ~50 steps/s here: low outlasts high's whole run
    "training.config.steps=200000",
    "training.config.logEverySteps=10",
    "training.config.checkpoint.everySteps=50",
)
LOW_CHECKPOINTS = 100  # low's status has a checkpoint at this step before high comes
NAN = float("nan")
HEADERS = ["measure", "median s", "min s", "max s", "ratio (median, min-max)"]


@dataclass(frozen=True)
class QueuedRound:
    plain_first_step: float  # helm install started -> the chief's first step, no Kueue
    admitted: float  # helm install started -> the Workload Admitted
    queued_first_step: float  # helm install started -> the chief's first step, under Kueue

    @property
    def ratio(self) -> float:
        return stats.ratio(self.queued_first_step, self.plain_first_step)


@dataclass(frozen=True)
class Preemption:
    stopped: float = NAN  # high installed -> low's group recorded Waiting (evicted by Kueue)
    high_first_step: float = NAN  # high installed -> high's first step
    readmitted: float = NAN  # high's end (its Workload on hold) -> low admitted again
    resumed: float = NAN  # high's end -> low's first step after readmission
    stopped_at: int = -1  # the step low's group stopped (and saved) at
    resumed_from: int = -1  # the step it resumed from
    problem: str = ""

    @property
    def retrained(self) -> int:
        return self.stopped_at - self.resumed_from if min(self.stopped_at, self.resumed_from) >= 0 else -1


@dataclass(frozen=True)
class Summary:
    rounds: tuple  # QueuedRound each
    preemption: Preemption
    kueue_version: str


def stopped_step(message: str) -> int | None:
    """The step in the chief's 'evicted by Kueue at step N (...)' status message (pure)."""
    m = re.search(r"evicted by Kueue at step (\d+)", message or "")
    return int(m.group(1)) if m else None


def resume_marks(stamped_log: str) -> tuple[int, float] | None:
    """(the step a chief's `tfmw start` resumed from, the kubelet's stamp of its first step
    after it) from `kubectl logs --timestamps` lines; None until that step is there (pure)."""
    resumed_from = None
    for line in stamped_log.splitlines():
        stamp, _, text = line.partition(" ")
        if (step := loglines.int_field(text, loglines.START, "resume_step")) is not None:
            resumed_from = step
        elif resumed_from is not None and loglines.progress_step(text) is not None:
            return resumed_from, time_seconds(stamp)
    return None


def admitted(workload: dict | None) -> bool:
    conditions = ((workload or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Admitted" and c.get("status") == "True" for c in conditions)


def quota_released(workload: dict | None) -> bool:
    """Kueue put the Workload on hold (its StatefulSet at 0): its quota is free again."""
    conditions = ((workload or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "QuotaReserved" and c.get("reason") == "OnHold" for c in conditions)


# ---------------------------------------------------------------- measuring


def _install_args(release: str, namespace: str, sets) -> list[str]:
    return cluster_kit.checked_args(release, namespace, sets, figure=FIGURE)


def _kueue_sets(priority: str | None = None) -> tuple[str, ...]:
    sets = ("scheduling.gang=kueue", f"scheduling.kueue.queueName={kueue.LOCAL_QUEUE}")
    return sets + ((f"scheduling.kueue.priorityClass={priority}",) if priority else ())


def _workload(api, namespace: str, release: str) -> dict | None:
    sts = api.get_or_none(ns_path(namespace, "statefulsets", f"{release}-tf-multiworker", group="apps/v1"))
    if not sts:
        return None
    found = api.items(
        f"{kueue.KUEUE_API}/namespaces/{namespace}/workloads",
        labelSelector=f"kueue.x-k8s.io/job-uid={sts['metadata']['uid']}",
    )
    return found[0] if found else None


def _chief_log(api, namespace: str, release: str, stamped: bool = False) -> str:
    query = {"timestamps": "true"} if stamped else None
    try:
        raw = api.request(
            "GET", ns_path(namespace, "pods", f"{release}-tf-multiworker-0") + "/log", query=query, raw=True
        )
    except ApiError:
        return ""  # no container (yet)
    return raw.decode(errors="replace")


def _status(api, namespace: str, release: str) -> dict:
    path = ns_path(namespace, "configmaps", f"{release}-tf-multiworker-status")
    return (api.get_or_none(path) or {}).get("data") or {}


def _queue_idle(api) -> dict:
    """The ClusterQueue's status once it holds no Workload (the last round's is gone)."""
    cq = api.get_or_none(f"{kueue.KUEUE_API}/clusterqueues/{kueue.CLUSTER_QUEUE}") or {}
    status = cq.get("status") or {}
    busy = [k for k in ("admittedWorkloads", "reservingWorkloads", "pendingWorkloads") if status.get(k)]
    return {} if busy else status or {"idle": True}


def _first_step(state, release: str, namespace: str, sets, managed: bool, log) -> tuple[float, float]:
    """(install started -> Workload Admitted (NaN without Kueue), -> the chief's first step) of
    one release in a namespace of its own; under Kueue, once its ClusterQueue is empty."""
    with cluster_kit.fresh_namespace(state, namespace, log, FIGURE) as api:
        if managed:
            cluster_kit.wait_until(
                lambda: _queue_idle(api), 180, "the ClusterQueue empty of the last round's Workload", FIGURE
            )
            kueue.manage_namespace(api, namespace)
        started = time.monotonic()
        cluster_kit.helm_run(state, *_install_args(release, namespace, sets), figure=FIGURE)
        admitted_at = NAN
        deadline = started + 300
        while time.monotonic() < deadline:
            if managed and math.isnan(admitted_at) and admitted(_workload(api, namespace, release)):
                admitted_at = time.monotonic() - started
            if cluster_kit.has_first_step(_chief_log(api, namespace, release)):
                return admitted_at, time.monotonic() - started
            time.sleep(POLL)
        log(cluster_kit.pods_line(state, namespace, FIGURE))
        if managed:
            workload = (_workload(api, namespace, release) or {}).get("status")
            log(f"  {FIGURE}: its Workload: {json.dumps(workload)[:1500]}")
        raise BenchError(f"{FIGURE}: {namespace}: no first step within 300 s")


def measure_round(state, index: int, log=print) -> QueuedRound:
    pid, sets = os.getpid(), cluster_kit.run_sets(f"bench-kueue-{index}")
    plain_ns, queued_ns = f"bench-plain-{index}-{pid}", f"bench-kueue-{index}-{pid}"

    def plain() -> float:
        log(f"  {FIGURE}: round {index + 1}: the release without Kueue")
        return _first_step(state, "bench", plain_ns, sets, False, log)[1]

    def queued() -> tuple[float, float]:
        log(f"  {FIGURE}: round {index + 1}: the release under Kueue")
        return _first_step(state, "bench", queued_ns, (*sets, *_kueue_sets()), True, log)

    if index % 2 == 0:  # alternate which goes first
        first_step = plain()
        admitted_after, queued_step = queued()
    else:
        admitted_after, queued_step = queued()
        first_step = plain()
    log(
        f"  {FIGURE}: round {index + 1}: first step {first_step:.1f} s plain, {queued_step:.1f} s under Kueue "
        f"(admitted after {admitted_after:.1f} s)"
    )
    return QueuedRound(first_step, admitted_after, queued_step)


def measure_preemption(state, log=print) -> Preemption:
    namespace = f"bench-preempt-{os.getpid()}"
    with cluster_kit.fresh_namespace(state, namespace, log, FIGURE) as api:
        kueue.manage_namespace(api, namespace)
        log(f"  {FIGURE}: low (tfmw-low) trains until it has checkpoints")
        cluster_kit.helm_run(
            state, *_install_args("low", namespace, (*LOW_SETS, *_kueue_sets("tfmw-low"))), figure=FIGURE
        )
        try:
            cluster_kit.wait_until(
                lambda: int(_status(api, namespace, "low").get("lastCheckpointStep") or 0) >= LOW_CHECKPOINTS,
                300,
                "low's first checkpoints",
                FIGURE,
            )
            log(f"  {FIGURE}: high (tfmw-high) installed: Kueue preempts low")
            high_at = time.monotonic()
            high_sets = (*cluster_kit.run_sets("bench-kueue-high"), *_kueue_sets("tfmw-high"))
            cluster_kit.helm_run(state, *_install_args("high", namespace, high_sets), figure=FIGURE)
            waiting = cluster_kit.wait_until(
                lambda: (data := _status(api, namespace, "low")).get("phase") == "Waiting" and data,
                180,
                "low recorded Waiting",
                FIGURE,
            )
            stopped = time.monotonic() - high_at
            stopped_at = stopped_step(waiting.get("message", ""))
            cluster_kit.wait_until(
                lambda: cluster_kit.has_first_step(_chief_log(api, namespace, "high")), 300, "high's first step", FIGURE
            )
            high_first_step = time.monotonic() - high_at
            cluster_kit.wait_until(lambda: quota_released(_workload(api, namespace, "high")), 300, "high's end", FIGURE)
            high_done, high_done_wall = time.monotonic(), time.time()
            cluster_kit.wait_until(
                lambda: admitted(_workload(api, namespace, "low")), 180, "low admitted again", FIGURE
            )
            readmitted = time.monotonic() - high_done
            marks = cluster_kit.wait_until(
                lambda: resume_marks(_chief_log(api, namespace, "low", stamped=True)),
                300,
                "low's first step after readmission",
                FIGURE,
            )
        except BenchError as err:
            log(cluster_kit.pods_line(state, namespace, FIGURE))
            return Preemption(problem=str(err).removeprefix(f"{FIGURE}: "))
    resumed_from, resumed_wall = marks
    result = Preemption(
        stopped=stopped,
        high_first_step=high_first_step,
        readmitted=readmitted,
        resumed=resumed_wall - high_done_wall,
        stopped_at=-1 if stopped_at is None else stopped_at,
        resumed_from=resumed_from,
    )
    log(
        f"  {FIGURE}: preemption: low stopped {result.stopped:.1f} s after high's install (at step "
        f"{result.stopped_at}), high's first step {result.high_first_step:.1f} s; after high's end low was "
        f"readmitted in {result.readmitted:.1f} s and resumed from step {result.resumed_from} in {result.resumed:.1f} s"
    )
    return result


def measure(quick: bool, log=print) -> Summary:
    bins, archive = cluster_kit.cluster_parts(log, FIGURE)
    rounds = 1 if quick else 3
    work = tempfile.mkdtemp(prefix="tfmw-bench-kueue-")
    state_dir = os.path.join(work, "state")
    try:
        state, _ = cluster_kit.cluster_up(controlplane, state_dir, bins, archive, log, FIGURE)
        try:
            try:
                kueue.install(state, say=lambda line: log(f"  {FIGURE}: {line}"))
            except kueue.KueueError as err:
                raise BenchError(f"{FIGURE}: Kueue could not be installed: {err}") from None
            results = tuple(measure_round(state, r, log) for r in range(rounds))
            preemption = measure_preemption(state, log)
        finally:
            cluster_kit.cluster_down(controlplane, state_dir, log, FIGURE)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return Summary(results, preemption, kueue.version())


# ---------------------------------------------------------------- reporting


def _row(name: str, values, ratios=None) -> list:
    lo, hi = stats.spread(values)
    ratio = ""
    if ratios:
        r_lo, r_hi = stats.spread(ratios)
        ratio = f"{stats.median(ratios):.2f}x ({r_lo:.2f}-{r_hi:.2f})"
    return [name, f"{stats.median(values):.1f}", f"{lo:.1f}", f"{hi:.1f}", ratio]


def _one(name: str, value: float, ratio: float = NAN) -> list:
    shown = "-" if math.isnan(value) else f"{value:.1f}"
    return [name, shown, shown, shown, "" if math.isnan(ratio) else f"{ratio:.2f}x"]


def table_rows(s: Summary) -> list[list]:
    plain = [r.plain_first_step for r in s.rounds]
    rows = [
        _row("install -> first step, plain StatefulSet", plain),
        _row("install -> Workload admitted, under Kueue", [r.admitted for r in s.rounds]),
        _row(
            "install -> first step, under Kueue", [r.queued_first_step for r in s.rounds], [r.ratio for r in s.rounds]
        ),
    ]
    p = s.preemption
    if p.problem:
        rows.append([f"preemption: not measured ({p.problem})", "-", "-", "-", ""])
        return rows
    rows += [
        _one("preemption: high installed -> low's group stopped", p.stopped),
        _one("preemption: high installed -> high's first step", p.high_first_step),
        _one("high's end -> low admitted again", p.readmitted),
        _one("high's end -> low's first step (resumed)", p.resumed, stats.ratio(p.resumed, stats.median(plain))),
        [
            f"steps low trained twice (stopped at {p.stopped_at}, resumed from {p.resumed_from})",
            str(p.retrained),
            "",
            "",
            "",
        ],
    ]
    return rows


def plot(s: Summary, path, subtitle: str) -> None:
    fig, ax = plots.subplots(1, 1, figsize=(8, 4))
    names = ["plain\nfirst step", "Kueue\nadmitted", "Kueue\nfirst step"]
    values = [
        stats.median([r.plain_first_step for r in s.rounds]),
        stats.median([r.admitted for r in s.rounds]),
        stats.median([r.queued_first_step for r in s.rounds]),
    ]
    if not s.preemption.problem:
        names += ["preempted:\nlow stopped", "high's end:\nlow readmitted", "high's end:\nlow resumed"]
        values += [s.preemption.stopped, s.preemption.readmitted, s.preemption.resumed]
    ax.bar(names, [0.0 if math.isnan(v) else v for v in values], color="#4c72b0")
    ax.set_ylabel("seconds (median)")
    ax.set_title(f"Kueue {s.kueue_version} on make cluster\n{subtitle}", fontsize=9)
    plots.save(fig, path)


# ---------------------------------------------------------------- the figure

TITLE = "Figure 7: the chart under a real Kueue"


def run_figure(bench: BenchRun) -> str:
    return measured(bench, sys.modules[__name__], "Figure 7: under Kueue", "fig7_kueue.png", section)


def kueue_text(s) -> str:
    """Figure 7's reading (pure)."""
    ratios = [r.ratio for r in s.rounds]
    plain = stats.median([r.plain_first_step for r in s.rounds])
    queued = stats.median([r.queued_first_step for r in s.rounds])
    admitted = stats.median([r.admitted for r in s.rounds])
    ratio = stats.median(ratios)
    text = (
        f"A 2-worker release that fits the quota reaches its first step {queued:.1f} s after `helm install` under "
        f"Kueue against {plain:.1f} s without it: a median ratio of {ratio:.2f}x "
        f"({judged(min(ratios), max(ratios), ratio)}). Kueue admitted the Workload {admitted:.1f} s after the "
        "install: its webhooks gate each pod as it is created, its StatefulSet integration builds the Workload, "
        "the queue admits it and the pods are ungated; the rest (the scheduler, the kubelets, the launcher, "
        "TensorFlow, the model) is the same as without Kueue."
    )
    p = s.preemption
    if p.problem:
        return text + f" The preemption was not measured: {p.problem}."
    exact = "none" if p.retrained == 0 else str(p.retrained)
    return text + (
        f" Preempted by a higher WorkloadPriorityClass, the running group stopped {p.stopped:.1f} s after the "
        f"higher-priority release was installed (each worker's SIGTERM: the group's checkpoint at step "
        f"{p.stopped_at}, the chief recording `Waiting`), and the higher-priority release took its first step "
        f"{p.high_first_step:.1f} s after its install. Once it ended (its scale to 0 puts its Workload on hold), "
        f"Kueue admitted the preempted group again in {p.readmitted:.1f} s, and it trained again "
        f"{p.resumed:.1f} s after that end ({stats.ratio(p.resumed, plain):.2f}x a fresh install's first step), "
        f"from step {p.resumed_from}: steps trained twice: {exact}."
    )


def section(s, table_rows, headers, load: str) -> str:
    """Figure 7's section of docs/benchmarks.md (pure)."""
    return paragraphs(
        "## Figure 7: the chart under a real Kueue",
        image("fig7_kueue.png", "install to admitted and first step with and without Kueue; preemption"),
        settings_line(
            f"figure 6's cluster (its own, two nodes) with Kueue {s.kueue_version} built from its Go module and "
            "installed with its own chart (`scripts/tfmw/devcluster/kueue.py`: the `statefulset` integration, "
            "WaitForPodsReady at its defaults, one ClusterQueue of 1500m CPU, i.e. three local workers). Per "
            "round, figure 6's short 2-worker release (`values/local.yaml`, 10 steps, a fresh run id) "
            "installed twice, back to back, the order alternating: plain, in a namespace Kueue does not "
            "manage, and with `scheduling.gang=kueue` into the namespace's LocalQueue; the Workload and the "
            "chief's log polled every 0.1 s. Once, a preemption: a long `tfmw-low` release (the `mlp` model, a "
            f"checkpoint every 50 steps) past step {LOW_CHECKPOINTS}, then a short `tfmw-high` one that "
            f"does not fit beside it. {len(s.rounds)} round(s); medians, the ratios paired per round.",
            load,
        ),
        table(headers, table_rows),
        "**Reading it.** " + kueue_text(s),
    )

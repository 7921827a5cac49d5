"""Figure 6: the local Kubernetes cluster (`make cluster`), and the chart on it beside `make local`.

One run measures, on a cluster of its own (scripts/tfmw/devcluster/controlplane.py: the control plane,
CoreDNS and two real nodes, each a kubelet + containerd (runc, CNI) + kube-proxy in a network
and mount namespace of its own, running the project's worker image; binaries and the image
built once beforehand and not timed), what issue 19's "Speed and budget" asks:

- `make cluster` ready time: controlplane.up's own `ready_seconds` (state folder made ->
  the worker image in both nodes, every node Ready, CoreDNS ready and the default
  ServiceAccount there), and whether the image was imported into the nodes by that `up`
  (and how long the import took, as up() reports it) or already in their containerd cache.
  When the first `up` imported it, the cluster is stopped and started again, and the second
  `up` (the image cached) is measured too: the one a user gets every time but the first.
  Then `make cluster-down` time;
- per round, a 2-worker release of the chart (values/local.yaml, a short run): how long
  `helm install` (no --wait) takes, the time from its return until both worker pods are
  Running (the API polled every 0.1 s), and the time from `helm install` starting to the
  chief's first training step (`tfmw progress step=1/..`, its log polled through the API
  server every 0.1 s);
- in the same round, `make local` (`python -m tfmw.localrun`, the same values and --set
  items) from process start to the first step, figure 2's machinery (`time_to_first_step`);
- in the same round, a fault pair from the fault harness (scripts/tfmw/faults/), the same steps,
  checkpoint interval and fault step for both: on the cluster `delete-worker` (the worker pod
  deleted through the API server, recreated by the StatefulSet controller), on `make local`
  `kill-worker` (SIGKILL of the worker, restarted by make local's kubelet): fault -> the
  group's first step after it resumed, and on the cluster fault -> the recreated pod Running;
- the ratios cluster / `make local` per round (paired: measured back to back, alternating
  which goes first), median and spread;
- once, after the rounds (issue 20): a resize, 2 -> 3 -> 2 workers by `helm upgrade --set
  workers.replicas=N` of a running release: upgrade started -> the chief re-forming the group
  at the new size and -> the group's first step at it (the chief's log, stamped by its
  kubelet), and whether it resumed from the step the old group stopped at;
- in the same round, the cluster's voluntary disruptions from the fault harness
  (scripts/tfmw/faults/disruptions.py), the same run: `drain-worker` (worker 1's node cordoned,
  worker 1 evicted through the Eviction API), `preempt-worker` (a higher-priority pod takes worker
  1's node; removed once the run is Waiting: "capacity returned"), `suspend` (`suspend: true`,
  then `suspend: false` once Suspended): disruption -> the group resumed, for the last two also
  after the room or the workers came back, the steps re-trained (target 0), and each as a ratio
  to the same round's pod delete;
- then (issue 20): the fault harness's `node-partition`: worker 1's node cut
  off with the chart's defaults (workers.nodeLossTolerationSeconds, the launcher's lost-peer
  watch), fault -> the replacement pod Running and -> the group resumed (target <= 90 s),
  steps lost, and what the cut-off pod wrote once the link healed (must be none).

Here: the figure's settings, what a run found (pure: its rounds, pairs, resizes, disruptions and
their Summary), its table and its plot. fig_cluster_measure measures it on a cluster of its own
(cluster_kit) and is the figure's entry; fig_cluster_report writes its section.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from entrypoint import loglines
from tfmw.faults import disruptions
from tfmw.k8s.api import time_seconds

from . import plots, stats
from .cluster_kit import Up
from .report import parts_cell

READY_TARGET_S = 20.0  # issues 10 and 19: `make cluster` ready within 20 s once built
RUNNING_TARGET_S = 5.0  # issues 10 and 19: both pods Running within 5 s of helm install returning, image present
WORKERS = 2
# The fault pair (scripts/tfmw/faults' defaults, as figure 3 runs them): the same for both sides.
FAULT_STEPS = 120
FAULT_CHECKPOINT_EVERY = 20
FAULT_AFTER_STEP = 50
# Each of the harness's waits (to the fault, then to the run's end): generous, as a loaded
# 2-core machine slows a 1-CPU-limited pod's steps several times; only a failure waits this long.
FAULT_TIMEOUT = 600
CLUSTER_FAULT = "delete-worker"
DISRUPTIONS = disruptions.DISRUPTIONS  # drain-worker, preempt-worker, suspend
LOCAL_FAULT = "kill-worker"
NODE_FAULT = "node-partition"
NODE_LOSS_TARGET_S = 90.0  # issue 20: a lost node -> the group resumed, with the chart's defaults
RESIZES = (3, 2)  # issue 20: a 2-worker run grown to 3, then shrunk back, by helm upgrade
RESIZE_EVERY = 50
RESIZE_SETS = (
    "training.config.model.name=mlp",  # ~50 steps/s here: the run outlasts both resizes
    "training.config.steps=200000",
    "training.config.logEverySteps=1",  # the first step at the new size is logged
    f"training.config.checkpoint.everySteps={RESIZE_EVERY}",
)
NAN = float("nan")


def running_workers(pods: list[dict]) -> int:
    """Worker pods in phase Running and not being deleted (pure)."""
    return sum(
        1
        for p in pods
        if (p.get("status") or {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    )


def wants_second_up(first: Up) -> bool:
    """A first `up` that imported the image is followed by a down and a second `up`, which
    finds the image in the nodes' cache: the ready time of every `make cluster` after the
    first (pure)."""
    return first.image == "imported"


@dataclass(frozen=True)
class ClusterRound:
    install_seconds: float  # helm install, start to return
    return_to_running: float  # helm install returned -> both worker pods Running
    install_to_first_step: float  # helm install started -> the chief's first step
    local_first_step: float  # make local started -> its chief's first step


@dataclass(frozen=True)
class FaultPair:
    """One round's fault pair: fault -> the group's first step after resuming, on the cluster
    (a deleted worker pod) and on `make local` (a killed worker); NaN where not measured."""

    cluster_resumed: float
    local_resumed: float
    pod_running: float = NAN  # cluster: pod deleted -> its replacement Running
    cluster_steps_lost: int = -1
    local_steps_lost: int = -1
    problem: str = ""  # why the pair is not measured; "" when both recovered

    @property
    def measured(self) -> bool:
        return not self.problem


def not_counted(side: str, result) -> str:
    """Why one side of a fault pair does not count ("" when it does) (pure)."""
    if not result.completed:
        return f"{side} {result.scenario}: {result.reason or 'did not complete'}"
    if math.isnan(result.seconds_to_resume):
        return f"{side} {result.scenario}: no step after the fault seen"
    return ""


def fault_pair(cluster, local) -> FaultPair:
    """A FaultPair from the harness's two FaultResults (scripts/tfmw/faults/) (pure)."""
    problem = "; ".join(p for p in (not_counted("cluster", cluster), not_counted("make local", local)) if p)
    return FaultPair(
        cluster_resumed=cluster.seconds_to_resume,
        local_resumed=local.seconds_to_resume,
        pod_running=cluster.seconds_to_pod_running,
        cluster_steps_lost=cluster.steps_lost,
        local_steps_lost=local.steps_lost,
        problem=problem,
    )


@dataclass(frozen=True)
class Resize:
    """One `helm upgrade --set workers.replicas=N` of a training release, by the chief's log
    (its kubelet's timestamps; NaN where not seen)."""

    workers: tuple  # (before, after)
    reformed: float = NAN  # upgrade started -> the chief re-forming the group at the new size
    resumed: float = NAN  # upgrade started -> the group's first step at the new size
    stopped_at: int = -1  # the step the old group stopped (and saved) at
    resumed_from: int = -1  # the step the new group resumed from
    problem: str = ""

    @property
    def exact(self) -> bool:
        return self.stopped_at == self.resumed_from >= 0


def resize_marks(stamped_log: str, workers: tuple, upgraded_at: float) -> Resize | None:
    """The Resize a chief's log shows (`kubectl logs --timestamps` lines): its last `tfmw stopped`
    before `re-forming the group at N workers`, that line, the next attempt's `tfmw start`
    and its first step; None until that step is there (pure)."""
    stopped = reformed = resumed_from = None
    for line in stamped_log.splitlines():
        stamp, _, text = line.partition(" ")
        if reformed is None:
            if (step := loglines.int_field(text, loglines.STOPPED, "step")) is not None:
                stopped = step
            elif loglines.said(text, loglines.LAUNCHER, f"re-forming the group at {workers[1]} workers"):
                reformed = time_seconds(stamp)
        elif resumed_from is None:
            resumed_from = loglines.int_field(text, loglines.START, "resume_step")
        elif loglines.progress_step(text) is not None:
            return Resize(
                workers,
                reformed=reformed - upgraded_at,
                resumed=time_seconds(stamp) - upgraded_at,
                stopped_at=-1 if stopped is None else stopped,
                resumed_from=resumed_from,
            )
    return None


@dataclass(frozen=True)
class Summary:
    ready_seconds: float  # the last `up`'s (the cluster the rounds ran on)
    up_seconds: float
    down_seconds: float
    install_seconds: float
    return_to_running: float
    return_to_running_max: float
    install_to_first_step: float
    running_to_first_step: float  # the pods' own start: Running -> the chief's first step
    local_first_step: float
    ratio: float  # median of the per-round ratios cluster / local
    ratio_min: float
    ratio_max: float
    rounds: int
    pairs: tuple = ()  # (cluster, local) seconds to the first step, per round
    ups: tuple = ()  # every Up, in order
    fault_cluster_resumed: float = NAN  # medians over the measured fault pairs
    fault_local_resumed: float = NAN
    fault_pod_running: float = NAN
    fault_ratio: float = NAN  # median of the per-round ratios delete-worker / kill-worker
    fault_ratio_min: float = NAN
    fault_ratio_max: float = NAN
    fault_pairs: tuple = ()  # (cluster, local) fault -> resumed seconds, per measured round
    fault_steps_lost: tuple = (-1, -1)  # (cluster, local): the most steps lost in any measured round
    fault_problems: tuple = ()  # why a round's pair is not measured
    node_resumed: float = NAN  # node-partition: fault -> the group resumed
    node_pod_running: float = NAN  # fault -> the replacement pod Running
    node_steps_lost: int = -1
    node_fenced: str = ""  # what the cut-off pod wrote after the heal ("none")
    node_problem: str = ""  # why it is not measured ("" when it is, or was not run)
    node_parts: tuple = ()  # (part, seconds): node cut off -> resumed by the harness's NODE_PARTS
    resizes: tuple = ()  # every Resize, in order
    disruptions: tuple = ()  # every Disrupted, in DISRUPTIONS' order

    @property
    def fault_rounds(self) -> int:
        return len(self.fault_pairs)

    @property
    def cached_up(self):
        """The last `up` that found the image in the nodes, else None."""
        return next((u for u in reversed(self.ups) if u.image == "cached"), None)

    @property
    def import_up(self):
        """The first `up` that imported the image, else None."""
        return next((u for u in self.ups if u.image == "imported"), None)


@dataclass(frozen=True)
class Disrupted:
    """One voluntary disruption over the rounds: medians, and the paired ratio to the pod delete."""

    scenario: str
    resumed: float = NAN  # disruption -> the group's first step after it
    after_return: float = NAN  # the room / the workers given back -> that step (held scenarios)
    ratio: float = NAN  # disruption -> resumed / the same round's pod delete -> resumed
    ratio_min: float = NAN
    ratio_max: float = NAN
    steps_lost: int = -1  # the most in any round (target 0: the group stops at its checkpoint)
    rounds: int = 0
    problems: tuple = ()


def disrupted(scenario: str, pairs: list) -> Disrupted:
    """`pairs`: per round, (the scenario's FaultResult, the round's pod-delete seconds) (pure)."""
    problems = tuple(p for p in (not_counted("cluster", r) for r, _ in pairs) if p)
    ok = [(r, delete) for r, delete in pairs if not not_counted("cluster", r) and not math.isnan(delete)]
    if not ok:
        return Disrupted(scenario, problems=problems or ("not run",))
    ratios = stats.paired_ratios([r.seconds_to_resume for r, _ in ok], [delete for _, delete in ok])
    lo, hi = stats.spread(ratios)
    held = [r.seconds_to_resume - r.seconds_held for r, _ in ok if not math.isnan(r.seconds_held)]
    return Disrupted(
        scenario,
        resumed=stats.median([r.seconds_to_resume for r, _ in ok]),
        after_return=stats.median(held) if held else NAN,
        ratio=stats.median(ratios),
        ratio_min=lo,
        ratio_max=hi,
        steps_lost=max(r.steps_lost for r, _ in ok),
        rounds=len(ok),
        problems=problems,
    )


def node_fields(result) -> dict:
    """The Summary's node-partition fields from the harness's FaultResult (None: not run) (pure)."""
    if result is None:
        return {}
    problem = not_counted("cluster", result)
    if problem:
        return {"node_problem": problem}
    return dict(
        node_resumed=result.seconds_to_resume,
        node_pod_running=result.seconds_to_pod_running,
        node_steps_lost=result.steps_lost,
        node_fenced=result.fenced_writes or "-",
        node_parts=tuple(result.node_parts.items()),
    )


def summarize(
    ups: list[Up],
    down_seconds: float,
    rounds: list[ClusterRound],
    fault_pairs: list[FaultPair] = (),
    node=None,
    resizes: list[Resize] = (),
    disruption_pairs: dict | None = None,
) -> Summary:
    if not ups:
        raise ValueError("no `make cluster` measured")
    if not rounds:
        raise ValueError("no rounds measured")
    ratios = stats.paired_ratios([r.install_to_first_step for r in rounds], [r.local_first_step for r in rounds])
    lo, hi = stats.spread(ratios)
    measured = [p for p in fault_pairs if p.measured]
    faults = {}
    if measured:
        fault_ratios = stats.paired_ratios([p.cluster_resumed for p in measured], [p.local_resumed for p in measured])
        flo, fhi = stats.spread(fault_ratios)
        running = [p.pod_running for p in measured if not math.isnan(p.pod_running)]
        faults = dict(
            fault_cluster_resumed=stats.median([p.cluster_resumed for p in measured]),
            fault_local_resumed=stats.median([p.local_resumed for p in measured]),
            fault_pod_running=stats.median(running) if running else NAN,
            fault_ratio=stats.median(fault_ratios),
            fault_ratio_min=flo,
            fault_ratio_max=fhi,
            fault_pairs=tuple((p.cluster_resumed, p.local_resumed) for p in measured),
            fault_steps_lost=(max(p.cluster_steps_lost for p in measured), max(p.local_steps_lost for p in measured)),
        )
    last = ups[-1]
    return Summary(
        ready_seconds=last.ready_seconds,
        up_seconds=last.wall_seconds,
        down_seconds=down_seconds,
        install_seconds=stats.median([r.install_seconds for r in rounds]),
        return_to_running=stats.median([r.return_to_running for r in rounds]),
        return_to_running_max=max(r.return_to_running for r in rounds),
        install_to_first_step=stats.median([r.install_to_first_step for r in rounds]),
        running_to_first_step=stats.median(
            [r.install_to_first_step - r.install_seconds - r.return_to_running for r in rounds]
        ),
        local_first_step=stats.median([r.local_first_step for r in rounds]),
        ratio=stats.median(ratios),
        ratio_min=lo,
        ratio_max=hi,
        rounds=len(rounds),
        pairs=tuple((r.install_to_first_step, r.local_first_step) for r in rounds),
        ups=tuple(ups),
        fault_problems=tuple(p.problem for p in fault_pairs if p.problem),
        **faults,
        **node_fields(node),
        resizes=tuple(resizes),
        disruptions=tuple(disrupted(s, pairs) for s, pairs in (disruption_pairs or {}).items()),
    )


def verdict(measured: float, target: float) -> str:
    return f"met (target ≤ {target:g} s)" if measured <= target else f"MISSED (target ≤ {target:g} s)"


def up_label(up: Up, index: int, count: int) -> str:
    """The table's name for one `up` (pure)."""
    which = "" if count == 1 else ("first `up`, " if index == 0 else "second `up` after a `cluster-down`, ")
    image = {
        "imported": f"the image imported into {up.import_nodes} node(s) in {up.import_seconds:.1f} s",
        "cached": "the image already in both nodes' containerd cache",
    }.get(up.image, "the image import not reported")
    return f"`make cluster` ready ({which}{image}; controlplane.up's ready_seconds)"


def ratio_cell(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f}x"


HEADERS = ["measurement", "seconds", "against"]


def table_rows(s: Summary) -> list[list]:
    ups = s.ups or (Up(s.ready_seconds, s.up_seconds),)
    rows = [
        [up_label(u, i, len(ups)), u.ready_seconds, verdict(u.ready_seconds, READY_TARGET_S)] for i, u in enumerate(ups)
    ]
    not_measured = "; ".join(s.fault_problems)
    rows += [
        [
            "`make cluster` wall time (up() call, incl. bridge and certificates)",
            ", ".join(f"{u.wall_seconds:.1f}" for u in ups),
            "-" if len(ups) == 1 else "per `up`, in order",
        ],
        ["`make cluster-down` (every process, namespace and the bridge gone)", s.down_seconds, "-"],
        ["`helm install` of a 2-worker release (no --wait), median", s.install_seconds, "-"],
        [
            "helm install returned → both worker pods Running, median (max)",
            f"{s.return_to_running:.2f} ({s.return_to_running_max:.2f})",
            verdict(s.return_to_running_max, RUNNING_TARGET_S),
        ],
        ["helm install → first training step on the cluster, median", s.install_to_first_step, "-"],
        ["of which: pods Running → first training step, median", s.running_to_first_step, "-"],
        ["`make local` start → first training step, median", s.local_first_step, "-"],
        [
            "ratio cluster / `make local` to the first step (paired per round), median",
            f"{s.ratio:.2f}x",
            f"min {s.ratio_min:.2f}x, max {s.ratio_max:.2f}x over {s.rounds} round(s): "
            + ", ".join(f"{cluster:.1f} / {local:.1f} s" for cluster, local in s.pairs),
        ],
        [
            f"pod delete → group resumed on the cluster (`{CLUSTER_FAULT}`), median",
            s.fault_cluster_resumed,
            f"{s.fault_steps_lost[0]} step(s) lost (≤ {FAULT_CHECKPOINT_EVERY})" if s.fault_rounds else "-",
        ],
        ["of which: pod delete → the recreated pod Running, median", s.fault_pod_running, "-"],
        [
            f"`make local` `{LOCAL_FAULT}` → group resumed, median",
            s.fault_local_resumed,
            f"{s.fault_steps_lost[1]} step(s) lost (≤ {FAULT_CHECKPOINT_EVERY})" if s.fault_rounds else "-",
        ],
        [
            f"ratio `{CLUSTER_FAULT}` / `{LOCAL_FAULT}` fault → resumed (paired per round), median",
            ratio_cell(s.fault_ratio),
            (
                f"min {s.fault_ratio_min:.2f}x, max {s.fault_ratio_max:.2f}x over {s.fault_rounds} round(s): "
                + ", ".join(f"{cluster:.1f} / {local:.1f} s" for cluster, local in s.fault_pairs)
                + (f"; not measured: {not_measured}" if not_measured else "")
            )
            if s.fault_rounds
            else "NOT measured" + (f": {not_measured}" if not_measured else ""),
        ],
    ]
    if s.node_problem or not math.isnan(s.node_resumed):
        rows += [
            [
                f"worker 1's node cut off (`{NODE_FAULT}`, the chart's defaults) → group resumed",
                s.node_resumed,
                f"NOT measured: {s.node_problem}"
                if s.node_problem
                else f"{verdict(s.node_resumed, NODE_LOSS_TARGET_S)}; {s.node_steps_lost} step(s) lost "
                f"(≤ {FAULT_CHECKPOINT_EVERY}); the cut-off pod wrote after the heal: {s.node_fenced}",
            ],
            ["of which: node cut off → the replacement pod Running", s.node_pod_running, "-"],
        ]
        if s.node_parts:
            rows.append(
                [
                    "node cut off → group resumed, in parts (Event times: 1 s resolution)",
                    sum(seconds for _, seconds in s.node_parts),
                    parts_cell(s.node_parts),
                ]
            )
    what = {
        "drain-worker": "worker 1's node drained (cordon, eviction)",
        "preempt-worker": "worker 1 preempted by a higher priority",
        "suspend": "`suspend: true`, then `suspend: false`",
    }
    for d in s.disruptions:
        rows.append(
            [
                f"{what.get(d.scenario, d.scenario)} (`{d.scenario}`) → group resumed, median",
                d.resumed,
                (
                    f"{ratio_cell(d.ratio)} the pod delete (min {ratio_cell(d.ratio_min)}, max "
                    f"{ratio_cell(d.ratio_max)} over {d.rounds} round(s)); {d.steps_lost} step(s) re-trained (target 0)"
                    + (f"; not measured: {'; '.join(d.problems)}" if d.problems else "")
                )
                if d.rounds
                else "NOT measured: " + "; ".join(d.problems),
            ]
        )
        if not math.isnan(d.after_return):
            rows.append(
                [
                    "of which: "
                    + ("the room returned" if d.scenario == "preempt-worker" else "`suspend: false`")
                    + " → group resumed, median",
                    d.after_return,
                    "-",
                ]
            )
    for r in s.resizes:
        before, after = r.workers
        rows += [
            [
                f"`helm upgrade --set workers.replicas={after}` ({before} → {after} workers) → group resumed",
                r.resumed,
                f"NOT measured: {r.problem}"
                if r.problem
                else f"resumed from step {r.resumed_from}, "
                + (
                    "the step the group stopped at (no step lost)"
                    if r.exact
                    else f"NOT the step the group stopped at ({r.stopped_at})"
                ),
            ],
            ["of which: upgrade → the chief re-forming the group", r.reformed, "-"],
        ]
    return rows


def _bar_value(value: float) -> float:
    return 0.0 if math.isnan(value) else value


def plot(s: Summary, path, subtitle: str) -> None:
    ups = s.ups or (Up(s.ready_seconds, s.up_seconds),)
    up_rows = [f"make cluster: ready ({'image ' + u.image if u.image != 'unknown' else 'image ?'})" for u in ups]
    if len(set(up_rows)) < len(up_rows):
        up_rows = [f"{row} #{i + 1}" for i, row in enumerate(up_rows)]
    rows = [
        *up_rows,
        "make cluster-down",
        "cluster: helm install → first step",
        "make local: start → first step",
        "cluster: pod delete → resumed",
        f"make local: {LOCAL_FAULT} → resumed",
    ]
    fig, ax = plots.subplots(figsize=(10, 2.2 + 0.45 * len(rows)))
    values = []
    for row, u in zip(up_rows, ups, strict=True):
        if u.image == "imported":
            ax.barh(row, u.import_seconds, color="lightsteelblue", height=0.55, label="image import (in ready)")
            ax.barh(row, u.ready_seconds - u.import_seconds, left=u.import_seconds, color="tab:blue", height=0.55)
        else:
            ax.barh(row, u.ready_seconds, color="tab:blue", height=0.55)
        values.append(u.ready_seconds)
    ax.barh("make cluster-down", s.down_seconds, color="tab:blue", height=0.55)
    values.append(s.down_seconds)
    left = 0.0
    for width, color, label in (
        (s.install_seconds, "tab:green", "helm install (returns)"),
        (s.return_to_running, "yellowgreen", "→ both pods Running"),
        (s.running_to_first_step, "tab:orange", "→ first step (pods' own start)"),
    ):
        ax.barh(rows[len(ups) + 1], width, left=left, color=color, height=0.55, label=label)
        left += width
    ax.barh(rows[len(ups) + 2], s.local_first_step, color="tab:purple", height=0.55)
    values += [s.install_to_first_step, s.local_first_step]
    running = _bar_value(s.fault_pod_running)
    ax.barh(rows[-2], running, color="tab:red", height=0.55, label="pod delete → recreated pod Running")
    ax.barh(
        rows[-2],
        max(_bar_value(s.fault_cluster_resumed) - running, 0.0),
        left=running,
        color="salmon",
        height=0.55,
        label="→ group resumed (first step after the fault)",
    )
    ax.barh(rows[-1], _bar_value(s.fault_local_resumed), color="tab:purple", height=0.55)
    values += [s.fault_cluster_resumed, s.fault_local_resumed]
    for y, value in enumerate(values):
        ax.text(
            _bar_value(value),
            y,
            f" {value:.1f} s" if not math.isnan(value) else " not measured",
            va="center",
            fontsize=8,
        )
    ax.axvline(READY_TARGET_S, color="tab:blue", ls=":", lw=1, label=f"ready target {READY_TARGET_S:g} s")
    ax.invert_yaxis()
    ax.set_xlim(0, max([READY_TARGET_S, *(_bar_value(v) for v in values)]) * 1.25)
    ax.set_xlabel("seconds (medians)")
    fault = (
        f"; pod delete → resumed {ratio_cell(s.fault_ratio)} make local's kill-worker"
        if s.fault_rounds
        else "; pod delete → resumed not measured"
    )
    ax.set_title(
        f"Figure 6: the local cluster (2 real nodes, the worker image) beside make local, medians of "
        f"{s.rounds} paired round(s)\nhelm install → first step {s.ratio:.2f}x make local's{fault}"
        f"\n{subtitle}",
        fontsize=9,
    )
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    ax.legend(unique.values(), unique.keys(), fontsize=7, loc="lower right")
    plots.save(fig, path)

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
- in the same round, `make local` (`python -m tfmw.localrun.run`, the same values and --set
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
"""

from __future__ import annotations

import collections
import contextlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from entrypoint.lifecycle import rfc3339
from entrypoint.loglines import progress_step
from tfmw.chart.helmkit import ToolError, find_helm, helm_error_line
from tfmw.deploy import install
from tfmw.devcluster import controlplane
from tfmw.devcluster.build import KubeBuildError, ensure_binaries
from tfmw.faults import cluster as fault_cluster
from tfmw.faults import disruptions
from tfmw.faults import local as fault_local
from tfmw.image import build as image
from tfmw.k8s.api import ApiError, ns_path, time_seconds
from tfmw.localrun.podspec import LocalRunError

from . import plots, stats
from .fig_launcher import time_to_first_step
from .procs import PY, BenchError, base_env

READY_TARGET_S = 20.0  # issues 10 and 19: `make cluster` ready within 20 s once built
RUNNING_TARGET_S = 5.0  # issues 10 and 19: both pods Running within 5 s of helm install returning, image present
WORKERS = 2
POLL = 0.1
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


def run_sets(run_id: str) -> list[str]:
    """The --set items of every measured run, cluster and local alike: a short run whose first
    step is logged; each run a fresh id (pure)."""
    return [
        "training.config.steps=10",
        "training.config.logEverySteps=1",
        "training.config.checkpoint.everySteps=10",
        f"training.runId={run_id}",
    ]


def running_workers(pods: list[dict]) -> int:
    """Worker pods in phase Running and not being deleted (pure)."""
    return sum(
        1
        for p in pods
        if (p.get("status") or {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    )


def has_first_step(log_text: str) -> bool:
    return any(progress_step(line) is not None for line in log_text.splitlines())


# controlplane.load_images says one of these about the worker image (through up()'s `say`).
IMAGE_LINE = re.compile(
    r"cluster: image (?P<refs>\S.*?) (?:imported into (?P<nodes>\d+) node\(s\) in "
    r"(?P<seconds>[0-9.]+)s|(?P<cached>already in every node))"
)


@dataclass(frozen=True)
class Up:
    """One `make cluster` (controlplane.up): its ready_seconds, the call's wall time, and what
    it said about the worker image: "imported" (import_seconds: up()'s own figure, every node
    importing in parallel), "cached" (already in every node's containerd) or "unknown"."""

    ready_seconds: float
    wall_seconds: float
    image: str = "unknown"
    import_seconds: float = NAN
    import_nodes: int = 0


def image_import(lines: list[str]) -> tuple[str, float, int]:
    """(image, import seconds, nodes) from up()'s `say` lines: the last line about the worker
    image decides; ("unknown", nan, 0) when up() said nothing about it (pure)."""
    found = ("unknown", NAN, 0)
    for line in lines:
        match = IMAGE_LINE.search(line)
        if match is None:
            continue
        found = (
            ("cached", NAN, 0)
            if match["cached"]
            else ("imported", float(match["seconds"].rstrip(".")), int(match["nodes"]))
        )
    return found


def make_up(ready_seconds: float, wall_seconds: float, lines: list[str]) -> Up:
    image, seconds, nodes = image_import(lines)
    return Up(ready_seconds, wall_seconds, image, seconds, nodes)


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


def _failure(side: str, result) -> str:
    """Why one side of a fault pair does not count ("" when it does) (pure)."""
    if not result.completed:
        return f"{side} {result.scenario}: {result.reason or 'did not complete'}"
    if math.isnan(result.seconds_to_resume):
        return f"{side} {result.scenario}: no step after the fault seen"
    return ""


def fault_pair(cluster, local) -> FaultPair:
    """A FaultPair from the harness's two FaultResults (scripts/tfmw/faults/) (pure)."""
    problem = "; ".join(p for p in (_failure("cluster", cluster), _failure("make local", local)) if p)
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
            if text.startswith("tfmw stopped ") and (m := re.search(r" step=(\d+)/", text)):
                stopped = int(m.group(1))
            elif f"re-forming the group at {workers[1]} workers" in text:
                reformed = time_seconds(stamp)
        elif resumed_from is None:
            if text.startswith("tfmw start ") and (m := re.search(r" resume_step=(\d+)", text)):
                resumed_from = int(m.group(1))
        elif progress_step(text) is not None:
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
    problems = tuple(p for p in (_failure("cluster", r) for r, _ in pairs) if p)
    ok = [(r, delete) for r, delete in pairs if not _failure("cluster", r) and not math.isnan(delete)]
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
    problem = _failure("cluster", result)
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


def parts_cell(parts) -> str:
    """`detection 40 s, eviction 10 s, ...` (pure)."""
    return ", ".join(f"{name} {seconds:.0f} s" for name, seconds in parts)


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


# ---------------------------------------------------------------- measuring


def _kubeconfig_env(state) -> dict:
    return dict(os.environ, KUBECONFIG=str(state.kubeconfig))


def helm_run(state, *args: str, timeout: float = 300, figure: str = "figure 6") -> subprocess.CompletedProcess:

    proc = subprocess.run(
        [find_helm(), *args], capture_output=True, text=True, env=_kubeconfig_env(state), timeout=timeout
    )
    if proc.returncode != 0:
        raise BenchError(f"{figure}: helm {args[0]} exited {proc.returncode}: {helm_error_line(proc.stderr)}")
    return proc


def wait_until(predicate, timeout: float, what: str, figure: str = "figure 6"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(POLL)
    raise BenchError(f"{figure}: {what} not within {timeout:g}s")


@contextlib.contextmanager
def fresh_namespace(state, name: str, log=print, figure: str = "figure 6"):
    """A fresh namespace (its default ServiceAccount there), deleted afterwards with every pod
    stopped before the next measurement: they would share its CPUs."""

    api = state.api("admin")
    try:
        api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    except ApiError as err:
        raise BenchError(f"{figure}: namespace {name} cannot be made: {err}") from None
    try:
        wait_until(
            lambda: api.get_or_none(ns_path(name, "serviceaccounts", "default")),
            60,
            f"the default ServiceAccount of namespace {name}",
            figure,
        )
        yield api
    finally:
        api.delete(f"/api/v1/namespaces/{name}")
        try:
            wait_until(lambda: not api.items(ns_path(name, "pods")), 180, f"the pods of namespace {name} to stop")
        except BenchError as err:
            log(f"  {figure}: {err}")


def measure_cluster_round(state, round_index: int, log=print) -> tuple[float, float, float]:
    """(helm install seconds, return -> pods Running, install start -> first step) of one release
    in a namespace of its own, deleted afterwards."""

    namespace = f"bench-{round_index}-{os.getpid()}"
    release = "bench"
    selector = f"app.kubernetes.io/instance={release},app.kubernetes.io/component=worker"
    args = checked_args(release, namespace, run_sets(f"bench-cluster-{round_index}"))
    with fresh_namespace(state, namespace, log) as api:
        log(f"  figure 6: round {round_index + 1}: helm install on the cluster")
        started = time.monotonic()
        helm_run(state, *args)
        returned = time.monotonic()
        wait_until(
            lambda: running_workers(api.items(ns_path(namespace, "pods"), labelSelector=selector)) == WORKERS,
            120,
            "both worker pods Running",
        )
        running = time.monotonic()
        chief = f"{release}-tf-multiworker-0"

        def chief_stepped() -> bool:
            try:
                text = api.request("GET", ns_path(namespace, "pods", chief) + "/log", raw=True)
            except ApiError:
                return False  # the container's log is not there yet
            return has_first_step(text.decode(errors="replace"))

        wait_until(chief_stepped, 300, "the chief's first training step")
        first_step = time.monotonic()
        return returned - started, running - returned, first_step - started


def _fault_line(where: str, result) -> str:
    return (
        f"  figure 6: {where} {result.scenario}: "
        f"{'recovered' if result.completed else 'NOT recovered: ' + result.reason}"
        f"; fault at step {result.step_at_fault}, resumed from {result.resume_step}, "
        f"fault → resumed {result.seconds_to_resume:.1f} s"
    )


def measure_cluster_fault(state, round_index: int, log=print, scenario: str = CLUSTER_FAULT):
    """The fault harness's `delete-worker` (or `scenario`) on the figure's cluster, in a
    namespace of its own; its FaultResult."""

    namespace = f"bench-{scenario}-{round_index}-{os.getpid()}"[:63]
    log(f"  figure 6: round {round_index + 1}: {scenario} on the cluster (scripts/tfmw/faults --cluster)")
    last_lines = collections.deque(maxlen=40)  # the pods' last lines, shown if the run fails
    with fresh_namespace(state, namespace, log):
        try:
            result = fault_cluster.run_cluster_scenario(
                scenario,
                Path(state.kubeconfig),
                namespace=namespace,
                release="bench-fault",
                steps=FAULT_STEPS,
                checkpoint_every=FAULT_CHECKPOINT_EVERY,
                fault_after_step=FAULT_AFTER_STEP,
                timeout=FAULT_TIMEOUT,
                out=last_lines.append,
            )
        except (ToolError, fault_cluster.FaultError) as err:
            raise BenchError(f"figure 6: {scenario}: {err}") from None
        if not result.completed:
            log("\n".join(last_lines) or "  figure 6: (no line from the pods)")
            log(pods_line(state, namespace))
    log(_fault_line("cluster", result) + f", fault → the replacement pod Running {result.seconds_to_pod_running:.1f} s")
    return result


def _resize_once(state, api, namespace: str, release: str, workers: tuple, log=print) -> Resize:
    """`helm upgrade` of the running release to workers[1], then the chief's log until the
    group's first step at that size."""
    chief = f"{release}-tf-multiworker-0"
    status = ns_path(namespace, "configmaps", f"{release}-tf-multiworker-status")
    log(f"  figure 6: resize {workers[0]} -> {workers[1]} workers (helm upgrade)")
    upgraded_at = time.time()
    helm_run(state, *_release_args("upgrade", release, namespace, workers[1]))

    def resumed() -> Resize | None:
        data = (api.get_or_none(status) or {}).get("data") or {}
        if f"{workers[1]} workers training" not in data.get("message", ""):
            return None
        since = rfc3339(upgraded_at - 1)
        try:
            text = api.request(
                "GET",
                ns_path(namespace, "pods", chief) + "/log",
                query={"timestamps": "true", "sinceTime": since},
                raw=True,
            )
        except ApiError:
            return None
        return resize_marks(text.decode(errors="replace"), workers, upgraded_at)

    try:
        result = wait_until(resumed, 300, f"the group's first step at {workers[1]} workers")
    except BenchError as err:
        log(pods_line(state, namespace))
        return Resize(workers, problem=str(err).removeprefix("figure 6: "))
    log(
        f"  figure 6: resized to {workers[1]}: re-forming after {result.reformed:.1f} s, first step after "
        f"{result.resumed:.1f} s, resumed from step {result.resumed_from} (stopped at {result.stopped_at})"
    )
    return result


def _release_args(verb: str, release: str, namespace: str, workers: int) -> list[str]:
    return checked_args(release, namespace, (*RESIZE_SETS, f"workers.replicas={workers}"), verb=verb)


def checked_args(release: str, namespace: str, sets, verb: str = "install", figure: str = "figure 6") -> list[str]:
    """The helm arguments of a measured release, its values checked as make deploy checks them."""
    try:
        return install.checked_args(release, namespace, list(sets), verb=verb)
    except ToolError as err:
        raise BenchError(f"{figure}: the measured release's values are refused: {err}") from None


def measure_resizes(state, log=print) -> list[Resize]:
    """A 2-worker release grown and shrunk by `helm upgrade` once it has a checkpoint: one
    Resize per size in RESIZES; the rest not measured once one fails."""
    namespace, release = f"bench-resize-{os.getpid()}", "bench-resize"
    status = ns_path(namespace, "configmaps", f"{release}-tf-multiworker-status")
    results: list[Resize] = []
    with fresh_namespace(state, namespace, log) as api:
        log(f"  figure 6: a {WORKERS}-worker run to resize (helm install)")
        helm_run(state, *_release_args("install", release, namespace, WORKERS))
        try:
            wait_until(
                lambda: (
                    int(((api.get_or_none(status) or {}).get("data") or {}).get("lastCheckpointStep") or 0)
                    >= 2 * RESIZE_EVERY
                ),
                300,
                "the run's first checkpoints",
            )
        except BenchError as err:
            return [Resize((WORKERS, RESIZES[0]), problem=str(err).removeprefix("figure 6: "))]
        before = WORKERS
        for after in RESIZES:
            results.append(_resize_once(state, api, namespace, release, (before, after), log))
            if results[-1].problem:
                break
            before = after
    return results


def pods_line(state, namespace: str, figure: str = "figure 6") -> str:
    """One line per pod of `namespace`: its phase and its container's state (for a failed run)."""

    try:
        pods = state.api("admin").items(ns_path(namespace, "pods"))
    except Exception as err:  # only a diagnostic
        return f"  {figure}: the pods of {namespace} could not be listed: {err}"
    parts = []
    for pod in pods:
        status = pod.get("status") or {}
        containers = [f"{c.get('name')}: {json.dumps(c.get('state'))}" for c in status.get("containerStatuses") or []]
        parts.append(f"{pod['metadata']['name']} {status.get('phase')} {'; '.join(containers)}")
    return f"  {figure}: pods: " + (" | ".join(parts) or "none")


def measure_local_fault(runs_dir, round_index: int, log=print):
    """The fault harness's `kill-worker` on `make local`'s runner; its FaultResult."""

    log(f"  figure 6: round {round_index + 1}: {LOCAL_FAULT} on make local (scripts/tfmw/faults/)")
    try:
        result = fault_local.run_scenario(
            LOCAL_FAULT,
            runs_dir=Path(runs_dir),
            steps=FAULT_STEPS,
            checkpoint_every=FAULT_CHECKPOINT_EVERY,
            fault_after_step=FAULT_AFTER_STEP,
            timeout=FAULT_TIMEOUT,
        )
    except (ToolError, LocalRunError) as err:
        raise BenchError(f"figure 6: {LOCAL_FAULT}: {err}") from None
    log(_fault_line("make local", result))
    if not result.completed:
        log("\n".join(result.log_tail[-20:]) or "  figure 6: (no line from the pods)")
    return result


def _stop_local_run(proc: subprocess.Popen) -> None:
    """Let `make local` finish its short run (it removes its network namespaces), then make sure."""
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # its handler stops the pods and cleans up
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def measure_local_round(runs_dir, round_index: int, log=print) -> float:
    """`make local` start -> its first training step, seconds."""
    command = [
        PY,
        "-m",
        "tfmw.localrun.run",
        "--runs-dir",
        str(runs_dir),
        "--release",
        f"bench-local-{round_index}",
        "--fresh",
        "--timeout",
        "300",
    ]
    for item in run_sets(f"bench-local-{round_index}"):
        command += ["--set", item]
    log(f"  figure 6: round {round_index + 1}: make local")
    # The local pods get the environment `make local` passes on (not figure 1's one-thread limit:
    # the cluster's pods do not have it either).
    timing = time_to_first_step(
        command, base_env(one_thread=False), timeout=300, stop=_stop_local_run, figure="figure 6"
    )
    return timing.first_step


def cluster_up(controlplane, state_dir: str, bins: dict, archive, log=print, figure: str = "figure 6", nodes: int = 2):
    """(state, Up) of one `make cluster` of `nodes` nodes, with what up() said about the worker image."""
    said: list[str] = []

    def say(line: str) -> None:
        said.append(line)
        log(f"  {figure}: {line}")

    log(f"  {figure}: make cluster (controlplane.up)")
    started = time.monotonic()
    try:
        state = controlplane.up(state_dir, nodes=nodes, bins=bins, images=[archive], say=say)
    except controlplane.ClusterError as err:
        raise BenchError(f"{figure}: make cluster failed: {err}") from None
    return state, make_up(state.ready_seconds, time.monotonic() - started, said)


def cluster_down(controlplane, state_dir: str, log=print, figure: str = "figure 6") -> float:
    log(f"  {figure}: make cluster-down (controlplane.down)")
    started = time.monotonic()
    controlplane.down(state_dir, say=lambda line: log(f"  {figure}: {line}"))
    return time.monotonic() - started


def cluster_parts(log=print, figure: str = "figure 6") -> tuple[dict, Path]:
    """(the cluster's binaries, the worker image's archive), built once and not timed; refuses
    a run without root (the nodes need network namespaces and a bridge)."""
    if os.geteuid() != 0:
        raise BenchError(
            f"{figure}: the local cluster needs root (network namespaces, a bridge); run make bench as root"
        )
    try:
        bins = ensure_binaries(progress=lambda line: log(f"  {figure}: {line}"))
    except KubeBuildError as err:
        raise BenchError(f"{figure}: the cluster binaries could not be built: {err}") from None
    try:
        # The nodes run the worker image: `up` imports it into a node unless the node's
        # containerd cache already holds that image id.
        ref = image.ensure_image(variant="cpu", base="debian", progress=lambda line: log(f"  {figure}: {line}"))
        return bins, image.save_archive(ref, controlplane.IMAGE_CACHE)
    except image.ImageError as err:
        raise BenchError(f"{figure}: the worker image could not be built: {err}") from None


def measure(quick: bool, log=print) -> Summary:
    bins, archive = cluster_parts(log)
    rounds = 1 if quick else 3
    work = tempfile.mkdtemp(prefix="tfmw-bench-cluster-")
    state_dir = os.path.join(work, "state")
    results, fault_pairs, ups = [], [], []
    disruption_pairs: dict = {scenario: [] for scenario in DISRUPTIONS}
    try:
        state, first = cluster_up(controlplane, state_dir, bins, archive, log)
        ups.append(first)
        try:
            if wants_second_up(first):
                log("  figure 6: the first up imported the image: cluster-down and up again, the image now cached")
                cluster_down(controlplane, state_dir, log)
                state, second = cluster_up(controlplane, state_dir, bins, archive, log)
                ups.append(second)
            for r in range(rounds):
                local_dir = os.path.join(work, "local")
                # Alternate which goes first so neither always gets the warmer page cache.
                if r % 2 == 0:
                    cluster = measure_cluster_round(state, r, log)
                    local = measure_local_round(local_dir, r, log)
                    cluster_fault = measure_cluster_fault(state, r, log)
                    local_fault = measure_local_fault(local_dir, r, log)
                else:
                    local = measure_local_round(local_dir, r, log)
                    cluster = measure_cluster_round(state, r, log)
                    local_fault = measure_local_fault(local_dir, r, log)
                    cluster_fault = measure_cluster_fault(state, r, log)
                results.append(ClusterRound(*cluster, local_first_step=local))
                fault_pairs.append(fault_pair(cluster_fault, local_fault))
                deleted = NAN if _failure("cluster", cluster_fault) else cluster_fault.seconds_to_resume
                for scenario in DISRUPTIONS:
                    disruption_pairs[scenario].append((measure_cluster_fault(state, r, log, scenario), deleted))
            resizes = measure_resizes(state, log)  # three workers: before a node is cut off
            # Last: it taints, and for a while loses, one of the two nodes.
            node = measure_cluster_fault(state, rounds, log, scenario=NODE_FAULT)
        finally:
            down_seconds = cluster_down(controlplane, state_dir, log)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return summarize(ups, down_seconds, results, fault_pairs, node, resizes, disruption_pairs)


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

"""The faults on a Kubernetes cluster (`make cluster`'s, or any a kubeconfig reaches): the
chart installed with helm, a pod deleted through the API server, every pod incarnation's log
followed through it (tfmw.k8s.Api)."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from entrypoint import loglines
from entrypoint.loglines import progress_step, said
from entrypoint.rundir import RunDir
from tfmw.chart import render
from tfmw.chart.helmkit import HelmFailed, ToolError, find_helm, run_helm
from tfmw.deploy import install
from tfmw.faults import disruptions
from tfmw.faults.analysis import FaultResult, fill_result
from tfmw.faults.local import run_sets
from tfmw.faults.nodes import (
    NODE_SCENARIOS,
    VICTIM_ORDINAL,
    NodeFaultError,
    cluster_dir,
    fault_node,
    heal_and_check,
    node_parts,
    spread_values,
)
from tfmw.k8s import namespaces
from tfmw.k8s.api import Api, ApiError, LogStream, ns_path
from tfmw.k8s.kubeconfig import KubeconfigError

# ---------------------------------------------------------------- real-cluster mode
#
# The same measurements on a Kubernetes cluster (the local control plane of `make cluster`,
# or any cluster a kubeconfig reaches): the chart installed with helm, the fault done through
# the API server, the pods' logs followed through it (tfmw.k8s.Api). Nothing here knows how the
# cluster runs its pods.

# node-loss last: it stays lost
CLUSTER_SCENARIOS = ("kill-trainer", "delete-worker", "delete-chief", *disruptions.DISRUPTIONS, *NODE_SCENARIOS)
VICTIM = {
    "kill-trainer": 1,
    "delete-worker": 1,
    "delete-chief": 0,
    **dict.fromkeys(disruptions.DISRUPTIONS, 1),
    **dict.fromkeys(NODE_SCENARIOS, VICTIM_ORDINAL),
}
CHART = Path(render.CHART_DIR)
DEFAULT_KUBECONFIG = Path(render.REPO) / ".cluster" / "kubeconfig"  # what `make cluster` writes


class FaultError(Exception):
    """One-line, operator-facing reason the harness could not run; exit 2 bad input, 3 cluster state."""

    def __init__(self, message: str, exit_code: int = 3):
        super().__init__(" ".join(message.split()))
        self.exit_code = exit_code


class Kube:
    """helm and the Kubernetes API (tfmw.k8s.Api) against one kubeconfig. API calls that fail
    raise FaultError, one line."""

    def __init__(self, kubeconfig: Path, helm: str | None = None):
        self.kubeconfig = Path(kubeconfig)
        self.helm_bin = find_helm(helm)
        try:
            self.api = Api.from_kubeconfig(kubeconfig_env=str(self.kubeconfig), timeout=30)
        except KubeconfigError as err:
            raise FaultError(f"--kubeconfig {kubeconfig}: {err}", exit_code=2) from None

    def helm(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
        try:
            return run_helm(self.kubeconfig, *args, helm=self.helm_bin, timeout=timeout, check=check)
        except HelmFailed as err:
            raise FaultError(f"`helm {' '.join(args[:3])} ...` exited {err.returncode}: {err.why}") from None

    def call(self, method: str, path: str, body: dict | None = None, **query):
        """One API call; FaultError naming it when the server refuses or does not answer."""
        try:
            if method == "GET":
                return self.api.get(path, **query)
            return self.api.request(method, path, body)
        except ApiError as err:
            raise FaultError(f"{method} {path}: {err}") from None

    def get(self, path: str) -> dict | None:
        """The object at `path`, or None when it does not exist."""
        try:
            return self.api.get_or_none(path)
        except ApiError as err:
            raise FaultError(f"GET {path}: {err}") from None

    def items(self, path: str, selector: str) -> list[dict]:
        return (self.call("GET", path, labelSelector=selector) or {}).get("items") or []

    def delete(self, path: str) -> None:
        try:
            self.api.delete(path)
        except ApiError as err:
            raise FaultError(f"DELETE {path}: {err}") from None

    def make_namespace(self, namespace: str) -> None:
        """A namespace of the harness's own, ready for pods (its default ServiceAccount there)."""
        try:
            namespaces.create(self.api, namespace)
        except ApiError as err:
            raise FaultError(f"POST {namespaces.NAMESPACES}: {err}") from None

    def delete_namespace(self, namespace: str, timeout: float = 180) -> None:
        """Delete the namespace and wait until it is gone (best effort: the harness's cleanup)."""
        try:
            namespaces.delete(self.api, namespace)
            namespaces.wait_gone(self.api, namespace, timeout)
        except ApiError:
            pass


TRAINER_ARGV = [b"-m", b"entrypoint.training"]


def trainer_pids(pod_uid: str, proc: Path = Path("/proc")) -> list[int]:
    """The PIDs, seen from this host, of `python -m entrypoint.training` in the pod whose UID
    is `pod_uid` (its cgroup path names the pod: `pod<uid>`, with dashes or underscores). Only
    where the cluster's nodes run on this host (`make cluster`)."""
    wanted = {f"pod{pod_uid}", f"pod{pod_uid.replace('-', '_')}"}
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "cmdline").read_bytes().split(b"\0")[1:3] != TRAINER_ARGV:
                continue
            cgroup = (entry / "cgroup").read_text()
        except OSError:
            continue
        if any(name in cgroup for name in wanted):
            found.append(int(entry.name))
    return found


def kill_trainer(kube: Kube, namespace: str, victim: str) -> float:
    """SIGKILL the victim pod's training process from the host (a pod's own PID 1 cannot be
    SIGKILLed from inside it, and under a peer the trainer is PID 1); the fault's time."""
    pod = kube.get(ns_path(namespace, "pods", victim)) or {}
    uid = (pod.get("metadata") or {}).get("uid", "")
    pids = trainer_pids(uid) if uid else []
    if not pids:
        raise FaultError(f"kill-trainer: no training process of pod {victim} ({uid or 'no uid'}) on this host")
    fault_time = time.monotonic()
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return fault_time


@dataclass
class Incarnation:
    """One pod (one UID) and one container start of it: its log as it arrived."""

    name: str
    ordinal: int
    uid: str
    restart: int
    first_seen: float
    running_since: float = float("nan")
    lines: list[str] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    follow: LogStream | None = None
    opening: bool = False  # a follow of its log is being opened (PodLogs._read)
    ended: bool = False


@dataclass
class Stream:
    lines: list[str] = field(default_factory=list)
    times: list[float] = field(default_factory=list)


def merge_incarnations(incarnations: list[Incarnation]) -> dict[int, Stream]:
    """One stream per ordinal: every incarnation's lines, in arrival order (pure)."""
    merged: dict[int, list[tuple[float, int, str]]] = {}
    for inc in incarnations:
        merged.setdefault(inc.ordinal, []).extend(
            (when, i, line) for i, (when, line) in enumerate(zip(inc.times, inc.lines, strict=True))
        )
    streams = {}
    for ordinal, items in merged.items():
        items.sort(key=lambda item: item[:2])
        streams[ordinal] = Stream([line for _, _, line in items], [when for when, _, _ in items])
    return streams


def first_index_after(times: list[float], moment: float) -> int:
    """Index of the first time at or after `moment` (len(times) if none) (pure)."""
    return next((i for i, when in enumerate(times) if when >= moment), len(times))


def pod_ordinal(name: str, statefulset: str) -> int | None:
    """`<statefulset>-<n>` -> n; None for any other pod (pure)."""
    head, _, tail = name.rpartition("-")
    return int(tail) if head == statefulset and tail.isdigit() else None


class PodLogs:
    """Follows every incarnation of a StatefulSet's pods: a poll of the pod list every
    `interval` seconds, and one followed log per container start, line by line with the
    time each line arrived. Logs are kept after the pods are gone (a finished run scales its
    StatefulSet to 0)."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        statefulset: str,
        selector: str,
        out=lambda line: None,
        interval: float = 0.5,
        ordinal_of=None,
    ):
        """`ordinal_of(pod)`: the worker index of a pod object, None for a pod that is not a
        worker (default: the StatefulSet's `<statefulset>-<n>` names; a peer's pods say it in
        a label)."""
        self.kube, self.namespace, self.statefulset, self.selector = kube, namespace, statefulset, selector
        self.ordinal_of = ordinal_of or (lambda pod: pod_ordinal(pod["metadata"]["name"], statefulset))
        self.out, self.interval = out, interval
        self.incarnations: dict[tuple[str, int], Incarnation] = {}
        self.current: dict[str, dict] = {}  # pod name -> its object in the last poll
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.last_error = ""
        self.thread = threading.Thread(target=self._poll, name="pod-logs", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(10)
        for inc in list(self.incarnations.values()):
            if inc.follow is not None:
                inc.follow.close()

    def _poll(self) -> None:
        while not self.stopping.is_set():
            try:
                listed = {"items": self.kube.items(ns_path(self.namespace, "pods"), self.selector)}
                self.last_error = ""
            except (FaultError, ValueError) as err:
                self.last_error = str(err)
                self.stopping.wait(self.interval)
                continue
            now = time.monotonic()
            current = {}
            for pod in listed["items"]:
                name = pod["metadata"]["name"]
                ordinal = self.ordinal_of(pod)
                if ordinal is None:
                    continue
                current[name] = pod
                statuses = (pod.get("status") or {}).get("containerStatuses") or []
                status = statuses[0] if statuses else {}
                key = (pod["metadata"]["uid"], int(status.get("restartCount", 0)))
                state = status.get("state") or {}
                with self.lock:
                    inc = self.incarnations.get(key)
                    if inc is None:
                        inc = self.incarnations[key] = Incarnation(name, ordinal, key[0], key[1], first_seen=now)
                    running = "running" in state and (pod.get("status") or {}).get("phase") == "Running"
                    if running and inc.running_since != inc.running_since:  # NaN: not yet
                        inc.running_since = now
                    # Follow once the container has started; follow again (skipping what was
                    # read) if a stream broke while the container still runs.
                    started = "running" in state or "terminated" in state
                    if started and not inc.opening and (inc.follow is None or (inc.ended and "running" in state)):
                        self._follow(inc, pod["spec"]["containers"][0]["name"])
            self.current = current
            self.stopping.wait(self.interval)

    def _follow(self, inc: Incarnation, container: str) -> None:
        skip = len(inc.lines)
        inc.ended, inc.opening = False, True
        threading.Thread(target=self._read, args=(inc, container, skip), daemon=True, name=f"logs-{inc.name}").start()

    def _read(self, inc: Incarnation, container: str, skip: int) -> None:
        # Opened here, never in the poll: the API server proxies a log from the pod's kubelet,
        # and for a node that is cut off it holds the request until its dial times out. A poll
        # waiting on that missed a replacement pod that lived less than that (node-partition).
        try:
            stream = self.kube.api.follow_log(self.namespace, inc.name, container=container)
        except ApiError as err:
            self.last_error, inc.ended = f"log of {inc.name}: {err}", True  # tried again at the next poll
            inc.opening = False
            return
        inc.follow, inc.opening = stream, False
        if self.stopping.is_set():
            stream.close()
        for number, line in enumerate(stream):
            if number < skip:
                continue
            with self.lock:
                inc.times.append(time.monotonic())
                inc.lines.append(line)
            self.out(f"[{inc.name}] {line}")
        inc.ended = True

    # -- reading ------------------------------------------------------------------
    def snapshot(self) -> list[Incarnation]:
        with self.lock:
            return sorted(self.incarnations.values(), key=lambda inc: (inc.ordinal, inc.first_seen))

    def wait_for(self, predicate, timeout: float, interval: float = 0.2):
        """Poll predicate(self) until truthy (returned) or `timeout` (None)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate(self)
            if value:
                return value
            time.sleep(interval)
        return None


def first_step_after(logs: PodLogs, started: float, timeout: float) -> float:
    """Seconds from `started` (the install) to the chief's first progress line; NaN when none
    came within `timeout` (the fault's own wait then says why)."""

    def stepped(pl: PodLogs):
        chief = merge_incarnations(pl.snapshot()).get(0, Stream())
        times = [t for t, line in zip(chief.times, chief.lines, strict=True) if progress_step(line) is not None]
        return times[0] if times else None

    when = logs.wait_for(stepped, timeout)
    return float("nan") if when is None else when - started


def install_sets(
    steps: int, checkpoint_every: int, hang_timeout_seconds: int | None, extra_sets: tuple[str, ...] = ()
) -> list[str]:
    """The harness's --set items for a cluster run: shared storage from the cluster's default
    StorageClass (a ReadWriteMany claim), so a recreated pod finds the group's checkpoints (pure)."""
    return [
        "storage.type=createClaim",
        "storage.createClaim.size=1Gi",
        *run_sets(steps, checkpoint_every, hang_timeout_seconds, extra_sets),
    ]


def completed_marker(kube: Kube, namespace: str, statefulset: dict) -> dict | None:
    """The chief's COMPLETED marker, read from the shared claim's PersistentVolume when that
    is a hostPath on this machine (the local cluster's StorageClass); None otherwise."""
    spec = statefulset["spec"]["template"]["spec"]
    claims = [
        v["persistentVolumeClaim"]["claimName"] for v in spec.get("volumes") or [] if "persistentVolumeClaim" in v
    ]
    env = {e["name"]: e.get("value") for e in spec["containers"][0].get("env") or []}
    run_id = env.get("TFMW_RUN_ID")
    if not claims or not run_id:
        return None
    claim = kube.get(ns_path(namespace, "persistentvolumeclaims", claims[0]))
    volume = (claim or {}).get("spec", {}).get("volumeName")
    pv = kube.get(f"/api/v1/persistentvolumes/{volume}") if volume else None
    host_path = ((pv or {}).get("spec", {}).get("hostPath") or {}).get("path")
    marker = Path(RunDir.of(host_path, run_id).completed) if host_path else None
    if marker is None or not marker.is_file():
        return None
    try:
        return json.loads(marker.read_text())
    except (OSError, ValueError):
        return None


def ready_for_fault(chief: Stream, fault_after_step: int) -> bool:
    """The chief has published a checkpoint and trained past `fault_after_step` (pure)."""
    saved = any(said(line, loglines.CHECKPOINT, "saved") for line in chief.lines)
    return saved and any((progress_step(line) or 0) >= fault_after_step for line in chief.lines)


def run_end(streams: dict[int, Stream], fault_time: float) -> str | None:
    """ "done" once every pod (two at least) logged `tfmw done` after the fault; else the first
    `tfmw failed` line, the run's end too; else None: still running (pure)."""
    if len(streams) < 2:
        return None
    if all(
        loglines.find(st.lines[first_index_after(st.times, fault_time) :], loglines.DONE) for st in streams.values()
    ):
        return "done"
    return next((line for st in streams.values() for line in st.lines if said(line, loglines.FAILED)), None)


# ---------------------------------------------------------------- one faulted run


@dataclass
class Pods:
    """A run's workers as the harness follows them (PodLogs): `name` the StatefulSet's (or the
    workload's) name, `selector` their labels, `ordinal_of` a pod object's worker index (None: the
    StatefulSet's `<name>-<n>`), `since` when its measured start began (None: before the install)."""

    name: str
    selector: str
    ordinal_of: Callable[[dict], int | None] | None = None
    since: float | None = None


class FaultedRun:
    """What differs between faulted runs (faulted_run does the rest, the same for each): how the
    run is installed, how its victim gets the fault, what "ended" means and what is recorded at
    the end, and what is removed after it. The chart's run (ChartRun) and a peer's TFJob or
    JobSet (tfmw.peers.run) are the two. A step that cannot go on raises FaultError (or
    ApiError, or the checked deploy path's ToolError): the result's reason."""

    # No first step within the timeout: stop there and say so. Otherwise the wait for a
    # checkpoint and the fault step gives up later, saying why.
    needs_first_step = False

    def __init__(self, kube: Kube, namespace: str, result: FaultResult, timeout: float, out=lambda line: None):
        self.kube, self.namespace, self.result, self.timeout, self.out = kube, namespace, result, timeout, out
        self.logs: PodLogs | None = None  # set by faulted_run once the run is installed
        self.held: list[disruptions.Disruption] = []  # the disruptions to undo after the run

    def install(self) -> Pods:
        """Start the run in the namespace; its workers to follow."""
        raise NotImplementedError

    def fault(self) -> float:
        """Do the fault to the victim (the run is ready for it); the fault's time (monotonic)."""
        raise NotImplementedError

    def wait_end(self, fault_time: float):
        """Wait until the run has ended (at most the timeout); what its end was (None: not ended)."""
        raise NotImplementedError

    def record(self, started: float, fault_time: float, outcome) -> None:
        """Fill the result: `started` the install's start, `outcome` what wait_end said."""
        raise NotImplementedError

    def clean_up(self, own_namespace: bool) -> None:
        """Remove the run (the namespace, when it is the harness's own)."""
        if own_namespace:
            self.kube.delete_namespace(self.namespace)


def faulted_run(run: FaultedRun, fault_after_step: int, own_namespace: bool = True) -> None:
    """One faulted run on the cluster, its measurements in run.result: in run.namespace (made
    here, and removed after, when `own_namespace`), the run installed, every pod incarnation's
    log followed, the fault done once the chief has published a checkpoint and passed
    `fault_after_step`, the wait for the run's end, and what happened recorded. A FaultError
    (or ApiError, or ToolError) on the way is the result's reason; whatever happens, the disruptions held are
    undone, the logs closed and the run removed. Raises FaultError only when the namespace
    cannot be made."""
    kube, result = run.kube, run.result
    if own_namespace:
        kube.make_namespace(run.namespace)
    started = time.monotonic()
    try:
        pods = run.install()
        run.logs = PodLogs(kube, run.namespace, pods.name, pods.selector, out=run.out, ordinal_of=pods.ordinal_of)
        run.logs.start()
        since = started if pods.since is None else pods.since
        result.seconds_to_first_step = first_step_after(run.logs, since, run.timeout)
        if run.needs_first_step and math.isnan(result.seconds_to_first_step):
            raise FaultError(f"no first step within {run.timeout:g}s{_last_error(run.logs)}")
        wait_ready_for_fault(run.logs, fault_after_step, run.timeout)
        fault_time = run.fault()
        outcome = run.wait_end(fault_time)
        run.record(started, fault_time, outcome)
    except (FaultError, ApiError) as err:
        result.reason = str(err)
    except ToolError as err:  # the checked deploy path's refusal (a suspend's resume): the harness's one line
        result.reason = str(FaultError(str(err)))
    finally:
        for disruption in run.held:
            disruption.cleanup()
        if run.logs is not None:
            run.logs.stop()
        run.clean_up(own_namespace)


def _last_error(logs: PodLogs) -> str:
    return f" ({logs.last_error})" if logs.last_error else ""


def wait_ready_for_fault(logs: PodLogs, fault_after_step: int, timeout: float) -> None:
    """Until the chief has published a checkpoint and passed `fault_after_step`; FaultError
    when it has not within `timeout` seconds."""

    def checkpoint_and_step(pl: PodLogs):
        return ready_for_fault(merge_incarnations(pl.snapshot()).get(0, Stream()), fault_after_step)

    if logs.wait_for(checkpoint_and_step, timeout) is None:
        raise FaultError(f"never reached a checkpoint and step {fault_after_step} before the fault" + _last_error(logs))


def fill_from_logs(result: FaultResult, logs: PodLogs, started: float, fault_time: float) -> None:
    """The run's total time and what its trainers' lines say about the recovery (fill_result)."""
    time.sleep(1.0)  # a launcher's last lines (after `tfmw done`) arrive before the streams are read
    result.seconds_total = time.monotonic() - started
    streams = merge_incarnations(logs.snapshot())
    if 0 in streams:
        marks = {o: first_index_after(st.times, fault_time) for o, st in streams.items()}
        fill_result(result, streams, marks, fault_time)


def log_tail(logs: PodLogs, lines: int) -> list[str]:
    """Each incarnation's last `lines` lines, named by its pod and UID."""
    return [f"[{inc.name} {inc.uid[:8]}] {line}" for inc in logs.snapshot() for line in inc.lines[-lines:]]


# ---------------------------------------------------------------- the chart's run


def worker_selector(release: str) -> str:
    return f"app.kubernetes.io/instance={release},app.kubernetes.io/component=worker"


class ChartRun(FaultedRun):
    """The chart installed with helm, its victim pod deleted through the API server (or its
    trainer killed, the pod disrupted, its node lost or cut off). It has ended once every pod
    logged `tfmw done` after the fault, or one `tfmw failed`; then the logs, the status ConfigMap
    and the COMPLETED marker say how it recovered."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        result: FaultResult,
        timeout: float,
        out,
        release: str,
        sets: list[str],
        node_dir: Path | None,
        victim_ordinal: int,
    ):
        super().__init__(kube, namespace, result, timeout, out)
        self.scenario, self.release, self.sets = result.scenario, release, sets
        self.node_dir, self.victim_ordinal = node_dir, victim_ordinal
        self.sts: dict = {}
        self.before: set[str] = set()  # the victim's pod UIDs before the fault
        self.node, self.old_uid = "", ""  # the victim's node and UID at the fault

    def install(self) -> Pods:
        values = [spread_values(self.node_dir)] if self.node_dir else []
        self.sts = _install_run(self.kube, self.release, self.namespace, self.sets, values=values)
        name = self.sts["metadata"]["name"]
        self.result.victim = f"{name}-{self.victim_ordinal}"
        return Pods(name, worker_selector(self.release))

    def fault(self) -> float:
        """The victim pod deleted through the API server, or its node lost or cut off."""
        victim = self.result.victim
        self.before = {inc.uid for inc in self.logs.snapshot() if inc.name == victim}
        pod = self.kube.get(ns_path(self.namespace, "pods", victim)) or {}
        self.node = (pod.get("spec") or {}).get("nodeName", "")
        self.old_uid = (pod.get("metadata") or {}).get("uid", "")
        return inject(
            self.kube,
            self.scenario,
            self.namespace,
            victim,
            self.held,
            node=self.node,
            node_dir=self.node_dir,
            release=self.release,
        )

    def wait_end(self, fault_time: float):
        if self.scenario in disruptions.HELD_PHASE:
            _hold_then_give_back(self.kube, self.namespace, self.sts, self.scenario, self.held[0], self.timeout)
            self.result.seconds_held = time.monotonic() - fault_time
        return self.logs.wait_for(lambda pl: run_end(merge_incarnations(pl.snapshot()), fault_time), self.timeout)

    def record(self, started: float, fault_time: float, outcome) -> None:
        result, kube = self.result, self.kube
        self._record_recovery(started, fault_time, outcome)
        if self.node_dir is not None:  # before a heal: the Events of the cut are all there by now
            fault_wall = time.time() - (time.monotonic() - fault_time)
            events = (kube.get(ns_path(self.namespace, "events")) or {}).get("items") or []
            victim = (result.victim, self.old_uid)
            result.node_parts = node_parts(
                events, victim, fault_wall, result.seconds_to_pod_running, result.seconds_to_resume
            )
        if self.scenario == "node-partition":
            result.fenced_writes = heal_and_check(
                kube, self.node_dir, self.node, self.namespace, result.victim, self.old_uid, self.out
            )
            if result.fenced_writes != "none":
                result.completed, result.reason = False, f"the cut-off pod wrote after the heal: {result.fenced_writes}"
        elif self.scenario == "node-loss":
            result.reason += f"; node {self.node} stays lost (make cluster-down, then make cluster)"

    def _record_recovery(self, started: float, fault_time: float, outcome: str | None) -> None:
        """What the logs, the status ConfigMap and the COMPLETED marker say about the recovery."""
        result, kube, logs = self.result, self.kube, self.logs
        victim = result.victim
        new = [
            inc
            for inc in logs.snapshot()
            if inc.name == victim and inc.uid not in self.before and inc.running_since == inc.running_since
        ]
        if new:
            result.recreated_pod = new[0].name
            result.seconds_to_pod_running = new[0].running_since - fault_time
        status = kube.get(ns_path(self.namespace, "configmaps", f"{self.sts['metadata']['name']}-status"))
        phase = ((status or {}).get("data") or {}).get("phase", "")
        fill_from_logs(result, logs, started, fault_time)
        result.marker_digest = (completed_marker(kube, self.namespace, self.sts) or {}).get("weightsDigest", "")
        if outcome == "done" and not new and result.scenario != "kill-trainer":
            result.reason = f"pod {victim} was not recreated"
        elif outcome == "done":
            result.completed = True
            result.reason = f"status phase {phase}" if phase else "every worker logged tfmw done"
        else:
            result.reason = outcome or (
                f"no `tfmw done` from every worker within {self.timeout:g}s (status phase {phase or '-'})"
            )
        result.log_tail = log_tail(logs, 12)

    def clean_up(self, own_namespace: bool) -> None:
        super().clean_up(own_namespace)
        if not own_namespace:
            self.kube.helm("uninstall", self.release, "-n", self.namespace, check=False)


def run_cluster_scenario(
    scenario: str,
    kubeconfig: Path,
    namespace: str | None = None,
    steps: int = 120,
    checkpoint_every: int = 20,
    fault_after_step: int = 50,
    hang_timeout_seconds: int | None = None,
    extra_sets: tuple[str, ...] = (),
    timeout: float = 300,
    release: str | None = None,
    kube: Kube | None = None,
    out=lambda line: None,
    victim_ordinal: int | None = None,
) -> FaultResult:
    """One real 2-worker run of the chart installed with helm on a cluster, with one pod
    deleted through the API server once a checkpoint exists and training passed
    `fault_after_step`. The StatefulSet controller recreates the pod under the same name;
    the group resumes from the shared checkpoint. In `namespace` (default: a new one, deleted
    afterwards). `victim_ordinal`: another pod than the scenario's (node faults: 1, the chief
    0). Never raises on a failed recovery: the result says what happened."""
    if scenario not in CLUSTER_SCENARIOS:
        raise FaultError(f"unknown cluster scenario {scenario!r}; known: {', '.join(CLUSTER_SCENARIOS)}", 2)
    kube = kube or Kube(kubeconfig)
    result = FaultResult(scenario, False, "", steps, checkpoint_every)
    node_dir = None
    if scenario in NODE_SCENARIOS:
        try:
            node_dir = cluster_dir(kubeconfig)
        except NodeFaultError as err:
            raise FaultError(str(err), 2) from None
    own_namespace = namespace is None
    run = ChartRun(
        kube,
        namespace or f"tfmw-faults-{os.getpid()}-{scenario}"[:63],
        result,
        timeout,
        out,
        release=release or f"fault-{scenario}"[:40],
        sets=install_sets(
            steps, checkpoint_every, hang_timeout_seconds, (*disruptions.EXTRA_SETS.get(scenario, ()), *extra_sets)
        ),
        node_dir=node_dir,
        victim_ordinal=VICTIM[scenario] if victim_ordinal is None else victim_ordinal,
    )
    faulted_run(run, fault_after_step, own_namespace)
    return result


def _install_run(kube: Kube, release: str, namespace: str, sets: list[str], values: list[Path] = ()) -> dict:
    """`helm install` of the chart with the local overlay, `values` files and `sets`; its
    worker StatefulSet."""
    try:
        args = install.checked_args(release, namespace, sets, list(values), helm=kube.helm_bin)
    except ToolError as err:
        raise FaultError(f"the run's values are refused: {err}") from None
    kube.helm(*args)
    statefulsets = kube.items(ns_path(namespace, "statefulsets", group="apps/v1"), worker_selector(release))
    if len(statefulsets) != 1:
        raise FaultError(f"expected one worker StatefulSet for release {release}, found {len(statefulsets)}")
    return statefulsets[0]


def inject(
    kube: Kube,
    scenario: str,
    namespace: str,
    victim: str,
    held: list,
    node: str = "",
    node_dir: Path | None = None,
    release: str = "",
) -> float:
    """Do `scenario` to pod `victim` (on `node`; looked up when not given), whoever runs it (the
    chart's `release`, or a peer's workload); the fault's time (monotonic). A disruption goes to
    `held`, to be given back after the run. Node faults act on `make cluster`'s nodes (`node_dir`:
    its state folder, found from the kubeconfig when not given)."""
    if scenario in disruptions.DISRUPTIONS:
        try:
            disruption = disruptions.disrupt(kube, scenario, namespace, release, victim, str(CHART))
        except (ApiError, ToolError) as err:
            raise FaultError(f"{scenario} of {victim}: {err}") from None
        held.append(disruption)
        return disruption.fault_time
    if scenario == "kill-trainer":
        return kill_trainer(kube, namespace, victim)
    if scenario in NODE_SCENARIOS:
        if node_dir is None:
            try:
                node_dir = cluster_dir(kube.kubeconfig)
            except NodeFaultError as err:
                raise FaultError(str(err), 2) from None
        node = node or ((kube.get(ns_path(namespace, "pods", victim)) or {}).get("spec") or {}).get("nodeName", "")
        if not node:
            raise FaultError(f"{scenario}: pod {victim} is on no node")
        fault_time = time.monotonic()
        fault_node(node_dir, scenario, node)
        return fault_time
    if scenario not in CLUSTER_SCENARIOS:
        raise ValueError(f"not a cluster scenario: {scenario!r}")
    fault_time = time.monotonic()
    kube.delete(ns_path(namespace, "pods", victim))
    return fault_time


def _hold_then_give_back(
    kube: Kube, namespace: str, sts: dict, scenario: str, disruption: disruptions.Disruption, timeout: float
) -> None:
    """Once the run is in the phase the disruption holds it in (Waiting, Suspended), give back
    what was taken (the room, the workers); FaultError when it never gets there."""
    phase, path = (
        disruptions.HELD_PHASE[scenario],
        ns_path(namespace, "configmaps", f"{sts['metadata']['name']}-status"),
    )
    deadline = time.monotonic() + timeout
    while (((kube.get(path) or {}).get("data") or {}).get("phase")) != phase:
        if time.monotonic() > deadline:
            raise FaultError(f"{scenario}: the run was never {phase} within {timeout:g}s")
        time.sleep(0.5)
    disruption.give_back()


def check_cluster(kubeconfig: Path) -> Kube:
    """A Kube for `kubeconfig` after checking the API server answers; FaultError otherwise."""
    if not Path(kubeconfig).is_file():
        raise FaultError(
            f"--kubeconfig {kubeconfig}: no such file; start a cluster with `make cluster` "
            "or pass the kubeconfig of one",
            exit_code=2,
        )
    try:
        kube = Kube(kubeconfig)
    except ToolError as err:
        raise FaultError(str(err), exit_code=err.exit_code) from None
    try:
        ready = kube.api.request("GET", "/readyz", raw=True).decode(errors="replace").strip()
    except ApiError as err:
        ready = str(err)
    if ready != "ok":
        raise FaultError(f"the cluster of {kubeconfig} does not answer: {ready}")
    return kube

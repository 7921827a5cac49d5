"""Fault injection: kill, hang, cut off or delete a worker mid-training and measure what it
costs. Used by tests/tfmw/faults and tests/e2e/cluster (assertions) and `make bench` (figures).

    python -m tfmw.faults [--scenario NAME ...] [--steps 120] [--set k=v ...]
    python -m tfmw.faults --cluster [--kubeconfig PATH] [--namespace NS] [--scenario NAME ...]

prints a table: time from fault to training resumed, steps lost, total steps, identical
weights. Every scenario is a real 2-worker MWMS run of the chart with values/local.yaml.

On `make local`'s runner (the default), in network namespaces (root) or on loopback ports.
What a fault means there (each is what a cluster does to a pod or a node):
  kill-worker / kill-chief   SIGKILL every process of pod 1 / pod 0 (OOM kill, node loss);
                             the local kubelet restarts the pod, as restartPolicy Always does.
  hang-worker                SIGSTOP pod 1's training process (a hung driver or collective);
                             the launcher's watchdog must notice and restart it.
  partition-worker           pod 1's network link down for `partition_seconds`, then up
                             (network namespaces only).
  kill-during-checkpoint     SIGKILL pod 0 (the chief, which writes the shared checkpoint)
                             while it is writing a checkpoint.

On a Kubernetes cluster (`--cluster`: `make cluster`'s, or any a kubeconfig reaches), the
chart is installed with helm (storage.type=createClaim: a ReadWriteMany claim from the
default StorageClass, so checkpoints are shared) in a namespace of its own, and:
  delete-worker / delete-chief   pod 1 / pod 0 deleted through the API once a checkpoint is
                             published and training passed step 50: the pod gets SIGTERM and
                             its grace period, the StatefulSet controller recreates it under
                             the same name, and the group resumes from the checkpoint.
Logs are followed through the API for every pod incarnation (kept after a finished run scales
its StatefulSet to 0); the chief's COMPLETED marker is read from the claim's volume when that
is a hostPath on this machine, and its weights digest must match every worker's.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from entrypoint import loglines
from entrypoint.goodput import read_line_fields
from entrypoint.loglines import LogLine, progress_step
from tfmw.chart import render
from tfmw.chart.helmkit import ToolError, find_helm, helm_error_line
from tfmw.k8s.api import Api, ApiError, LogStream, ns_path
from tfmw.k8s.kubeconfig import KubeconfigError
from tfmw.localrun.kubelet import LocalCluster
from tfmw.localrun.podspec import LocalRunError, build_pods, find_workload
from tfmw.localrun.run import DEFAULT_RUNS, base_env, choose_network, metrics_enabled
from tfmw.table import markdown_table

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
    seconds_to_detect: float = float("nan")  # fault -> a worker's collective fails / watchdog fires
    seconds_to_resume: float = float("nan")
    seconds_total: float = float("nan")
    final_steps: set = field(default_factory=set)
    digests: set = field(default_factory=set)
    model: str = ""
    trainer_restarts: int = 0
    log_tail: list = field(default_factory=list)
    # The chief's time account at the end (its `tfmw completed` line, entrypoint.goodput).
    goodput: float = float("nan")
    wall_seconds: float = float("nan")
    seconds_to_chief_end: float = float("nan")  # the harness's start -> the chief's `tfmw completed`
    # the chief's own first start in the same run: `starting training (attempt 1)` -> its first
    # step (TensorFlow import, the group forming, build, restore, the traced first step)
    seconds_cold_start: float = float("nan")
    badput: dict = field(default_factory=dict)
    # fault -> resumed, split at the chief's milestones (recovery_parts): part -> seconds
    parts: dict = field(default_factory=dict)
    # Cluster mode: the deleted pod, the pod the StatefulSet controller made in its place,
    # and the digest in the chief's COMPLETED marker on shared storage (when readable here).
    victim: str = ""
    recreated_pod: str = ""
    seconds_to_pod_running: float = float("nan")
    marker_digest: str = ""

    @property
    def steps_lost(self) -> int:
        return self.step_at_fault - self.resume_step if self.resume_step >= 0 else -1

    @property
    def identical_weights(self) -> bool:
        """Every worker ended with the same weights (and, when read, the same as the model the
        chief published)."""
        return len(self.digests | ({self.marker_digest} if self.marker_digest else set())) == 1


def _max_step(streams: dict, until: float | None = None) -> int:
    best = 0
    for stream in streams.values():
        for when, line in zip(stream.times, stream.lines, strict=True):
            if until is not None and when > until:
                break
            step = progress_step(line)
            if step is not None:
                best = max(best, step)
    return best


def said(raw: str, kind: str, head: str = "") -> LogLine | None:
    """The `tfmw <kind> <head>...` line `raw` is, else None: `said(l, "launcher", "watchdog")`."""
    parsed = loglines.parse_kind(raw, kind)
    return parsed if parsed is not None and parsed.text.startswith(head) else None


def shows_detection(raw: str) -> bool:
    """A line that shows the group knows about the fault: a surviving worker's failed
    collective, the watchdog, or a deleted pod's trainer told to stop (SIGTERM)."""
    return any(
        said(raw, kind, head)
        for kind, head in (
            (loglines.ERROR, ""),
            (loglines.LAUNCHER, "watchdog"),
            (loglines.SIGTERM, ""),
            (loglines.STOPPED, ""),
        )
    )


# The recovery's parts, in order, each ending at a line of the chief's (the last one it
# started training from): (part, kind, text the line starts with).
RECOVERY_MILESTONES = (
    ("trainer exit", loglines.LAUNCHER, "restarting training in place"),
    ("restart", loglines.LAUNCHER, "starting training (attempt"),
    ("process start", loglines.CONNECTING, ""),
    ("group re-form", loglines.CONNECTED, ""),
    ("restore", loglines.START, ""),
)
RECOVERY_PARTS = ("detection", *(m[0] for m in RECOVERY_MILESTONES), "first step")


def recovery_parts(chief, mark: int, start: int, fault_time: float, detected: float | None) -> dict[str, float]:
    """fault -> resumed in parts (pure): detection (the fault to the first line showing it),
    then the chief's milestones before its final `tfmw start` (line `start`), each the last of
    its kind before the next, then the first step. A milestone the chief did not print (a
    killed chief restarts in a new launcher: no `restarting training in place`) merges its time
    into the next part. The parts add up to seconds_to_resume."""
    after = [i for i in range(start, len(chief.lines)) if progress_step(chief.lines[i]) is not None]
    if not after:
        return {}
    found = {"first step": after[0], "restore": start}
    upper = start
    for part, kind, head in reversed(RECOVERY_MILESTONES[:-1]):
        hits = [i for i in range(mark, upper) if said(chief.lines[i], kind, head)]
        if hits:
            found[part] = upper = hits[-1]
    clock = fault_time
    parts: dict[str, float] = {}
    if detected is not None:
        clock = max(detected, fault_time)
        parts["detection"] = clock - fault_time
    for part in RECOVERY_PARTS[1:]:
        if part in found:
            when = max(chief.times[found[part]], clock)
            parts[part] = when - clock
            clock = when
    return parts


def fill_result(result: FaultResult, streams: dict, marks: dict[int, int], fault_time: float) -> None:
    """The measurements of one faulted run from its pods' logs (pure).

    streams: ordinal -> object with `lines` and `times` (the monotonic time each line arrived),
    one pod's whole log in order (on a cluster: every incarnation of that pod name, in order);
    marks: ordinal -> index of its first line after the fault; fault_time: when it was injected.
    """
    result.step_at_fault = max(result.step_at_fault, _max_step(streams, until=fault_time))
    chief = streams[0]
    # The run that finished: the chief's last `tfmw start` after the fault.
    starts = [i for i in range(marks[0], len(chief.lines)) if said(chief.lines[i], loglines.START)]
    if starts:
        first = starts[-1]
        resume = said(chief.lines[first], loglines.START).int_field("resume_step")
        result.resume_step = -1 if resume is None else resume
        after = [i for i in range(first, len(chief.lines)) if progress_step(chief.lines[i]) is not None]
        if after:
            result.seconds_to_resume = chief.times[after[0]] - fault_time
    detected = [
        when
        for o, st in streams.items()
        for when, line in zip(st.times[marks[o] :], st.lines[marks[o] :], strict=True)
        if shows_detection(line)
    ]
    if detected:
        result.seconds_to_detect = min(detected) - fault_time
    first = [i for i in range(marks[0]) if said(chief.lines[i], loglines.LAUNCHER, "starting training (attempt 1)")]
    stepped = [i for i in range(first[0], marks[0]) if progress_step(chief.lines[i]) is not None] if first else []
    if stepped:
        result.seconds_cold_start = chief.times[stepped[0]] - chief.times[first[0]]
    if starts:
        result.parts = recovery_parts(chief, marks[0], starts[-1], fault_time, min(detected) if detected else None)
    # Steps reached before the group broke can exceed the step at the fault moment.
    broke = chief.times[starts[0]] if starts else None
    result.step_at_fault = max(result.step_at_fault, _max_step(streams, until=broke))
    for ordinal, stream in streams.items():
        done = loglines.find(stream.lines, loglines.DONE)
        if done:
            fields = done[-1].fields
            result.final_steps.add(int(fields["steps"]))
            result.digests.add(fields["weights_digest"])
            if ordinal == 0:
                result.model = fields.get("model", "")
        result.trainer_restarts += sum(
            bool(said(line, loglines.LAUNCHER, "restarting training")) for line in stream.lines
        )
    ended = loglines.find(chief.lines, loglines.COMPLETED)
    account = read_line_fields(ended[-1].fields) if ended else None
    if account is not None:
        result.goodput, result.wall_seconds, result.badput = account


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
    cluster: LocalCluster, result: FaultResult, fault_after_step: int, partition_seconds: float, timeout: float
) -> None:
    """Start the cluster, wait for the trigger, inject the fault, wait for the run's end,
    and measure it into `result`."""
    started = time.monotonic()
    cluster.start()
    if cluster.wait_for_line(0, fault_trigger(result.scenario, fault_after_step), timeout=timeout) is None:
        result.reason = f"never reached step {fault_after_step} before the fault"
        return
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
    fault_after_step: int = 50,
    hang_timeout_seconds: int | None = None,
    partition_seconds: float = 15.0,
    extra_sets: tuple[str, ...] = (),
    timeout: float = 400,
    out=lambda line: None,
    env: dict | None = None,
) -> FaultResult:
    """One real 2-worker run with one fault; returns the measurements (never raises on a
    failed recovery: the result says what happened). `hang_timeout_seconds` None: the chart's
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
        fault_and_recover(cluster, result, fault_after_step, partition_seconds, timeout)
        return result
    finally:
        cluster.shutdown()


# ---------------------------------------------------------------- real-cluster mode
#
# The same measurements on a Kubernetes cluster (the local control plane of `make cluster`,
# or any cluster a kubeconfig reaches): the chart installed with helm, the fault done through
# the API server, the pods' logs followed through it (tfmw.k8s.Api). Nothing here knows how the
# cluster runs its pods.

CLUSTER_SCENARIOS = ("delete-worker", "delete-chief")
VICTIM = {"delete-worker": 1, "delete-chief": 0}
CHART = Path(render.CHART_DIR)
VALUES_LOCAL = Path(render.VALUES_DIR) / "local.yaml"
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
        self.env = dict(os.environ, KUBECONFIG=str(self.kubeconfig))
        try:
            self.api = Api.from_kubeconfig(kubeconfig_env=str(self.kubeconfig), timeout=30)
        except KubeconfigError as err:
            raise FaultError(f"--kubeconfig {kubeconfig}: {err}", exit_code=2) from None

    def helm(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
        proc = subprocess.run([self.helm_bin, *args], capture_output=True, text=True, env=self.env, timeout=timeout)
        if check and proc.returncode != 0:
            why = helm_error_line(proc.stderr)
            raise FaultError(f"`helm {' '.join(args[:3])} ...` exited {proc.returncode}: {why}")
        return proc

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

    def delete_namespace(self, namespace: str, timeout: float = 180) -> None:
        """Delete the namespace and wait until it is gone (best effort: the harness's cleanup)."""
        path = f"/api/v1/namespaces/{namespace}"
        deadline = time.monotonic() + timeout
        try:
            self.api.delete(path)
            while time.monotonic() < deadline and self.api.get_or_none(path) is not None:
                time.sleep(1)
        except ApiError:
            pass


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
        self, kube: Kube, namespace: str, statefulset: str, selector: str, out=lambda line: None, interval: float = 0.5
    ):
        self.kube, self.namespace, self.statefulset, self.selector = kube, namespace, statefulset, selector
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
                ordinal = pod_ordinal(name, self.statefulset)
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
                    if started and (inc.follow is None or (inc.ended and "running" in state)):
                        self._follow(inc, pod["spec"]["containers"][0]["name"])
            self.current = current
            self.stopping.wait(self.interval)

    def _follow(self, inc: Incarnation, container: str) -> None:
        skip = len(inc.lines)
        inc.ended = False
        try:
            inc.follow = self.kube.api.follow_log(self.namespace, inc.name, container=container)
        except ApiError as err:
            self.last_error, inc.ended = f"log of {inc.name}: {err}", True  # tried again at the next poll
            return
        threading.Thread(target=self._read, args=(inc, inc.follow, skip), daemon=True, name=f"logs-{inc.name}").start()

    def _read(self, inc: Incarnation, stream: LogStream, skip: int) -> None:
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
    marker = Path(host_path, run_id, "COMPLETED") if host_path else None
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
) -> FaultResult:
    """One real 2-worker run of the chart installed with helm on a cluster, with one pod
    deleted through the API server once a checkpoint exists and training passed
    `fault_after_step`. The StatefulSet controller recreates the pod under the same name;
    the group resumes from the shared checkpoint. In `namespace` (default: a new one, deleted
    afterwards). Never raises on a failed recovery: the result says what happened."""
    if scenario not in CLUSTER_SCENARIOS:
        raise FaultError(f"unknown cluster scenario {scenario!r}; known: {', '.join(CLUSTER_SCENARIOS)}", 2)
    kube = kube or Kube(kubeconfig)
    release = release or f"fault-{scenario}"[:40]
    result = FaultResult(scenario, False, "", steps, checkpoint_every)
    own_namespace = namespace is None
    if own_namespace:
        namespace = f"tfmw-faults-{os.getpid()}-{scenario}"[:63]
        kube.call("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
    logs = None
    started = time.monotonic()
    try:
        sts = _install_run(
            kube, release, namespace, install_sets(steps, checkpoint_every, hang_timeout_seconds, extra_sets)
        )
        selector = f"app.kubernetes.io/instance={release},app.kubernetes.io/component=worker"
        logs = PodLogs(kube, namespace, sts["metadata"]["name"], selector, out=out)
        logs.start()
        result.victim = f"{sts['metadata']['name']}-{VICTIM[scenario]}"
        before, fault_time = _delete_once_ready(kube, logs, namespace, result.victim, fault_after_step, timeout)
        outcome = logs.wait_for(lambda pl: run_end(merge_incarnations(pl.snapshot()), fault_time), timeout)
        _record_recovery(result, kube, logs, namespace, sts, (started, before, fault_time), outcome, timeout)
        return result
    except FaultError as err:
        result.reason = str(err)
        return result
    finally:
        if logs is not None:
            logs.stop()
        if own_namespace:
            kube.delete_namespace(namespace)
        else:
            kube.helm("uninstall", release, "-n", namespace, check=False)


def _install_run(kube: Kube, release: str, namespace: str, sets: list[str]) -> dict:
    """`helm install` of the chart with the local overlay and `sets`; its worker StatefulSet."""
    args = ["install", release, str(CHART), "-n", namespace, "-f", str(VALUES_LOCAL)]
    for item in sets:
        args += ["--set", item]
    kube.helm(*args)
    selector = f"app.kubernetes.io/instance={release},app.kubernetes.io/component=worker"
    statefulsets = kube.items(ns_path(namespace, "statefulsets", group="apps/v1"), selector)
    if len(statefulsets) != 1:
        raise FaultError(f"expected one worker StatefulSet for release {release}, found {len(statefulsets)}")
    return statefulsets[0]


def _delete_once_ready(
    kube: Kube, logs: PodLogs, namespace: str, victim: str, fault_after_step: int, timeout: float
) -> tuple[set[str], float]:
    """Once the chief saved a checkpoint and passed `fault_after_step`: the victim pod is
    deleted through the API server. Returns the victim's pod UIDs before the fault, and the fault's time."""

    def checkpoint_and_step(pl: PodLogs):
        return ready_for_fault(merge_incarnations(pl.snapshot()).get(0, Stream()), fault_after_step)

    if logs.wait_for(checkpoint_and_step, timeout) is None:
        raise FaultError(
            f"never reached a checkpoint and step {fault_after_step} before the fault"
            + (f" ({logs.last_error})" if logs.last_error else "")
        )
    before = {inc.uid for inc in logs.snapshot() if inc.name == victim}
    fault_time = time.monotonic()
    kube.delete(ns_path(namespace, "pods", victim))
    return before, fault_time


def _record_recovery(
    result: FaultResult,
    kube: Kube,
    logs: PodLogs,
    namespace: str,
    sts: dict,
    fault: tuple[float, set[str], float],
    outcome: str | None,
    timeout: float,
) -> None:
    """What the logs, the status ConfigMap and the COMPLETED marker say about the recovery.
    `fault`: when the run started, the victim's pod UIDs before the fault, the fault's time."""
    started, before, fault_time = fault
    victim = result.victim
    new = [
        inc
        for inc in logs.snapshot()
        if inc.name == victim and inc.uid not in before and inc.running_since == inc.running_since
    ]
    if new:
        result.recreated_pod = new[0].name
        result.seconds_to_pod_running = new[0].running_since - fault_time
    status = kube.get(ns_path(namespace, "configmaps", f"{sts['metadata']['name']}-status"))
    phase = ((status or {}).get("data") or {}).get("phase", "")
    time.sleep(1.0)  # a launcher's last lines (after `tfmw done`) arrive before the streams are read
    result.seconds_total = time.monotonic() - started
    streams = merge_incarnations(logs.snapshot())
    if 0 in streams:
        marks = {o: first_index_after(st.times, fault_time) for o, st in streams.items()}
        fill_result(result, streams, marks, fault_time)
    result.marker_digest = (completed_marker(kube, namespace, sts) or {}).get("weightsDigest", "")
    if outcome == "done" and not new:
        result.reason = f"pod {victim} was not recreated"
    elif outcome == "done":
        result.completed = True
        result.reason = f"status phase {phase}" if phase else "every worker logged tfmw done"
    else:
        result.reason = outcome or f"no `tfmw done` from every worker within {timeout:g}s (status phase {phase or '-'})"
    result.log_tail = [f"[{inc.name} {inc.uid[:8]}] {line}" for inc in logs.snapshot() for line in inc.lines[-12:]]


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


TABLE_HEADERS = [
    "fault",
    "completed",
    "fault at step",
    "resumed from",
    "steps lost",
    "fault → detected (s)",
    "fault → resumed (s)",
    "trainer restarts",
    "identical weights",
]


def parts_table(results: list[FaultResult]) -> list[str]:
    """fault -> resumed in its parts (recovery_parts), the chief's cold start in the same run and
    the ratio of the two, and the chief's goodput for the whole run: one row a fault (pure)."""

    def cell(value: float) -> str:
        return "-" if value is None or math.isnan(value) else f"{value:.1f}"

    rows = []
    for r in results:
        ratio = r.seconds_to_resume / r.seconds_cold_start if r.seconds_cold_start > 0 else float("nan")
        rows.append(
            [
                r.scenario,
                *(cell(r.parts.get(part, float("nan"))) for part in RECOVERY_PARTS),
                cell(r.seconds_to_resume),
                cell(r.seconds_cold_start),
                "-" if math.isnan(ratio) else f"{ratio:.2f}x",
                "-" if math.isnan(r.goodput) else f"{r.goodput:.1%}",
            ]
        )
    return markdown_table(
        [
            "fault",
            *(f"{p} (s)" for p in RECOVERY_PARTS),
            "fault → resumed (s)",
            "cold start (s)",
            "resumed / cold start",
            "goodput (chief)",
        ],
        rows,
    ).splitlines()


CLUSTER_HEADERS = [
    "fault",
    "pod deleted",
    "recreated as",
    "fault → recreated pod Running (s)",
    "COMPLETED marker digest",
    "total (s)",
]


def table(results: list[FaultResult]) -> list[str]:
    """What each fault cost, one markdown row a fault (pure)."""
    return markdown_table(
        TABLE_HEADERS,
        [
            [
                r.scenario,
                "yes" if r.completed else "NO: " + r.reason,
                str(r.step_at_fault),
                str(r.resume_step),
                f"{r.steps_lost} (≤ {r.checkpoint_every})",
                f"{r.seconds_to_detect:.1f}",
                f"{r.seconds_to_resume:.1f}",
                str(r.trainer_restarts),
                "yes" if r.identical_weights else "NO",
            ]
            for r in results
        ],
    ).splitlines()


def cluster_table(results: list[FaultResult]) -> list[str]:
    """What the cluster did about each deleted pod (cluster mode only; pure)."""

    def marker(r: FaultResult) -> str:
        return ("matches" if r.marker_digest in r.digests else "DIFFERS") if r.marker_digest else "not read"

    return markdown_table(
        CLUSTER_HEADERS,
        [
            [
                r.scenario,
                r.victim or "-",
                r.recreated_pod or "NOT recreated",
                f"{r.seconds_to_pod_running:.1f}",
                marker(r),
                f"{r.seconds_total:.1f}",
            ]
            for r in results
        ],
    ).splitlines()


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m tfmw.faults", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--scenario",
        action="append",
        help=f"run only these (repeatable); default: all. Local: {', '.join(SCENARIOS)}; "
        f"--cluster: {', '.join(CLUSTER_SCENARIOS)}",
    )
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="run on a Kubernetes cluster (helm install, a pod deleted through the API) instead of make local's runner",
    )
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        default=Path(os.environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG),
        help="--cluster: the cluster's kubeconfig (default: $KUBECONFIG, else make cluster's)",
    )
    parser.add_argument("--namespace", help="--cluster: install here (default: a new namespace, deleted afterwards)")
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--set", dest="sets", action="append", default=[])
    parser.add_argument(
        "--hang-timeout",
        type=int,
        default=None,
        help="training.hangTimeoutSeconds for the run (the watchdog's static bound); default: "
        "the chart's (600 s, with training.hangDetection=adaptive)",
    )
    parser.add_argument("--verbose", action="store_true", help="stream every pod's log")
    args = parser.parse_args(argv)
    known = CLUSTER_SCENARIOS if args.cluster else SCENARIOS
    for scenario in args.scenario or []:
        if scenario not in known:
            parser.exit(
                2,
                f"faults: --scenario {scenario}: not a {'cluster' if args.cluster else 'local'} "
                f"scenario; use one of {', '.join(known)}"
                + ("" if args.cluster else f" (or --cluster for {', '.join(CLUSTER_SCENARIOS)})")
                + "\n",
            )
    if args.steps < 60:
        parser.exit(2, f"faults: --steps {args.steps}: the fault lands after step 50, so at least 60\n")
    args.scenarios = args.scenario or list(known)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    out = print if args.verbose else (lambda line: None)
    results = []
    if args.cluster:
        try:
            kube = check_cluster(args.kubeconfig)
        except FaultError as err:
            print(f"faults: {err}", file=sys.stderr)
            return err.exit_code
        for scenario in args.scenarios:
            print(f"running {scenario} on the cluster of {args.kubeconfig} ...", flush=True)
            results.append(
                run_cluster_scenario(
                    scenario,
                    args.kubeconfig,
                    namespace=args.namespace,
                    steps=args.steps,
                    extra_sets=tuple(args.sets),
                    hang_timeout_seconds=args.hang_timeout,
                    kube=kube,
                    out=out,
                )
            )
    else:
        for scenario in args.scenarios:
            print(f"running {scenario} ...", flush=True)
            try:
                results.append(
                    run_scenario(
                        scenario,
                        steps=args.steps,
                        extra_sets=tuple(args.sets),
                        hang_timeout_seconds=args.hang_timeout,
                        out=out,
                    )
                )
            except (ToolError, LocalRunError) as err:  # the chart cannot run here at all
                print(f"faults: {err}", file=sys.stderr)
                return getattr(err, "exit_code", 2)
    print("\n".join(table(results)))
    if any(r.parts for r in results):
        print("\n" + "\n".join(parts_table(results)))
    if args.cluster:
        print("\n" + "\n".join(cluster_table(results)))
    return 0 if all(r.completed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

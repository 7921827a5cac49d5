"""Every pod incarnation's log followed through the API server (PodLogs), merged into one
stream per worker, and the pure readers of those streams: ready for the fault, the run's end."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from entrypoint import loglines
from entrypoint.loglines import progress_step, said
from tfmw.faults.kube import FaultError, Kube
from tfmw.k8s.api import ApiError, LogStream, ns_path


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

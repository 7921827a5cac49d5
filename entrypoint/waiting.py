"""Why the group waits for workers that are not running, said in one place.

Two parts of the launcher learn why a worker is not running: the peer wait (before an attempt,
reading the pods it waits for) and the lost-peer watch (inside a stalled attempt, reading its
peers' pods). Both hand what they read to one `WaitingNote`, which composes the chief's status
message from everything the launcher knows at that moment (a resize in progress, the peer wait's
deadline). A group that has trained and now waits for a worker is in phase Waiting (its reason in
the message): Running means the group trains. Once it trains again the note puts the run back to
Running with the message it replaced. The first start stays Pending and a resize Resizing, each
with the note as its message. So the user sees one phase and one message for one situation,
whichever part read the pods last.

Pure apart from the tracker it writes to: no I/O, no clock (the caller passes the time).
"""

from __future__ import annotations

import calendar
import threading
import time
from dataclasses import dataclass

from .lifecycle import Phase

NAMED_AT_MOST = 5  # pods named in one message; the rest are counted
NO_SANDBOX_SECONDS = 60.0  # a pod placed this long without its sandbox is said to wait on its volume
NOT_MOUNTED = "not attached or mounted"  # the words of such a reason: the message adds the fix once
VOLUME_FIX = (
    "a ReadWriteOnce claim serves one node at a time (Multi-Attach; `kubectl describe pod` shows the "
    "volume's Events): use a ReadWriteMany claim, or pin every worker to one node (workers.nodeSelector "
    "kubernetes.io/hostname)"
)


def _epoch(stamp: str) -> float | None:
    try:
        return float(calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")))
    except (TypeError, ValueError):
        return None


def no_sandbox_reason(pod: dict, now: float) -> str | None:
    """Why a pod placed on a node has not started, when its kubelet has not set up its sandbox
    (PodReadyToStartContainers False, Kubernetes 1.29+) for NO_SANDBOX_SECONDS since it took the
    pod (status.startTime) and the pod mounts a claim (pure; `now`: epoch seconds). The kubelet
    mounts a pod's volumes before it makes the sandbox, so such a pod most likely waits on its
    claim's volume, e.g. a ReadWriteOnce one attached to another node. The pod says only
    ContainerCreating; the volume's Events say for sure, and the workers' Role does not read
    Events. None otherwise (an image pull has its sandbox)."""
    status, spec = pod.get("status") or {}, pod.get("spec") or {}
    if status.get("phase") not in (None, "Pending") or not spec.get("nodeName"):
        return None
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "PodReadyToStartContainers"), None)
    started = _epoch(status.get("startTime") or "")
    if ready is None or ready.get("status") != "False" or started is None or now - started < NO_SANDBOX_SECONDS:
        return None
    claims = [
        v["persistentVolumeClaim"].get("claimName", "?")
        for v in spec.get("volumes") or []
        if v.get("persistentVolumeClaim")
    ]
    if not claims:
        return None
    return (
        f"ContainerCreating on node {spec['nodeName']} for {int(now - started)}s with no sandbox: the volume of "
        f"claim {', '.join(claims)} is most likely {NOT_MOUNTED}"
    )


def pod_waiting_reason(pod: dict, now: float | None = None) -> str | None:
    """Why a pod is not running yet, as the scheduler or the kubelet says it (pure): the
    PodScheduled condition's message ("0/2 nodes are available: 2 Insufficient cpu."), a
    container's waiting reason (ImagePullBackOff: ...), or, given `now` (epoch seconds), a claim's
    volume it waits on (no_sandbox_reason); None when nothing says."""
    status = pod.get("status") or {}
    if status.get("phase") not in (None, "Pending"):
        return None
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return " ".join(f"{condition.get('reason', '')}: {condition.get('message', '')}".split())
    for container in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") and waiting.get("reason") not in ("ContainerCreating", "PodInitializing"):
            return " ".join(f"{waiting['reason']}: {waiting.get('message', '')}".split()).rstrip(": ")
    return None if now is None else no_sandbox_reason(pod, now)


@dataclass(frozen=True)
class Waiting:
    """What the launcher knows while its group waits: the phase, the group's size, the size
    before a resize in progress (None: no resize), whether it is in the peer wait (whose
    deadline is peers.timeoutSeconds) and that timeout."""

    phase: Phase
    workers: int
    resized_from: int | None
    in_peer_wait: bool
    peer_timeout_seconds: int


def named_reasons(reasons: dict[int, str], pod_prefix: str) -> str:
    """'w-1: why; w-2: why; and 3 more', the fix once for a volume (pure)."""
    ordinals = sorted(reasons)
    named = "; ".join(f"{pod_prefix}-{o}: {reasons[o]}" for o in ordinals[:NAMED_AT_MOST])
    if len(ordinals) > NAMED_AT_MOST:
        named += f"; and {len(ordinals) - NAMED_AT_MOST} more"
    if any(NOT_MOUNTED in reasons[o] for o in ordinals[:NAMED_AT_MOST]):
        named += f"; {VOLUME_FIX}"
    return named


def waiting_message(waiting: Waiting, reasons: dict[int, str], pod_prefix: str) -> str:
    """The chief's status message while its group waits for the workers in `reasons`
    (ordinal -> why it is not running), from what the launcher knows (pure)."""
    named = named_reasons(reasons, pod_prefix)
    timeout = waiting.peer_timeout_seconds
    old = waiting.resized_from
    if waiting.phase is Phase.RESIZING and old is not None:
        return (
            f"workers.replicas {old} -> {waiting.workers}: waiting for the new workers ({named}); "
            f"after peers.timeoutSeconds={timeout} the run fails (PeersNotFound), "
            f"unless workers.replicas goes back to {old}"
        )
    then = f", or the run fails after peers.timeoutSeconds={timeout} (PeersNotFound)" if waiting.in_peer_wait else ""
    once = "training starts" if waiting.phase is Phase.PENDING else "the group resumes from its last checkpoint"
    return f"waiting for workers that are not running ({named}); {once} once they run{then}"


class WaitingNote:
    """The one writer of the chief's "waiting for workers" message. `report` composes it from
    the latest reasons, `trains` puts back the message it replaced (unless a transition has
    replaced the note meanwhile). Thread-safe: the peer wait and the lost-peer watch run in
    different threads."""

    def __init__(self, tracker, pod_prefix: str):
        self.tracker = tracker
        self.pod_prefix = pod_prefix
        self._lock = threading.Lock()
        self._replaced: str | None = None
        self._said = ""
        self._last: dict[int, str] = {}  # the latest reasons reported, for a run that fails waiting

    def report(self, waiting: Waiting, reasons: dict[int, str]) -> None:
        """Workers are not running (ordinal -> why). Every worker's phase says so (its readiness
        reads it); the chief's status carries the message. Reasons read for a group larger than
        the one there is now (a grow undone meanwhile) say nothing about it."""
        reasons = {o: why for o, why in reasons.items() if o < waiting.workers}
        if not reasons:
            return
        with self._lock:
            self._last = dict(reasons)
            state = self.tracker.state
            if self._replaced is None or state.message != self._said:
                self._replaced = state.message
            message = waiting_message(waiting, reasons, self.pod_prefix)
            if state.phase in (Phase.RUNNING, Phase.RESTARTING):
                self.tracker.transition(Phase.WAITING, message=message)
            elif self.tracker.is_chief:
                self.tracker.note(message)
            self._said = self.tracker.state.message

    def last_seen(self) -> str:
        """Why the workers were not running when last read ("" when none was reported), for the
        Failed message of a run that gave up waiting for them."""
        with self._lock:
            return named_reasons(self._last, self.pod_prefix) if self._last else ""

    def trains(self) -> None:
        """The group makes progress again: back to Running, with the message the note replaced."""
        with self._lock:
            state = self.tracker.state
            if state.phase is Phase.WAITING:
                self.tracker.transition(Phase.RUNNING, message=self._replaced or "the group trains again")
            elif self._replaced is not None and state.message == self._said:
                self.tracker.note(self._replaced)
            self._replaced = None
            self._last = {}

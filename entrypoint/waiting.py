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

Pure apart from the tracker it writes to: no I/O, no clock.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from .lifecycle import Phase

NAMED_AT_MOST = 5  # pods named in one message; the rest are counted


def pod_waiting_reason(pod: dict) -> str | None:
    """Why a pod is not running yet, as the scheduler or the kubelet says it (pure): the
    PodScheduled condition's message ("0/2 nodes are available: 2 Insufficient cpu."), a
    container's waiting reason (ImagePullBackOff: ...); None when nothing says."""
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
    return None


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


def waiting_message(waiting: Waiting, reasons: dict[int, str], pod_prefix: str) -> str:
    """The chief's status message while its group waits for the workers in `reasons`
    (ordinal -> why it is not running), from what the launcher knows (pure)."""
    ordinals = sorted(reasons)
    named = "; ".join(f"{pod_prefix}-{o}: {reasons[o]}" for o in ordinals[:NAMED_AT_MOST])
    if len(ordinals) > NAMED_AT_MOST:
        named += f"; and {len(ordinals) - NAMED_AT_MOST} more"
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

    def report(self, waiting: Waiting, reasons: dict[int, str]) -> None:
        """Workers are not running (ordinal -> why). Every worker's phase says so (its readiness
        reads it); the chief's status carries the message. Reasons read for a group larger than
        the one there is now (a grow undone meanwhile) say nothing about it."""
        reasons = {o: why for o, why in reasons.items() if o < waiting.workers}
        if not reasons:
            return
        with self._lock:
            state = self.tracker.state
            if self._replaced is None or state.message != self._said:
                self._replaced = state.message
            message = waiting_message(waiting, reasons, self.pod_prefix)
            if state.phase in (Phase.RUNNING, Phase.RESTARTING):
                self.tracker.transition(Phase.WAITING, message=message)
            elif self.tracker.is_chief:
                self.tracker.note(message)
            self._said = self.tracker.state.message

    def trains(self) -> None:
        """The group makes progress again: back to Running, with the message the note replaced."""
        with self._lock:
            state = self.tracker.state
            if state.phase is Phase.WAITING:
                self.tracker.transition(Phase.RUNNING, message=self._replaced or "the group trains again")
            elif self._replaced is not None and state.message == self._said:
                self.tracker.note(self._replaced)
            self._replaced = None

"""What a fault run's logs say: the result of one fault (FaultResult), when it was
detected, where training resumed, and fault -> resumed split at the chief's milestones (pure).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from entrypoint import loglines
from entrypoint.goodput import read_line_fields
from entrypoint.loglines import progress_step, said


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
    watchdog: str = ""  # the first hang watchdog line after the fault (its bound and basis)
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
    fenced_writes: str = ""  # node-partition: what the cut-off pod wrote after the heal ("none")
    node_parts: dict = field(default_factory=dict)  # node faults: fault -> resumed by nodes.NODE_PARTS
    # preempt-worker, suspend: fault -> the room (or the workers) given back, once the run was
    # Waiting (Suspended); the recovery proper is seconds_to_resume - seconds_held
    seconds_held: float = float("nan")
    # cluster mode: the install (helm install, or a peer's workload created) -> the chief's first step
    seconds_to_first_step: float = float("nan")

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
    fired = [
        parsed.text
        for o, st in streams.items()
        for line in st.lines[marks[o] :]
        if (parsed := said(line, loglines.LAUNCHER, "watchdog")) is not None
    ]
    if fired:
        result.watchdog = fired[0]
    first = [i for i in range(marks[0]) if said(chief.lines[i], loglines.LAUNCHER, "starting training (attempt 1)")]
    stepped = [i for i in range(first[0], marks[0]) if progress_step(chief.lines[i]) is not None] if first else []
    if stepped:
        result.seconds_cold_start = chief.times[stepped[0]] - chief.times[first[0]]
    if starts:
        result.parts = recovery_parts(chief, marks[0], starts[-1], fault_time, min(detected) if detected else None)
    # Steps reached before the group broke can exceed the step at the fault moment (a graceful
    # stop trains on to the boundary). It broke at the first `tfmw start` after the fault on
    # any worker: a replaced chief's own start arrives late (its new pod's log is followed
    # from when the harness sees it), while a survivor already trains with it.
    restarted = [
        st.times[i]
        for o, st in streams.items()
        for i in range(marks[o], len(st.lines))
        if said(st.lines[i], loglines.START)
    ]
    broke = min(restarted) if restarted else None
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

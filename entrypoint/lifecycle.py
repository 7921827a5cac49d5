"""A run's life: one state machine, written down once (docs/lifecycle.md is checked against it).

Pure: no I/O, no clock (callers pass `now`), no TensorFlow. The launcher drives it, the
status recorder writes its states to the status ConfigMap, and the Kubernetes Events are
named after its transitions.

    Pending -> Running <-> Restarting            (in place, from the last checkpoint)
    Running | Restarting -> Waiting -> Running   (the group is not formed: a worker is not running,
                                                  e.g. preempted or replaced, Pending meanwhile)
    Running | Restarting | Waiting -> Resizing -> Running  (workers.replicas changed: the group
                                                  stops at a checkpoint, re-forms at the new size)
    any of the above -> Suspended -> Pending     (suspend: true stopped the group at a checkpoint
                                                  and removed its pods; suspend: false resumes)
    any of the above -> Succeeded                (the chief's COMPLETED marker)
    any of the above -> Failed                   (a terminal reason below)

A run is identified by its run id and its `startedAt`: a new training.runId, or a retry
after a Failed run whose pod template changed (a new `revision`), starts a new attempt
with a new `startedAt`; a pod restart continues the same one.
"""

from __future__ import annotations

import calendar
import time
from dataclasses import dataclass, replace
from enum import StrEnum

from .errors import (
    EXIT_BAD_CONFIG,
    EXIT_DEADLINE_EXCEEDED,
    EXIT_OK,
    EXIT_PEERS_NOT_FOUND,
    EXIT_RETRIES_EXHAUSTED,
    EXIT_TRAINING_FAILED,
)
from .loglines import one_line


class Phase(StrEnum):
    PENDING = "Pending"  # launcher started: checking the run's record, waiting for peers
    RUNNING = "Running"  # the training command runs
    RESTARTING = "Restarting"  # it failed retryably (or the chief's pod restarted): restarting in place
    RESIZING = "Resizing"  # the StatefulSet's replicas changed: re-forming the group at the new size
    WAITING = "Waiting"  # the group is not formed: a worker is not running (Pending, preempted, replaced)
    SUSPENDED = "Suspended"  # stopped at a group checkpoint by `suspend: true`, pods removed; resumable
    SUCCEEDED = "Succeeded"  # terminal
    FAILED = "Failed"  # terminal


class Reason(StrEnum):
    COMPLETED = "Completed"  # the chief's COMPLETED marker exists
    BAD_CONFIG = "BadConfig"  # environment, TF_CONFIG or training config refused
    PEERS_NOT_FOUND = "PeersNotFound"  # peer names never resolved within peers.timeoutSeconds
    RESTART_LIMIT = "RestartLimit"  # training.maxRestarts restarts without progress
    REPEATED_ERROR = "RepeatedError"  # one error ended training.sameErrorLimit attempts in a row, no progress
    DEADLINE_EXCEEDED = "DeadlineExceeded"  # training.activeDeadlineSeconds passed
    TRAINING_FAILED = "TrainingFailed"  # the trainer's permanent error (corrupt data, non-finite loss)
    # training finished (exit 0) but the chief could not write COMPLETED (shared storage
    # read-only, missing, full): not Succeeded (nothing would stop a restart training the run
    # again), and not retried (retrying would train it again)
    COMPLETION_NOT_RECORDED = "CompletionNotRecorded"


TERMINAL = frozenset({Phase.SUCCEEDED, Phase.FAILED})

# Every allowed transition, with the reasons a terminal one may carry (non-terminal: none).
EDGES: dict[tuple[Phase, Phase], tuple[Reason, ...]] = {
    (Phase.PENDING, Phase.RUNNING): (),
    (Phase.PENDING, Phase.SUCCEEDED): (Reason.COMPLETED,),
    (Phase.PENDING, Phase.FAILED): (Reason.BAD_CONFIG, Reason.PEERS_NOT_FOUND, Reason.DEADLINE_EXCEEDED),
    (Phase.RUNNING, Phase.RESTARTING): (),
    (Phase.RUNNING, Phase.SUCCEEDED): (Reason.COMPLETED,),
    (Phase.RUNNING, Phase.FAILED): (
        Reason.BAD_CONFIG,
        Reason.TRAINING_FAILED,
        Reason.RESTART_LIMIT,
        Reason.REPEATED_ERROR,
        Reason.DEADLINE_EXCEEDED,
        Reason.COMPLETION_NOT_RECORDED,
    ),
    (Phase.RESTARTING, Phase.RUNNING): (),
    (Phase.RESTARTING, Phase.SUCCEEDED): (Reason.COMPLETED,),
    # BadConfig: a restarted chief pod whose training command cannot be run (a new image)
    (Phase.RESTARTING, Phase.FAILED): (Reason.BAD_CONFIG, Reason.PEERS_NOT_FOUND, Reason.DEADLINE_EXCEEDED),
    (Phase.RUNNING, Phase.RESIZING): (),
    (Phase.RESTARTING, Phase.RESIZING): (),
    (Phase.RESIZING, Phase.RUNNING): (),
    (Phase.RESIZING, Phase.RESTARTING): (),
    (Phase.RESIZING, Phase.SUCCEEDED): (Reason.COMPLETED,),
    # the new workers never appear (PeersNotFound: e.g. a new worker that cannot be scheduled
    # for peers.timeoutSeconds), or the deadline passes while the group re-forms
    (Phase.RESIZING, Phase.FAILED): (
        Reason.PEERS_NOT_FOUND,
        Reason.DEADLINE_EXCEEDED,
        Reason.RESTART_LIMIT,
        Reason.REPEATED_ERROR,
    ),
    # a worker is not running (its pod Pending: preempted, evicted, replaced after a lost node)
    (Phase.RUNNING, Phase.WAITING): (),
    (Phase.RESTARTING, Phase.WAITING): (),
    (Phase.WAITING, Phase.RUNNING): (),  # the group trains again
    (Phase.WAITING, Phase.RESTARTING): (),  # the attempt that waited failed: restart in place
    (Phase.WAITING, Phase.RESIZING): (),
    (Phase.WAITING, Phase.SUCCEEDED): (Reason.COMPLETED,),
    (Phase.WAITING, Phase.FAILED): (
        Reason.PEERS_NOT_FOUND,
        Reason.DEADLINE_EXCEEDED,
        Reason.RESTART_LIMIT,
        Reason.REPEATED_ERROR,
        Reason.TRAINING_FAILED,
        Reason.BAD_CONFIG,
    ),
    # suspend: true (the StatefulSet at 0 replicas, the run not over): the chief records it as
    # its pod stops; suspend: false brings the pods back, and the run goes on from its checkpoint
    **{
        (src, Phase.SUSPENDED): ()
        for src in (Phase.PENDING, Phase.RUNNING, Phase.RESTARTING, Phase.RESIZING, Phase.WAITING)
    },
    (Phase.SUSPENDED, Phase.PENDING): (),
}
# Phases in which the group is under way but not training: a pod that starts now continues it.
UNDER_WAY = frozenset({Phase.RUNNING, Phase.RESTARTING, Phase.RESIZING, Phase.WAITING})

# The launcher's exit code for a terminal reason, where a platform owns the lifecycle
# (TFJob, an Indexed Job, JobSet): 0 on success, a permanent non-zero code on failure.
EXIT_CODE = {
    Reason.COMPLETED: EXIT_OK,
    Reason.BAD_CONFIG: EXIT_BAD_CONFIG,
    Reason.PEERS_NOT_FOUND: EXIT_PEERS_NOT_FOUND,
    Reason.TRAINING_FAILED: EXIT_TRAINING_FAILED,
    Reason.RESTART_LIMIT: EXIT_RETRIES_EXHAUSTED,
    # 4, as the trainer's own permanent error: the same error would end a platform's retry too
    Reason.REPEATED_ERROR: EXIT_TRAINING_FAILED,
    Reason.DEADLINE_EXCEEDED: EXIT_DEADLINE_EXCEEDED,
    # 4, a permanent training failure: a platform must not retry the pod (a retry trains the
    # finished run again), and failure policies written for 2-6 already fail the job on it
    Reason.COMPLETION_NOT_RECORDED: EXIT_TRAINING_FAILED,
}

# The Kubernetes Event (reason, type) a transition into a phase emits. Entering Running
# from Pending is "Started"; from Restarting it is the end of a restart already announced.
EVENTS = {
    (Phase.PENDING, Phase.RUNNING): ("Started", "Normal"),
    (Phase.RUNNING, Phase.RESTARTING): ("Restarted", "Warning"),
    (Phase.RUNNING, Phase.RESIZING): ("Resizing", "Normal"),
    (Phase.RESTARTING, Phase.RESIZING): ("Resizing", "Normal"),
    (Phase.RESIZING, Phase.RUNNING): ("Resized", "Normal"),
    (Phase.RUNNING, Phase.WAITING): ("Waiting", "Warning"),
    (Phase.RESTARTING, Phase.WAITING): ("Waiting", "Warning"),
    (Phase.WAITING, Phase.RUNNING): ("Regrouped", "Normal"),
    (Phase.WAITING, Phase.RESIZING): ("Resizing", "Normal"),
    (Phase.SUSPENDED, Phase.PENDING): ("Resumed", "Normal"),
    **{(src, dst): ("Suspended", "Normal") for src, dst in EDGES if dst is Phase.SUSPENDED},
    **{(src, dst): ("Succeeded", "Normal") for src, dst in EDGES if dst is Phase.SUCCEEDED},
    **{(src, dst): ("Failed", "Warning") for src, dst in EDGES if dst is Phase.FAILED},
}

# The status ConfigMap's data keys (all string values), in the order documented.
STATUS_KEYS = (
    "runId",
    "phase",
    "step",
    "totalSteps",
    "loss",
    "restarts",
    "lastCheckpointStep",
    "reason",
    "message",
    "startedAt",
    "finishedAt",
    "revision",
    "updatedAt",
    "elapsedSeconds",
    "goodput",
    "productiveSeconds",
    "badputSeconds",
    "checkpointIntervalSeconds",
)
# What a worker other than the chief writes when it records its own terminal failure: it
# knows neither the checkpoints nor the restart count, and must not overwrite them.
TERMINAL_KEYS = ("runId", "phase", "reason", "message", "finishedAt", "revision", "updatedAt")

MESSAGE_LIMIT = 1000  # an Event's message must stay under 1024 bytes; keep the status the same


class IllegalTransition(ValueError):
    pass


@dataclass(frozen=True)
class RunState:
    run_id: str
    phase: Phase = Phase.PENDING
    reason: str = ""
    message: str = ""
    step: int | None = None
    total_steps: int | None = None
    loss: str = ""  # as the trainer printed it
    restarts: int = 0
    last_checkpoint_step: int | None = None
    started_at: str = ""
    finished_at: str = ""
    revision: str = ""
    updated_at: str = ""
    elapsed_seconds: str = ""  # this attempt's time with a launcher up, on launchers' monotonic clocks (RunClock)
    # where the run's time went (entrypoint.goodput.Accounting.to_fields), as recorded
    goodput: str = ""
    productive_seconds: str = ""
    badput_seconds: str = ""
    checkpoint_interval_seconds: str = ""  # the trainer's auto interval, as it last logged it

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL


def fresh(run_id: str, revision: str, now: str) -> RunState:
    """A new attempt of a run: Pending, started now."""
    return RunState(run_id=run_id, revision=revision, started_at=now, updated_at=now)


def advance(state: RunState, to: Phase, *, now: str, reason: Reason | None = None, message: str = "") -> RunState:
    """The state after the transition `state.phase -> to`; refuses one the machine lacks."""
    allowed = EDGES.get((state.phase, to))
    if allowed is None:
        raise IllegalTransition(f"{state.phase} -> {to} is not a transition of a run")
    if to in TERMINAL:
        if reason not in allowed:
            raise IllegalTransition(
                f"{state.phase} -> {to} cannot have reason {reason}; allowed: {', '.join(map(str, allowed))}"
            )
    elif reason is not None:
        raise IllegalTransition(f"{state.phase} -> {to} is not terminal and takes no reason")
    return replace(
        state,
        phase=to,
        reason=str(reason) if reason else "",
        message=status_message(message),
        updated_at=now,
        restarts=state.restarts + (1 if to is Phase.RESTARTING else 0),
        finished_at=now if to in TERMINAL else "",
    )


def status_message(text: object) -> str:
    """A state's message: one line whose words are separated by one space (a multi-line,
    indented error reads as one sentence in `kubectl get`/`describe`), cut to MESSAGE_LIMIT."""
    return one_line(" ".join(str(text).split()), MESSAGE_LIMIT)


def event_for(src: Phase, dst: Phase) -> tuple[str, str] | None:
    return EVENTS.get((src, dst))


def exit_code(state: RunState) -> int:
    """The exit code of a terminal state (a platform's success and failure policies read it)."""
    if state.phase is Phase.SUCCEEDED:
        return EXIT_OK
    try:
        return EXIT_CODE[Reason(state.reason)]
    except ValueError:
        return EXIT_TRAINING_FAILED  # a reason this version does not know: still permanent


# -- the status object ---------------------------------------------------------------
def _num(value: int | None) -> str:
    return "" if value is None else str(value)


def to_data(state: RunState, keys: tuple[str, ...] = STATUS_KEYS) -> dict[str, str]:
    """The ConfigMap data for a state (every value a string; unknown: "")."""
    every = {
        "runId": state.run_id,
        "phase": str(state.phase),
        "step": _num(state.step),
        "totalSteps": _num(state.total_steps),
        "loss": state.loss,
        "restarts": str(state.restarts),
        "lastCheckpointStep": _num(state.last_checkpoint_step),
        "reason": state.reason,
        "message": state.message,
        "startedAt": state.started_at,
        "finishedAt": state.finished_at,
        "revision": state.revision,
        "updatedAt": state.updated_at,
        "elapsedSeconds": state.elapsed_seconds,
        "goodput": state.goodput,
        "productiveSeconds": state.productive_seconds,
        "badputSeconds": state.badput_seconds,
        "checkpointIntervalSeconds": state.checkpoint_interval_seconds,
    }
    return {key: every[key] for key in keys}


def _int_or_none(value) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def from_data(data: dict | None) -> RunState | None:
    """A recorded state, or None when the object holds no (readable) run."""
    if not data or not data.get("runId"):
        return None
    try:
        phase = Phase(data.get("phase", ""))
    except ValueError:
        return None
    return RunState(
        run_id=data["runId"],
        phase=phase,
        reason=data.get("reason", ""),
        message=data.get("message", ""),
        step=_int_or_none(data.get("step")),
        total_steps=_int_or_none(data.get("totalSteps")),
        loss=data.get("loss", ""),
        restarts=_int_or_none(data.get("restarts")) or 0,
        last_checkpoint_step=_int_or_none(data.get("lastCheckpointStep")),
        started_at=data.get("startedAt", ""),
        finished_at=data.get("finishedAt", ""),
        revision=data.get("revision", ""),
        updated_at=data.get("updatedAt", ""),
        elapsed_seconds=data.get("elapsedSeconds", ""),
        goodput=data.get("goodput", ""),
        productive_seconds=data.get("productiveSeconds", ""),
        badput_seconds=data.get("badputSeconds", ""),
        checkpoint_interval_seconds=data.get("checkpointIntervalSeconds", ""),
    )


def recorded_final(recorded: RunState | None, incoming: RunState) -> bool:
    """Is `recorded` a terminal state of the run `incoming` belongs to? Then nothing overwrites
    it (terminal states are recorded once, by whoever reached one first): a Succeeded run id
    is final; a Failed one is final for the same pod-template revision (the redeploy rule of
    plan_start) or, without revisions, for the same attempt (startedAt)."""
    if recorded is None or not recorded.terminal or recorded.run_id != incoming.run_id:
        return False
    if recorded.phase is Phase.SUCCEEDED:
        return True
    if recorded.revision:
        return recorded.revision == incoming.revision
    return bool(recorded.started_at) and recorded.started_at == incoming.started_at


# -- what a starting launcher does (redeploy) ------------------------------------------
TRAIN, SUCCEEDED_ALREADY, FAILED_ALREADY = "train", "succeeded", "failed"


@dataclass(frozen=True)
class StartPlan:
    action: str  # TRAIN, SUCCEEDED_ALREADY or FAILED_ALREADY
    state: RunState  # the run's state to continue from
    resumed: bool  # the run was under way when this launcher started (a pod restart)
    why: str  # one line for the log


def plan_start(recorded: RunState | None, run_id: str, revision: str, completed: bool, now: str) -> StartPlan:
    """What a launcher does before training, from the COMPLETED marker and the recorded status.

    - the marker exists: Succeeded (again), never retrain;
    - the status says Succeeded for this run id: Succeeded again (runs without shared storage);
    - the status says Failed for this run id at this same pod-template revision: Failed again,
      no retry (nothing that could fix it changed); an empty revision never matches;
    - the status says Pending/Running/Restarting/Resizing/Waiting for this run id: a pod restart,
      continue the same attempt (startedAt kept, so the deadline is not reset; a restart
      mid-training counts);
    - the status says Suspended for this run id: resumed (suspend: false), continue the same
      attempt from its checkpoint, Pending until the group forms;
    - otherwise (no status, another run id, Failed at another revision): a new attempt.
    """
    same_run = recorded is not None and recorded.run_id == run_id
    if completed:
        if same_run and recorded.phase is Phase.SUCCEEDED:
            return StartPlan(SUCCEEDED_ALREADY, recorded, False, "run already Succeeded (COMPLETED marker)")
        base = recorded if same_run and not recorded.terminal else fresh(run_id, revision, now)
        state = advance(
            replace(base, phase=Phase.PENDING),
            Phase.SUCCEEDED,
            now=now,
            reason=Reason.COMPLETED,
            message="COMPLETED marker found: the run finished earlier",
        )
        return StartPlan(SUCCEEDED_ALREADY, state, False, "run already completed (COMPLETED marker)")
    if same_run and recorded.phase is Phase.SUCCEEDED:
        return StartPlan(SUCCEEDED_ALREADY, recorded, False, "run already Succeeded (status)")
    if same_run and recorded.phase is Phase.FAILED:
        if revision and recorded.revision == revision:
            return StartPlan(
                FAILED_ALREADY, recorded, False, f"run already Failed ({recorded.reason}) at revision {revision}"
            )
        return StartPlan(
            TRAIN,
            fresh(run_id, revision, now),
            False,
            f"run Failed ({recorded.reason}) at revision {recorded.revision or '-'}; "
            f"revision {revision or '-'} trains again from its last checkpoint",
        )
    if same_run and recorded.phase is Phase.SUSPENDED:
        state = replace(
            advance(
                recorded, Phase.PENDING, now=now, message=f"resumed from step {recorded.last_checkpoint_step or 0}"
            ),
            revision=revision or recorded.revision,
            started_at=recorded.started_at or now,
        )
        return StartPlan(TRAIN, state, False, f"run suspended at step {recorded.last_checkpoint_step or 0}: resuming")
    if same_run:
        resumed = recorded.phase in UNDER_WAY
        state = replace(
            recorded,
            phase=Phase.RESTARTING if resumed else Phase.PENDING,
            revision=revision or recorded.revision,
            started_at=recorded.started_at or now,
            restarts=recorded.restarts + (1 if resumed else 0),
            updated_at=now,
            finished_at="",
        )
        return StartPlan(TRAIN, state, resumed, f"run under way since {state.started_at}: continuing")
    return StartPlan(TRAIN, fresh(run_id, revision, now), False, "new run")


# -- deadline ---------------------------------------------------------------------------
def rfc3339(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def parse_rfc3339(text: str) -> float | None:
    try:
        return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))
    except (TypeError, ValueError):
        return None


def continues_attempt(recorded: RunState | None, state: RunState) -> bool:
    """Does this launcher continue the recorded attempt of the run (its pod was recreated, or
    the run resumed from Suspended)? Then what the record counted is carried on."""
    return (
        recorded is not None
        and recorded.run_id == state.run_id
        and not recorded.terminal
        and bool(recorded.started_at)
        and recorded.started_at == state.started_at
    )


@dataclass(frozen=True)
class RunClock:
    """This attempt's elapsed seconds, for training.activeDeadlineSeconds: what the status
    recorded when this launcher started (`carried`), plus this launcher's own monotonic time
    since (`since`, time.monotonic() then). No two nodes' wall clocks are ever compared, so an
    NTP step on any node neither ends a run early nor extends it. Time with no launcher of the
    run up (pods being recreated, a suspended run) is not counted, nor is the time between the
    chief's last status write and its pod's end (at most a checkpoint interval). The chief's
    count is the one recorded (elapsedSeconds); the other workers carry it from their start."""

    carried: float
    since: float

    def elapsed(self, now: float) -> float:
        return self.carried + max(0.0, now - self.since)

    def deadline(self, seconds: int) -> float | None:
        """When `seconds` of elapsed time are reached, on this launcher's monotonic clock; None: no deadline."""
        return None if seconds <= 0 else self.since + seconds - self.carried


def run_clock(recorded: RunState | None, state: RunState, launched: float, since: float) -> RunClock:
    """The clock of the attempt `state` for a launcher started at `launched` (epoch seconds) and
    `since` (monotonic): the recorded elapsedSeconds when it continues the recorded attempt, else 0.
    A record from a launcher before elapsedSeconds was kept counts from its startedAt on this
    node's wall clock, once (the only comparison of two nodes' clocks, and only on that upgrade)."""
    if not continues_attempt(recorded, state):
        return RunClock(0.0, since)
    try:
        carried = float(recorded.elapsed_seconds)
    except ValueError:
        started = parse_rfc3339(recorded.started_at)
        carried = launched - started if started is not None else 0.0
    return RunClock(carried if 0.0 <= carried < float("inf") else 0.0, since)  # NaN, inf, a negative: 0


# -- docs/lifecycle.md is checked against this ------------------------------------------
def markdown_table() -> str:
    rows = ["| from | to | reasons | Event |", "|---|---|---|---|"]
    for (src, dst), reasons in EDGES.items():
        event = event_for(src, dst)
        rows.append(
            f"| {src} | {dst} | {', '.join(f'`{r}`' for r in reasons) or '-'} | "
            f"{f'`{event[0]}` ({event[1]})' if event else '-'} |"
        )
    return "\n".join(rows)


def reasons_table() -> str:
    rows = ["| reason | phase | exit code (platform mode) |", "|---|---|---|"]
    for reason, code in EXIT_CODE.items():
        phase = Phase.SUCCEEDED if reason is Reason.COMPLETED else Phase.FAILED
        rows.append(f"| `{reason}` | {phase} | {code} |")
    return "\n".join(rows)

"""The launcher's view of the run: the state machine (entrypoint.lifecycle) driven by what the
supervisor sees, logged as one line per transition and handed to the status recorder.

The trainer's output lines (docs/contracts.md) are parsed here with entrypoint.loglines, in
the supervisor's output thread: `tfmw start`, `tfmw progress`, `tfmw checkpoint saved`,
`tfmw error`, `tfmw done`.
Parsing is cheap and never raises; recording is the recorder's background thread's job, so
nothing here slows training.
"""

from __future__ import annotations

import collections
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from . import loglines, mtbf
from .goodput import Accounting, Ledger
from .lifecycle import (
    TERMINAL,
    TERMINAL_KEYS,
    Phase,
    Reason,
    RunClock,
    RunState,
    advance,
    event_for,
    rfc3339,
    status_message,
)
from .loglines import CHECKPOINT, DONE, ERROR, PROGRESS, START, LogLine
from .readiness import in_group

_TASK = re.compile(r"/job:worker(?:/replica:\d+)?/task:(\d+)")
_FOLLOWED = (START, PROGRESS, CHECKPOINT, ERROR, DONE)


def followed(raw: str) -> LogLine | None:
    """The trainer line the launcher follows (start, progress, checkpoint saved or interval,
    error, done), parsed; None for any other line."""
    parsed = loglines.parse(raw)
    if parsed is None or parsed.kind not in _FOLLOWED:
        return None
    if parsed.kind == CHECKPOINT and not parsed.text.startswith(("saved ", "interval ")):
        return None  # `checkpoint writing`: not saved yet
    return parsed


@dataclass
class Observed:
    """What the metrics endpoint shows beyond the run's state (entrypoint.metrics)."""

    examples_per_sec: float | None = None
    checkpoint_seconds_last: float | None = None
    checkpoint_interval_seconds: float | None = None  # the trainer's auto interval (checkpoint interval)
    checkpoint_seconds_sum: float = 0.0
    checkpoints: int = 0
    restarts: collections.Counter = field(default_factory=collections.Counter)  # by kind
    # training.elastic (entrypoint.elastic): the members of the group's epoch, of how many
    # configured; and the seconds this launcher's group trained with fewer (degraded), closed
    # and, since degraded_since (monotonic), open
    members: int | None = None
    replicas: int | None = None
    degraded_seconds: float = 0.0
    degraded_since: float | None = None


# A stop at a checkpoint boundary then exits: the trainer's last steps after the save, the
# launcher's status write, the process exit.
STOP_MARGIN_SECONDS = 15.0


class RunTracker:
    """Holds the run's state and its time account (entrypoint.goodput); every transition is
    logged, and recorded by the chief (any worker records a terminal Failed it reaches itself)."""

    def __init__(
        self,
        state: RunState,
        recorder,
        *,
        is_chief: bool,
        worker_index: int,
        log: Callable[[str], None],
        clock: Callable[[], float] = time.time,
        ledger: Ledger | None = None,
        grace_seconds: int = 0,
        run_clock: RunClock | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ):
        self._state = state
        # The attempt's elapsed time (the deadline's), recorded as elapsedSeconds; None: not kept.
        self.run_clock, self.monotonic = run_clock, monotonic
        self._lock = threading.Lock()
        self.recorder = recorder
        self.is_chief = is_chief
        self.worker_index = worker_index
        self.log = log
        self.clock = clock
        self.ledger = ledger or Ledger(clock())
        self.observed = Observed()
        self._last_error = ""
        self._stepped = False  # a training step in the current attempt (entrypoint.readiness)
        self.grace_seconds = grace_seconds  # the pod's terminationGracePeriodSeconds (0: unknown)
        self._checkpointed: tuple[float, int] | None = None  # (when, step) of this attempt's last save
        self._grace_warned = False

    @property
    def state(self) -> RunState:
        with self._lock:
            return self._state

    def now(self) -> str:
        return rfc3339(self.clock())

    def accounting(self) -> Accounting:
        with self._lock:
            return self.ledger.snapshot(self.clock())

    def view(self) -> tuple[RunState, Accounting, Observed]:
        """(state, time account, a copy of what was observed), consistent with each other: what a
        metrics scrape reads (entrypoint.metrics)."""
        with self._lock:
            observed = replace(self.observed, restarts=collections.Counter(self.observed.restarts))
            return self._state, self.ledger.snapshot(self.clock()), observed

    def members(self, members: int, replicas: int) -> None:
        """An elastic group formed at `members` of `replicas` workers: degraded time runs while
        it is fewer (counted apart from the badput: the group trains)."""
        with self._lock:
            now, seen = self.monotonic(), self.observed
            if seen.degraded_since is not None:
                seen.degraded_seconds += now - seen.degraded_since
            seen.members, seen.replicas = members, replicas
            seen.degraded_since = now if members < replicas else None

    def degraded_seconds(self) -> float:
        """Seconds trained as a degraded elastic group, up to now."""
        with self._lock:
            seen = self.observed
            open_part = self.monotonic() - seen.degraded_since if seen.degraded_since is not None else 0.0
            return seen.degraded_seconds + open_part

    def _stamped(self, state: RunState) -> RunState:  # caller holds self._lock
        fields = self.ledger.snapshot(self.clock()).to_fields()
        if self.run_clock is not None:
            state = replace(state, elapsed_seconds=f"{self.run_clock.elapsed(self.monotonic()):.1f}")
        return replace(
            state,
            goodput=fields["goodput"],
            productive_seconds=fields["productiveSeconds"],
            badput_seconds=fields["badputSeconds"],
        )

    # -- transitions -------------------------------------------------------------------
    def transition(self, to: Phase, reason: Reason | None = None, message: str = "") -> RunState:
        with self._lock:
            src = self._state.phase
            if to is Phase.RESTARTING:
                self.ledger.failed(self.clock())
            elif to in TERMINAL:
                self.ledger.ended(self.clock())
            state = advance(self._state, to, now=self.now(), reason=reason, message=message)
            self._state = state = self._stamped(state)
            # Queued under the lock (record() never blocks), so the recorder sees states in the
            # order they happened, never an older snapshot after a newer one.
            if self.is_chief or to is Phase.FAILED:
                self.recorder.record(state, None if self.is_chief else TERMINAL_KEYS)
                event = event_for(src, to)
                if event is not None:
                    self.recorder.event(event[0], event[1], state.message or f"{to}")
        self.log(
            loglines.line(
                loglines.LIFECYCLE,
                phase=to,
                **{"from": src},
                run=state.run_id,
                worker=self.worker_index,
                reason=state.reason or None,
                restarts=state.restarts,
                message=state.message or None,
            )
        )
        return state

    def adopt(self, recorded: RunState) -> None:
        """The run ended elsewhere (a peer recorded it): take its state as ours, record nothing."""
        with self._lock:
            self._state = recorded
        self.log(
            loglines.line(
                loglines.LIFECYCLE,
                phase=recorded.phase,
                run=recorded.run_id,
                worker=self.worker_index,
                reason=recorded.reason or "-",
                recorded_by="peer",
                message=recorded.message,
            )
        )

    def note(self, message: str) -> None:
        """A new message for the current phase (what a resize waits for), recorded by the chief;
        no transition, no Event."""
        with self._lock:
            if self._state.message == status_message(message):
                return
            self._state = self._stamped(replace(self._state, message=status_message(message), updated_at=self.now()))
            if self.is_chief:
                self.recorder.record(self._state, None)

    def record_now(self, event: tuple[str, str, str] | None = None) -> None:
        """The chief writes the current state (start of a launcher), optionally with an Event."""
        if not self.is_chief:
            return
        with self._lock:
            self._state = self._stamped(self._state)
            self.recorder.record(self._state, None)
            if event is not None:
                self.recorder.event(*event)

    # -- the time account (entrypoint.goodput) ------------------------------------------
    def peer_wait(self) -> None:
        with self._lock:
            self.ledger.peer_wait(self.clock())

    def peers_found(self) -> None:
        with self._lock:
            self.ledger.peers_found(self.clock())

    def beat(self, step: int, phase: str | None, written: float | None = None) -> None:
        """A new heartbeat of the training command (the supervisor's on_beat), at the time the
        trainer wrote it when known (the file's mtime), never later than now."""
        with self._lock:
            now = self.clock()
            self.ledger.beat(min(written, now) if written is not None else now, phase)
            self._stepped = self._stepped or phase == "train"

    def group_stopped(self) -> None:
        """The training command stopped for the group to re-form (a resize): until the next
        attempt trains, the time is the restart's, as after a failure."""
        with self._lock:
            self.ledger.failed(self.clock())

    def group_broke(self, error: str) -> None:
        """The command reported a group error (entrypoint.groupbreak) and is tearing TensorFlow
        down: the attempt is lost from here, so the teardown counts as the restart's time."""
        with self._lock:
            self.ledger.failed(self.clock())

    def ready(self, seconds_without_progress: float = 0.0) -> tuple[bool, str]:
        """Is this worker in a group that trains (entrypoint.readiness)? What /ready answers."""
        with self._lock:
            return in_group(self._state, self._stepped, self.ledger.beats, seconds_without_progress)

    def restart_counted(self, kind: str) -> None:
        with self._lock:
            self.observed.restarts[kind] += 1

    def attempt_env(self, path: str) -> dict[str, str]:
        """The starting attempt's estimate of the group's mean time between failures, for the
        trainer's auto checkpoint interval, written to `path` (entrypoint.mtbf): from the run's
        restarts and its wall time as the account holds it (carried across launcher restarts;
        never timestamps written on other nodes)."""
        with self._lock:
            restarts, wall = self._state.restarts, self.ledger.snapshot(self.clock()).wall
        return mtbf.attempt_env(path, restarts, wall)

    # -- the trainer's output -----------------------------------------------------------
    def attempt_started(self) -> None:
        with self._lock:
            self._last_error = ""
            self._stepped = False
            self._checkpointed = None
            self.ledger.attempt_started(self.clock())

    def on_line(self, line: str) -> None:
        parsed = followed(line)
        if parsed is None:
            return
        kind, f = parsed.kind, parsed.fields
        checkpoint = False
        too_short = None
        with self._lock:
            s = self._state
            if kind == START:
                resume = parsed.int_field("resume_step")
                s = replace(
                    s,
                    step=resume if resume is not None else s.step,
                    total_steps=parsed.int_field("steps") or s.total_steps,
                )
            elif kind == PROGRESS:
                step = parsed.int_field("step")
                total = f.get("step", "").partition("/")[2]
                s = replace(
                    s,
                    step=step if step is not None else s.step,
                    total_steps=(int(total) if total.isdigit() else 0) or s.total_steps,
                    loss=f.get("loss", s.loss),
                )
                rate = parsed.float_field("examples_per_sec")
                self.observed.examples_per_sec = rate if rate is not None else self.observed.examples_per_sec
            elif kind == CHECKPOINT and parsed.int_field("step") is not None:
                s, too_short = self._checkpoint_saved(s, parsed)
                checkpoint = True
            elif kind == CHECKPOINT and parsed.text.startswith("interval"):
                s = self._interval_chosen(s, parsed)
            elif kind == DONE:
                steps = parsed.int_field("steps")
                s = replace(s, step=steps if steps is not None else s.step, loss=f.get("final_loss", s.loss))
            elif kind == ERROR:
                self._last_error = loglines.error_text(parsed)
            if checkpoint:
                s = self._stamped(replace(s, updated_at=self.now()))
            self._state = s
            if checkpoint and self.is_chief:
                self.recorder.record(s, None)  # coalesced: at most one write in flight
        if too_short and self.is_chief:
            self.log(loglines.line(loglines.LAUNCHER, text=f"warning: {too_short}"))
            self.recorder.event("GracePeriodTooShort", "Warning", too_short)
            self.note(f"{self.state.message}; warning: {too_short}" if self.state.message else f"warning: {too_short}")

    def _checkpoint_saved(self, s: RunState, parsed: LogLine) -> tuple[RunState, str | None]:
        """`tfmw checkpoint saved`: the run's state, the account, the grace check's warning
        (caller holds self._lock)."""
        saved = parsed.int_field("step")
        s = replace(s, last_checkpoint_step=saved, step=max(s.step or 0, saved))
        seconds = parsed.float_field("seconds")  # the stall; write_seconds: the whole save
        self.ledger.checkpoint_saved(self.clock(), seconds, parsed.float_field("age_seconds"))
        if seconds is not None:
            o = self.observed
            o.checkpoint_seconds_last, o.checkpoints = seconds, o.checkpoints + 1
            o.checkpoint_seconds_sum += seconds
        written = parsed.float_field("write_seconds")
        return s, self._grace_check(saved, written if written is not None else seconds)

    def _interval_chosen(self, s: RunState, parsed: LogLine) -> RunState:
        """`tfmw checkpoint interval seconds=`: the auto interval, for the status and metrics."""
        interval = parsed.float_field("seconds")
        if interval is None:
            return s
        self.observed.checkpoint_interval_seconds = interval
        return replace(s, checkpoint_interval_seconds=f"{interval:.1f}")

    def _grace_check(self, step: int, save_seconds: float | None) -> str | None:
        """A stop (drain, preemption, suspend) is acted on at the next checkpoint boundary, so the
        pod's grace period must cover a whole checkpoint interval and its write: said once, when
        one measured in this attempt is longer (caller holds self._lock)."""
        now, last = self.clock(), self._checkpointed
        self._checkpointed = (now, step)
        if not self.grace_seconds or self._grace_warned or last is None or step <= last[1]:
            return None
        interval = now - last[0]
        needed = interval + STOP_MARGIN_SECONDS
        if needed <= self.grace_seconds:
            return None
        self._grace_warned = True
        write = f", its write {save_seconds:.1f}s" if save_seconds is not None else ""
        return (
            f"workers.terminationGracePeriodSeconds={self.grace_seconds} is shorter than a checkpoint interval "
            f"({interval:.0f}s from step {last[1]} to {step}{write}) and the stop after it: a drain, preemption "
            f"or suspend would be SIGKILLed before the group's checkpoint and lose up to {step - last[1]} steps; "
            f"raise it to at least {needed:.0f}, or checkpoint more often (training.config.checkpoint.everySteps)"
        )

    def restart_message(self, cause: str) -> str:
        """'worker 1 lost: UnavailableError: ..., resuming from step 20' (the Restarted Event)."""
        with self._lock:
            error = self._last_error
        if error:
            tasks = [int(t) for t in _TASK.findall(error) if int(t) != self.worker_index]
            cause = f"worker {tasks[0]} lost: {error}" if tasks else f"{cause}: {error}"
        return f"{loglines.one_line(cause, 700)}, {self.resume_point()}"

    def resume_point(self) -> str:
        """Where a restart resumes, as far as the launcher knows: the built-in trainer's (or any
        command's) last published checkpoint step from its `tfmw checkpoint saved` lines; a user
        command that prints none keeps its own checkpoints (Keras' BackupAndRestore, say), which the
        launcher cannot see, so it says so rather than 'step 0'."""
        with self._lock:
            step, beats = self._state.last_checkpoint_step, self.ledger.beats
        if step:
            return f"resuming from step {step}"
        if beats:
            return "resuming from the start (no checkpoint yet)"
        return "the training command resumes from its own checkpoint, if it keeps one"

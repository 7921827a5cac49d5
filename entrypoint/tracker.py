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

from . import loglines
from .goodput import Accounting, Ledger
from .lifecycle import (
    TERMINAL,
    TERMINAL_KEYS,
    Phase,
    Reason,
    RunState,
    advance,
    event_for,
    rfc3339,
    status_message,
)
from .loglines import CHECKPOINT, DONE, ERROR, PROGRESS, START, LogLine

_TASK = re.compile(r"/job:worker(?:/replica:\d+)?/task:(\d+)")
_FOLLOWED = (START, PROGRESS, CHECKPOINT, ERROR, DONE)


def followed(raw: str) -> LogLine | None:
    """The trainer line the launcher follows (start, progress, checkpoint saved, error, done),
    parsed; None for any other line."""
    parsed = loglines.parse(raw)
    if parsed is None or parsed.kind not in _FOLLOWED:
        return None
    if parsed.kind == CHECKPOINT and not parsed.text.startswith("saved "):
        return None  # `checkpoint writing`: not saved yet
    return parsed


@dataclass
class Observed:
    """What the metrics endpoint shows beyond the run's state (entrypoint.metrics)."""

    examples_per_sec: float | None = None
    checkpoint_seconds_last: float | None = None
    checkpoint_seconds_sum: float = 0.0
    checkpoints: int = 0
    restarts: collections.Counter = field(default_factory=collections.Counter)  # by kind


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
    ):
        self._state = state
        self._lock = threading.Lock()
        self.recorder = recorder
        self.is_chief = is_chief
        self.worker_index = worker_index
        self.log = log
        self.clock = clock
        self.ledger = ledger or Ledger(clock())
        self.observed = Observed()
        self._last_error = ""

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

    def _stamped(self, state: RunState) -> RunState:  # caller holds self._lock
        fields = self.ledger.snapshot(self.clock()).to_fields()
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

    def group_stopped(self) -> None:
        """The training command stopped for the group to re-form (a resize): until the next
        attempt trains, the time is the restart's, as after a failure."""
        with self._lock:
            self.ledger.failed(self.clock())

    def restart_counted(self, kind: str) -> None:
        with self._lock:
            self.observed.restarts[kind] += 1

    # -- the trainer's output -----------------------------------------------------------
    def attempt_started(self) -> None:
        with self._lock:
            self._last_error = ""
            self.ledger.attempt_started(self.clock())

    def on_line(self, line: str) -> None:
        parsed = followed(line)
        if parsed is None:
            return
        kind, f = parsed.kind, parsed.fields
        checkpoint = False
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
                saved = parsed.int_field("step")
                s = replace(s, last_checkpoint_step=saved, step=max(s.step or 0, saved))
                checkpoint = True
                seconds = parsed.float_field("seconds")
                self.ledger.checkpoint_saved(self.clock(), seconds)
                if seconds is not None:
                    o = self.observed
                    o.checkpoint_seconds_last, o.checkpoints = seconds, o.checkpoints + 1
                    o.checkpoint_seconds_sum += seconds
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

    def restart_message(self, cause: str) -> str:
        """'worker 1 lost: UnavailableError: ..., resuming from step 20' (the Restarted Event)."""
        with self._lock:
            error, state = self._last_error, self._state
        if error:
            tasks = [int(t) for t in _TASK.findall(error) if int(t) != self.worker_index]
            cause = f"worker {tasks[0]} lost: {error}" if tasks else f"{cause}: {error}"
        return f"{loglines.one_line(cause, 700)}, resuming from step {state.last_checkpoint_step or 0}"

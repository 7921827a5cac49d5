"""The launcher's view of the run: the state machine (entrypoint.lifecycle) driven by what the
supervisor sees, logged as one line per transition and handed to the status recorder.

The trainer's output lines (docs/contracts.md) are parsed here, in the supervisor's output
thread: `tfmw start`, `tfmw progress`, `tfmw checkpoint saved`, `tfmw error`, `tfmw done`.
Parsing is cheap and never raises; recording is the recorder's background thread's job, so
nothing here slows training.
"""
from __future__ import annotations

import re
import threading
import time
from dataclasses import replace
from typing import Callable

from .lifecycle import (TERMINAL_KEYS, Phase, Reason, RunState, advance, event_for, one_line,
                        rfc3339)

_KV = re.compile(r'(\w+)=("[^"]*"|\S+)')
_TASK = re.compile(r"/job:worker(?:/replica:\d+)?/task:(\d+)")


def key_values(line: str) -> dict[str, str]:
    return {k: v.strip('"') for k, v in _KV.findall(line)}


def parse_line(line: str) -> tuple[str, dict[str, str]] | None:
    """(kind, fields) of a trainer line the launcher follows, else None.

    kinds: start, progress, checkpoint (saved only), error, done."""
    if not line.startswith("tfmw "):
        return None
    head, _, rest = line[5:].partition(" ")
    if head in ("start", "progress", "done"):
        return head, key_values(rest)
    if head == "checkpoint" and rest.startswith("saved "):
        return "checkpoint", key_values(rest)
    if head == "error":
        fields = key_values(rest)
        # everything after "worker=<i> " is the error itself: "<ErrorType>: <message>"
        match = re.match(r"retryable=\S+ worker=\S+ (?P<text>.*)$", rest)
        fields["text"] = match.group("text") if match else rest
        return "error", fields
    return None


def _int(value: str | None) -> int | None:
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _quote(message: str) -> str:
    return '"' + one_line(message, 500).replace('"', "'") + '"'


class RunTracker:
    """Holds the run's state; every transition is logged, and recorded by the chief (any
    worker records a terminal Failed it reaches itself)."""

    def __init__(self, state: RunState, recorder, *, is_chief: bool, worker_index: int,
                 log: Callable[[str], None], clock: Callable[[], float] = time.time):
        self._state = state
        self._lock = threading.Lock()
        self.recorder = recorder
        self.is_chief = is_chief
        self.worker_index = worker_index
        self.log = log
        self.clock = clock
        self._last_error = ""

    @property
    def state(self) -> RunState:
        with self._lock:
            return self._state

    def now(self) -> str:
        return rfc3339(self.clock())

    # -- transitions -------------------------------------------------------------------
    def transition(self, to: Phase, reason: Reason | None = None, message: str = "") -> RunState:
        with self._lock:
            src = self._state.phase
            self._state = state = advance(self._state, to, now=self.now(), reason=reason, message=message)
            # Queued under the lock (record() never blocks), so the recorder sees states in the
            # order they happened, never an older snapshot after a newer one.
            if self.is_chief or to is Phase.FAILED:
                self.recorder.record(state, None if self.is_chief else TERMINAL_KEYS)
                event = event_for(src, to)
                if event is not None:
                    self.recorder.event(event[0], event[1], state.message or f"{to}")
        self.log(f"tfmw lifecycle phase={to} from={src} run={state.run_id} worker={self.worker_index}"
                 + (f" reason={state.reason}" if state.reason else "") + f" restarts={state.restarts}"
                 + (f" message={_quote(state.message)}" if state.message else ""))
        return state

    def adopt(self, recorded: RunState) -> None:
        """The run ended elsewhere (a peer recorded it): take its state as ours, record nothing."""
        with self._lock:
            self._state = recorded
        self.log(f"tfmw lifecycle phase={recorded.phase} run={recorded.run_id} worker={self.worker_index} "
                 f"reason={recorded.reason or '-'} recorded_by=peer message={_quote(recorded.message)}")

    def record_now(self, event: tuple[str, str, str] | None = None) -> None:
        """The chief writes the current state (start of a launcher), optionally with an Event."""
        if not self.is_chief:
            return
        with self._lock:
            self.recorder.record(self._state, None)
            if event is not None:
                self.recorder.event(*event)

    # -- the trainer's output -----------------------------------------------------------
    def attempt_started(self) -> None:
        with self._lock:
            self._last_error = ""

    def on_line(self, line: str) -> None:
        parsed = parse_line(line)
        if parsed is None:
            return
        kind, f = parsed
        checkpoint = False
        with self._lock:
            s = self._state
            if kind == "start":
                s = replace(s, step=_int(f.get("resume_step")) if _int(f.get("resume_step")) is not None else s.step,
                            total_steps=_int(f.get("steps")) or s.total_steps)
            elif kind == "progress":
                step, _, total = f.get("step", "").partition("/")
                s = replace(s, step=_int(step) if _int(step) is not None else s.step,
                            total_steps=_int(total) or s.total_steps, loss=f.get("loss", s.loss))
            elif kind == "checkpoint" and _int(f.get("step")) is not None:
                saved = _int(f.get("step"))
                s = replace(s, last_checkpoint_step=saved, step=max(s.step or 0, saved))
                checkpoint = True
            elif kind == "done":
                s = replace(s, step=_int(f.get("steps")) if _int(f.get("steps")) is not None else s.step,
                            loss=f.get("final_loss", s.loss))
            elif kind == "error":
                self._last_error = f.get("text", "")
            if checkpoint:
                s = replace(s, updated_at=self.now())
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
        return f"{one_line(cause, 700)}, resuming from step {state.last_checkpoint_step or 0}"

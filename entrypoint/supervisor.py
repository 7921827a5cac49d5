"""Run the training command as a child and keep the group training.

Why in-process supervision: a StatefulSet pod's only restart policy is Always, and when
one MWMS worker dies the others fail their collective (UnavailableError after the
coordination heartbeat, about 8 s). Letting the kubelet restart every container would add
CrashLoopBackOff delays; restarting the training process in place, from the last
checkpoint, re-forms the group in seconds. The supervisor ends with an Ending (Succeeded,
Failed with a lifecycle reason, or stopped by a signal); what the pod does then (idle,
scale to 0, exit) is the launcher's business (entrypoint.launcher).

The loop only acts: one attempt's process is entrypoint.attempt's, and what to do when it
ends (succeed, fail, stop, re-form the group, restart after a back-off, give up) is the pure
restart rule's, entrypoint.restarts.decide.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import loglines
from .attempt import TrainingProcess
from .errors import EXIT_OK, EXIT_SIGTERM
from .hangwatch import ADAPTIVE, FLOOR_SECONDS
from .lifecycle import Phase, Reason
from .oomkill import MemoryCgroup
from .restarts import (
    AttemptOutcome,
    Decision,
    History,
    Next,
    deadline_message,
    decide,
    finished_message,
    found_message,
    may_be_a_resize,
)

# The run directory's one API (no TensorFlow import for a local path): the marker is
# published the same way, and reads the same, whichever side writes it.
from .rundir import (
    MarkerUnreadable,
    RunDir,
    completed_detail,
    completed_marker,
    marker_exists,
    marker_exists_retrying,
    write_completed,
)
from .standby import Standby


@dataclass(frozen=True)
class Ending:
    """How supervision ended: phase Succeeded or Failed (with its reason), or None when a
    signal stopped it (the pod is going away; not a state of the run)."""

    phase: Phase | None
    reason: Reason | None = None
    message: str = ""
    returncode: int = EXIT_OK  # only for a stop: what the launcher exits with


@dataclass
class SupervisorConfig:
    command: Sequence[str]
    env: dict
    run_dir: Path | None  # <shared>/<run>; None: no shared storage (no completion marker)
    heartbeat_file: Path
    max_restarts: int = 20
    # training.sameErrorLimit: attempts in a row ended by the same error, with no progress between
    # them, before the run is Failed (RepeatedError; entrypoint.crashprint); 0: off
    same_error_limit: int = 2
    hang_timeout_seconds: float = 0  # 0: watchdog off; else the static bound and the ceiling
    hang_detection: str = ADAPTIVE  # adaptive: trainer steps get a bound from their observed time (hangwatch)
    hang_floor_seconds: float = FLOOR_SECONDS  # the adaptive bound's floor (tests lower it)
    poll_seconds: float = 0.5
    backoff_first_seconds: float = 1.0
    # before a restart: the run's record, the group's size, the peers (may raise); returns the
    # training command's new environment when the group changed size (a new TF_CONFIG), else None
    regroup: Callable[[], dict | None] = lambda: None
    # after a retryable exit: did the group stop because its size changed (a resize seen by
    # another launcher)? Its why, or None. Then it is a regroup, not a failure.
    resized: Callable[[], str | None] = lambda: None
    is_chief: bool = False  # the chief records completion if the command did not
    log: Callable[[str], None] = field(default=lambda line: print(line, flush=True))
    # activeDeadlineSeconds: the time on `clock`, this launcher's monotonic clock, at which the
    # run's elapsed time reaches it (lifecycle.RunClock.deadline: no wall clock, so no clock step
    # ends a run); then training is stopped (SIGTERM, so the trainer checkpoints; SIGKILL after
    # stop_grace_seconds). None: no deadline.
    deadline: float | None = None
    deadline_seconds: int = 0  # for the message only
    stop_grace_seconds: float = 120.0
    clock: Callable[[], float] = time.monotonic
    # hooks for the run's state (entrypoint.tracker): called from the supervisor's threads
    on_attempt: Callable[[int], None] = lambda attempt: None  # a training attempt starts
    on_restart: Callable[[str], None] = lambda cause: None  # it failed; restarting in place
    on_output: Callable[[str], None] = lambda line: None  # every line the command prints
    # a new heartbeat: (step, phase, when it was written: epoch seconds, None if unknown)
    on_beat: Callable[[int, str | None, float | None], None] = lambda step, phase, written: None
    tee: Callable[[bytes], None] | None = None  # every raw output line, also (the kept log, entrypoint.podlog)
    # a user command finished but the chief cannot write COMPLETED (shared storage read-only,
    # missing, full): retry this long, backing off, before failing (CompletionNotRecorded)
    marker_retry_seconds: float = 60.0
    # Warm standby (entrypoint.standby): the modules the next trainer process imports ahead,
    # waiting, so a restart in place skips them (TensorFlow: ~3 s); None: every start is cold.
    # It is started once the current attempt trains (its second heartbeat) or after
    # standby_delay_seconds, and at once when an attempt fails without one.
    standby_preload: Sequence[str] | None = None
    standby_delay_seconds: float = 20.0
    # The first attempt's standby, started with the launcher (entrypoint.standby.prestart),
    # taken by the first start that has none of its own (None: that start is cold).
    first_standby: Callable[[], Standby | None] = lambda: None
    # The container's memory cgroup (entrypoint.oomkill): its OOM-kill counter, read before each
    # attempt and after a SIGKILL, tells the kernel's OOM killer from any other SIGKILL.
    memory: MemoryCgroup = field(default_factory=MemoryCgroup)
    # The command's output ended with a traceback of a group error (entrypoint.groupbreak): it
    # is only tearing TensorFlow down now. Its process group is ended this long after, so the
    # group can re-form without waiting out the teardown (18 s measured for a Keras script).
    broken_grace_seconds: float = 5.0
    on_group_broken: Callable[[str], None] = lambda error: None  # the attempt is lost from here
    # After the command's main process exits, what it left running (its process group, orphans
    # it left to PID 1) gets SIGTERM, then SIGKILL this long after (entrypoint.reaper).
    left_running_grace_seconds: float = 10.0
    # Before each attempt's command starts: remove the scratch an earlier attempt left (a SIGKILL
    # skips its own cleanup) on this node and, for the chief, in the run directory (entrypoint.scratch).
    clean_scratch: Callable[[], None] = lambda: None
    # Added to each attempt's environment as it starts: what the run's record says now (the
    # MTBF estimate for the trainer's auto checkpoint interval, entrypoint.mtbf)
    attempt_env: Callable[[], dict[str, str]] = lambda: {}

    def deadline_passed(self) -> bool:
        return self.deadline is not None and self.clock() >= self.deadline

    def until_deadline(self, delay: float) -> float:
        """`delay`, cut short at the deadline."""
        if self.deadline is None:
            return delay
        return max(0.0, min(delay, self.deadline - self.clock()))


class Supervisor:
    """The restart loop: an attempt (entrypoint.attempt), the restart rule's decision on how
    it ended (entrypoint.restarts.decide), that decision acted on; until the run ends."""

    def __init__(self, config: SupervisorConfig):
        self.cfg = config
        self._stop = threading.Event()
        self._regroup_why: str | None = None  # a resize asked the group to stop and re-form
        self._process = TrainingProcess(config, self._stop, lambda: self._regroup_why is not None, self._say)

    def _say(self, text: str) -> None:
        """One `tfmw launcher <text>` line."""
        self.cfg.log(loglines.line(loglines.LAUNCHER, text=text))

    # -- signals -------------------------------------------------------------------
    def request_stop(self, signum: int = signal.SIGTERM) -> None:
        """SIGTERM (pod deletion, drain, helm uninstall): pass it on so the trainer can
        checkpoint at a safe point, then stop without restarting."""
        self._stop.set()
        self._process.discard_standby()
        self._process.signal(signum)

    def seconds_without_progress(self) -> float:
        """Since the trainer's heartbeat last changed (restarts and peer waits included): how
        long the group has not trained."""
        return self._process.seconds_without_progress()

    def request_regroup(self, why: str) -> None:
        """The group must re-form (its size changed): SIGTERM the training command, so the
        whole group stops at its next checkpoint boundary, then start it again through
        `regroup` (the new TF_CONFIG). Not a failure: no back-off, no restart counted."""
        self._regroup_why = why
        self._process.discard_standby()  # it holds the old TF_CONFIG
        self._process.signal(signal.SIGTERM)

    @property
    def regroup_pending(self) -> bool:
        """A regroup was asked for and the group has not re-formed yet."""
        return self._regroup_why is not None

    def _regroup(self) -> None:
        env = self.cfg.regroup()
        # A resize asked for while regroup waited is one regroup has seen (it re-reads the size
        # while it waits for the peers); one asked for after this comes again.
        self._regroup_why = None
        if env is not None:
            self.cfg.env = env
            self._process.discard_standby()  # it holds the old TF_CONFIG

    def _deadline_ending(self, detail: str) -> Ending:
        return Ending(Phase.FAILED, Reason.DEADLINE_EXCEEDED, deadline_message(self.cfg.deadline_seconds, detail))

    # -- main loop -----------------------------------------------------------------
    def run(self) -> Ending:
        try:
            return self._supervise()
        finally:
            self._process.discard_standby()  # supervision is over: no process outlives it

    def _supervise(self) -> Ending:
        cfg = self.cfg
        history = History(
            max_restarts=cfg.max_restarts,
            backoff_first=cfg.backoff_first_seconds,
            records_completion=cfg.is_chief and cfg.run_dir is not None,
            deadline_seconds=cfg.deadline_seconds,
            same_error_limit=cfg.same_error_limit,
        )
        attempt = 0
        while not self._stop.is_set():
            ending = self._ended_before_start()
            if ending is not None:
                return ending
            attempt += 1
            decision = decide(self._attempt(attempt), history)
            history = decision.history
            ending = self._act(decision)
            if ending is not None:
                return ending
        return Ending(None, returncode=EXIT_SIGTERM)

    def _ended_before_start(self) -> Ending | None:
        """The run completed already (the marker), or its deadline passed: nothing to start."""
        try:
            marker = completed_marker(self.cfg.run_dir)
            done_before = marker_exists_retrying(marker, self.cfg.marker_retry_seconds, self._stop.wait, self._say)
        except MarkerUnreadable as err:  # retried for marker_retry_seconds: fail closed, never "done"
            if self._stop.is_set():
                return Ending(None, returncode=EXIT_SIGTERM)
            return Ending(Phase.FAILED, Reason.BAD_CONFIG, str(err))
        if done_before:
            return Ending(Phase.SUCCEEDED, Reason.COMPLETED, found_message(completed_detail(self.cfg.run_dir)))
        if self.cfg.deadline_passed():
            return self._deadline_ending("not restarting training")
        return None

    def _attempt(self, attempt: int) -> AttemptOutcome:
        """Run attempt number `attempt`; how it ended, with what happened meanwhile (a stop, a resize)."""
        self.cfg.on_attempt(attempt)
        self._say(f"starting training (attempt {attempt}): {' '.join(self.cfg.command)}")
        outcome = self._process.run_attempt()
        outcome = replace(outcome, stopped=self._stop.is_set(), regroup_why=self._regroup_why)
        if may_be_a_resize(outcome):  # did another launcher see the group's size change?
            self._regroup_why = self.cfg.resized()
            if self._regroup_why is not None:
                self._process.discard_standby()  # it holds the old TF_CONFIG
                outcome = replace(outcome, regroup_why=self._regroup_why)
        return outcome

    def _act(self, decision: Decision) -> Ending | None:
        """Carry out `decision`: the run's Ending, or None to go on with the next attempt."""
        kind = decision.kind
        if kind is Next.REGROUP:
            self.cfg.on_restart(decision.cause)
            self._say(decision.say)
            self._regroup()
            return None  # not a failure: no back-off, nothing counted against training.maxRestarts
        if kind is Next.RESTART:
            return self._restart(decision)
        if decision.say:
            self._say(decision.say)
        if kind is Next.STOP:
            return Ending(None, returncode=decision.returncode)
        if kind is Next.SUCCEED:
            return self._succeed(decision.record)
        return Ending(Phase.FAILED, decision.reason, decision.message)  # FAIL, GIVE_UP, REPEATED, DEADLINE

    def _restart(self, decision: Decision) -> Ending | None:
        self._process.spawn_standby()  # none yet (an early failure): it imports during the back-off
        self.cfg.on_restart(decision.cause)
        self._say(decision.say)
        if self._stop.wait(self.cfg.until_deadline(decision.delay)):
            return None  # stopped during the back-off
        if self.cfg.deadline_passed():
            return self._deadline_ending("not restarting training")
        self._regroup()
        return None

    def _succeed(self, record: bool) -> Ending:
        if record:
            failed = self._record_completion(RunDir(str(self.cfg.run_dir)))
            if failed is not None:
                return failed
        return Ending(Phase.SUCCEEDED, Reason.COMPLETED, finished_message(completed_detail(self.cfg.run_dir)))

    def _record_completion(self, run: RunDir) -> Ending | None:
        """Write COMPLETED unless the trainer did; retry a failed write for
        `marker_retry_seconds` (a storage hiccup), backing off. None: recorded. Else the run's
        end, Failed (CompletionNotRecorded): Succeeded without a marker would let a restart
        train the finished run again."""
        marker = Path(run.completed)
        started = time.monotonic()
        delay, tries = 0.5, 0
        while True:
            tries += 1
            try:
                if marker_exists(marker):
                    return None
                write_completed(run, {"by": "launcher", "command": " ".join(self.cfg.command)})
                return None
            except (OSError, MarkerUnreadable) as err:
                error = (
                    f"{type(err).__name__}: {err.strerror}"
                    if isinstance(err, OSError) and err.strerror
                    else f"{type(err).__name__}: {err}"
                )
            left = self.cfg.marker_retry_seconds - (time.monotonic() - started)
            if left <= 0 or self._stop.is_set():
                message = (
                    f"training finished but COMPLETED could not be written to {marker} after {tries} "
                    f"tries ({error}); not retrying (that would train the run again): fix the shared "
                    "storage (TFMW_SHARED_DIR, storage.*), then create that file (any JSON) or set a new "
                    "training.runId"
                )
                self._say(message)
                return Ending(Phase.FAILED, Reason.COMPLETION_NOT_RECORDED, message)
            if tries == 1:
                self._say(
                    f"cannot write COMPLETED to {marker} ({error}); retrying for up "
                    f"to {self.cfg.marker_retry_seconds:g}s"
                )
            if self._stop.wait(min(delay, left)):
                continue  # stopped: one last try, then the failure above
            delay = min(delay * 2, 10.0)

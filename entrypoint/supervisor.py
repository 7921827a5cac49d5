"""Run the training command as a child and keep the group training.

Why in-process supervision: a StatefulSet pod's only restart policy is Always, and when
one MWMS worker dies the others fail their collective (UnavailableError after the
coordination heartbeat, about 8 s). Letting the kubelet restart every container would add
CrashLoopBackOff delays; restarting the training process in place, from the last
checkpoint, re-forms the group in seconds. The supervisor ends with an Ending (Succeeded,
Failed with a lifecycle reason, or stopped by a signal); what the pod does then (idle,
scale to 0, exit) is the launcher's business (entrypoint.launcher).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import loglines
from .errors import EXIT_BAD_CONFIG, EXIT_OK, EXIT_RETRYABLE, EXIT_SIGTERM, EXIT_TRAINING_FAILED
from .groupbreak import BreakDetector
from .hangwatch import ADAPTIVE, FLOOR_SECONDS, HangWatch, Verdict
from .lifecycle import Phase, Reason
from .oomkill import OOM_KILLED, MemoryCgroup, oom_cause

# The run directory's one API (no TensorFlow import for a local path): the marker is
# published the same way, and reads the same, whichever side writes it.
from .rundir import (
    MarkerUnreadable,
    RunDir,
    completed_detail,
    completed_marker,
    marker_exists,
    read_beat,
    write_completed,
)
from .standby import Standby
from .startchecks import start_problem

DONE, PERMANENT, RETRY = "done", "permanent", "retry"

# The training command's permanent exit codes and the run's terminal reason for each.
PERMANENT_REASONS = {EXIT_BAD_CONFIG: Reason.BAD_CONFIG, EXIT_TRAINING_FAILED: Reason.TRAINING_FAILED}


def classify_exit(returncode: int) -> str:
    """Map the training command's exit status to what the supervisor does next.

    0 -> done; 2 (a bad training config) and 4 (a permanent training error: corrupt data, a
    non-finite loss, anything the trainer logs with retryable=false) -> permanent, retrying
    cannot help; 75 (EX_TEMPFAIL: a lost peer), a signal (negative code) or any other failure
    -> retry (a user script dies with 1 on a lost peer just as on a bug; the restart limit
    bounds the cost of guessing wrong).
    """
    if returncode == EXIT_OK:
        return DONE
    if returncode in PERMANENT_REASONS:
        return PERMANENT
    return RETRY


@dataclass(frozen=True)
class Ending:
    """How supervision ended: phase Succeeded or Failed (with its reason), or None when a
    signal stopped it (the pod is going away; not a state of the run)."""

    phase: Phase | None
    reason: Reason | None = None
    message: str = ""
    returncode: int = EXIT_OK  # only for a stop: what the launcher exits with


# Why an attempt failed, as the metrics label it (tfmw_restarts_total{kind=...}).
HANG, OOM, SIGNAL, GROUP, EXIT = "hang", "oom", "signal", "group", "exit"
RESTART_KINDS = (GROUP, SIGNAL, OOM, HANG, EXIT)
_GROUP_REASON = f"a peer failed or the group broke (exit {EXIT_RETRYABLE})"
_BROKEN_REASON = "the group broke"  # a user command's traceback said so (entrypoint.groupbreak)


def restart_kind(reason: str) -> str:
    """The kind of a failed attempt's reason, as _run_once words it: hang, oom, signal, group
    (exit 75: a peer failed or the group broke) or exit (any other exit code)."""
    if reason.startswith("hang:"):
        return HANG
    if reason.startswith(OOM_KILLED):
        return OOM
    if reason.startswith("killed by signal"):
        return SIGNAL
    return GROUP if reason == _GROUP_REASON or reason.startswith(_BROKEN_REASON) else EXIT


def backoff_seconds(failures: int, first: float = 1.0, cap: float = 30.0) -> float:
    """The wait before restart number `failures` without progress: none for the first (an
    attempt that trained and then lost a peer restarts at once: the group re-forms as soon as
    the peer is back, and a wait here only adds to every recovery), then first, 2x first, ...
    up to cap, so a command that fails at once does not spin."""
    if failures <= 1:
        return 0.0
    return min(first * (2 ** (failures - 2)), cap)


@dataclass
class _AttemptWatch:
    """What one attempt's loop has seen so far."""

    watch: HangWatch
    started: float = field(default_factory=time.monotonic)
    beats: int = 0  # heartbeat changes seen in this attempt
    last_beat: tuple | None = None
    progressed: bool = False
    hung: Verdict | None = None  # the watchdog's verdict, once it killed the attempt
    bound_said: bool = False  # the adaptive hang bound was announced (once an attempt)
    deadline_hit: bool = False
    term_sent: float = 0.0
    broken: BreakDetector = field(default_factory=BreakDetector)  # the command's output says its group broke
    broken_at: float | None = None  # when (monotonic); set by the output pump's thread
    broken_killed: bool = False  # it did not exit within broken_grace_seconds: ended


@dataclass
class SupervisorConfig:
    command: Sequence[str]
    env: dict
    run_dir: Path | None  # <shared>/<run>; None: no shared storage (no completion marker)
    heartbeat_file: Path
    max_restarts: int = 20
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
    # activeDeadlineSeconds: a wall-clock time (epoch seconds) after which training is stopped
    # (SIGTERM, so the trainer checkpoints; SIGKILL after stop_grace_seconds). None: no deadline.
    deadline: float | None = None
    deadline_seconds: int = 0  # for the message only
    stop_grace_seconds: float = 120.0
    wall_clock: Callable[[], float] = time.time
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
    # The container's memory cgroup (entrypoint.oomkill): its OOM-kill counter, read before each
    # attempt and after a SIGKILL, tells the kernel's OOM killer from any other SIGKILL.
    memory: MemoryCgroup = field(default_factory=MemoryCgroup)
    # The command's output ended with a traceback of a group error (entrypoint.groupbreak): it
    # is only tearing TensorFlow down now. Its process group is ended this long after, so the
    # group can re-form without waiting out the teardown (18 s measured for a Keras script).
    broken_grace_seconds: float = 5.0
    on_group_broken: Callable[[str], None] = lambda error: None  # the attempt is lost from here


class _StartRefused(Exception):
    """The training command could not be started at all (one line: start_problem)."""


@dataclass
class _Attempt:
    returncode: int
    progressed: bool
    reason: str  # why it ended, for the log and the Restarted Event
    deadline_hit: bool
    last_error: str  # the command's last `tfmw error ...` text, else its last output line


class Supervisor:
    def __init__(self, config: SupervisorConfig):
        self.cfg = config
        self._stop = threading.Event()
        self._child: subprocess.Popen | None = None
        self._last_activity = time.monotonic()
        self._progress_at = time.monotonic()  # the last heartbeat change (training progress)
        self._last_line = ""
        self._last_error = ""
        self._output_error = False
        self._env: dict | None = None
        self._standby: Standby | None = None
        self._standby_lock = threading.Lock()
        self._regroup_why: str | None = None  # a resize asked the group to stop and re-form

    def _say(self, text: str) -> None:
        """One `tfmw launcher <text>` line."""
        self.cfg.log(loglines.line(loglines.LAUNCHER, text=text))

    # -- signals -------------------------------------------------------------------
    def request_stop(self, signum: int = signal.SIGTERM) -> None:
        """SIGTERM (pod deletion, drain, helm uninstall): pass it on so the trainer can
        checkpoint at a safe point, then stop without restarting."""
        self._stop.set()
        self._discard_standby()
        child = self._child
        if child is not None and child.poll() is None:
            try:
                os.killpg(child.pid, signum)
            except ProcessLookupError:
                pass

    def seconds_without_progress(self) -> float:
        """Since the trainer's heartbeat last changed (restarts and peer waits included): how
        long the group has not trained."""
        return time.monotonic() - self._progress_at

    def request_regroup(self, why: str) -> None:
        """The group must re-form (its size changed): SIGTERM the training command, so the
        whole group stops at its next checkpoint boundary, then start it again through
        `regroup` (the new TF_CONFIG). Not a failure: no back-off, no restart counted."""
        self._regroup_why = why
        self._discard_standby()  # it holds the old TF_CONFIG
        child = self._child
        if child is not None and child.poll() is None:
            _signal_group(child, signal.SIGTERM)

    def _regroup(self) -> None:
        env = self.cfg.regroup()
        # A resize asked for while regroup waited is one regroup has seen (it re-reads the size
        # while it waits for the peers); one asked for after this comes again.
        self._regroup_why = None
        if env is not None:
            self.cfg.env = env
            self._discard_standby()  # it holds the old TF_CONFIG

    def _deadline_passed(self) -> bool:
        return self.cfg.deadline is not None and self.cfg.wall_clock() >= self.cfg.deadline

    def _deadline_ending(self, detail: str) -> Ending:
        return Ending(
            Phase.FAILED,
            Reason.DEADLINE_EXCEEDED,
            f"training.activeDeadlineSeconds={self.cfg.deadline_seconds} passed; {detail}",
        )

    # -- main loop -----------------------------------------------------------------
    def run(self) -> Ending:
        try:
            return self._supervise()
        finally:
            self._discard_standby()  # supervision is over: no process outlives it

    def _supervise(self) -> Ending:
        failures_without_progress = 0
        attempt = 0
        while not self._stop.is_set():
            marker = completed_marker(self.cfg.run_dir)
            try:
                done_before = marker_exists(marker)
            except MarkerUnreadable as err:
                return Ending(Phase.FAILED, Reason.BAD_CONFIG, str(err))
            if done_before:
                return Ending(
                    Phase.SUCCEEDED,
                    Reason.COMPLETED,
                    f"COMPLETED marker found:{completed_detail(self.cfg.run_dir) or ' the run finished'}",
                )
            if self._deadline_passed():
                return self._deadline_ending("not restarting training")
            attempt += 1
            self.cfg.on_attempt(attempt)
            self._say(f"starting training (attempt {attempt}): {' '.join(self.cfg.command)}")
            try:
                result = self._run_once()
            except _StartRefused as refused:  # no retry makes the kernel start it
                message = str(refused)
                self._say(f"{message}; not retrying")
                return Ending(Phase.FAILED, Reason.BAD_CONFIG, message)
            returncode = result.returncode
            if self._stop.is_set():
                self._say(f"stopped by signal; training exited with {returncode}")
                return Ending(None, returncode=EXIT_SIGTERM if returncode != 0 else EXIT_OK)
            outcome = classify_exit(returncode)
            if outcome == DONE:
                self._say("training finished")
                if self.cfg.is_chief and self.cfg.run_dir is not None:
                    # A user command knows nothing of the marker: record completion for it,
                    # so a restarted pod of this run never trains again either.
                    failed = self._record_completion(RunDir(str(self.cfg.run_dir)))
                    if failed is not None:
                        return failed
                return Ending(
                    Phase.SUCCEEDED,
                    Reason.COMPLETED,
                    f"training finished:{completed_detail(self.cfg.run_dir) or ' exit 0'}",
                )
            if result.deadline_hit:
                return self._deadline_ending(f"training stopped (exit {returncode})")
            if outcome == RETRY and self._regroup_why is None:
                self._regroup_why = self.cfg.resized()
                if self._regroup_why is not None:
                    self._discard_standby()  # it holds the old TF_CONFIG
            if outcome == RETRY and self._regroup_why is not None:
                why = self._regroup_why
                self.cfg.on_restart(f"resize: {why}")
                self._say(f"training stopped (exit {returncode}) for the group to re-form: {why}")
                self._regroup()
                continue  # not a failure: no back-off, nothing counted against training.maxRestarts
            if outcome == PERMANENT:
                reason = PERMANENT_REASONS[returncode]
                what = (
                    "training refused its configuration"
                    if reason is Reason.BAD_CONFIG
                    else "training failed permanently"
                )
                self._say(
                    f"{what} (exit {returncode}); not retrying"
                    + (": fix training.config" if reason is Reason.BAD_CONFIG else "")
                )
                return Ending(Phase.FAILED, reason, result.last_error or f"training exited with {returncode}")
            failures_without_progress = 1 if result.progressed else failures_without_progress + 1
            if failures_without_progress > self.cfg.max_restarts:
                self._say(
                    f"giving up: {failures_without_progress - 1} restarts "
                    f"without progress (limit {self.cfg.max_restarts}); last failure: {result.reason}"
                )
                return Ending(
                    Phase.FAILED,
                    Reason.RESTART_LIMIT,
                    f"{failures_without_progress - 1} restarts without progress "
                    f"(training.maxRestarts={self.cfg.max_restarts}); last failure: {result.reason}"
                    + (f": {result.last_error}" if result.last_error else ""),
                )
            self._spawn_standby()  # none yet (an early failure): it imports during the back-off
            delay = backoff_seconds(failures_without_progress, first=self.cfg.backoff_first_seconds)
            self.cfg.on_restart(result.reason)
            self._say(f"restarting training in place in {delay:.0f}s: {result.reason}")
            if self._stop.wait(self._until_deadline(delay)):
                break
            if self._deadline_passed():
                return self._deadline_ending("not restarting training")
            self._regroup()
        return Ending(None, returncode=EXIT_SIGTERM)

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

    def _until_deadline(self, delay: float) -> float:
        if self.cfg.deadline is None:
            return delay
        return max(0.0, min(delay, self.cfg.deadline - self.cfg.wall_clock()))

    def _run_once(self) -> _Attempt:
        """One attempt: start the command (from the warm standby, else cold), follow its
        heartbeat until it exits, and enforce the deadline and the watchdog on the way."""
        hb = self.cfg.heartbeat_file
        hb.unlink(missing_ok=True)
        self._env = dict(self.cfg.env, TFMW_HEARTBEAT_FILE=str(hb))
        self._last_line = self._last_error = ""
        oom_kills = self.cfg.memory.oom_kills()  # None: unknown (no cgroup), reported as before
        child = self._child = self._start_attempt(self._env)
        if self._stop.is_set():  # a SIGTERM between the check and the start: pass it on
            self.request_stop()
        elif self._regroup_why is not None:  # a resize asked for while it started: stop it again
            _signal_group(child, signal.SIGTERM)
        self._last_activity = time.monotonic()
        seen = _AttemptWatch(
            HangWatch(self.cfg.hang_timeout_seconds, self.cfg.hang_detection, floor_seconds=self.cfg.hang_floor_seconds)
        )
        pump = threading.Thread(target=self._pump_output, args=(child, seen), daemon=True)
        pump.start()
        while child.poll() is None:
            try:  # wakes at once when the command exits: no poll interval added to a recovery
                child.wait(self.cfg.poll_seconds)
            except subprocess.TimeoutExpired:
                pass
            self._follow_heartbeat(seen)
            if self._standby is None and (
                seen.beats >= 2 or time.monotonic() - seen.started >= self.cfg.standby_delay_seconds
            ):
                self._spawn_standby()  # this attempt trains: get the next one ready
            self._enforce_deadline(child, seen)
            self._enforce_watchdog(child, seen)
            self._end_broken_attempt(child, seen)
        pump.join(timeout=5)
        self._child = None
        returncode = -signal.SIGKILL if seen.hung else child.returncode
        return _Attempt(
            returncode,
            seen.progressed,
            self._attempt_reason(child.returncode, seen, oom_kills),
            seen.deadline_hit,
            self._last_error or self._last_line,
        )

    def _start_attempt(self, env: dict[str, str]) -> subprocess.Popen:
        child = self._start_standby()  # the waiting standby, else a cold start
        if child is not None:
            return child
        try:
            return subprocess.Popen(
                list(self.cfg.command),
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # own process group: a kill reaches every descendant
        except OSError as err:
            raise _StartRefused(start_problem(self.cfg.command, err)) from None

    def _follow_heartbeat(self, seen: _AttemptWatch) -> None:
        """A new heartbeat (step, phase) is progress: the watchdog and the goodput account hear it."""
        hb = self.cfg.heartbeat_file
        beat = read_beat(hb)
        if beat is None or beat == seen.last_beat:
            return
        seen.progressed = seen.progressed or seen.last_beat is not None or beat[0] > 0
        seen.last_beat = beat
        self._last_activity = self._progress_at = time.monotonic()
        seen.watch.observe(beat[0], beat[1], self._last_activity)
        seen.beats += 1
        bound = seen.watch.adaptive_timeout()
        if bound is not None and not seen.bound_said:
            # From here a hang is caught in seconds, not training.hangTimeoutSeconds: an
            # operator reading the log (and the fault harness) can tell which bound holds.
            seen.bound_said = True
            self._say(f"hang bound {bound:.3g}s from step {beat[0]} ({seen.watch.adaptive_basis()})")
        try:  # when the trainer wrote it (wall clock), not when this poll saw it
            written = hb.stat().st_mtime
        except OSError:
            written = None
        self.cfg.on_beat(beat[0], beat[1], written)

    def _enforce_deadline(self, child: subprocess.Popen, seen: _AttemptWatch) -> None:
        """Past training.activeDeadlineSeconds: SIGTERM (a checkpoint at the next boundary),
        SIGKILL after the grace."""
        if not seen.deadline_hit and not self._stop.is_set() and self._deadline_passed():
            seen.deadline_hit = True
            seen.term_sent = time.monotonic()
            self._say(
                f"deadline: training.activeDeadlineSeconds="
                f"{self.cfg.deadline_seconds} passed; stopping training (SIGTERM: the trainer "
                f"checkpoints at its next checkpoint boundary, SIGKILL after "
                f"{self.cfg.stop_grace_seconds:g}s)"
            )
            _signal_group(child, signal.SIGTERM)
        if (
            seen.deadline_hit
            and child.poll() is None
            and time.monotonic() - seen.term_sent > self.cfg.stop_grace_seconds
        ):
            self._say("deadline: training did not stop in time; killing it")
            _signal_group(child, signal.SIGKILL)
            seen.term_sent = float("inf")

    def _enforce_watchdog(self, child: subprocess.Popen, seen: _AttemptWatch) -> None:
        verdict = None if self._stop.is_set() or seen.hung else seen.watch.check(time.monotonic(), self._last_activity)
        if verdict is not None:
            self._say(
                f"watchdog: no training progress for {verdict.idle:.1f}s "
                f"(hang timeout {verdict.timeout:.3g}s, {verdict.basis}); killing training"
            )
            _signal_group(child, signal.SIGKILL)
            seen.hung = verdict

    def _end_broken_attempt(self, child: subprocess.Popen, seen: _AttemptWatch) -> None:
        """The command reported a group error and is still running (TensorFlow's teardown):
        past the grace, end its process group, as the built-in trainer ends itself."""
        if seen.broken_at is None or seen.broken_killed or self._stop.is_set() or child.poll() is not None:
            return
        if time.monotonic() - seen.broken_at >= self.cfg.broken_grace_seconds:
            self._say(
                f"the group broke ({seen.broken.error}) and training did not exit within "
                f"{self.cfg.broken_grace_seconds:g}s of it (TensorFlow's teardown); ending it to restart sooner"
            )
            _signal_group(child, signal.SIGKILL)
            seen.broken_killed = True

    def _attempt_reason(self, returncode: int, seen: _AttemptWatch, oom_kills) -> str:
        if seen.broken.error is not None and returncode != EXIT_RETRYABLE:
            how = "ended after the grace" if seen.broken_killed else f"exit {returncode}"
            return f"{_BROKEN_REASON}: {seen.broken.error} ({how})"
        if seen.hung:
            return f"hang: no progress for {seen.hung.timeout:.3g}s ({seen.hung.basis})"
        if (
            returncode in (-signal.SIGKILL, 128 + signal.SIGKILL)
            and not seen.deadline_hit
            and (oom := oom_cause(oom_kills, self.cfg.memory)) is not None
        ):  # 137: a shell's SIGKILLed child
            return oom  # "OOMKilled: ... at the container's memory limit (2.0 GiB): raise ..."
        if returncode < 0:
            return f"killed by signal {_signal_name(-returncode)}"
        if returncode == EXIT_RETRYABLE:
            return _GROUP_REASON
        return f"training exited with {returncode}"

    # -- warm standby (entrypoint.standby) ------------------------------------------------
    def _spawn_standby(self) -> None:
        if self.cfg.standby_preload is None or self._stop.is_set() or self._env is None:
            return
        with self._standby_lock:
            if self._standby is not None or self._stop.is_set():
                return
            try:
                self._standby = Standby(self.cfg.command, self._env, self.cfg.standby_preload)
            except OSError as err:  # the cold start will say what is wrong, if anything
                self._say(f"standby: cannot start one ({err}); restarts start cold")
                self.cfg.standby_preload = None

    def _start_standby(self) -> subprocess.Popen | None:
        """The waiting standby, told to run the command (its PID becomes the trainer's); None:
        start cold (no standby yet, or it died)."""
        with self._standby_lock:
            standby, self._standby = self._standby, None
        if standby is None:
            return None
        child = standby.take()
        if child is None:
            self._say(f"start standby=no: the standby (pid {standby.pid}) {standby.why}; starting cold")
            return None
        self._say(
            f"start standby=yes pid={child.pid} ready={'yes' if standby.ready else 'no'}: "
            "the waiting process runs the training command (its imports already done)"
        )
        return child

    def _discard_standby(self) -> None:
        with self._standby_lock:
            standby, self._standby = self._standby, None
        if standby is not None:
            standby.discard()

    def _pump_output(self, child: subprocess.Popen, seen: _AttemptWatch) -> None:
        # Pass every line through unchanged (kubectl logs shows the trainer as is), treat
        # output as a sign of life for commands that do not write the heartbeat, and let the
        # run's tracker follow progress (it never blocks: recording is another thread's job).
        # The tracker hears a line before it is passed on: what the log shows, /metrics
        # already says (a scrape right after `tfmw checkpoint saved` found no checkpoint).
        out = sys.stdout.buffer
        for raw in iter(child.stdout.readline, b""):
            self._last_activity = time.monotonic()
            text = raw.decode(errors="replace").rstrip("\r\n")
            line = text.strip()
            broke = seen.broken.feed(text)
            if line:
                self._last_line = line
                error = loglines.parse_kind(line, loglines.ERROR)
                if error is not None:
                    self._last_error = loglines.error_text(error)
                try:
                    self.cfg.on_output(line)
                except Exception as err:  # following progress must never stop the output
                    if not self._output_error:
                        self._output_error = True
                        self._say(
                            f"status: cannot follow training output ({type(err).__name__}: {err}); training goes on"
                        )
            out.write(raw)
            out.flush()
            if self.cfg.tee is not None:
                self.cfg.tee(raw if raw.endswith(b"\n") else raw + b"\n")
            if broke is not None:  # said after the command's own line, which names the error
                seen.broken_at = time.monotonic()
                self._say(
                    f"the group broke: {broke}; training ends within {self.cfg.broken_grace_seconds:g}s "
                    "(its own exit, else the launcher ends it), then restarts in place"
                )
                try:
                    self.cfg.on_group_broken(broke)
                except Exception as err:  # the account is a record: it must never stop the output
                    self._say(f"status: cannot record the group's break ({type(err).__name__}: {err})")
        child.stdout.close()


def _signal_name(number: int) -> str:
    """SIGKILL, or the number for one Python has no name for (a real-time signal, SIGRTMIN+n)."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def _signal_group(child: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(child.pid, sig)
    except ProcessLookupError:
        pass

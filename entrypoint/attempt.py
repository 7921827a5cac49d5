"""One attempt of the training command: its process, followed from start to exit.

The supervisor (entrypoint.supervisor) decides; this runs. An attempt starts the command
(from the warm standby, entrypoint.standby, else cold) in its own process group, passes its
output through, follows its heartbeat, and on the way enforces the deadline
(training.activeDeadlineSeconds), the hang watchdog (entrypoint.hangwatch) and the end of a
group its output says broke (entrypoint.groupbreak). It ends with an AttemptOutcome
(entrypoint.restarts), which the supervisor's restart rule reads.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from . import loglines, reaper
from .crashprint import CrashPrint
from .groupbreak import BreakDetector
from .hangwatch import HangWatch, Verdict
from .oomkill import oom_cause
from .outputlines import OutputLines
from .restarts import SIGKILLED, AttemptOutcome, attempt_reason
from .rundir import read_beat
from .standby import Standby
from .startchecks import start_problem

if TYPE_CHECKING:
    from .supervisor import SupervisorConfig

_CHUNK = 64 * 1024  # one read of the command's output pipe
_REAP_EVERY_SECONDS = 1.0  # while the command runs: a /proc scan for zombies of orphans it left


class StartRefused(Exception):
    """The training command could not be started at all (one line: start_problem)."""


@dataclass
class AttemptWatch:
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
    cut_said: bool = False  # a line past outputlines.LINE_CAP was announced (once an attempt)
    group_killed: bool = False  # the launcher SIGKILLed the group (watchdog, deadline, a broken group)
    crash: CrashPrint = field(default_factory=CrashPrint)  # what its output says of a failure


class TrainingProcess:
    """The training command's process, one attempt at a time, and the standby for the next.

    `stopped` is the supervisor's stop flag (set from a signal handler's thread);
    `regroup_asked` says whether a resize asked the group to stop and re-form."""

    def __init__(
        self,
        cfg: SupervisorConfig,
        stopped: threading.Event,
        regroup_asked: Callable[[], bool],
        say: Callable[[str], None],
    ):
        self.cfg = cfg
        self._stop = stopped
        self._regroup_asked = regroup_asked
        self._say = say
        self._child: subprocess.Popen | None = None
        self._last_activity = time.monotonic()
        self._progress_at = time.monotonic()  # the last heartbeat change (training progress)
        self._last_line = ""
        self._last_error = ""
        self._output_error = False
        self._env: dict | None = None
        self._standby: Standby | None = None
        self._standby_lock = threading.Lock()
        self._reaped_at = 0.0
        self._printed_before: CrashPrint | None = None  # the attempt before's output, to tell them apart
        self._sessions: set[int] = set()  # every attempt's session (its pid): whose zombies are ours to reap

    def seconds_without_progress(self) -> float:
        """Since the trainer's heartbeat last changed (restarts and peer waits included): how
        long the group has not trained."""
        return time.monotonic() - self._progress_at

    def signal(self, sig: int) -> None:
        """Send `sig` to the running attempt's whole process group (none running: nothing)."""
        child = self._child
        if child is not None and child.poll() is None:
            _signal_group(child, sig)

    def run_attempt(self) -> AttemptOutcome:
        """One attempt: start the command (from the warm standby, else cold), follow its
        heartbeat until it exits, and enforce the deadline and the watchdog on the way."""
        hb = self.cfg.heartbeat_file
        hb.unlink(missing_ok=True)
        self._env = dict(self.cfg.env, **self.cfg.attempt_env(), TFMW_HEARTBEAT_FILE=str(hb))
        self._last_line = self._last_error = ""
        oom_kills = self.cfg.memory.oom_kills()  # None: unknown (no cgroup), reported as before
        self.cfg.clean_scratch()  # what a killed attempt left (entrypoint.scratch): none of ours runs now
        try:
            child = self._child = self._start(self._env)
        except StartRefused as refused:
            return AttemptOutcome(start_refused=str(refused))
        self._sessions.add(child.pid)  # its own session (start_new_session): the command's and its children's
        if self._stop.is_set():  # a SIGTERM between the check and the start: pass it on
            self.discard_standby()
            self.signal(signal.SIGTERM)
        elif self._regroup_asked():  # a resize asked for while it started: stop it again
            _signal_group(child, signal.SIGTERM)
        self._last_activity = time.monotonic()
        seen = AttemptWatch(
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
                self.spawn_standby()  # this attempt trains: get the next one ready
            self._enforce_deadline(child, seen)
            self._enforce_watchdog(child, seen)
            self._end_broken_attempt(child, seen)
            self._reap_now_and_then(child)
        left = self._end_left_running(child, seen)
        pump.join(timeout=5)  # the group is gone: nothing holds the pipe open any more
        self._child = None
        oom = oom_cause(oom_kills, self.cfg.memory) if child.returncode in SIGKILLED else None
        reason = attempt_reason(
            child.returncode,
            broken=seen.broken.error,
            broken_killed=seen.broken_killed,
            hung=seen.hung,
            deadline_hit=seen.deadline_hit,
            oom=oom,
        )
        return AttemptOutcome(
            returncode=-signal.SIGKILL if seen.hung else child.returncode,
            progressed=seen.progressed,
            reason=reason,
            deadline_hit=seen.deadline_hit,
            last_error=self._last_error or self._last_line,
            left_running=left,
            **self._what_it_said(seen.crash),
        )

    def _what_it_said(self, crash: CrashPrint) -> dict:
        """The output's part of the outcome (entrypoint.crashprint), this attempt against the one before."""
        new_output = crash.checkpointed or crash.new_since(self._printed_before)
        self._printed_before = crash
        return {"exception": crash.exception, "error_line": crash.error_line, "new_output": new_output}

    def _start(self, env: dict[str, str]) -> subprocess.Popen:
        child = self._take_standby(env)  # the waiting standby, else a cold start
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
            raise StartRefused(start_problem(self.cfg.command, err)) from None

    def _live_children(self, child: subprocess.Popen | None = None) -> set[int]:
        """Our live Popens' pids: theirs to reap (their returncode), never the reaper's."""
        standby = self._standby
        pids = {child.pid} if child is not None and child.returncode is None else set()
        return pids | ({standby.pid} if standby is not None else set())

    def _reap_now_and_then(self, child: subprocess.Popen) -> None:
        """While the command runs: reap the zombies of orphans it left to us (a daemon it started)."""
        now = time.monotonic()
        if now - self._reaped_at >= _REAP_EVERY_SECONDS:
            self._reaped_at = now
            reaper.reap(self._live_children(child), sessions=None if reaper.adopting() else self._sessions)

    def _end_left_running(self, child: subprocess.Popen, seen: AttemptWatch) -> tuple[str, ...]:
        """The command's main process exited: end what it left running (SIGTERM, SIGKILL after
        the grace), reap it, and say what that was. After the launcher's own SIGKILL of the
        group, its members are let die first: they were not left running, they were killed."""
        if seen.group_killed:
            reaper.wait_gone(child.pid, 2.0, self._live_children())
        ended = reaper.end_left_running(child.pid, self.cfg.left_running_grace_seconds, self._live_children())
        if not ended:
            return ()
        signals = [sig for sig in ("SIGTERM", "SIGKILL") if any(e.signal == sig for e in ended)]
        if len(signals) == 1:
            how = f"ended {'it' if len(ended) == 1 else 'them'} with {signals[0]}"
        else:  # some outlived the grace
            how = "; ".join(
                f"ended {', '.join(e.describe() for e in ended if e.signal == sig)} with {sig}" for sig in signals
            )
        children = ", ".join(e.describe() for e in ended)
        self._say(
            f"the command exited {child.returncode} while its child{'ren' if len(ended) > 1 else ''} "
            f"{children} still ran; {how} (SIGKILL after {self.cfg.left_running_grace_seconds:g}s)"
        )
        return tuple(f"{e.describe()}: ended with {e.signal}" for e in ended)

    def _follow_heartbeat(self, seen: AttemptWatch) -> None:
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

    def _enforce_deadline(self, child: subprocess.Popen, seen: AttemptWatch) -> None:
        """Past training.activeDeadlineSeconds: SIGTERM (a checkpoint at the next boundary),
        SIGKILL after the grace."""
        if not seen.deadline_hit and not self._stop.is_set() and self.cfg.deadline_passed():
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
            seen.group_killed = True

    def _enforce_watchdog(self, child: subprocess.Popen, seen: AttemptWatch) -> None:
        verdict = None if self._stop.is_set() or seen.hung else seen.watch.check(time.monotonic(), self._last_activity)
        if verdict is not None:
            self._say(
                f"watchdog: no training progress for {verdict.idle:.1f}s "
                f"(hang timeout {verdict.timeout:.3g}s, {verdict.basis}); killing training"
            )
            _signal_group(child, signal.SIGKILL)
            seen.hung = verdict
            seen.group_killed = True

    def _end_broken_attempt(self, child: subprocess.Popen, seen: AttemptWatch) -> None:
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
            seen.broken_killed = seen.group_killed = True

    # -- warm standby (entrypoint.standby) ------------------------------------------------
    def spawn_standby(self) -> None:
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

    def _take_standby(self, env: dict[str, str]) -> subprocess.Popen | None:
        """The waiting standby, told to run the command with `env` (its PID becomes the
        trainer's): the one started during the attempt before, else, for the first attempt,
        the launcher's (started with it); None: start cold (none, or it died)."""
        with self._standby_lock:
            standby, self._standby = self._standby, None
        first = standby is None
        if first:
            standby = self.cfg.first_standby()  # once: later calls find none
        if standby is None:
            return None
        child = standby.take(env)
        if child is None:
            self._say(f"start standby=no: the standby (pid {standby.pid}) {standby.why}; starting cold")
            return None
        self._say(
            f"start standby=yes pid={child.pid} ready={'yes' if standby.ready else 'no'}: "
            + (
                "the process started with the launcher runs the training command "
                "(its imports overlapped the launcher's start)"
                if first
                else "the waiting process runs the training command (its imports already done)"
            )
        )
        return child

    def discard_standby(self) -> None:
        with self._standby_lock:
            standby, self._standby = self._standby, None
        if standby is not None:
            standby.discard()

    def _pump_output(self, child: subprocess.Popen, seen: AttemptWatch) -> None:
        # Pass the output through unchanged (kubectl logs shows the trainer as is), treat any
        # output as a sign of life for commands that do not write the heartbeat (a progress
        # bar redrawn with \r is output: read in chunks, not lines), and let the run's tracker
        # follow progress (it never blocks: recording is another thread's job). The tracker
        # hears a line before it is passed on: what the log shows, /metrics already says (a
        # scrape right after `tfmw checkpoint saved` found no checkpoint).
        lines = OutputLines()
        fd = child.stdout.fileno()
        while True:
            try:
                chunk = os.read(fd, _CHUNK)
            except OSError:  # the pipe was closed under us: the output is over
                chunk = b""
            if not chunk:
                break
            self._last_activity = time.monotonic()
            self._relay(seen, lines, *lines.feed(chunk))
        self._relay(seen, lines, *lines.finish(), ended=True)
        child.stdout.close()

    def _relay(self, seen: AttemptWatch, lines: OutputLines, relay: bytes, texts: list[str], ended=False) -> None:
        broke = None
        for text in texts:
            broke = seen.broken.feed(text) or broke
            seen.crash.feed(text)
            self._hear(text.strip())
        if relay:
            out = sys.stdout.buffer
            out.write(relay)
            out.flush()
            if self.cfg.tee is not None:  # the kept log holds whole lines: the launcher's follow
                self.cfg.tee(relay + b"\n" if ended else relay)
        if lines.cut and not seen.cut_said:
            seen.cut_said = True
            self._say(
                f"output: a line of training's output is longer than {lines.cap // 1024} KiB; the launcher "
                "reads its first part only (it is relayed whole)"
            )
        if broke is not None:  # said after the command's own line, which names the error
            self._group_broke(seen, broke)

    def _hear(self, line: str) -> None:
        """One line of the command's output (stripped): the last line, the last error, the tracker."""
        if not line:
            return
        self._last_line = line
        error = loglines.parse_kind(line, loglines.ERROR)
        if error is not None:
            self._last_error = loglines.error_text(error)
        try:
            self.cfg.on_output(line)
        except Exception as err:  # following progress must never stop the output
            if not self._output_error:
                self._output_error = True
                self._say(f"status: cannot follow training output ({type(err).__name__}: {err}); training goes on")

    def _group_broke(self, seen: AttemptWatch, error: str) -> None:
        seen.broken_at = time.monotonic()
        self._say(
            f"the group broke: {error}; training ends within {self.cfg.broken_grace_seconds:g}s "
            "(its own exit, else the launcher ends it), then restarts in place"
        )
        try:
            self.cfg.on_group_broken(error)
        except Exception as err:  # the account is a record: it must never stop the output
            self._say(f"status: cannot record the group's break ({type(err).__name__}: {err})")


def _signal_group(child: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(child.pid, sig)
    except ProcessLookupError:
        pass

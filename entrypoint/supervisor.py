"""Run the training command as a child and keep the group training.

Why in-process supervision: a StatefulSet pod's only restart policy is Always, and when
one MWMS worker dies the others fail their collective (UnavailableError after the
coordination heartbeat, about 8 s). Letting the kubelet restart every container would add
CrashLoopBackOff delays; restarting the training process in place, from the last
checkpoint, re-forms the group in seconds. After success the launcher idles (it must not
exit 0: the kubelet would start it again) and never retrains a completed run.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from .errors import (EXIT_BAD_CONFIG, EXIT_OK, EXIT_RETRIES_EXHAUSTED, EXIT_RETRYABLE, EXIT_SIGTERM,
                     EXIT_TRAINING_FAILED)
# The trainer's write-then-rename (no TensorFlow import for a local path): one way to
# publish the marker, whichever side writes it.
from .training.rundir import RunDir, write_atomic

DONE, PERMANENT, RETRY = "done", "permanent", "retry"


def classify_exit(returncode: int) -> str:
    """Map the training command's exit status to what the supervisor does next.

    0 -> done; 2 -> a bad training config, retrying cannot help; 75 (EX_TEMPFAIL), a signal
    (negative code), or any other failure -> retry (a user script dies with 1 on a lost peer
    just as on a bug; the restart limit bounds the cost of guessing wrong).
    """
    if returncode == EXIT_OK:
        return DONE
    if returncode == EXIT_BAD_CONFIG:
        return PERMANENT
    return RETRY


def backoff_seconds(failures: int, first: float = 1.0, cap: float = 30.0) -> float:
    return min(first * (2 ** max(failures - 1, 0)), cap)


@dataclass
class SupervisorConfig:
    command: Sequence[str]
    env: dict
    run_dir: Path | None            # <shared>/<run>; None: no shared storage (no completion marker)
    heartbeat_file: Path
    max_restarts: int = 20
    hang_timeout_seconds: float = 0  # 0: watchdog off
    exit_on_completion: bool = False
    poll_seconds: float = 0.5
    backoff_first_seconds: float = 1.0
    regroup: Callable[[], None] = lambda: None  # re-check peers before a restart
    is_chief: bool = False          # the chief records completion if the command did not
    log: Callable[[str], None] = field(default=lambda line: print(line, flush=True))


def completed_marker(run_dir: Path | None) -> Path | None:
    return Path(RunDir(str(run_dir)).completed) if run_dir else None


class Supervisor:
    def __init__(self, config: SupervisorConfig):
        self.cfg = config
        self._stop = threading.Event()
        self._child: subprocess.Popen | None = None
        self._last_activity = time.monotonic()

    # -- signals -------------------------------------------------------------------
    def request_stop(self, signum: int = signal.SIGTERM) -> None:
        """SIGTERM (pod deletion, drain, helm uninstall): pass it on so the trainer can
        checkpoint at a safe point, then stop without restarting."""
        self._stop.set()
        child = self._child
        if child is not None and child.poll() is None:
            try:
                os.killpg(child.pid, signum)
            except ProcessLookupError:
                pass

    # -- main loop -----------------------------------------------------------------
    def run(self) -> int:
        failures_without_progress = 0
        attempt = 0
        while not self._stop.is_set():
            marker = completed_marker(self.cfg.run_dir)
            if marker is not None and marker.exists():
                return self._idle_completed(marker)
            attempt += 1
            self.cfg.log(f"tfmw launcher starting training (attempt {attempt}): "
                         f"{' '.join(self.cfg.command)}")
            returncode, progressed, reason = self._run_once()
            if self._stop.is_set():
                self.cfg.log(f"tfmw launcher stopped by signal; training exited with {returncode}")
                return EXIT_SIGTERM if returncode != 0 else EXIT_OK
            outcome = classify_exit(returncode)
            if outcome == DONE:
                self.cfg.log("tfmw launcher training finished")
                marker = completed_marker(self.cfg.run_dir)
                if self.cfg.is_chief and marker is not None and not marker.exists():
                    # A user command knows nothing of the marker: record completion for it,
                    # so a restarted pod of this run never trains again either.
                    record = {"by": "launcher", "command": " ".join(self.cfg.command),
                              "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
                    write_atomic(str(marker), json.dumps(record, indent=2, sort_keys=True) + "\n")
                return self._idle_completed(marker)
            if outcome == PERMANENT:
                self.cfg.log(f"tfmw launcher training refused its configuration (exit {returncode}); "
                             "not retrying: fix training.config")
                return EXIT_BAD_CONFIG
            failures_without_progress = 1 if progressed else failures_without_progress + 1
            if failures_without_progress > self.cfg.max_restarts:
                self.cfg.log(f"tfmw launcher giving up: {failures_without_progress - 1} restarts "
                             f"without progress (limit {self.cfg.max_restarts}); last failure: {reason}")
                return EXIT_RETRIES_EXHAUSTED
            delay = backoff_seconds(failures_without_progress, first=self.cfg.backoff_first_seconds)
            self.cfg.log(f"tfmw launcher restarting training in place in {delay:.0f}s: {reason}")
            if self._stop.wait(delay):
                break
            self.cfg.regroup()
        return EXIT_SIGTERM

    def _run_once(self) -> tuple[int, bool, str]:
        hb = self.cfg.heartbeat_file
        hb.unlink(missing_ok=True)
        env = dict(self.cfg.env, TFMW_HEARTBEAT_FILE=str(hb))
        child = subprocess.Popen(
            list(self.cfg.command), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True)  # own process group: a kill reaches every descendant
        self._child = child
        self._last_activity = time.monotonic()
        pump = threading.Thread(target=self._pump_output, args=(child,), daemon=True)
        pump.start()
        last_beat = None
        progressed = False
        hung = False
        while child.poll() is None:
            time.sleep(self.cfg.poll_seconds)
            beat = _read_heartbeat(hb)
            if beat is not None and beat != last_beat:
                progressed = progressed or last_beat is not None or beat > 0
                last_beat = beat
                self._last_activity = time.monotonic()
            idle = time.monotonic() - self._last_activity
            if (self.cfg.hang_timeout_seconds and idle > self.cfg.hang_timeout_seconds
                    and not self._stop.is_set()):
                self.cfg.log(f"tfmw launcher watchdog: no training progress for {idle:.0f}s "
                             f"(hang timeout {self.cfg.hang_timeout_seconds:g}s); killing training")
                _kill_group(child)
                hung = True
        pump.join(timeout=5)
        self._child = None
        returncode = child.returncode
        if hung:
            reason = f"hang: no progress for {self.cfg.hang_timeout_seconds:g}s"
        elif returncode < 0:
            reason = f"killed by signal {signal.Signals(-returncode).name}"
        elif returncode == EXIT_RETRYABLE:
            reason = "a peer failed or the group broke (exit 75)"
        else:
            reason = f"training exited with {returncode}"
        return (returncode if not hung else -signal.SIGKILL), progressed, reason

    def _pump_output(self, child: subprocess.Popen) -> None:
        # Pass every line through unchanged (kubectl logs shows the trainer as is) and
        # treat output as a sign of life for commands that do not write the heartbeat.
        out = sys.stdout.buffer
        for line in iter(child.stdout.readline, b""):
            self._last_activity = time.monotonic()
            out.write(line)
            out.flush()
        child.stdout.close()

    def _idle_completed(self, marker: Path | None) -> int:
        detail = ""
        if marker is not None and marker.exists():
            try:
                record = json.loads(marker.read_text())
                detail = "".join(f" {name}={record[key]}" for key, name in
                                 (("steps", "steps"), ("finalLoss", "final_loss"), ("model", "model"))
                                 if key in record)
            except (OSError, ValueError):
                detail = ""
        run = self.cfg.env.get("TFMW_RUN_ID", "")
        self.cfg.log(f"tfmw completed run={run}{detail}")
        if self.cfg.exit_on_completion:
            return EXIT_OK
        # A StatefulSet restarts a container that exits, even with 0: stay up, idle,
        # until the pod is deleted (helm uninstall) so the run is never trained twice.
        self.cfg.log("tfmw launcher idle: this run is complete; uninstall the release or set a new "
                     "training.runId to train again")
        self._stop.wait()
        return EXIT_OK


def _read_heartbeat(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _kill_group(child: subprocess.Popen) -> None:
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass

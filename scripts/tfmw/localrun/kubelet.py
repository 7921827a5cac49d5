"""`make local`'s kubelet: start the local pods, restart them as `restartPolicy: Always` does,
stop them, and tell when the run they train has ended.

The evaluator's pod (a Job's, `restartPolicy: Never`) ends when it exits 0; any other exit
the Job would retry, so it is restarted too (a fatal code ends the local run, as a worker's).

A StatefulSet pod has `restartPolicy: Always`: when a pod's process exits, it is started
again (after a short back-off: 1 s doubling to 10 s here, where the kubelet uses 10 s to
5 min). The launcher inside ends a run like a job (docs/lifecycle.md) and then idles, so
"done" means: every pod has logged `tfmw completed`, and "failed" means: a pod logged
`tfmw failed ... exit_code=<n>` (bad config, peers not found, restart limit, deadline, a
permanent trainer error), which ends the local run at once with that reason and code. A
pod whose process exits with one of those codes (a launcher without a lifecycle, e.g. an
older image) ends it too. Every line a pod prints is streamed with a `[pod]` prefix and kept.
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

from entrypoint import loglines
from entrypoint.errors import (
    EXIT_BAD_CONFIG,
    EXIT_DEADLINE_EXCEEDED,
    EXIT_OK,
    EXIT_PEERS_NOT_FOUND,
    EXIT_RETRIES_EXHAUSTED,
    EXIT_TRAINING_FAILED,
    EXIT_UNEXPECTED,
)

from .podspec import LocalPod
from .proctree import descendants, signal_tree

# The launcher's exit codes that end a run for good (docs/contracts.md): a pod exiting with one
# is not restarted, and the local run ends with that code.
FATAL_EXIT = {
    EXIT_BAD_CONFIG: "bad configuration",
    EXIT_PEERS_NOT_FOUND: "peers not found",
    EXIT_TRAINING_FAILED: "training failed permanently",
    EXIT_RETRIES_EXHAUSTED: "training retries exhausted",
    EXIT_DEADLINE_EXCEEDED: "deadline exceeded",
}
EXIT_TIMED_OUT = 1  # `make local --timeout` passed before every pod completed (no launcher code)


@dataclass(frozen=True)
class PodFailure:
    """Why one pod ended the local run: its launcher's `tfmw failed` line (reason, exit code,
    message), or, from a launcher without a lifecycle, its process's fatal exit code."""

    pod: str
    exit_code: int
    reason: str = ""  # the launcher's Reason (BadConfig, RestartLimit ...); "" for a bare exit
    message: str = ""

    def __str__(self) -> str:
        meaning = FATAL_EXIT.get(self.exit_code, "failed")
        if not self.reason:
            return f"{self.pod} exited {self.exit_code} ({meaning})"
        return f"{self.pod}: {self.reason} ({meaning}): {self.message}".rstrip(": ")


@dataclass
class PodProcess:
    """One local pod as its kubelet sees it: the current process, how often it was started,
    every line it printed (and when), its exit codes, and whether its launcher logged the
    run's end (`tfmw completed`, or `tfmw failed` -> failure)."""

    pod: LocalPod
    proc: subprocess.Popen | None = None
    starts: int = 0
    lines: list[str] = field(default_factory=list)
    times: list[float] = field(default_factory=list)  # time.monotonic() of each line
    completed: bool = False
    exits: list[int] = field(default_factory=list)
    failure: PodFailure | None = None
    # cleared while the pod may not start again (hold: its node is gone and no other has room)
    may_start: threading.Event = field(default_factory=lambda: _set(threading.Event()))


def _set(event: threading.Event) -> threading.Event:
    event.set()
    return event


@dataclass(frozen=True)
class LocalRunResult:
    """How waiting for the local pods ended: ok (every pod completed) or why not, and the
    code `make local` exits with."""

    ok: bool
    reason: str
    exit_code: int


class LocalCluster:
    """The local pods of one rendered StatefulSet and their network, each kept running by its
    own kubelet thread until shutdown(); `states` holds each pod's PodProcess by ordinal."""

    def __init__(
        self,
        pods: Sequence[LocalPod],
        network,
        base_env: dict[str, str],
        grace_seconds: float = 30.0,
        out: Callable[[str], None] | None = None,
        max_backoff: float = 10.0,
    ):
        self.states = {p.ordinal: PodProcess(p) for p in pods}
        self.network = network
        self.base_env = base_env
        self.grace_seconds = grace_seconds
        self.max_backoff = max_backoff
        self._out = out or (lambda line: (sys.stdout.write(line + "\n"), sys.stdout.flush()))
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self.started_at = time.monotonic()

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> None:
        self.network.setup([s.pod for s in self.states.values()])
        for state in self.states.values():
            state.pod.pod_dir.mkdir(parents=True, exist_ok=True)
            for path, text in state.pod.files.items():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
            for key in ("TMPDIR", "HOME"):
                if key in state.pod.env:
                    Path(state.pod.env[key]).mkdir(parents=True, exist_ok=True)
        for state in self.states.values():
            thread = threading.Thread(
                target=self._kubelet, args=(state,), daemon=True, name=f"kubelet-{state.pod.name}"
            )
            thread.start()
            self._threads.append(thread)

    def _spawn(self, state: PodProcess) -> subprocess.Popen:
        pod = state.pod
        env = dict(self.base_env, **pod.env)
        argv = self.network.wrap(pod, list(pod.argv))
        proc = subprocess.Popen(
            argv,
            env=env,
            cwd=pod.pod_dir,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # its own group, like a container
        state.starts += 1
        return proc

    def _kubelet(self, state: PodProcess) -> None:
        backoff = 1.0
        while not self._stopping.is_set():
            if not self._start(state):
                return
            if state.starts > 1:
                self._emit(state, f"(local kubelet) container restarted, start #{state.starts}")
            started = time.monotonic()
            code = self._follow(state)
            if self._stopping.is_set() or self._ended(state, code):
                return
            self._emit(
                state,
                f"(local kubelet) container exited with {code}; restarting in "
                f"{backoff:.0f}s (restartPolicy: {state.pod.restart_policy})",
            )
            if time.monotonic() - started > 60:
                backoff = 1.0
            if self._stopping.wait(backoff):
                return
            if not state.may_start.is_set():
                self._emit(state, "(local kubelet) pod held: no room to start it until it is released")
                while not state.may_start.wait(0.5):
                    if self._stopping.is_set():
                        return
                self._emit(state, "(local kubelet) pod released: starting it")
            backoff = min(backoff * 2, self.max_backoff)

    def _start(self, state: PodProcess) -> bool:
        """Start the pod's container, unless shutting down; False: it is not running (and the
        pod's thread ends)."""
        with self._lock:
            if self._stopping.is_set():
                return False
            try:
                state.proc = self._spawn(state)
            except (OSError, TypeError, ValueError) as err:  # a pod that cannot start fails the run
                cannot_start = err
            else:
                return True
        self._cannot_start(state, cannot_start)  # said outside the lock, which _emit takes too
        return False

    def _follow(self, state: PodProcess) -> int:
        """Print the container's output until it exits; its exit code, recorded."""
        for raw in iter(state.proc.stdout.readline, b""):
            self._emit(state, raw.decode(errors="replace").rstrip("\n"))
        code = state.proc.wait()
        with self._changed:
            state.exits.append(code)
            self._changed.notify_all()
        return code

    def _ended(self, state: PodProcess, code: int) -> bool:
        """Whether the container's exit `code` ends the pod (recorded) rather than restarting it."""
        if code == EXIT_OK and state.pod.restart_policy != "Always":
            with self._changed:  # a Job's pod (the evaluator) that succeeded: its end
                state.completed = True
                self._changed.notify_all()
            return True
        if code in FATAL_EXIT:
            with self._changed:
                if state.failure is None:
                    state.failure = PodFailure(state.pod.name, code)
                self._changed.notify_all()
            return True
        return False

    def _cannot_start(self, state: PodProcess, err: Exception) -> None:
        """The container could not be started at all: the pod fails with why, so the run ends
        instead of waiting for a pod that will never print."""
        self._emit(state, f"(local kubelet) cannot start the container: {type(err).__name__}: {err}")
        with self._changed:
            if state.failure is None:
                state.failure = PodFailure(state.pod.name, 1, "ContainerCannotRun", f"{type(err).__name__}: {err}")
            self._changed.notify_all()

    def _emit(self, state: PodProcess, line: str) -> None:
        with self._changed:
            state.lines.append(line)
            state.times.append(time.monotonic())
            parsed = loglines.parse(line)
            if parsed is not None and parsed.kind == loglines.COMPLETED:
                state.completed = True
            elif parsed is not None and parsed.kind == loglines.FAILED and state.failure is None:
                state.failure = failure_of(state.pod.name, parsed)
            self._changed.notify_all()
        self._out(f"[{state.pod.name}] {line}")

    # -- waiting -------------------------------------------------------------------
    def wait(self, timeout: float) -> LocalRunResult:
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                failures = [s.failure for s in self.states.values() if s.failure]
                if failures:
                    return LocalRunResult(False, "; ".join(map(str, failures)), failures[0].exit_code)
                if all(s.completed for s in self.states.values()):
                    evaluator = any(s.pod.restart_policy != "Always" for s in self.states.values())
                    return LocalRunResult(
                        True,
                        "every worker completed"
                        + (", and the evaluator evaluated the final checkpoint" if evaluator else ""),
                        EXIT_OK,
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    return LocalRunResult(False, f"not completed after {timeout:g}s", EXIT_TIMED_OUT)
                self._changed.wait(min(left, 1.0))

    def wait_for_line(
        self, ordinal: int, predicate: Callable[[str], bool], timeout: float, start_index: int = 0
    ) -> str | None:
        """The first line of pod `ordinal` (from start_index on) for which predicate holds."""
        deadline = time.monotonic() + timeout
        state = self.states[ordinal]
        with self._changed:
            while True:
                for line in state.lines[start_index:]:
                    if predicate(line):
                        return line
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._changed.wait(min(left, 1.0))

    # -- faults (tests and `make local` experiments) -------------------------------
    def signal_pod(self, ordinal: int, sig: int) -> None:
        """Deliver `sig` to every process of the pod, as if to the container's whole PID
        namespace (SIGKILL: the container dies; SIGSTOP: it freezes)."""
        proc = self.states[ordinal].proc
        if proc is not None and proc.poll() is None:
            signal_tree(proc.pid, sig)

    def hold(self, ordinal: int) -> None:
        """The pod's node is lost and no other node has room: SIGKILL the pod and keep it from
        starting again until release(ordinal)."""
        self.states[ordinal].may_start.clear()
        self.signal_pod(ordinal, signal.SIGKILL)

    def release(self, ordinal: int) -> None:
        """Room again: the held pod starts."""
        self.states[ordinal].may_start.set()

    def set_link(self, ordinal: int, up: bool) -> None:
        self.network.set_link(ordinal, up)

    def training_pids(self, ordinal: int) -> list[int]:
        """The pod's processes below its launcher: the training command and its children."""
        proc = self.states[ordinal].proc
        if proc is None or proc.poll() is not None:
            return []
        return [pid for pid in descendants(proc.pid) if pid != proc.pid]

    # -- shutdown ------------------------------------------------------------------
    def shutdown(self) -> None:
        """SIGTERM every pod, wait up to the grace period, SIGKILL what is left, remove the
        network. Safe to call twice."""
        self._stopping.set()
        procs = [s.proc for s in self.states.values() if s.proc is not None]
        for proc in procs:
            if proc.poll() is None:
                signal_tree(proc.pid, signal.SIGCONT)  # a stopped pod must see the TERM
                try:
                    os.kill(proc.pid, signal.SIGTERM)  # the launcher forwards it
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + self.grace_seconds
        for proc in procs:
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                pass
        for proc in procs:
            # Whatever outlived the grace period dies, descendants included: in a real
            # container the PID namespace would take them all down.
            signal_tree(proc.pid, signal.SIGKILL)
            proc.wait()
        for thread in self._threads:
            thread.join(timeout=5)
        self.network.teardown()


def failure_of(pod: str, failed: loglines.LogLine) -> PodFailure:
    """The failure a launcher's `tfmw failed run=<id> reason=<R> exit_code=<n> message="..."`
    line reports (a line without exit_code: 1, what a crash exits with)."""
    code = failed.int_field("exit_code")
    return PodFailure(
        pod,
        EXIT_UNEXPECTED if code is None else code,
        failed.fields.get("reason", "Failed"),
        failed.fields.get("message", ""),
    )

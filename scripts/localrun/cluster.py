"""Start, restart and stop local pods as a kubelet would, and watch them finish.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from scripts.loglines import key_values
from .podspec import LocalPod
from entrypoint.errors import (EXIT_BAD_CONFIG, EXIT_DEADLINE_EXCEEDED, EXIT_PEERS_NOT_FOUND,
                               EXIT_RETRIES_EXHAUSTED, EXIT_TRAINING_FAILED)

FATAL_EXIT = {EXIT_BAD_CONFIG: "bad configuration", EXIT_PEERS_NOT_FOUND: "peers not found",
              EXIT_TRAINING_FAILED: "training failed permanently",
              EXIT_RETRIES_EXHAUSTED: "training retries exhausted",
              EXIT_DEADLINE_EXCEEDED: "deadline exceeded"}


@dataclass
class PodState:
    pod: LocalPod
    proc: subprocess.Popen | None = None
    starts: int = 0
    lines: list[str] = field(default_factory=list)
    times: list[float] = field(default_factory=list)  # time.monotonic() of each line
    completed: bool = False
    exits: list[int] = field(default_factory=list)
    fatal: str | None = None
    fatal_code: int = 0


@dataclass
class Outcome:
    ok: bool
    reason: str
    exit_code: int


class LocalCluster:
    def __init__(self, pods: Sequence[LocalPod], network, base_env: dict[str, str],
                 grace_seconds: float = 30.0, out: Callable[[str], None] | None = None,
                 max_backoff: float = 10.0):
        self.states = {p.ordinal: PodState(p) for p in pods}
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
            thread = threading.Thread(target=self._kubelet, args=(state,), daemon=True,
                                      name=f"kubelet-{state.pod.name}")
            thread.start()
            self._threads.append(thread)

    def _spawn(self, state: PodState) -> subprocess.Popen:
        pod = state.pod
        env = dict(self.base_env, **pod.env)
        argv = self.network.wrap(pod, list(pod.argv))
        proc = subprocess.Popen(argv, env=env, cwd=pod.pod_dir, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)  # its own group, like a container
        state.starts += 1
        return proc

    def _kubelet(self, state: PodState) -> None:
        backoff = 1.0
        while not self._stopping.is_set():
            with self._lock:
                if self._stopping.is_set():
                    return
                state.proc = self._spawn(state)
            if state.starts > 1:
                self._emit(state, f"(local kubelet) container restarted, start #{state.starts}")
            started = time.monotonic()
            for raw in iter(state.proc.stdout.readline, b""):
                self._emit(state, raw.decode(errors="replace").rstrip("\n"))
            code = state.proc.wait()
            with self._changed:
                state.exits.append(code)
                self._changed.notify_all()
            if self._stopping.is_set():
                return
            if code in FATAL_EXIT:
                with self._changed:
                    if state.fatal is None:
                        state.fatal = f"{state.pod.name} exited {code} ({FATAL_EXIT[code]})"
                        state.fatal_code = code
                    self._changed.notify_all()
                return
            self._emit(state, f"(local kubelet) container exited with {code}; restarting in "
                              f"{backoff:.0f}s (restartPolicy: Always)")
            if time.monotonic() - started > 60:
                backoff = 1.0
            if self._stopping.wait(backoff):
                return
            backoff = min(backoff * 2, self.max_backoff)

    def _emit(self, state: PodState, line: str) -> None:
        with self._changed:
            state.lines.append(line)
            state.times.append(time.monotonic())
            if line.startswith("tfmw completed"):
                state.completed = True
            elif line.startswith("tfmw failed ") and state.fatal is None:
                fields = key_values(line)
                code = int(fields.get("exit_code") or 1)
                state.fatal = (f"{state.pod.name}: {fields.get('reason', 'Failed')} "
                               f"({FATAL_EXIT.get(code, 'failed')}): {fields.get('message', '')}".rstrip(": "))
                state.fatal_code = code
            self._changed.notify_all()
        self._out(f"[{state.pod.name}] {line}")

    # -- waiting -------------------------------------------------------------------
    def wait(self, timeout: float) -> Outcome:
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                fatal = [s for s in self.states.values() if s.fatal]
                if fatal:
                    return Outcome(False, "; ".join(s.fatal for s in fatal), fatal[0].fatal_code)
                if all(s.completed for s in self.states.values()):
                    return Outcome(True, "every worker completed", 0)
                left = deadline - time.monotonic()
                if left <= 0:
                    return Outcome(False, f"not completed after {timeout:g}s", 1)
                self._changed.wait(min(left, 1.0))

    def wait_for_line(self, ordinal: int, predicate: Callable[[str], bool], timeout: float,
                      start_index: int = 0) -> str | None:
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


def descendants(root: int) -> list[int]:
    """root and every process below it, from /proc (children first found, root first)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read().decode(errors="replace")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def signal_tree(root: int, sig: int) -> None:
    for pid in descendants(root):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass

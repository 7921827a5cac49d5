"""`python -m entrypoint.standby`: the next training process, started ahead and waiting.

Why: after a peer dies every surviving worker restarts its trainer in place, and most of
that restart is a new Python importing TensorFlow (~2.5-3 s on 2 CPUs) before the group can
re-form. The supervisor (entrypoint.attempt) keeps one standby per worker: started with
the training command's own interpreter, environment (TF_CONFIG included) and working
directory, it imports TensorFlow (and, for the built-in trainer, the trainer's modules) and
then blocks on a socket the supervisor holds. On a restart the supervisor writes "go" with the
attempt's environment, and the standby runs the command in this process, exactly as
`python -m <module> args` or `python <script> args` would: same sys.argv, sys.path[0], cwd and
environment; its output and exit code are the trainer's.

The first attempt has one too: `python -m entrypoint run` starts it before its own imports
(prestart, from entrypoint/__main__.py), so TensorFlow's import overlaps the launcher's start
(its imports, settings, TF_CONFIG, the run's record, the peer wait). That standby is started
with the pod's environment, before the TF_CONFIG is known: what the launcher settles later
(TF_CONFIG, the heartbeat file) comes with "go", which is written only once the attempt may
train (peers resolved, run directory owned, scratch cleared). Importing touches none of it.

While waiting it costs no GPU memory: importing TensorFlow does not create the eager context
or touch a device (tests/entrypoint/test_standby.py checks it); nothing here calls TF. If the socket
closes (the launcher is gone, or the standby was discarded) it exits 0, silently.

Usage (the supervisor's, not an operator's):
    python -m entrypoint.standby --fd N [--preload mod,mod] [--no-nice] -- python -m <module> [args...]
    python -m entrypoint.standby --fd N [--preload mod,mod] [--no-nice] -- python <script.py> [args...]

Only the standard library is imported here before "go": anything else would change what
the command finds already imported.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import runpy
import signal
import socket
import sys
import threading

_PYTHON = re.compile(r"python[0-9.]*\Z")
IMPORT_NICE = 19  # the importing thread's: the lowest CPU priority
# The process's name (/proc/<pid>/comm, `ps -e`, `pgrep`) while it waits; on "go" it takes its
# own back. Its command line cannot change, so this is how a tool tells a waiting standby from
# one that runs the trainer (the fault harness's kill-trainer: tfmw.faults.inject).
WAITING_NAME = "tfmw-standby"


def _rename(path: str, name: str) -> str | None:
    """Set a thread's name (comm) through /proc; the name it had, or None where it cannot."""
    try:
        with open(path, "r+") as f:
            old = f.read().strip()
            f.seek(0)
            f.write(name)
        return old
    except OSError:
        return None


def entry_of(command) -> tuple[str, str, list[str]] | None:
    """("module", name, args) for `python -m name args`, ("script", path, args) for
    `python path args`; None for anything a standby cannot run as a cold start would
    (another program, interpreter options, `-c`, nothing to run)."""
    command = list(command)
    if len(command) < 2 or not _PYTHON.match(os.path.basename(command[0])):
        return None
    if command[1] == "-m":
        if len(command) < 3 or not command[2] or command[2].startswith("-"):
            return None
        return "module", command[2], command[3:]
    if command[1].startswith("-") or not command[1]:
        return None
    return "script", command[1], command[2:]


def _parse(argv: list[str]) -> tuple[int, list[str], bool, list[str]]:
    fd, preload, nice = -1, [], True
    i = 0
    while i < len(argv) and argv[i] != "--":
        if argv[i] == "--fd":
            fd = int(argv[i + 1])
            i += 2
        elif argv[i] == "--preload":
            preload = [m for m in argv[i + 1].split(",") if m]
            i += 2
        elif argv[i] == "--no-nice":
            nice = False
            i += 1
        else:
            raise SystemExit(f"entrypoint.standby: unknown argument {argv[i]!r}")
    return fd, preload, nice, argv[i + 1 :]


def _wait_for_go(sock: socket.socket) -> dict | None:
    """The attempt's environment once the supervisor writes `go <JSON>` (`go` alone: this
    process's own); None when the socket closes or says anything else."""
    data = b""
    while not data.endswith(b"\n"):
        try:
            chunk = sock.recv(1 << 16)  # the environment: a TF_CONFIG can be large
        except InterruptedError:
            continue
        except OSError:
            return None
        if not chunk:
            return None
        data += chunk
    if data == b"go\n":
        return dict(os.environ)
    if not data.startswith(b"go "):
        return None
    try:
        env = json.loads(data[3:])
    except ValueError:
        return None
    return env if isinstance(env, dict) else None


def _take_environment(started: dict, env: dict) -> None:
    """Make os.environ what a cold start with `env` would see: what the launcher changed since
    this process started (the first attempt's TF_CONFIG, heartbeat file) is applied; what the
    imports set themselves (the trainer's TF_USE_LEGACY_KERAS default) stays, as in a cold start."""
    for key in started.keys() - env.keys():
        os.environ.pop(key, None)
    for key, value in env.items():
        if started.get(key) != value:
            os.environ[key] = value


def _import_at_idle_priority(modules: list[str], nice: bool = True, name: str | None = None) -> None:
    """Import `modules` in this thread at the lowest CPU priority (nice 19): the standby imports
    while the group trains, on the same cores, and must not slow its steps (TensorFlow's import
    is ~3 s of CPU). Linux keeps a nice value per thread, and an unprivileged process can never
    raise its priority again, so only this importing thread is lowered; the main thread, which
    becomes the trainer on "go", keeps the launcher's. Threads an import starts inherit nice
    19; TensorFlow's compute pools start later, from the main thread. The first attempt's
    standby (--no-nice) imports at the launcher's priority: nothing of this pod trains yet.
    The thread takes the process's own name back (`name`), for the threads the imports start."""
    if name is not None:
        _rename("/proc/thread-self/comm", name)
    try:
        if nice:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), IMPORT_NICE)
    except OSError:
        pass  # no lower priority to be had: import as the launcher's
    for module in modules:
        try:
            importlib.import_module(module)
        except BaseException:  # the command meets the same error itself (cold), and reports it
            pass


def main(argv: list[str] | None = None) -> int:
    fd, preload, nice, command = _parse(sys.argv[1:] if argv is None else argv)
    started = dict(os.environ)  # before the imports: what "go" changes is measured against it
    entry = entry_of(command)
    sock = socket.socket(fileno=fd)
    if entry is None:
        return 2
    kind, target, args = entry
    # sys.path[0] as the interpreter sets it for a cold start: the working directory for
    # -m (already so: this module was started with -m), the script's real directory for a script.
    if kind == "script":
        sys.path[0] = os.path.dirname(os.path.realpath(target))
    # SIGTERM blocked before the imports: every thread they start (TensorFlow starts many)
    # inherits the block, as in a cold start, where the built-in trainer blocks it before it
    # imports TensorFlow and takes it in one sigwait thread. Unblocked, a process-directed
    # SIGTERM went to one of those threads, and TensorFlow's own handler swallowed it: a
    # trainer started from a standby never checkpointed and stopped when its pod was deleted.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    name = _rename("/proc/self/comm", WAITING_NAME)  # the main thread's: the process's name
    importing = threading.Thread(target=_import_at_idle_priority, args=(preload, nice, name), name="standby-preload")
    importing.start()
    importing.join()
    try:
        sock.sendall(b"ready\n")
    except OSError:
        pass
    env = _wait_for_go(sock)
    sock.close()
    if env is None:
        return 0
    _take_environment(started, env)
    if name is not None:
        _rename("/proc/self/comm", name)  # running the command: named as a cold start is
    # The command's main thread takes SIGTERM as in a cold start (the built-in trainer blocks it
    # again and waits for it in its own thread; a user's script gets it in its main thread).
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    if kind == "module":
        sys.argv = [command[0], *args]  # argv[0] becomes the module's file, as with -m
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.argv = [target, *args]
        runpy.run_path(os.path.abspath(target), run_name="__main__")
    return 0


if __name__ == "__main__":
    code = main()
    sys.exit(code)


# -- the supervisor's side ---------------------------------------------------------------------
# (imported by entrypoint.attempt in the launcher, never run in the standby before "go")

BUILTIN_TRAINER = "entrypoint.training"
DEFAULT_TRAINING_COMMAND = ("python", "-m", BUILTIN_TRAINER)  # `python -m entrypoint run` without one
# What the built-in trainer's standby imports: the training loop and everything it needs
# (TensorFlow, tf_keras, the data pipeline), exactly as its own import would, nothing run.
BUILTIN_PRELOAD = ("entrypoint.training.trainer",)
USER_PRELOAD = ("tensorflow",)
POLICIES = ("auto", "true", "false")


def is_builtin_trainer(command) -> bool:
    """Is the command `python -m entrypoint.training ...` (the built-in trainer)?"""
    entry = entry_of(command)
    return entry is not None and entry[0] == "module" and entry[1] == BUILTIN_TRAINER


def standby_plan(policy: str, command) -> tuple[tuple[str, ...] | None, str]:
    """(modules the standby preloads, or None: no standby; why, for the launcher's log line).

    auto: on for the built-in trainer only (its imports are known to be side-effect free);
    true: also for a user's `python -m module` / `python script.py` (opt-in: importing
    TensorFlow before the script runs means environment variables the script sets before its
    own `import tensorflow`, e.g. TF_CPP_MIN_LOG_LEVEL, come too late); false: never."""
    policy = policy or "auto"
    entry = entry_of(command)
    builtin = is_builtin_trainer(command)
    if policy == "false":
        return None, "off (training.warmStandby: false)"
    if entry is None:
        return None, (
            "off: the training command is not `python -m <module> ...` or `python <script> ...` "
            "(no interpreter options), so only a cold start runs it as given"
        )
    if builtin:
        return BUILTIN_PRELOAD, "on (the built-in trainer; TensorFlow and the trainer imported ahead)"
    if policy == "true":
        return USER_PRELOAD, "on (training.warmStandby: true; TensorFlow imported ahead of the command)"
    return None, "off for a user command (set training.warmStandby: true to opt in)"


def _stopped(pid: int) -> bool:
    """Is the process stopped (state T/t in /proc)? A stopped standby told "go" would only hang."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


class Standby:
    """One waiting standby process of `command` (the supervisor's handle on it)."""

    def __init__(self, command, env: dict, preload, cwd: str | None = None, nice: bool = True):
        import subprocess

        parent, child = socket.socketpair()
        argv = [
            command[0],
            "-m",
            "entrypoint.standby",
            "--fd",
            str(child.fileno()),
            "--preload",
            ",".join(preload),
            *([] if nice else ["--no-nice"]),
            "--",
            *command,
        ]
        try:
            self.process = subprocess.Popen(
                argv,
                env=env,
                cwd=cwd,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                pass_fds=(child.fileno(),),
                start_new_session=True,
            )  # own group, as a cold start
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        self.sock = parent
        self.sock.setblocking(False)
        self.command, self.preload = list(command), tuple(preload)
        self.ready = False
        self.why = ""

    @property
    def pid(self) -> int:
        return self.process.pid

    def _poll_ready(self) -> None:
        try:
            data = self.sock.recv(64)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            return
        if data.startswith(b"ready"):
            self.ready = True

    def take(self, env: dict | None = None):
        """Start the command in the standby, with `env` (None: the one it was started with):
        its Popen, or None (start cold: it died, or it is stopped, e.g. SIGSTOPped with the
        trainer's whole tree; `why` says which)."""
        if self.process.poll() is not None:
            self.why = f"exited with {self.process.returncode}"
            self.discard()
            return None
        if _stopped(self.process.pid):
            self.why = "is stopped (SIGSTOP)"
            self.discard()
            return None
        self._poll_ready()
        go = b"go\n" if env is None else b"go " + json.dumps(dict(env)).encode() + b"\n"
        try:
            self.sock.setblocking(True)
            self.sock.sendall(go)
        except OSError:
            self.discard()
            return None
        self.sock.close()
        return self.process

    def discard(self) -> None:
        """Close the socket (the standby exits 0 on its own), kill its group to be sure, reap it."""
        import signal

        self.sock.close()
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.process.wait(timeout=10)
        except Exception:  # nothing more to do; never block the supervisor
            pass
        if self.process.stdout is not None:
            self.process.stdout.close()


class FirstStandby:
    """The first attempt's standby, started with the launcher (prestart) and held until the
    first attempt takes it (entrypoint.attempt) or the launcher finds it will not train
    (discard). Both may come from different threads (a SIGTERM's): one of them gets it."""

    def __init__(self, standby: Standby | None = None):
        self._standby = standby
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        standby = self._standby
        return standby.pid if standby is not None else None

    def take(self, command, preload) -> Standby | None:
        """The standby, if it was started for this command and preload (the launcher's own plan
        for its settings); else None, and one that does not fit is discarded."""
        with self._lock:
            standby, self._standby = self._standby, None
        if standby is None:
            return None
        if standby.command != list(command) or preload is None or standby.preload != tuple(preload):
            standby.discard()
            return None
        return standby

    def discard(self) -> None:
        """Not taken (or not any more): kill and reap it. Taken: nothing (it is the trainer now)."""
        with self._lock:
            standby, self._standby = self._standby, None
        if standby is not None:
            standby.discard()


def run_command(rest) -> list[str]:
    """The training command given after `run` (`[--] [command...]`; none: the built-in trainer).
    The one reading of it: entrypoint.cli's, and prestart's before the CLI is imported."""
    command = list(rest)
    if command and command[0] == "--":
        command = command[1:]
    return command or list(DEFAULT_TRAINING_COMMAND)


def training_command(argv) -> list[str] | None:
    """The training command of `python -m entrypoint <argv>` when argv is `run [--] [command...]`;
    None for another command."""
    argv = list(argv)
    if not argv or argv[0] != "run":
        return None
    return run_command(argv[1:])


def prestart(argv, environ, stopping: bool = False) -> FirstStandby:
    """Start the first attempt's standby for `python -m entrypoint <argv>`, before the launcher
    imports anything else (~0.2 s of its own imports, then its settings, TF_CONFIG, the run's
    record and the peer wait, all of which TensorFlow's import now overlaps). Only where
    training.warmStandby would give the training command a standby at all (standby_plan: the
    built-in trainer under auto or true, an opted-in user command under true, never under
    false); the launcher takes it only if its own plan agrees. Nothing when a stop signal came
    already (`stopping`) or the standby cannot be started (the first start is then cold, as
    before). Its environment is the pod's; the attempt's own comes with "go"."""
    command = training_command(argv)
    policy = environ.get("TFMW_WARM_STANDBY") or "auto"
    if stopping or command is None or policy not in POLICIES:
        return FirstStandby()
    preload, _ = standby_plan(policy, command)
    if preload is None:
        return FirstStandby()
    try:  # nothing of this pod trains yet: import at the launcher's priority
        return FirstStandby(Standby(command, dict(environ), preload, nice=False))
    except Exception:  # never the launcher's start: the cold start will say what is wrong, if anything
        return FirstStandby()

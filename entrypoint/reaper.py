"""What PID 1 owes its descendants: orphans adopted, the rest of a group ended, zombies reaped.

The launcher is the container's PID 1 (no tini), so every process the training command leaves
behind comes to it: a background child still running when the command's main process exits
(it would hold the GPU, and with `completion.onSuccess: idle` run on for good), and, once such
an orphan exits, its zombie, which only its parent may reap. The pattern is dumb-init's and
tini's (`-g`, subreaper mode): the command runs in its own process group (entrypoint.attempt),
and when its main process exits the rest of the group gets SIGTERM, then SIGKILL after a grace;
zombies are reaped. Outside a container (make local) the launcher's process is not PID 1, so
it first becomes a child subreaper (prctl PR_SET_CHILD_SUBREAPER, Linux >= 3.4, tini's
`register_subreaper`): orphans then come to it instead of to the host's init.

Only a process that adopts orphans (PID 1, or the launcher's own process once a subreaper:
`adopting()`) treats every child it did not start as the command's. Anywhere else (the
launcher run inside another program, as the tests do) its other children are that program's,
so only the command's session counts: its group, and what moved to a group of its own
(setpgid) but stayed in the session the command started (a setsid() escapes; only PID 1 finds it).

Only zombies that are not a live `subprocess.Popen`'s are reaped: a blanket `waitpid(-1)` would
take a Popen's exit status, and CPython then reports that child's exit as 0
(subprocess.Popen._try_wait turns the ChildProcessError into returncode 0): a failed trainer
would look finished. So the children are found in /proc (state Z, parent = us) and reaped by
pid. Linux only, standard library only.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
PROC = Path("/proc")


@dataclass(frozen=True)
class Proc:
    """One process, as /proc/<pid>/stat describes it."""

    pid: int
    comm: str  # the executable's name, up to 15 characters (`sleep`, `python3`)
    state: str  # R, S, D, T, Z (zombie), ...
    ppid: int
    pgrp: int
    session: int = 0  # the session id: the command's pid, for all it started that did not setsid()


@dataclass(frozen=True)
class Ended:
    """A process the command left running, and the signal that ended it."""

    pid: int
    comm: str
    signal: str  # "SIGTERM", or "SIGKILL" when it outlived the grace

    def describe(self) -> str:
        return f"{self.comm} (pid {self.pid})"


def parse_stat(text: str) -> Proc | None:
    """The fields of one /proc/<pid>/stat line; None if it is not one. `comm` may hold spaces and
    parentheses, so the fields after it are read after the last ')'."""
    head, sep, tail = text.rpartition(")")
    pid, open_paren, comm = head.partition(" (")
    fields = tail.split()
    if not sep or not open_paren or len(fields) < 4 or not pid.strip().isdigit():
        return None
    try:
        return Proc(int(pid), comm, fields[0], int(fields[1]), int(fields[2]), int(fields[3]))
    except ValueError:
        return None


def processes(proc: Path = PROC) -> list[Proc]:
    """Every process visible in `proc` now (one that exits while it is read is left out)."""
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parsed = parse_stat((entry / "stat").read_text(errors="replace"))
        except OSError:
            continue
        if parsed is not None:
            found.append(parsed)
    return found


def left_running(
    procs: Iterable[Proc], pgid: int, parent: int, exclude: Iterable[int] = (), adopt_all: bool = True
) -> list[Proc]:
    """The live processes the command (its group and session are `pgid`) left: its group's and
    session's, and, when `adopt_all`, the orphans adopted by `parent` (one that left the session
    with setsid() still comes to us), less `exclude` (our own live children: the warm standby)."""
    skip = set(exclude)
    return [
        p
        for p in procs
        if p.state != "Z"
        and p.pid not in skip
        and p.pid != parent
        and (p.pgrp == pgid or p.session == pgid or (adopt_all and p.ppid == parent))
    ]


def our_zombies(
    procs: Iterable[Proc], parent: int, exclude: Iterable[int] = (), sessions: Iterable[int] | None = None
) -> list[int]:
    """Zombies whose parent is `parent`, less `exclude` (the live Popens', theirs to reap); with
    `sessions`, only those of these sessions (the commands'), else any (we adopt orphans)."""
    skip, only = set(exclude), None if sessions is None else set(sessions)
    return [
        p.pid
        for p in procs
        if p.state == "Z" and p.ppid == parent and p.pid not in skip and (only is None or p.session in only)
    ]


def reap(exclude: Iterable[int] = (), proc: Path = PROC, sessions: Iterable[int] | None = None) -> list[int]:
    """Reap our zombies that are not `exclude`'s (the live Popens), of `sessions` (None: any); the pids reaped."""
    reaped = []
    for pid in our_zombies(processes(proc), os.getpid(), exclude, sessions):
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                reaped.append(pid)
        except ChildProcessError:  # reaped meanwhile by its Popen, or not ours after all
            pass
    return reaped


_adopting = False  # this process adopts orphans (become_subreaper succeeded, or it is PID 1)


def adopting() -> bool:
    """Does this process adopt orphans, so that a child it did not start is the command's?"""
    return _adopting or os.getpid() == 1


def become_subreaper(on: bool = True) -> bool:
    """Orphans of our descendants come to us (PID 1 has that already); `on=False` gives that up
    (a test that tried it). False: the kernel refused (not Linux >= 3.4); orphans then go to the
    host's init, unreported."""
    global _adopting
    if os.getpid() == 1:
        return True
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        done = libc.prctl(PR_SET_CHILD_SUBREAPER, 1 if on else 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
    if done:
        _adopting = on
    return done


def end_left_running(
    pgid: int,
    grace_seconds: float,
    exclude: Iterable[int] = (),
    *,
    proc: Path = PROC,
    sleep: Callable[[float], None] = time.sleep,
) -> list[Ended]:
    """After the command's main process exited: SIGTERM what it left running (its group, our
    adopted orphans), SIGKILL what still runs after `grace_seconds`, reap them. What was ended,
    and how; [] when nothing was left."""
    me, skip, adopt = os.getpid(), set(exclude), adopting()
    sessions = None if adopt else {pgid}
    left = left_running(processes(proc), pgid, me, skip, adopt)
    if not left:
        reap(skip, proc, sessions)
        return []
    _signal(left, pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    running = left
    while running and time.monotonic() < deadline:
        sleep(0.05)
        reap(skip, proc, sessions)
        running = left_running(processes(proc), pgid, me, skip, adopt)
    killed = {p.pid for p in running}
    if running:
        _signal(running, pgid, signal.SIGKILL)
        for _ in range(40):  # SIGKILL cannot be caught: gone within moments (unless in D state)
            sleep(0.05)
            reap(skip, proc, sessions)
            if not left_running(processes(proc), pgid, me, skip, adopt):
                break
    return [Ended(p.pid, p.comm, "SIGKILL" if p.pid in killed else "SIGTERM") for p in left]


def _signal(procs: list[Proc], pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for p in procs:
        if p.pgrp != pgid:  # left the group (setsid): only its pid reaches it
            try:
                os.kill(p.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


def wait_gone(pgid: int, seconds: float, exclude: Iterable[int] = (), *, proc: Path = PROC) -> bool:
    """Reap while a group the launcher SIGKILLed dies, up to `seconds`; True: nothing is left."""
    me, deadline, adopt = os.getpid(), time.monotonic() + seconds, adopting()
    while True:
        reap(exclude, proc, None if adopt else {pgid})
        if not left_running(processes(proc), pgid, me, exclude, adopt):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)

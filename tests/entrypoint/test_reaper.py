"""PID 1's duties (entrypoint.reaper): /proc read right, what a command left running ended, zombies reaped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from entrypoint import reaper
from entrypoint.reaper import Proc, left_running, our_zombies, parse_stat


def test_parse_stat_reads_the_fields_after_the_last_parenthesis():
    line = "4242 (my (odd) name) S 1 4242 4243 0 -1 4194560 100 0 0 0"
    assert parse_stat(line) == Proc(4242, "my (odd) name", "S", 1, 4242, 4243)


@pytest.mark.parametrize("bad", ["", "garbage", "12 (x", "x (y) S 1 2", "12 (y) S"])
def test_parse_stat_refuses_what_is_not_a_stat_line(bad):
    assert parse_stat(bad) is None


PROCS = [
    Proc(100, "launcher", "S", 1, 100),
    Proc(200, "trainer", "Z", 100, 200),  # the command's main process (a live Popen's zombie)
    Proc(201, "sleep", "S", 100, 200),  # its background child, adopted
    Proc(202, "worker", "S", 201, 200),  # a grandchild, still in the group
    Proc(203, "daemon", "S", 100, 203),  # left the group with setsid(), adopted by us
    Proc(204, "gone", "Z", 100, 200),  # an adopted orphan that exited: our zombie
    Proc(300, "standby", "S", 100, 300),  # the warm standby: our own live child
    Proc(400, "other", "S", 1, 400),  # not ours at all
]


def test_left_running_is_the_group_and_our_orphans_less_our_own_children():
    left = left_running(PROCS, pgid=200, parent=100, exclude={300})
    assert [p.pid for p in left] == [201, 202, 203]


def test_our_zombies_leave_a_live_popens_to_it():
    assert our_zombies(PROCS, parent=100, exclude={200}) == [204]


# Inside another program (not PID 1, not a subreaper), that program's other children are its own:
# only the command's session counts, and a stranger's zombie is never taken.
SESSION_PROCS = [
    Proc(201, "sleep", "S", 100, 200, 200),  # the command's child, still in its group
    Proc(205, "worker", "S", 201, 205, 200),  # moved to a group of its own, same session
    Proc(206, "build", "S", 100, 206, 206),  # the host program's own child: not the command's
    Proc(207, "gone", "Z", 100, 207, 200),  # the command's orphan, exited
    Proc(208, "done", "Z", 100, 208, 208),  # the host program's child, exited: its Popen's to reap
]


def test_without_adopting_only_the_commands_session_is_left_running_or_reaped():
    assert [p.pid for p in left_running(SESSION_PROCS, pgid=200, parent=100, adopt_all=False)] == [201, 205]
    assert our_zombies(SESSION_PROCS, parent=100, sessions={200}) == [207]


@pytest.fixture(autouse=True)
def _not_a_subreaper_after():
    # pytest's own process must not stay a subreaper: orphans of every later test's processes
    # would come to it and stay zombies, and the launcher inside it would take them for its own
    yield
    reaper.become_subreaper(on=False)


def _become_subreaper():
    if not reaper.become_subreaper():
        pytest.fail("prctl(PR_SET_CHILD_SUBREAPER) refused: Linux >= 3.4 is required")


def test_an_orphans_zombie_is_reaped_and_a_live_popen_keeps_its_exit_status():
    _become_subreaper()
    # The shell starts `true` in the background and exits: `true` is orphaned to us, then a zombie.
    subprocess.run(["sh", "-c", "true & echo $! > /dev/null"], check=True)
    failing = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])
    deadline = time.monotonic() + 5
    while not our_zombies(reaper.processes(), os.getpid(), {failing.pid}) and time.monotonic() < deadline:
        time.sleep(0.02)
    while _state(failing.pid) != "Z" and time.monotonic() < deadline:
        time.sleep(0.02)  # the Popen's child exited too: a zombie the reaper must leave alone
    assert _state(failing.pid) == "Z"
    reaped = reaper.reap(exclude={failing.pid})
    assert reaped and failing.pid not in reaped
    assert not our_zombies(reaper.processes(), os.getpid(), {failing.pid})
    assert failing.wait() == 3  # not 0: its status was not taken


def _state(pid: int) -> str:
    try:
        return parse_stat((reaper.PROC / str(pid) / "stat").read_text()).state
    except (OSError, AttributeError):
        return "?"


def test_end_left_running_terms_then_kills_after_the_grace():
    _become_subreaper()
    # A main process that leaves one child that obeys SIGTERM and one that ignores it.
    body = (
        "import subprocess, sys\n"
        "subprocess.Popen(['sleep', '600'])\n"
        "subprocess.Popen([sys.executable, '-c', 'import signal, time; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(600)'], stdout=sys.stdout)\n"
        "sys.stdin.readline()\n"  # leave once both children run
    )
    main = subprocess.Popen(
        [sys.executable, "-c", body], stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True
    )
    assert main.stdout.readline() == b"1\n"  # the stubborn child has set its handler
    main.stdin.close()
    assert main.wait() == 0
    ended = reaper.end_left_running(main.pid, grace_seconds=0.5)
    assert sorted((e.signal, e.comm == "sleep") for e in ended) == [("SIGKILL", False), ("SIGTERM", True)]
    assert not left_running(reaper.processes(), main.pid, os.getpid())
    assert not our_zombies(reaper.processes(), os.getpid())


def test_nothing_left_running_is_nothing_to_say():
    _become_subreaper()
    main = subprocess.Popen(["true"], start_new_session=True)
    main.wait()
    assert reaper.end_left_running(main.pid, grace_seconds=0.5) == []


def test_wait_gone_sees_a_killed_group_die():
    _become_subreaper()
    main = subprocess.Popen(["sh", "-c", "sleep 600 & sleep 600"], start_new_session=True)
    time.sleep(0.2)
    os.killpg(main.pid, signal.SIGKILL)
    main.wait()
    assert reaper.wait_gone(main.pid, 2.0)

"""A process tree killed whole, a child in a session of its own included (tfmw.localrun.proctree)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from tfmw.localrun.proctree import kill_tree

# A parent that starts a child in a new session (as the launcher starts its training command)
# and prints the child's PID; both then sleep.
PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
print(child.pid, flush=True)
time.sleep(300)
"""


def test_kill_tree_ends_a_child_in_its_own_session_and_waits_for_it():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    try:
        assert os.getpgid(child) != os.getpgid(parent.pid)  # a killpg of the parent's group misses it
        assert kill_tree(parent.pid) == []
        parent.wait(timeout=10)
        assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE
    finally:
        for pid in (child, parent.pid):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        parent.stdout.close()


def test_kill_tree_of_a_process_already_gone_is_empty():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    time.sleep(0.1)
    assert kill_tree(proc.pid) == []

"""Stop signals from the first line of `python -m entrypoint` on (entrypoint/stopsignal.py),
also as PID 1 of its own PID namespace, as in a container: there the kernel drops a signal
the process has no handler for, so one sent while the launcher still imports would be lost
and the pod would wait out its terminationGracePeriodSeconds."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from launcherkit import command, pod_env
from repo import REPO

from entrypoint import stopsignal

CAUGHT_EARLY = r"""
import os, signal, sys
from entrypoint import stopsignal
stopsignal.catch_early()
os.kill(os.getpid(), signal.SIGTERM)   # as during the imports: recorded, nothing else
print("still here", flush=True)
{then}
"""


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)


def test_a_signal_caught_early_reaches_the_handler_that_takes_over():
    then = "seen = []\nstopsignal.hand_over(lambda signum, frame: seen.append(signum))\nprint(seen)"
    proc = run_python(CAUGHT_EARLY.format(then=then))
    assert proc.stdout.split("\n")[:2] == ["still here", f"[{int(signal.SIGTERM)}]"], proc.stderr


def test_a_short_command_exits_128_plus_the_signal_caught_early():
    proc = run_python(CAUGHT_EARLY.format(then="stopsignal.exit_on_signal()\nprint('not reached')"))
    assert (proc.returncode, proc.stdout) == (128 + signal.SIGTERM, "still here\n"), proc.stderr


def test_exit_on_signal_outside_python_m_entrypoint_changes_nothing():
    before = signal.getsignal(signal.SIGTERM)
    stopsignal.exit_on_signal()  # a test calling a command in its own process keeps its handlers
    assert signal.getsignal(signal.SIGTERM) is before


# -- as PID 1 ----------------------------------------------------------------------------

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="a PID namespace needs root and unshare (util-linux): run the tests as root (CI does)",
)


def start_as_pid_1(argv: list[str], env: dict) -> tuple[subprocess.Popen, int]:
    """`argv` as PID 1 of a new PID namespace; (unshare's process, argv's host PID)."""
    proc = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--kill-child", *argv],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = children.read_text().split() if children.exists() else []
        if found:
            return proc, int(found[0])
        time.sleep(0.001)
    proc.kill()
    raise AssertionError("unshare started no process")


def catches(pid: int, sig: int) -> bool:
    """Whether `pid` has a handler for `sig` (SigCgt in /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    return False


def sigterm_once_caught(pid: int, within: float = 30) -> float:
    """SIGTERM to `pid` the moment it first catches SIGTERM; the seconds that took."""
    started = time.monotonic()
    while not catches(pid, signal.SIGTERM):
        assert time.monotonic() - started < within, f"PID {pid} never caught SIGTERM: as PID 1 it would be lost"
        time.sleep(0.001)
    os.kill(pid, signal.SIGTERM)
    return time.monotonic() - started


@needs_root
def test_check_peers_as_pid_1_ends_on_sigterm():
    """helm test's pod: a peer wait of 120 s, deleted at once. Before, it had no handler at all."""
    proc, pid = start_as_pid_1(
        [sys.executable, "-m", "entrypoint", "check-peers", "nowhere.invalid", "--timeout-seconds", "120"],
        dict(os.environ),
    )
    try:
        sigterm_once_caught(pid)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM, proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()


@needs_root
def test_the_launcher_as_pid_1_hears_a_sigterm_sent_during_its_imports_and_never_trains(fake_api, tmp_path):
    trainer = command(
        tmp_path, "import pathlib, time\npathlib.Path(__file__).with_name('trained').touch()\ntime.sleep(60)"
    )
    # opted in to the warm standby, whose first one `python -m entrypoint run` starts at once
    # (none once a stop came; killed by the stop otherwise): its `tensorflow` takes a minute
    (tmp_path / "tensorflow.py").write_text("import time\ntime.sleep(60)\n")
    env = pod_env(fake_api, tmp_path, TFMW_WARM_STANDBY="true", PYTHONPATH=str(tmp_path))
    proc, pid = start_as_pid_1([sys.executable, "-m", "entrypoint", "run", "--", *trainer], env)
    try:
        sigterm_once_caught(pid)
        # the launcher's own handler comes after its imports; the signal came before or at once
        assert proc.wait(timeout=30) == 143, proc.stderr.read()
        assert not (tmp_path / "trained").exists()
        assert "starting training" not in proc.stdout.read()
    finally:
        proc.kill()
        proc.wait()

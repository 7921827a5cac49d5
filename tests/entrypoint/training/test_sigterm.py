"""SIGTERM: phases of the flag, and a real process that TensorFlow's own handler cannot swallow."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from workers import REPO, base_env, free_ports, tf_config, trainer_cmd

from entrypoint.training.sigterm import EXIT_SIGTERM, SigtermFlag


def test_sigterm_before_training_exits_at_once():
    exits = []
    flag = SigtermFlag(exit_now=exits.append)
    flag.handle()
    assert exits == [EXIT_SIGTERM]


def test_sigterm_while_training_only_raises_the_flag():
    exits = []
    flag = SigtermFlag(exit_now=exits.append)
    flag.training_started()
    assert flag() is False
    flag.handle()
    assert flag() is True and exits == []


def test_sigterm_while_finishing_lets_the_export_finish():
    exits = []
    flag = SigtermFlag(exit_now=exits.append)
    flag.training_started()
    flag.training_finished()
    flag.handle()
    assert exits == []


def test_sigterm_is_taken_by_the_waiting_thread_in_a_real_process():
    code = (
        "from entrypoint.training.sigterm import SigtermFlag; import time; f = SigtermFlag(); f.install(); "
        "f.training_started(); print('ready', flush=True); deadline = time.time() + 20\n"
        "while not f() and time.time() < deadline: time.sleep(0.05)\n"
        "print('flag', f(), flush=True)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=base_env(), stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "flag True" in out, out


@pytest.mark.slow
def test_sigterm_while_waiting_for_peers_is_not_lost(tmp_path):
    # Worker 0 waits in MultiWorkerMirroredStrategy creation for worker 1, inside a TensorFlow call
    # that holds the GIL and after TensorFlow installed its own SIGTERM handler. The SIGTERM it gets
    # there must not be swallowed: once the group forms, worker 0 exits 143 without training.
    ports = free_ports(2)
    env = {"TFMW_SHARED_DIR": str(tmp_path)}
    logs = [tmp_path / "w0.log", tmp_path / "w1.log"]

    def start(i):
        with open(logs[i], "w") as log:
            return subprocess.Popen(
                trainer_cmd(),
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=base_env({**env, "TF_CONFIG": tf_config(ports, i)}),
            )

    first = start(0)
    second = None
    try:
        deadline = time.monotonic() + 60
        while "tfmw connecting" not in logs[0].read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(3)  # now inside strategy creation, waiting for worker 1
        first.send_signal(signal.SIGTERM)
        second = start(1)
        code = first.wait(timeout=90)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    out = logs[0].read_text()
    assert code == EXIT_SIGTERM, out
    assert "tfmw sigterm: stopping before training started" in out
    assert "tfmw progress" not in out

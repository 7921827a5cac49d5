"""SIGTERM: phases of the flag, and a real process that TensorFlow's own handler cannot swallow."""

from __future__ import annotations

import random
import re
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


GRACE_SECONDS = 120  # the chart's default workers.terminationGracePeriodSeconds


@pytest.mark.slow
@pytest.mark.parametrize("moment,signalled", [("step", (1,)), ("checkpoint-write", (0, 1))])
def test_sigterm_at_any_moment_ends_in_a_published_checkpoint_within_the_default_grace(tmp_path, moment, signalled):
    """SIGTERM at a random moment of a step (seeded), or while the chief writes a checkpoint (held
    there a second by the test hook), to one worker or to both: every worker stops at the same
    checkpoint boundary, the chief publishes that checkpoint, and both exit 143, all within the
    default grace period: a drain, a preemption or a suspend loses nothing."""
    ports = free_ports(2)
    rng = random.Random(f"{moment}-{signalled}")
    env = {
        "TFMW_SHARED_DIR": str(tmp_path),
        "TFMW_RUN_ID": "r",
        "TFMW_FAULT_CHECKPOINT_PAUSE_SECONDS": "1" if moment == "checkpoint-write" else "0",
    }
    overrides = [
        "--set", "model.name=mlp", "--set", "steps=100000", "--set", "logEverySteps=20",
        "--set", "checkpoint.everySteps=100", "--set", "data.synthetic.examples=512",
    ]  # fmt: skip
    logs = [tmp_path / "w0.log", tmp_path / "w1.log"]
    procs = []
    for i in (0, 1):
        with open(logs[i], "w") as log:
            procs.append(
                subprocess.Popen(
                    trainer_cmd(*overrides),
                    cwd=REPO,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=base_env({**env, "TF_CONFIG": tf_config(ports, i)}),
                )
            )
    try:
        mark = "tfmw checkpoint writing step=200" if moment == "checkpoint-write" else "tfmw checkpoint saved step=200"
        deadline = time.monotonic() + 120
        while mark not in logs[0].read_text():
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), logs[0].read_text()
            time.sleep(0.02)
        if moment == "step":
            time.sleep(rng.uniform(0.05, 1.5))  # somewhere in the steps after the checkpoint
        signalled_at = time.monotonic()
        for i in signalled:
            procs[i].send_signal(signal.SIGTERM)
        codes = [p.wait(timeout=GRACE_SECONDS) for p in procs]
        took = time.monotonic() - signalled_at
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    outs = [log.read_text() for log in logs]
    assert codes == [EXIT_SIGTERM, EXIT_SIGTERM], outs[0][-3000:]
    assert took < GRACE_SECONDS
    stopped = {int(re.search(r"tfmw stopped step=(\d+)/", out).group(1)) for out in outs}
    assert len(stopped) == 1, stopped  # one boundary for the whole group
    (step,) = stopped
    assert step >= 200 and step % 100 == 0
    state = (tmp_path / "r" / "checkpoints" / "checkpoint").read_text()
    assert f'model_checkpoint_path: "ckpt-{step}"' in state, state  # published, not just written

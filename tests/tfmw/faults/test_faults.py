"""Worker failure on `make local`'s runner: real 2-worker MWMS training, real faults.

Each fault (SIGKILL a worker, SIGKILL the chief, SIGSTOP a worker's training process,
cut a worker's network, SIGKILL the chief mid-checkpoint-write) must leave a job that
completes with exactly the configured number of steps, identical weights on every worker,
and at most one checkpoint interval of work lost. Slow: ~20-45 s per fault.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap

import pytest
from repo import REPO

from entrypoint import loglines
from entrypoint.loglines import said
from tfmw.chart import render
from tfmw.faults.local import SCENARIOS, run_scenario
from tfmw.localrun.kubelet import LocalCluster
from tfmw.localrun.podspec import build_pods, find_workload
from tfmw.localrun.run import base_env, choose_network

pytestmark = pytest.mark.slow
EVERY = 20  # the mid-checkpoint kill: its checkpoints every 20 steps of the cnn
# The five faults train the mlp (values/local.yaml's cnn takes a core per worker for half a minute): what is
# tested is the recovery, not the model. The fault after the first checkpoints, >= 400 steps before the end.
FAULT_STEPS, FAULT_EVERY, FAULT_AFTER = 600, 100, 150
FAULT_SETS = ("training.config.model.name=mlp",)


def reloads_and_predicts(model_dir: str) -> bool:
    check = textwrap.dedent(f"""
        import os; os.environ["TF_USE_LEGACY_KERAS"] = "1"
        import numpy as np, tf_keras as keras
        model = keras.models.load_model({model_dir!r}, compile=False)
        out = model.predict(np.zeros((1,) + tuple(model.input_shape[1:]), "float32"), verbose=0)
        assert np.all(np.isfinite(out))
    """)
    return subprocess.run([sys.executable, "-c", check], capture_output=True, timeout=300).returncode == 0


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_training_survives_fault(scenario, tmp_path):
    if scenario == "partition-worker" and os.geteuid() != 0:
        pytest.skip("cutting a worker's network needs network namespaces: run the tests as root (CI does)")
    result = run_scenario(
        scenario,
        runs_dir=tmp_path,
        steps=FAULT_STEPS,
        checkpoint_every=FAULT_EVERY,
        fault_after_step=FAULT_AFTER,
        extra_sets=FAULT_SETS,
    )  # the chart's watchdog defaults (adaptive)
    context = "\n".join(result.log_tail)
    assert result.completed, f"{result.reason}\n{context}"
    assert result.final_steps == {FAULT_STEPS}, context
    assert result.identical_weights, result.digests
    assert result.trainer_restarts >= 1, "the fault never broke the group: nothing was tested"
    assert 0 <= result.resume_step <= result.step_at_fault
    assert result.resume_step % FAULT_EVERY == 0
    assert 0 <= result.steps_lost <= FAULT_EVERY, (result.step_at_fault, result.resume_step)
    if scenario in ("kill-chief", "kill-during-checkpoint"):
        assert reloads_and_predicts(result.model)
    if scenario == "hang-worker":
        # stopped while stepping, after its launcher said its adaptive bound: caught by that
        # bound, not by the static 600 s
        assert ", adaptive: " in result.watchdog, result.watchdog
    if scenario in ("kill-worker", "hang-worker", "partition-worker"):
        # The chief's launcher lived through the whole run: its time account (entrypoint.goodput)
        # covers the harness's own wall time, and the fault shows up where it belongs.
        assert set(result.badput) <= {
            "startup",
            "peerWait",
            "checkpoint",
            "restart",
            "lostWork",
            "detection",
            "export",
        }, result.badput
        # (to its end, not the harness's: the other worker may take a while to notice the
        # chief's coordination service is gone after the chief finished)
        end = result.seconds_to_chief_end
        assert abs(result.wall_seconds - end) <= max(2.0, 0.03 * end), (result.wall_seconds, end, result.badput)
        assert result.badput.get("restart", 0) > 0 and result.badput.get("startup", 0) > 0, result.badput
        if result.steps_lost > 0:
            assert result.badput.get("lostWork", 0) + result.badput.get("detection", 0) > 0, result.badput
        assert 0 < result.goodput < 1


def test_kill_mid_checkpoint_never_publishes_a_partial_checkpoint(tmp_path):
    result = run_scenario(
        "kill-during-checkpoint", runs_dir=tmp_path, steps=80, checkpoint_every=EVERY, fault_after_step=50
    )
    assert result.completed, result.reason
    # The chief died while writing step 60: the group resumed from the last checkpoint published
    # before that, 40 — or 20 when 40's background write was still in flight as 60's began (on a
    # loaded machine a write takes seconds). Which one, the chief's kept log says: the steps its
    # first attempt saw saved.
    assert result.step_at_fault == 60
    (log,) = tmp_path.glob("faults-*/*/shared/*/logs/*-tf-multiworker-0.log")
    first_attempt = log.read_text().split("tfmw start ")[1]
    saved = [int(step) for step in re.findall(r"^tfmw checkpoint saved step=(\d+)", first_attempt, re.M)]
    assert saved and max(saved) in (20, 40), saved
    assert result.resume_step == max(saved), (result.resume_step, saved)


def _local_cluster(tmp_path, *sets, release="restart"):
    rendered = render.prepare("local", list(sets), release=release)
    workload = find_workload(rendered.objects, "default")
    pods = build_pods(workload, tmp_path / release)
    network, _ = choose_network("auto", 2222, len(pods))
    return LocalCluster(pods, network, base_env(), grace_seconds=20, out=lambda line: None)


def test_completed_job_whose_pods_restart_does_not_train_again(tmp_path):
    cluster = _local_cluster(tmp_path, "training.config.steps=10", "training.config.checkpoint.everySteps=5")
    try:
        cluster.start()
        assert cluster.wait(300).ok
        for ordinal in (0, 1):
            mark = len(cluster.states[ordinal].lines)
            cluster.signal_pod(ordinal, signal.SIGKILL)  # pod deleted / rescheduled
            line = cluster.wait_for_line(ordinal, lambda entry: bool(said(entry, loglines.COMPLETED)), 120, mark)
            assert line is not None, cluster.states[ordinal].lines[mark:]
            later = cluster.states[ordinal].lines[mark:]
            assert not any(
                said(line, loglines.START) or said(line, loglines.PROGRESS) or said(line, loglines.LAUNCHER, "starting")
                for line in later
            ), later
            assert cluster.states[ordinal].starts == 2
    finally:
        cluster.shutdown()


def test_retries_exhausted_exit_5_with_reason(tmp_path):
    # Training that fails at once, every time (training.sameErrorLimit off, else the second
    # failure would end it as RepeatedError): the launcher gives up after the limit, the run
    # is Failed (RestartLimit, exit code 5) with one clear line, and the local runner reports
    # it at once instead of waiting out its timeout or crash-looping.
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tfmw.localrun",
            "--runs-dir",
            str(tmp_path),
            "--release",
            "exhaust",
            "--set",
            "training.command={/bin/false}",
            "--set",
            "training.maxRestarts=2",
            "--set",
            "training.sameErrorLimit=0",  # the same failure every time: off, to reach the restart limit
            "--timeout",
            "120",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 5, proc.stdout[-2000:]
    assert "giving up: 2 restarts without progress (limit 2); last failure: training exited with 1" in proc.stdout
    assert "FAILED: exhaust-tf-multiworker-" in proc.stdout
    assert "RestartLimit (training retries exhausted)" in proc.stdout


def test_bad_training_config_ends_the_local_run_at_once_with_exit_2(tmp_path):
    # A config only the running trainer can refuse (data files that are not there): the launcher
    # records Failed (BadConfig) and idles, as in a StatefulSet; the local runner reads its
    # `tfmw failed` line and stops with the run's code, naming the key. (What the trainer's
    # validator refuses, `make local` refuses before it starts anything: test_deploy_render.py.)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tfmw.localrun",
            "--runs-dir",
            str(tmp_path),
            "--release",
            "badcfg",
            "--set",
            f"training.config.data.source=files training.config.data.path={tmp_path / 'no-data'} "
            "training.config.data.numClasses=10",
            "--timeout",
            "120",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stdout[-2000:]
    summary = proc.stdout[proc.stdout.index("tf-multiworker local run FAILED") :]
    assert "BadConfig (bad configuration)" in summary and "data.path" in summary

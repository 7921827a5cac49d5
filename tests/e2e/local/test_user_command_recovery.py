"""A user command (TF's Keras tutorial script with BackupAndRestore) loses a peer mid-run: the
chief's launcher reads the group error in its script's traceback and ends TensorFlow's
teardown after the grace, so the group re-forms without waiting it out; the run ends
Succeeded. Real helm, real TensorFlow, make local's runner (slow)."""

from __future__ import annotations

import os
import signal
import time

import pytest
from repo import REPO

from tfmw.chart import render
from tfmw.localrun.kubelet import LocalCluster
from tfmw.localrun.podspec import build_pods, find_workload
from tfmw.localrun.run import base_env, choose_network, metrics_enabled

pytestmark = pytest.mark.slow

SCRIPT = REPO / "examples" / "keras_tutorial_worker.py"


def test_a_user_commands_broken_group_is_ended_after_the_grace_and_the_run_succeeds(tmp_path):
    rendered = render.prepare(
        "local", [f"training.command={{python,{SCRIPT}}}"], release="user-break", namespace="default"
    )
    workload = find_workload(rendered.objects, "default")
    pods = build_pods(workload, tmp_path / "runs")
    # The kill lands in epoch 2, after epoch 1's backup: 1 s into an epoch of 120 steps (with 30,
    # a quiet machine finished epoch 2 within that second, and the kill found no group to break).
    for pod in pods:
        pod.env.update(EXAMPLE_EPOCHS="2", EXAMPLE_STEPS_PER_EPOCH="120")
    network, _ = choose_network("auto", int(workload.env_value("TFMW_PORT") or 2222), 2, metrics_enabled(workload))
    cluster = LocalCluster(pods, network, base_env(), grace_seconds=20)
    try:
        cluster.start()
        assert cluster.wait_for_line(0, lambda line: line.startswith("Epoch 2/"), timeout=300), "never reached epoch 2"
        time.sleep(1)  # mid-epoch
        killed_at = time.monotonic()
        victims = cluster.training_pids(1)
        assert victims, "worker 1 runs no training command"
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        # Either TF's teardown hangs on the lost peer and the launcher ends it after the grace
        # ("the group broke: ..."), or worker 1's launcher restarts it so fast that the chief's
        # script fails at once on its new incarnation (ci59) and exits by itself: both restart
        # the chief in place, neither waits out TF's own timeouts.
        ended = ("tfmw launcher the group broke:", "tfmw launcher restarting training in place")
        broke = cluster.wait_for_line(0, lambda line: line.startswith(ended), timeout=120)
        assert broke is not None, "\n".join(cluster.states[0].lines[-30:])
        outcome = cluster.wait(400)
        assert outcome.ok, outcome.reason
        chief = cluster.states[0]
        restarted = [
            when
            for when, line in zip(chief.times, chief.lines, strict=True)
            if when > killed_at and "tfmw launcher starting training (attempt 2)" in line
        ]
        assert restarted, "\n".join(chief.lines[-40:])
        print(f"chief: group error read {broke!r}; attempt 2 started {restarted[0] - killed_at:.1f}s after the kill")
        # a teardown the launcher ended is counted as the group's restart
        if "the group broke:" in broke:
            assert any("restarting training in place" in line and "the group broke: " in line for line in chief.lines)
    finally:
        cluster.shutdown()

"""Suspend and resume (entrypoint.launcher, entrypoint.lifecycle): the StatefulSet at 0 replicas
while the run is under way is a suspend. The chief's pod, stopped, records Suspended at the
group's checkpoint; a pod that starts later finds it Suspended and resumes the run there. A pod
stopped while the StatefulSet keeps its replicas (a drain, a preemption) records nothing: the
group re-forms. Real supervisor, real API client against fakeapi."""

from __future__ import annotations

import time

from launcherkit import Run, command, pod_env

import entrypoint.regroup as regroup

# Trains until SIGTERM, then saves at "the boundary" (step 20) and exits 143, as the trainer does;
# a later start resumes from 20 and finishes.
STOPS_AT_20_THEN_FINISHES = """
    import pathlib, signal, sys, time
    here = pathlib.Path(sys.argv[0]).parent
    if not (here / "stopped").exists():
        def stop(*_):
            print("tfmw stopped step=20/40 reason=sigterm checkpoint=/x", flush=True)
            (here / "stopped").write_text("")
            sys.exit(143)
        signal.signal(signal.SIGTERM, stop)
        print("tfmw start run=r1 worker=0/2 replicas=2 resume_step=0 steps=40", flush=True)
        print("tfmw checkpoint saved step=20 path=/x/ckpt-20", flush=True)
        (here / "training").write_text("")
        time.sleep(60)
    print("tfmw start run=r1 worker=0/2 replicas=2 resume_step=20 steps=40", flush=True)
    print("tfmw checkpoint saved step=40 path=/x/ckpt-40", flush=True)
    print("tfmw done steps=40 final_loss=0.25 examples_per_sec=1.0 model=- weights_digest=abc", flush=True)
"""


def resizable_env(fake_api, tmp_path) -> dict:
    env = pod_env(fake_api, tmp_path, pod="train-0", replicas=2)
    del env["TFMW_REPLICAS"]  # with API access the size is the StatefulSet's
    del env["TFMW_LOOPBACK_PORTS"]
    return env


def wait(holds, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not holds():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def start_training(fake_api, tmp_path) -> Run:
    fake_api.replicas["train"] = 2
    run = Run(resizable_env(fake_api, tmp_path), command(tmp_path, STOPS_AT_20_THEN_FINISHES))
    run.until("tfmw launcher starting training (attempt 1)")
    wait(lambda: (tmp_path / "training").exists())
    return run


def test_a_stop_with_the_statefulset_at_zero_is_a_suspend_and_a_later_start_resumes(fake_api, tmp_path, monkeypatch):
    monkeypatch.setattr(regroup, "wait_for_peers", lambda hosts, timeout, log, sleep: None)
    run = start_training(fake_api, tmp_path)
    fake_api.replicas["train"] = 0  # helm upgrade --set suspend=true
    assert run.stop() == 143
    status = fake_api.status("train-status")
    assert status["phase"] == "Suspended" and status["lastCheckpointStep"] == "20", status
    assert status["message"].startswith("suspended at step 20 (the StatefulSet at 0 replicas: suspend: true)")
    assert [e["reason"] for e in fake_api.events][-1] == "Suspended"

    fake_api.replicas["train"] = 2  # suspend: false
    again = Run(resizable_env(fake_api, tmp_path), command(tmp_path, STOPS_AT_20_THEN_FINISHES))
    again.until("tfmw launcher idle:")
    assert "run=r1 revision=rev-a: run suspended at step 20: resuming" in "\n".join(again.logs)
    status = fake_api.status("train-status")
    assert status["phase"] == "Succeeded" and status["startedAt"], status
    reasons = [e["reason"] for e in fake_api.events]
    assert reasons[-3:] == ["Resumed", "Started", "Succeeded"], reasons
    resumed = next(e for e in fake_api.events if e["reason"] == "Resumed")
    assert resumed["message"] == "resumed from step 20"
    again.stop()


def test_a_stop_while_the_statefulset_keeps_its_replicas_records_nothing(fake_api, tmp_path, monkeypatch):
    """A drain or a preemption deletes one pod: the group re-forms; no phase is recorded for it."""
    monkeypatch.setattr(regroup, "wait_for_peers", lambda hosts, timeout, log, sleep: None)
    run = start_training(fake_api, tmp_path)
    assert run.stop() == 143
    assert fake_api.status("train-status")["phase"] == "Running"
    assert "Suspended" not in [e["reason"] for e in fake_api.events]


def test_a_group_evicted_by_kueue_is_recorded_waiting_at_its_checkpoint(fake_api, tmp_path, monkeypatch):
    """Kueue evicts a whole group (a preemption, WaitForPodsReady) by writing the condition
    TerminationTarget on each pod, then deleting them; the StatefulSet keeps its replicas and
    the pods come back gated. The chief's stop says so: Waiting, requeued, at the checkpoint."""
    monkeypatch.setattr(regroup, "wait_for_peers", lambda hosts, timeout, log, sleep: None)
    run = start_training(fake_api, tmp_path)
    fake_api.pods["train-0"] = {
        "metadata": {"name": "train-0"},
        "status": {
            "conditions": [
                {
                    "type": "TerminationTarget",
                    "status": "True",
                    "reason": "WorkloadEvicted",
                    "message": "Preempted to accommodate a workload due to prioritization in the ClusterQueue",
                }
            ]
        },
    }
    assert run.stop() == 143
    status = fake_api.status("train-status")
    assert status["phase"] == "Waiting" and status["lastCheckpointStep"] == "20", status
    assert status["message"].startswith("evicted by Kueue at step 20 (WorkloadEvicted: Preempted to accommodate"), (
        status
    )
    assert "Suspended" not in [e["reason"] for e in fake_api.events]


def test_the_queue_eviction_is_read_from_kueues_pod_condition_only():
    from entrypoint.queueing import evicted_by_queue

    assert evicted_by_queue({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}) is None
    assert evicted_by_queue({"status": {"conditions": [{"type": "TerminationTarget", "status": "False"}]}}) is None
    assert evicted_by_queue({}) is None
    condition = {"type": "TerminationTarget", "status": "True", "reason": "WorkloadEvicted"}
    assert evicted_by_queue({"status": {"conditions": [condition]}}) == "WorkloadEvicted"

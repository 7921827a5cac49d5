"""A resize (entrypoint.regroup): where the launcher reads the group's size from its
StatefulSet (no TFMW_REPLICAS, API access), a change of spec.replicas stops the training
command (SIGTERM: the group checkpoints at its next boundary) and starts it again with a
TF_CONFIG of the new size. Real supervisor, real API client against fakeapi, small training
commands that print what the trainer prints."""

from __future__ import annotations

import time

import pytest
from launcherkit import WORKER_LABELS, Run, attempts, command, pod_env

import entrypoint.peerwatch as peerwatch
import entrypoint.regroup as regroup
import entrypoint.waiting as waiting
from tfmw.devcluster.fakeapi import unschedulable_pod

# Each attempt appends its group size (TF_CONFIG's workers) to "sizes". The first trains until
# SIGTERM, then saves at "the boundary" (step 20) and exits 143, as the trainer does; the
# second resumes from step 20 and finishes.
# Every attempt: count itself in "attempts", append its group size to "sizes".
ATTEMPT = """
    import json, os, pathlib, signal, sys, time
    here = pathlib.Path(sys.argv[0]).parent
    counter = here / "attempts"
    n = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(n + 1))
    workers = len(json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"])
    with open(here / "sizes", "a") as sizes:
        sizes.write(f"{workers}\\n")
"""

STOPS_ON_SIGTERM_THEN_FINISHES = (
    ATTEMPT
    + """
    if n == 0:
        def stop(*_):
            time.sleep(0.3)  # the checkpoint's write: the status says Resizing meanwhile
            print("tfmw checkpoint saved step=20 path=/x/ckpt-20", flush=True)
            os._exit(143)
        signal.signal(signal.SIGTERM, stop)
        print(f"tfmw start run=r1 worker=0/{workers} replicas={workers} resume_step=0 steps=40", flush=True)
        print("tfmw progress step=10/40 epoch=1 loss=0.5000 examples_per_sec=10.0", flush=True)
        (here / "training").write_text("yes")
        time.sleep(60)
        sys.exit(1)
    print(f"tfmw start run=r1 worker=0/{workers} replicas={workers} resume_step=20 steps=40", flush=True)
    print("tfmw progress step=40/40 epoch=2 loss=0.2500 examples_per_sec=10.0", flush=True)
    print("tfmw checkpoint saved step=40 path=/x/ckpt-40", flush=True)
    print("tfmw done steps=40 final_loss=0.2500 examples_per_sec=10.0 model=- weights_digest=abc", flush=True)
"""
)


@pytest.fixture(autouse=True)
def fast_size_polls(monkeypatch):
    monkeypatch.setattr(regroup, "RESIZE_POLL_SECONDS", 0.05)


def resizable_env(fake_api, tmp_path, pod="train-0") -> dict:
    env = pod_env(fake_api, tmp_path, pod=pod)
    del env["TFMW_REPLICAS"]  # the chart with API access: the size is the StatefulSet's
    return env


UNSCHEDULABLE = unschedulable_pod("train-2", "0/2 nodes are available: 2 Insufficient cpu.", labels=dict(WORKER_LABELS))


def wait_for_status(fake_api, holds, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not holds(fake_api.status("train-status")):
        assert time.monotonic() < deadline, fake_api.status("train-status")
        time.sleep(0.02)


def sizes(tmp_path) -> list[int]:
    return [int(line) for line in (tmp_path / "sizes").read_text().split()]


def wait_for_file(path, run: Run, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, "\n".join(run.logs)
        time.sleep(0.02)


@pytest.mark.parametrize("before,after", [(2, 3), (3, 2)])
def test_a_replicas_change_is_one_group_restart_at_the_new_size(fake_api, tmp_path, before, after):
    fake_api.replicas["train"] = before
    run = Run(resizable_env(fake_api, tmp_path), command(tmp_path, STOPS_ON_SIGTERM_THEN_FINISHES))
    run.until("tfmw launcher starting training (attempt 1)")
    wait_for_file(tmp_path / "training", run)
    fake_api.replicas["train"] = after  # helm upgrade --set workers.replicas=<after>
    run.until("tfmw launcher idle:")
    assert attempts(tmp_path) == 2 and sizes(tmp_path) == [before, after]
    assert f"tfmw launcher resizing: workers.replicas {before} -> {after}: the group stops" in "\n".join(run.logs)
    assert f"tfmw launcher re-forming the group at {after} workers" in run.logs
    # the Events say what happened; a resize is no restart and no failure
    assert [e["reason"] for e in fake_api.events] == ["Started", "Resizing", "Resized", "Succeeded"]
    resizing, resized = fake_api.events[1], fake_api.events[2]
    assert resizing["type"] == "Normal" and f"workers.replicas {before} -> {after}" in resizing["message"]
    assert resized["message"] == f"{after} workers training, resumed from step 20"
    status = fake_api.status("train-status")
    assert (status["phase"], status["restarts"], status["lastCheckpointStep"]) == ("Succeeded", "0", "40")
    assert "Resizing" in {p.get("phase") for p in fake_api.patches("train-status")}
    assert run.stop() == 0


def test_the_size_at_start_is_the_statefulsets(fake_api, tmp_path):
    fake_api.replicas["train"] = 3
    run = Run(resizable_env(fake_api, tmp_path), command(tmp_path, STOPS_ON_SIGTERM_THEN_FINISHES))
    run.until("tfmw launcher starting training (attempt 1)")
    wait_for_file(tmp_path / "training", run)
    assert sizes(tmp_path) == [3]
    assert "workers=3" in run.line("tfmw launcher task=worker:0")
    run.stop()


def test_a_pod_outside_the_group_waits_to_be_removed_and_records_nothing(fake_api, tmp_path):
    fake_api.replicas["train"] = 2  # lowered from 3: the StatefulSet controller deletes train-2
    run = Run(resizable_env(fake_api, tmp_path, pod="train-2"), command(tmp_path, STOPS_ON_SIGTERM_THEN_FINISHES))
    run.until("tfmw launcher worker 2 is outside the group of 2 workers")
    assert attempts(tmp_path) == 0
    assert fake_api.patches("train-status") == [] and fake_api.events == []
    assert run.stop() == 0


def test_a_size_that_cannot_be_read_is_a_refusal_naming_the_statefulset(fake_api, tmp_path):
    del fake_api.replicas["train"]  # 404: no such StatefulSet (TFMW_STATEFULSET names another)
    run = Run(resizable_env(fake_api, tmp_path), command(tmp_path, STOPS_ON_SIGTERM_THEN_FINISHES))
    run.until("tfmw launcher idle:")
    status = fake_api.status("train-status")
    assert (status["phase"], status["reason"]) == ("Failed", "BadConfig")
    assert "cannot read the group's size from statefulset train's scale" in status["message"]
    assert "HTTP 404" in status["message"]
    assert attempts(tmp_path) == 0
    run.stop()


# The group stops by itself (a peer's pod was scaled away and got SIGTERM: every worker saved at
# the boundary and exited 143) before this launcher's next read of the size.
STOPPED_BY_THE_GROUP_THEN_FINISHES = (
    ATTEMPT
    + """
    if n == 0:
        print(f"tfmw start run=r1 worker=0/{workers} replicas={workers} resume_step=0 steps=40", flush=True)
        while not (here / "scaled").exists():
            time.sleep(0.02)
        print("tfmw checkpoint saved step=20 path=/x/ckpt-20", flush=True)
        sys.exit(143)
    print(f"tfmw start run=r1 worker=0/{workers} replicas={workers} resume_step=20 steps=40", flush=True)
    print("tfmw checkpoint saved step=40 path=/x/ckpt-40", flush=True)
    print("tfmw done steps=40 final_loss=0.2500 examples_per_sec=10.0 model=- weights_digest=abc", flush=True)
"""
)


def test_a_group_stopped_by_a_removed_peer_re_forms_at_the_new_size(fake_api, tmp_path, monkeypatch):
    monkeypatch.setattr(regroup, "RESIZE_POLL_SECONDS", 3600)  # the group stops first
    fake_api.replicas["train"] = 3
    run = Run(resizable_env(fake_api, tmp_path), command(tmp_path, STOPPED_BY_THE_GROUP_THEN_FINISHES))
    run.until("tfmw launcher starting training (attempt 1)")
    fake_api.replicas["train"] = 2
    (tmp_path / "scaled").write_text("")
    run.until("tfmw launcher idle:")
    assert sizes(tmp_path) == [3, 2]
    assert [e["reason"] for e in fake_api.events] == ["Started", "Resizing", "Resized", "Succeeded"]
    assert fake_api.status("train-status")["restarts"] == "0"
    # a resize another launcher saw: a regroup at once, no back-off, nothing counted
    said = "\n".join(run.logs)
    assert "training stopped (exit 143) for the group to re-form: workers.replicas 3 -> 2" in said, said
    assert "restarting training in place in" not in said, said
    run.stop()


def test_without_a_size_change_a_stopped_group_is_an_ordinary_restart(fake_api, tmp_path, monkeypatch):
    monkeypatch.setattr(regroup, "RESIZE_POLL_SECONDS", 3600)
    run = Run(resizable_env(fake_api, tmp_path), command(tmp_path, STOPPED_BY_THE_GROUP_THEN_FINISHES))
    run.until("tfmw launcher starting training (attempt 1)")
    (tmp_path / "scaled").write_text("")
    run.until("tfmw launcher idle:")
    assert sizes(tmp_path) == [2, 2]
    assert [e["reason"] for e in fake_api.events] == ["Started", "Restarted", "Succeeded"]
    run.stop()


def test_a_grow_undone_while_its_new_worker_is_missing_re_forms_at_the_old_size(fake_api, tmp_path, monkeypatch):
    """A grow from 2 to 9: workers 2-7 are scheduled, worker 8 never is (no CPU left), so it
    never resolves. The chief's status names worker 8 and the scheduler's reason; the user
    scales back to 2 before peers.timeoutSeconds: the group re-forms at 2 instead of failing
    PeersNotFound. The lost-peer watch, which also reads the peers' pods while the group makes
    no progress, runs meanwhile: every message written while Resizing is the resize's."""
    monkeypatch.setattr(peerwatch, "NODE_LOSS_POLL_SECONDS", 0.05)
    monkeypatch.setattr(peerwatch, "STALLED_SECONDS", 0.1)
    waited = []

    def peers_wait(hosts, timeout, log, sleep):  # the launcher's own sleep: it looks at the size
        waited.append(len(hosts))
        while len(hosts) == 9:
            sleep(0.05)

    monkeypatch.setattr(regroup, "wait_for_peers", peers_wait)
    env = resizable_env(fake_api, tmp_path)
    del env["TFMW_LOOPBACK_PORTS"]  # one host name per worker (loopback ones are all localhost)
    run = Run(env, command(tmp_path, STOPS_ON_SIGTERM_THEN_FINISHES))
    run.until("tfmw launcher starting training (attempt 1)")
    wait_for_file(tmp_path / "training", run)
    for ordinal in range(2, 8):
        fake_api.pods[f"train-{ordinal}"] = {
            "kind": "Pod",
            "metadata": {"name": f"train-{ordinal}", "labels": dict(WORKER_LABELS)},
            "status": {"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}]},
        }
    fake_api.pods["train-8"] = dict(UNSCHEDULABLE, metadata={"name": "train-8", "labels": dict(WORKER_LABELS)})
    fake_api.replicas["train"] = 9
    run.until("tfmw launcher re-forming the group at 9 workers")
    # while it waits, the chief's status says why the new worker is not there: the last one
    wait_for_status(
        fake_api,
        lambda status: (
            "waiting for the new workers (train-8: Unschedulable: 0/2 nodes are available: 2 Insufficient cpu.)"
            in status.get("message", "")
        ),
    )
    assert fake_api.status("train-status")["phase"] == "Resizing"
    time.sleep(0.5)  # several rounds of both readers
    fake_api.replicas["train"] = 2  # helm upgrade back to 2: the new workers are removed
    run.until("tfmw launcher idle:")
    assert waited == [2, 9, 2] and sizes(tmp_path) == [2, 2]
    phase, said = "", []
    for patch in fake_api.patches("train-status"):
        phase = patch.get("phase", phase)
        if phase == "Resizing" and "train-8" in patch.get("message", ""):
            said.append(patch["message"])
    assert said and all(
        m.startswith("workers.replicas 2 -> 9: waiting for the new workers (train-8: ") for m in said
    ), said
    assert fake_api.status("train-status")["phase"] == "Succeeded"
    assert [e["reason"] for e in fake_api.events] == ["Started", "Resizing", "Resized", "Succeeded"]
    run.stop()


def test_a_restart_waiting_for_a_peer_that_cannot_be_scheduled_says_why(fake_api, tmp_path, monkeypatch):
    """After a lost node, worker 1's replacement finds no node with room: while the group waits,
    the run is Waiting and the chief's status names the pod and the scheduler's reason. Once it
    is scheduled, the group resumes from its checkpoint."""
    scheduled = []

    def peers_wait(hosts, timeout, log, sleep):  # the restart's wait lasts until it is scheduled
        if (tmp_path / "scaled").exists():
            while not scheduled:
                sleep(0.05)

    monkeypatch.setattr(regroup, "wait_for_peers", peers_wait)
    env = resizable_env(fake_api, tmp_path)
    del env["TFMW_LOOPBACK_PORTS"]
    run = Run(env, command(tmp_path, STOPPED_BY_THE_GROUP_THEN_FINISHES))
    run.until("tfmw launcher starting training (attempt 1)")
    fake_api.pods["train-1"] = dict(UNSCHEDULABLE, metadata={"name": "train-1", "labels": dict(WORKER_LABELS)})
    (tmp_path / "scaled").write_text("")  # the group broke: worker 1 is gone
    wait_for_status(
        fake_api,
        lambda status: (
            (
                "waiting for workers that are not running (train-1: Unschedulable: 0/2 nodes are available: "
                "2 Insufficient cpu.); the group resumes from its last checkpoint once they run"
            )
            in status.get("message", "")
        ),
    )
    assert fake_api.status("train-status")["phase"] == "Waiting"
    scheduled.append(True)
    run.until("tfmw launcher idle:")
    assert fake_api.status("train-status")["phase"] == "Succeeded"
    run.stop()


def test_the_first_start_waiting_for_a_peer_that_cannot_be_scheduled_says_why(fake_api, tmp_path, monkeypatch):
    """A first deploy whose worker 1 finds no node with room: while the chief waits for it, its
    Pending status names the pod and the scheduler's reason (what `make status` prints)."""
    scheduled = []

    def peers_wait(hosts, timeout, log, sleep):  # worker 1 has no address until it is scheduled
        while not scheduled:
            sleep(0.05)

    monkeypatch.setattr(regroup, "wait_for_peers", peers_wait)
    fake_api.pods["train-1"] = dict(UNSCHEDULABLE, metadata={"name": "train-1", "labels": dict(WORKER_LABELS)})
    env = resizable_env(fake_api, tmp_path)
    del env["TFMW_LOOPBACK_PORTS"]
    run = Run(env, command(tmp_path, STOPS_ON_SIGTERM_THEN_FINISHES)).until("tfmw launcher run=r1")
    wait_for_status(
        fake_api,
        lambda status: (
            status.get("message", "")
            == (
                "waiting for workers that are not running (train-1: Unschedulable: 0/2 nodes are available: "
                "2 Insufficient cpu.); training starts once they run, or the run fails after "
                "peers.timeoutSeconds=600 (PeersNotFound)"
            )
        ),
    )
    assert fake_api.status("train-status")["phase"] == "Pending"
    scheduled.append(True)
    run.until("tfmw launcher starting training (attempt 1)")
    wait_for_status(fake_api, lambda status: status.get("phase") == "Running")
    assert "waiting for" not in fake_api.status("train-status")["message"]
    run.stop()


def test_a_first_start_whose_worker_waits_on_its_volume_says_so_and_so_does_the_run_that_gives_up(
    fake_api, tmp_path, monkeypatch
):
    """Worker 1 is placed on a node where its claim's volume does not attach (a ReadWriteOnce
    claim attached to worker 0's node): its pod says only ContainerCreating, with no sandbox.
    The chief's Pending status names it with the fix while it waits, and when peers.timeoutSeconds
    passes, the Failed run's message still says it (not only the DNS name that never resolved)."""
    give_up = []

    def peers_wait(hosts, timeout, log, sleep):
        while not give_up:
            sleep(0.05)
        raise regroup.PeersNotFound("peers not found after 600s: 1 of 2 never resolved: train-1.train.ml")

    monkeypatch.setattr(regroup, "wait_for_peers", peers_wait)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 300))
    fake_api.pods["train-1"] = {
        "metadata": {"name": "train-1", "labels": dict(WORKER_LABELS)},
        "spec": {"nodeName": "node-2", "volumes": [{"name": "shared", "persistentVolumeClaim": {"claimName": "rwo"}}]},
        "status": {
            "phase": "Pending",
            "startTime": started,
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "PodReadyToStartContainers", "status": "False"},
            ],
            "containerStatuses": [{"name": "worker", "state": {"waiting": {"reason": "ContainerCreating"}}}],
        },
    }
    env = resizable_env(fake_api, tmp_path)
    del env["TFMW_LOOPBACK_PORTS"]
    run = Run(env, command(tmp_path, STOPS_ON_SIGTERM_THEN_FINISHES)).until("tfmw launcher run=r1")
    why = "train-1: ContainerCreating on node node-2 for "  # 300 s and a few
    wait_for_status(fake_api, lambda status: why in status.get("message", ""))
    status = fake_api.status("train-status")
    assert status["phase"] == "Pending" and waiting.VOLUME_FIX in status["message"], status
    assert "the volume of claim rwo is most likely not attached or mounted" in status["message"]
    give_up.append(True)
    wait_for_status(fake_api, lambda status: status.get("phase") == "Failed")
    status = fake_api.status("train-status")
    assert status["reason"] == "PeersNotFound", status
    assert status["message"].startswith(
        "peers not found after 600s: 1 of 2 never resolved: train-1.train.ml; the pods when last read: " + why
    ), status
    assert status["message"].endswith(waiting.VOLUME_FIX), status
    run.stop()

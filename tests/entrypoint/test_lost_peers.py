"""A peer lost with its node (entrypoint.launcher, entrypoint.nodeloss): while the group makes
no progress, the chief force-deletes a peer's pod that the API and the network both call lost,
and the other workers do so for the chief's. Real supervisor, real API client against fakeapi,
a training command that stalls (as one does whose peer is gone). The probe of the peer's TF
port goes to loopback only."""

from __future__ import annotations

import socket
import time

import pytest
from fakeapi import Failure, unschedulable_pod
from launcherkit import Run, command, pod_env

import entrypoint.launcher as launcher_module

STALLS = """
    import time
    print("tfmw connecting worker=0/2", flush=True)
    time.sleep(60)
"""


@pytest.fixture(autouse=True)
def fast_polls(monkeypatch):
    monkeypatch.setattr(launcher_module, "NODE_LOSS_POLL_SECONDS", 0.05)
    monkeypatch.setattr(launcher_module, "STALLED_SECONDS", 0.3)
    monkeypatch.setattr(launcher_module, "PEER_PROBE_SECONDS", 0.5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def lost_pod(name: str, reason: str = "DeletionByTaintManager") -> dict:
    return {
        "kind": "Pod",
        "metadata": {"name": name, "uid": f"uid-{name}", "deletionTimestamp": "2026-12-02T10:03:00Z"},
        "spec": {"nodeName": "node-2"},
        "status": {
            "podIP": "127.0.0.1",
            "conditions": [
                {"type": "Ready", "status": "False", "lastTransitionTime": "2026-12-02T10:00:40Z"},
                {"type": "DisruptionTarget", "status": "True", "reason": reason},
            ],
        },
    }


def start(fake_api, tmp_path, pod: str, port: int) -> Run:
    env = pod_env(fake_api, tmp_path, pod=pod, replicas=2, TFMW_PORT=str(port))
    return Run(env, command(tmp_path, STALLS)).until("tfmw launcher starting training (attempt 1)")


def reads_of(fake_api, pod: str) -> int:
    return sum(r.method == "GET" and r.path.endswith(f"/pods/{pod}") for r in fake_api.requests)


def wait_until(holds, run: Run, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not holds():
        assert time.monotonic() < deadline, "\n".join(run.logs)
        time.sleep(0.02)


def test_the_chief_force_deletes_a_peer_lost_with_its_node(fake_api, tmp_path):
    fake_api.pods["train-1"] = lost_pod("train-1")
    run = start(fake_api, tmp_path, "train-0", free_port())  # nothing listens: the peer is gone
    wait_until(lambda: fake_api.deleted_pods, run)
    assert fake_api.deleted_pods == [("train-1", 0)]  # grace 0
    delete = next(r for r in fake_api.requests if r.method == "DELETE")
    assert delete.body["preconditions"] == {"uid": "uid-train-1"}  # never its replacement
    said = run.line("tfmw launcher peer train-1 was lost with its node")
    assert "node-2" in said and "Force-deleted it" in said
    wait_until(lambda: any(e["reason"] == "PeerLost" for e in fake_api.events), run)
    run.stop()


def test_a_worker_force_deletes_the_chief_lost_with_its_node(fake_api, tmp_path):
    fake_api.pods["train-0"] = lost_pod("train-0")
    run = start(fake_api, tmp_path, "train-1", free_port())
    wait_until(lambda: fake_api.deleted_pods, run)
    assert fake_api.deleted_pods == [("train-0", 0)]
    run.stop()


def test_a_peer_whose_port_answers_is_not_deleted(fake_api, tmp_path):
    """The API calls it lost (its node is not ready), but its processes run: its kubelet, not
    a peer, stops it."""
    fake_api.pods["train-1"] = lost_pod("train-1")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        run = start(fake_api, tmp_path, "train-0", listener.getsockname()[1])
        wait_until(lambda: reads_of(fake_api, "train-1") >= 3, run)
        assert fake_api.deleted_pods == []
        run.stop()


@pytest.mark.parametrize("reason", [None, "PreemptionByScheduler", "EvictionByEvictionAPI"])
def test_a_peer_stopped_by_anything_but_the_taint_manager_is_not_deleted(fake_api, tmp_path, reason):
    pod = lost_pod("train-1", reason or "x")
    if reason is None:
        pod["status"]["conditions"].pop()  # no DisruptionTarget: a plain delete (helm, a user)
    fake_api.pods["train-1"] = pod
    run = start(fake_api, tmp_path, "train-0", free_port())
    wait_until(lambda: reads_of(fake_api, "train-1") >= 3, run)
    assert fake_api.deleted_pods == []
    run.stop()


def test_without_delete_permission_it_says_why_once_and_training_goes_on(fake_api, tmp_path):
    fake_api.pods["train-1"] = lost_pod("train-1")
    fake_api.failures.append(Failure("DELETE", r"/pods/train-1$", 403, times=-1))
    run = start(fake_api, tmp_path, "train-0", free_port())
    wait_until(lambda: any("cannot be force-deleted" in line for line in run.logs), run)
    time.sleep(0.5)  # more polls: it does not try again, nor say it again
    assert sum(r.method == "DELETE" for r in fake_api.requests) == 1
    said = [line for line in run.logs if "cannot be force-deleted" in line]
    assert len(said) == 1 and "HTTP 403" in said[0] and "--force --grace-period=0" in said[0]
    assert "train-1" in fake_api.pods and run.thread.is_alive()  # the run goes on, as before
    run.stop()


STALLS_THEN_TRAINS = """
    import os, pathlib, time
    print("tfmw connecting worker=0/2", flush=True)
    go = pathlib.Path(os.environ["GO_FILE"])
    while not go.exists():  # the group waits inside TensorFlow for its missing worker
        time.sleep(0.05)
    for step in range(1, 600):  # then it trains: the heartbeat changes
        pathlib.Path(os.environ["TFMW_HEARTBEAT_FILE"]).write_text(f"{step} train")
        time.sleep(0.05)
"""


def test_a_stalled_group_whose_peer_cannot_be_scheduled_says_why_until_it_trains(fake_api, tmp_path):
    """After a lost node the replacement finds no node with room, while the chief's attempt
    waits for it inside TensorFlow (the peer's name resolved when the attempt began). The run is
    Waiting, and the chief's status names the pod and the scheduler's reason; once the group
    trains again it is Running, with the message the wait replaced."""
    fake_api.pods["train-1"] = unschedulable_pod(
        "train-1", "0/3 nodes are available: 1 Insufficient cpu.", uid="uid-new"
    )
    go = tmp_path / "peer-running"
    env = pod_env(fake_api, tmp_path, pod="train-0", replicas=2, TFMW_PORT=str(free_port()), GO_FILE=str(go))
    run = Run(env, command(tmp_path, STALLS_THEN_TRAINS)).until("tfmw launcher starting training (attempt 1)")
    waiting = (
        "waiting for workers that are not running (train-1: Unschedulable: 0/3 nodes are available: "
        "1 Insufficient cpu.); the group resumes from its last checkpoint once they run"
    )
    wait_until(lambda: fake_api.status("train-status").get("message") == waiting, run)
    assert fake_api.status("train-status")["phase"] == "Waiting"
    assert fake_api.deleted_pods == []  # Pending is not lost
    fake_api.pods["train-1"]["status"] = {"phase": "Running"}
    go.write_text("")
    wait_until(lambda: fake_api.status("train-status").get("message") != waiting, run)
    assert fake_api.status("train-status")["message"] == "run r1: 2 workers training"
    assert fake_api.status("train-status")["phase"] == "Running"
    assert [e["reason"] for e in fake_api.events][-2:] == ["Waiting", "Regrouped"]
    run.stop()


SLEEPS = """
    import time
    time.sleep(600)  # a user command: no heartbeat, ever
"""


def test_a_user_commands_group_is_running_again_once_every_peer_runs(fake_api, tmp_path):
    """A user command writes no heartbeat, so no progress ever says its group trains again:
    once the peer that was not running runs, the run is Running again (its workers Ready), not
    Waiting for good (a rollback or a drain would then wait on readiness forever)."""
    fake_api.pods["train-1"] = unschedulable_pod(
        "train-1", "0/3 nodes are available: 1 Insufficient cpu.", uid="uid-new"
    )
    env = pod_env(fake_api, tmp_path, pod="train-0", replicas=2, TFMW_PORT=str(free_port()))
    run = Run(env, command(tmp_path, SLEEPS)).until("tfmw launcher starting training (attempt 1)")
    wait_until(lambda: fake_api.status("train-status").get("phase") == "Waiting", run)
    fake_api.pods["train-1"]["status"] = {"phase": "Running"}
    wait_until(lambda: fake_api.status("train-status").get("phase") == "Running", run)
    assert fake_api.status("train-status")["message"] == "run r1: 2 workers training"
    assert [e["reason"] for e in fake_api.events][-2:] == ["Waiting", "Regrouped"]
    run.stop()

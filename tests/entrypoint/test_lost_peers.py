"""A peer lost with its node (entrypoint.peerwatch, entrypoint.nodeloss): while the group makes
no progress, the chief force-deletes a peer's pod that the API and the network both call lost
(it lists the release's workers in one request), and worker 1 and the last do so for the chief's.
Real supervisor, real API client against fakeapi, a training command that stalls (as one does
whose peer is gone). The probe of the peer's TF port goes to loopback only."""

from __future__ import annotations

import socket
import time

import pytest
from launcherkit import WORKER_LABELS, Run, command, pod_env

import entrypoint.peerwatch as peerwatch
from tfmw.devcluster.fakeapi import Failure, unschedulable_pod

STALLS = """
    import time
    print("tfmw connecting worker=0/2", flush=True)
    time.sleep(60)
"""


@pytest.fixture(autouse=True)
def fast_polls(monkeypatch):
    monkeypatch.setattr(peerwatch, "NODE_LOSS_POLL_SECONDS", 0.05)
    monkeypatch.setattr(peerwatch, "STALLED_SECONDS", 0.3)
    monkeypatch.setattr(peerwatch, "PEER_PROBE_SECONDS", 0.5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def lost_pod(name: str, reason: str = "DeletionByTaintManager") -> dict:
    return {
        "kind": "Pod",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "labels": dict(WORKER_LABELS),
            "deletionTimestamp": "2026-12-02T10:03:00Z",
        },
        "spec": {"nodeName": "node-2"},
        "status": {
            "podIP": "127.0.0.1",
            "conditions": [
                {"type": "Ready", "status": "False", "lastTransitionTime": "2026-12-02T10:00:40Z"},
                {"type": "DisruptionTarget", "status": "True", "reason": reason},
            ],
        },
    }


def start(fake_api, tmp_path, pod: str, port: int, replicas: int = 2) -> Run:
    env = pod_env(fake_api, tmp_path, pod=pod, replicas=replicas, TFMW_PORT=str(port))
    return Run(env, command(tmp_path, STALLS)).until("tfmw launcher starting training (attempt 1)")


def pod_reads(fake_api) -> list[str]:
    """Each request for pods: 'list' (the release's workers, by selector) or the pod read by name."""
    reads = []
    for r in fake_api.requests:
        if r.method == "GET" and r.path.startswith("/api/v1/namespaces/ml/pods?"):
            reads.append("list")
        elif r.method == "GET" and "/pods/" in r.path:
            reads.append(r.path.rsplit("/", 1)[1])
    return reads


def reads_of(fake_api, pod: str) -> int:
    """Reads that saw `pod`: the chief's lists, or a GET of it by name."""
    return sum(read in ("list", pod) for read in pod_reads(fake_api))


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
    wait_until(lambda: any(line.startswith("tfmw launcher peer train-1 was lost") for line in run.logs), run)
    said = run.line("tfmw launcher peer train-1 was lost with its node")
    assert "node-2" in said and "Force-deleted it" in said
    wait_until(lambda: any(e["reason"] == "PeerLost" for e in fake_api.events), run)
    run.stop()


@pytest.mark.parametrize("watcher", ["train-1", "train-3"])  # worker 1 and the last (of 4)
def test_a_worker_force_deletes_the_chief_lost_with_its_node(fake_api, tmp_path, watcher):
    fake_api.pods["train-0"] = lost_pod("train-0")
    run = start(fake_api, tmp_path, watcher, free_port(), replicas=4)
    wait_until(lambda: fake_api.deleted_pods, run)
    assert fake_api.deleted_pods == [("train-0", 0)]
    assert set(pod_reads(fake_api)) == {"train-0"}  # a worker reads the chief's pod alone, by name
    run.stop()


def test_the_chief_reads_its_peers_in_one_request_per_period_whatever_their_number(fake_api, tmp_path):
    """The request budget (docs/contracts.md): while the group is stalled the chief lists the
    release's workers once per period, never one GET per peer."""
    for i in range(1, 64):
        fake_api.pods[f"train-{i}"] = unschedulable_pod(
            f"train-{i}", "0/3 nodes are available.", labels=dict(WORKER_LABELS)
        )
    run = start(fake_api, tmp_path, "train-0", free_port(), replicas=64)
    wait_until(lambda: pod_reads(fake_api).count("list") >= 5, run)
    reads = pod_reads(fake_api)
    assert set(reads) <= {"list", "train-0"}, reads  # its own pod (the status fence) by name, peers listed
    run.stop()


@pytest.mark.parametrize("pod", ["train-2", "train-62"])
def test_workers_but_the_chief_the_first_and_the_last_read_no_pod_at_all(fake_api, tmp_path, pod):
    fake_api.pods["train-0"] = lost_pod("train-0")
    run = start(fake_api, tmp_path, pod, free_port(), replicas=64)
    time.sleep(1.0)  # many polls' worth, the group stalled
    assert pod_reads(fake_api) == [] and fake_api.deleted_pods == []
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


def test_without_the_delete_right_a_lost_peer_is_named_for_an_admin_once(fake_api, tmp_path):
    """rbac.pods.delete=false (TFMW_RBAC_OFF): no DELETE is tried; the pod is named once."""
    fake_api.pods["train-1"] = lost_pod("train-1")
    env = pod_env(
        fake_api, tmp_path, pod="train-0", replicas=2, TFMW_PORT=str(free_port()), TFMW_RBAC_OFF="pods.delete"
    )
    run = Run(env, command(tmp_path, STALLS)).until("tfmw launcher starting training (attempt 1)")
    wait_until(lambda: any("is lost with its node" in line for line in run.logs), run)
    time.sleep(0.5)  # more polls: named once
    said = [line for line in run.logs if "is lost with its node" in line]
    assert len(said) == 1 and said[0].startswith("tfmw launcher peer train-1 is lost with its node (its node node-2")
    admin = "(rbac.pods.delete=false): an admin runs `kubectl delete pod train-1 -n ml --force --grace-period=0`"
    assert admin in said[0], said[0]
    assert not any(r.method == "DELETE" for r in fake_api.requests) and "train-1" in fake_api.pods
    run.stop()


def test_without_the_get_right_no_pod_is_read(fake_api, tmp_path):
    """rbac.pods.get=false (TFMW_RBAC_OFF): a stalled group reads no pod (nor lists any)."""
    fake_api.pods["train-1"] = lost_pod("train-1")
    env = pod_env(fake_api, tmp_path, pod="train-0", TFMW_PORT=str(free_port()), TFMW_RBAC_OFF="pods.get,pods.delete")
    run = Run(env, command(tmp_path, STALLS)).until("tfmw launcher starting training (attempt 1)")
    time.sleep(1.0)  # stalled (0.3 s) and many polls (0.05 s) later
    assert pod_reads(fake_api) == [] and not fake_api.deleted_pods
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
        "train-1", "0/3 nodes are available: 1 Insufficient cpu.", uid="uid-new", labels=dict(WORKER_LABELS)
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
    wait_until(lambda: [e["reason"] for e in fake_api.events][-2:] == ["Waiting", "Regrouped"], run)
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
        "train-1", "0/3 nodes are available: 1 Insufficient cpu.", uid="uid-new", labels=dict(WORKER_LABELS)
    )
    env = pod_env(fake_api, tmp_path, pod="train-0", replicas=2, TFMW_PORT=str(free_port()))
    run = Run(env, command(tmp_path, SLEEPS)).until("tfmw launcher starting training (attempt 1)")
    wait_until(lambda: fake_api.status("train-status").get("phase") == "Waiting", run)
    fake_api.pods["train-1"]["status"] = {"phase": "Running"}
    wait_until(lambda: fake_api.status("train-status").get("phase") == "Running", run)
    assert fake_api.status("train-status")["message"] == "run r1: 2 workers training"
    wait_until(lambda: [e["reason"] for e in fake_api.events][-2:] == ["Waiting", "Regrouped"], run)
    run.stop()


def test_without_a_pod_list_the_chief_reads_its_peers_by_name_in_turn(fake_api, tmp_path):
    """A StatefulSet of the user's own (no TFMW_POD_SELECTOR) or a Role without `list`: the
    chief still replaces a lost peer, reading at most 20 pods by name per period, in turn."""
    fake_api.pods["train-30"] = lost_pod("train-30")
    env = pod_env(fake_api, tmp_path, pod="train-0", replicas=40, TFMW_PORT=str(free_port()))
    del env["TFMW_POD_SELECTOR"]
    run = Run(env, command(tmp_path, STALLS)).until("tfmw launcher starting training (attempt 1)")
    wait_until(lambda: fake_api.deleted_pods, run)
    assert fake_api.deleted_pods == [("train-30", 0)]
    reads = pod_reads(fake_api)
    assert "list" not in reads and set(reads) - {"train-0"} <= {f"train-{i}" for i in range(1, 40)}
    run.stop()


def test_a_refused_pod_list_falls_back_to_reading_by_name_and_says_so_once(fake_api, tmp_path):
    fake_api.pods["train-1"] = lost_pod("train-1")
    fake_api.failures.append(Failure("GET", r"/pods\?", 403, times=-1))
    run = start(fake_api, tmp_path, "train-0", free_port())
    wait_until(lambda: fake_api.deleted_pods, run)
    said = [line for line in run.logs if "cannot list the release's pods" in line]
    assert len(said) == 1 and "reading at most 20 of them by name" in said[0]
    run.stop()

"""The cluster's own voluntary disruptions, on real kubelets with plain `kubectl`: a node drain
(and a node-pool upgrade: every node drained in turn), a priority preemption, a suspend and
resume, and a retry of a Failed run. Each costs no steps: the group stops at the checkpoint it
agrees on, and resumes from exactly that step. The readiness ("in a group that trains") makes the
PodDisruptionBudget hold while the group trains, and flips NotReady and back.

Every run here trains the same model on the same data for the same steps, so the weights they end
with must be the same whatever happened on the way: the last test compares them.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading

import pytest
from clusterkit import CHART, KILL_TRAINER, REPO, TOOLS, follow, status, wait_for, wait_succeeded

from tfmw.faults.podlogs import PodLogs, merge_incarnations
from tfmw.k8s.api import ns_path

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

# mlp trains ~50 steps/s here: half a minute of training, a checkpoint a second; every disruption
# starts once step 200 is saved and is over within a few hundred steps (the drains' three
# evictions, the slowest, stop the group for most of theirs)
STEPS, EVERY = 1500, 50
SETS = (
    "training.config.model.name=mlp",
    f"training.config.steps={STEPS}",
    "training.config.logEverySteps=50",
    f"training.config.checkpoint.everySteps={EVERY}",
    "completion.onSuccess=idle",  # the pods stay: their logs and readiness are read after the end
)
DIGESTS: dict[str, str] = {}  # test -> the weights every worker ended with


# ---------------------------------------------------------------- helpers


def install(cluster, ns: str, release: str, *sets: str) -> None:
    args = ["upgrade", "--install", release, str(CHART), "-n", ns, "-f", str(REPO / "values" / "local.yaml")]
    for item in (*SETS, *sets):
        args += ["--set", item]
    cluster.helm(*args)


def ready(pod: dict) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in (pod.get("status") or {}).get("conditions") or []
    )


def all_ready(cluster, ns: str, release: str, count: int = 2) -> bool:
    pods = cluster.workers(ns, release)
    return len(pods) == count and all(ready(p) and not p["metadata"].get("deletionTimestamp") for p in pods)


def checkpoint_at_least(cluster, ns: str, release: str, step: int) -> bool:
    return int(status(cluster, ns, release).get("lastCheckpointStep") or 0) >= step


def stops_and_resumes(logs: PodLogs) -> dict[int, list[tuple[int, int]]]:
    """Per worker: (the step a `tfmw stopped` saved at, the step the next start resumed from)."""
    out = {}
    for ordinal, stream in merge_incarnations(logs.snapshot()).items():
        pairs, stopped = [], None
        for line in stream.lines:
            if m := re.search(r"tfmw stopped step=(\d+)/", line):
                stopped = int(m.group(1))
            elif stopped is not None and (m := re.search(r"tfmw start .*resume_step=(\d+)", line)):
                pairs.append((stopped, int(m.group(1))))
                stopped = None
        out[ordinal] = pairs
    return out


def final_digests(logs: PodLogs) -> set[str]:
    """The weights each worker ended with, once every worker's followed log says it is done."""

    def every_worker_done(pl: PodLogs):
        found = {}
        for ordinal, stream in merge_incarnations(pl.snapshot()).items():
            done = [m.group(1) for line in stream.lines if (m := re.search(r"tfmw done .*weights_digest=(\S+)", line))]
            found[ordinal] = done[-1] if done else ""
        return found if len(found) >= 2 and all(found.values()) else None

    found = logs.wait_for(every_worker_done, 60) or every_worker_done(logs) or {}
    return set(found.values()) or {""}


def sts_reasons(cluster, ns: str) -> list[str]:
    events = sorted(cluster.events(ns), key=lambda e: e.get("firstTimestamp") or e.get("eventTime") or "")
    return [e["reason"] for e in events if (e.get("involvedObject") or {}).get("kind") == "StatefulSet"]


def kubectl(*args: str, kubeconfig, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(TOOLS / "kubectl"), "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class ReadyWatch:
    """Samples one pod's Ready condition twice a second, in the background."""

    def __init__(self, cluster, ns: str, pod: str):
        self.cluster, self.ns, self.pod, self.seen, self.stop = cluster, ns, pod, [], threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop.wait(0.5):
            pod = self.cluster.api.get_or_none(ns_path(self.ns, "pods", self.pod))
            state = ready(pod) if pod else None
            if not self.seen or self.seen[-1] != state:
                self.seen.append(state)

    def done(self) -> list:
        self.stop.set()
        self.thread.join(5)
        return self.seen


# ---------------------------------------------------------------- drains and an upgrade


def test_a_node_pool_upgrade_drains_one_worker_at_a_time_and_costs_no_steps(cluster, namespace):
    """Each node is drained in turn with plain `kubectl drain` (and uncordoned after, as a
    replaced node comes back), the way a node-pool upgrade goes. The PodDisruptionBudget lets a
    drain evict one worker of a training group at a time: the drain of the node that then holds
    both workers waits on the budget between its two evictions until the first has stopped the
    group (a NotReady worker trains nothing: unhealthyPodEvictionPolicy AlwaysAllow). Every eviction stops
    the group at a checkpoint it agrees on and the group resumes from exactly that step; a
    surviving worker goes NotReady while the group re-forms, and Ready again."""
    release, kube = "upgrade", cluster.kubeconfig
    install(cluster, namespace, release, "workers.podAntiAffinity=soft")
    logs = follow(cluster, namespace, release)
    try:
        wait_for(lambda: all_ready(cluster, namespace, release), 180, "both workers Ready (the group trains)", 1)
        wait_for(lambda: checkpoint_at_least(cluster, namespace, release, 200), 120, "a checkpoint at step 200")
        pods = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in cluster.workers(namespace, release)}
        nodes = sorted(set(pods.values()) | {n["metadata"]["name"] for n in cluster.api.items("/api/v1/nodes")})
        survivor = f"{release}-tf-multiworker-0"
        first = pods[f"{release}-tf-multiworker-1"]
        assert pods[survivor] != first, pods  # soft anti-affinity spread them: one survives the first drain
        watch = ReadyWatch(cluster, namespace, survivor)
        drains = []
        for node in [first, *[n for n in nodes if n != first]]:
            drain = kubectl(
                "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=240s", kubeconfig=kube
            )
            assert drain.returncode == 0, drain.stdout + drain.stderr
            drains.append(drain.stdout + drain.stderr)
            assert kubectl("uncordon", node, kubeconfig=kube).returncode == 0
            wait_for(lambda: all_ready(cluster, namespace, release), 180, f"the group training again after {node}", 1)
        final = wait_succeeded(cluster, namespace, release)
        digests = final_digests(logs)
    finally:
        logs.stop()
    # the second node held both workers by then: its drain waited on the budget between them (the
    # other was still Ready, in the group that trained)
    assert "would violate the pod's disruption budget" in drains[-1], drains[-1]
    # the survivor of the first drain: Ready, NotReady while the group re-forms, Ready again
    seen = [state for state in watch.done() if state is not None]
    assert seen[:3] == [True, False, True], seen
    resumes = stops_and_resumes(logs)
    assert sum(len(pairs) for pairs in resumes.values()) >= 4, resumes  # 3 evictions, both workers each time
    for ordinal, pairs in resumes.items():
        assert all(saved == resumed for saved, resumed in pairs), (ordinal, pairs)  # 0 steps re-trained
    reasons = sts_reasons(cluster, namespace)
    assert "Failed" not in reasons and final["restarts"] != "0", (reasons, final)
    assert len(digests) == 1 and "" not in digests, digests
    DIGESTS["upgrade"] = digests.pop()


# ---------------------------------------------------------------- a priority preemption


PRIORITY = {
    "apiVersion": "scheduling.k8s.io/v1",
    "kind": "PriorityClass",
    "metadata": {"name": "tfmw-test-high"},
    "value": 1000000,
    "description": "a pod that preempts the test's workers",
}


def millicores(quantity: str) -> int:
    return int(quantity[:-1]) if quantity.endswith("m") else int(float(quantity) * 1000)


def hog(node: str, cpu: str, image: str) -> dict:
    """A high-priority pod that fits `node` only once a worker is preempted from it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "hog"},
        "spec": {
            "priorityClassName": "tfmw-test-high",
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {"kubernetes.io/hostname": node},
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "hog",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["python3", "-c", "import time; time.sleep(10**6)"],
                    "resources": {"requests": {"cpu": cpu, "memory": "16Mi"}},
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                }
            ],
        },
    }


def test_a_preempted_worker_waits_for_room_and_the_run_loses_no_steps(cluster, namespace):
    """A pod of a higher priority takes worker 1's node (one worker per node, so the worker has
    nowhere else to go): the scheduler preempts it, gracefully; the group stops at a checkpoint,
    the run is Waiting (not Running) with the scheduler's reason while the worker is Pending, and
    once the room returns the group resumes from exactly that step and succeeds. No Failed."""
    release = "preempt"
    install(cluster, namespace, release, "workers.podAntiAffinity=hard")
    logs = follow(cluster, namespace, release)
    cluster.api.create("/apis/scheduling.k8s.io/v1/priorityclasses", PRIORITY)
    try:
        wait_for(lambda: all_ready(cluster, namespace, release), 180, "both workers Ready", 1)
        wait_for(lambda: checkpoint_at_least(cluster, namespace, release, 200), 120, "a checkpoint at step 200")
        victim = cluster.api.get(ns_path(namespace, "pods", f"{release}-tf-multiworker-1"))
        node = victim["spec"]["nodeName"]
        allocatable = millicores(cluster.api.get(f"/api/v1/nodes/{node}")["status"]["allocatable"]["cpu"])
        used = sum(
            millicores(c.get("resources", {}).get("requests", {}).get("cpu", "0"))
            for p in cluster.api.items("/api/v1/pods", fieldSelector=f"spec.nodeName={node}")
            if p["status"].get("phase") not in ("Succeeded", "Failed")
            for c in p["spec"]["containers"]
        )
        # all the room there is, and the victim's: it fits only if the worker goes
        worker = millicores(victim["spec"]["containers"][0]["resources"]["requests"]["cpu"])
        cluster.api.create(ns_path(namespace, "pods"), hog(node, f"{allocatable - used + worker}m", cluster.image))

        def waiting():
            data = status(cluster, namespace, release)
            return data if data.get("phase") == "Waiting" else None

        seen = wait_for(
            waiting,
            180,
            "the run Waiting for its preempted worker",
            1,
            lambda: str(status(cluster, namespace, release)),
        )
        assert f"{release}-tf-multiworker-1:" in seen["message"] and "Unschedulable" in seen["message"], seen
        assert not all_ready(cluster, namespace, release)
        cluster.api.delete(
            ns_path(namespace, "pods", "hog"), {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
        )
        wait_succeeded(cluster, namespace, release)
        digests = final_digests(logs)
    finally:
        logs.stop()
        cluster.api.delete("/apis/scheduling.k8s.io/v1/priorityclasses/tfmw-test-high")
    reasons = sts_reasons(cluster, namespace)
    assert "Failed" not in reasons and "Waiting" in reasons and "Regrouped" in reasons, reasons
    preempted = [e for e in cluster.events(namespace) if e.get("reason") == "Preempted"]
    assert preempted, "the scheduler did not preempt the worker: nothing was tested"
    for ordinal, pairs in stops_and_resumes(logs).items():
        assert pairs and all(saved == resumed for saved, resumed in pairs), (ordinal, pairs)
    assert len(digests) == 1 and "" not in digests, digests
    DIGESTS["preempt"] = digests.pop()


# ---------------------------------------------------------------- suspend and resume


def tfmw(cluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tfmw.cli", *args],
        capture_output=True,
        text=True,
        env=cluster.env(),
        cwd=REPO,
        timeout=600,
    )


def test_suspend_frees_the_workers_and_resume_continues_at_the_step(cluster, namespace):
    """`make suspend`: the group stops at a checkpoint, every worker is removed, the run is
    Suspended at that step and the claim stays; `make resume`: the workers come back and the run
    goes on from exactly that step to the end. Each verb refuses, changing nothing, where it has
    nothing to do."""
    release = "pause"
    where = ("--env", "local", "--release", release, "--namespace", namespace)
    install(cluster, namespace, release)
    logs = follow(cluster, namespace, release)
    try:
        wait_for(lambda: all_ready(cluster, namespace, release), 180, "both workers Ready", 1)
        wait_for(lambda: checkpoint_at_least(cluster, namespace, release, 200), 120, "a checkpoint at step 200")
        retry = tfmw(cluster, "retry", *where)
        assert retry.returncode == 3 and "has no Failed run to retry (run pause is Running)" in retry.stderr
        suspended = tfmw(cluster, "suspend", *where)
        assert suspended.returncode == 0, suspended.stdout + suspended.stderr
        data = status(cluster, namespace, release)
        assert data["phase"] == "Suspended" and not cluster.workers(namespace, release), data
        step = int(data["lastCheckpointStep"])
        assert f"suspended at step {step}" in data["message"] and 0 < step < STEPS
        assert cluster.statefulset(namespace, f"{release}-tf-multiworker")["spec"]["replicas"] == 0
        assert cluster.api.get_or_none(ns_path(namespace, "persistentvolumeclaims", f"{release}-tf-multiworker-shared"))
        again = tfmw(cluster, "suspend", *where)
        assert again.returncode == 3 and "is suspended already" in again.stderr, again.stderr
        resumed = tfmw(cluster, "resume", *where)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        wait_succeeded(cluster, namespace, release)
        digests = final_digests(logs)
        not_suspended = tfmw(cluster, "resume", *where)
        assert not_suspended.returncode == 3 and "is not suspended (run pause is Succeeded)" in not_suspended.stderr
        over = tfmw(cluster, "suspend", *where)
        assert over.returncode == 3 and "already Succeeded: nothing to suspend" in over.stderr, over.stderr
    finally:
        logs.stop()
    reasons = sts_reasons(cluster, namespace)
    assert "Suspended" in reasons and "Resumed" in reasons and "Failed" not in reasons, reasons
    resumes = stops_and_resumes(logs)
    assert resumes[0] and resumes[0][-1] == (step, step), resumes  # stopped there, resumed there
    assert len(digests) == 1 and "" not in digests, digests
    DIGESTS["suspend"] = digests.pop()


# ---------------------------------------------------------------- retry a Failed run


def test_a_failed_run_is_retried_from_its_checkpoint_once_the_cause_is_gone(cluster, namespace):
    """`training.maxRestarts=0`: a trainer killed once fails the run (RestartLimit), and the
    workers scale to 0. A redeploy of the same values would find it Failed again; `make retry`
    trains it again, from its last checkpoint, to the end."""
    release = "again"
    where = ("--env", "local", "--release", release, "--namespace", namespace)
    install(cluster, namespace, release, "training.maxRestarts=0", "completion.onFailure=scaleToZero")
    logs = follow(cluster, namespace, release)
    try:
        wait_for(lambda: all_ready(cluster, namespace, release), 180, "both workers Ready", 1)
        wait_for(lambda: checkpoint_at_least(cluster, namespace, release, 200), 120, "a checkpoint at step 200")
        killed = cluster.kubectl(
            "exec", "-n", namespace, f"{release}-tf-multiworker-1", "-c", "worker", "--", "python", "-c", KILL_TRAINER
        ).stdout
        assert killed.strip() == "1", f"worker 1's training process: {killed!r}"
        failed = wait_for(
            lambda: (lambda d: d if d.get("phase") == "Failed" else None)(status(cluster, namespace, release)),
            120,
            "the run Failed (RestartLimit)",
            1,
        )
        assert failed["reason"] == "RestartLimit", failed
        checkpoint = int(failed["lastCheckpointStep"] or 0)
        assert checkpoint >= 200
        retried = tfmw(cluster, "retry", *where)
        assert retried.returncode == 0, retried.stdout + retried.stderr
        assert f"retrying run {release} (RestartLimit" in retried.stdout and "training.retry=1" in retried.stdout
        wait_succeeded(cluster, namespace, release)
        digests = final_digests(logs)
    finally:
        logs.stop()
    starts = [
        int(m.group(1))
        for stream in merge_incarnations(logs.snapshot()).values()
        for line in stream.lines
        if (m := re.search(r"tfmw start .*resume_step=(\d+)", line))
    ]
    assert checkpoint in starts, starts  # the retry resumed from the Failed run's last checkpoint
    assert len(digests) == 1 and "" not in digests, digests
    DIGESTS["retry"] = digests.pop()


def test_every_disruption_ended_with_the_weights_of_one_and_the_same_run():
    """The same model, data and steps, stopped and resumed in four different ways at four
    different steps: one set of weights, as an uninterrupted run's."""
    assert sorted(DIGESTS) == ["preempt", "retry", "suspend", "upgrade"], DIGESTS
    assert len(set(DIGESTS.values())) == 1, DIGESTS

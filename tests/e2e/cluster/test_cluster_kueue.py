"""The chart under a real Kueue (the pinned sigs.k8s.io/kueue, built from its Go module and
installed with its own Helm chart into the shared cluster: scripts/tfmw/devcluster/kueue.py),
with the real kube-scheduler and kubelets. Kueue manages only the namespaces these tests label,
and is uninstalled after them, so the rest of the suite never meets its webhooks.

The ClusterQueue holds three of values/local.yaml's workers (1500m CPU): one 2-worker release
fits, a second one waits. Every release is `scheduling.gang=kueue` with the namespace's
LocalQueue; nothing else of Kueue's is set by the chart (Kueue names and sizes the group)."""

from __future__ import annotations

import re

import pytest
from clusterkit import (
    CHART,
    REPO,
    built_ahead,
    delete_namespace,
    follow,
    new_namespace,
    status,
    wait_for,
    wait_succeeded,
)

from tfmw.devcluster import kueue
from tfmw.faults.kube import Kube
from tfmw.faults.podlogs import PodLogs, merge_incarnations
from tfmw.k8s.api import ns_path

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

STEPS, EVERY = 1500, 50  # mlp, ~50 steps/s here: about half a minute of training
SETS = (
    "scheduling.gang=kueue",
    f"scheduling.kueue.queueName={kueue.LOCAL_QUEUE}",
    "training.config.model.name=mlp",
    f"training.config.steps={STEPS}",
    "training.config.logEverySteps=50",
    f"training.config.checkpoint.everySteps={EVERY}",
)
GATE = "kueue.x-k8s.io/admission"
DIGESTS: dict[str, str] = {}  # test -> the weights its runs ended with (one config: one set of weights)


@pytest.fixture(scope="module")
def queued(cluster):
    """Kueue installed into the shared cluster for this module's tests, then removed (its
    manager built ahead, from when the cluster came up: clusterkit.BUILDS_AHEAD)."""
    built_ahead("queued")
    kueue.install(cluster.state, say=print)
    try:
        yield cluster
    finally:
        kueue.uninstall(cluster.state)


@pytest.fixture
def ns(queued, request) -> str:
    name = new_namespace(queued, request.node.name.replace("test_", "t-"))
    kueue.manage_namespace(queued.api, name)
    yield name
    delete_namespace(queued, name)


def install(cluster, ns: str, release: str, *sets: str) -> None:
    args = ["install", release, str(CHART), "-n", ns, "-f", str(REPO / "values" / "local.yaml")]
    for item in (*SETS, *sets):
        args += ["--set", item]
    cluster.helm(*args)


def workload(cluster, ns: str, release: str) -> dict | None:
    """The Workload Kueue made for the release's StatefulSet (found by the StatefulSet's UID)."""
    sts = cluster.statefulset(ns, f"{release}-tf-multiworker")
    if not sts:
        return None
    found = cluster.api.items(
        f"{kueue.KUEUE_API}/namespaces/{ns}/workloads", labelSelector=f"kueue.x-k8s.io/job-uid={sts['metadata']['uid']}"
    )
    return found[0] if found else None


def condition(wl: dict | None, kind: str) -> dict:
    return next((c for c in ((wl or {}).get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


def admitted(cluster, ns: str, release: str) -> bool:
    return condition(workload(cluster, ns, release), "Admitted").get("status") == "True"


def ungated(pods: list[dict]) -> list[dict]:
    """The release's two pods once none holds a scheduling gate; else nothing."""
    return pods if len(pods) == 2 and not any(p["spec"].get("schedulingGates") for p in pods) else []


def gated_and_not_started(pod: dict) -> bool:
    gates = [g["name"] for g in pod["spec"].get("schedulingGates") or []]
    return GATE in gates and not pod["spec"].get("nodeName") and not (pod.get("status") or {}).get("containerStatuses")


def digests(logs: PodLogs) -> set[str]:
    found = set()
    for stream in merge_incarnations(logs.snapshot()).values():
        found |= {m.group(1) for line in stream.lines if (m := re.search(r"tfmw done .*weights_digest=(\S+)", line))}
    return found


def test_a_release_over_the_quota_is_gated_whole_and_starts_when_the_first_ends(queued, ns):
    """First fits the quota: admitted as one Workload, its pods ungated, trains, Succeeds,
    and its scale to 0 releases the quota (the Workload goes OnHold). Second does not fit
    while first runs: both its pods exist, gated, no container started, and its Workload says
    why; once first's quota is released it is admitted and trains to the same weights."""
    cluster = queued
    install(cluster, ns, "first")
    wait_for(
        lambda: admitted(cluster, ns, "first"), 120, "first admitted", 1, lambda: str(workload(cluster, ns, "first"))
    )
    # Kueue lifts its gate from each pod after it admits the Workload, not in the same write
    pods = wait_for(lambda: ungated(cluster.workers(ns, "first")), 60, "first's two pods ungated", 1)
    wl = workload(cluster, ns, "first")
    # Kueue named and sized the group itself, from the StatefulSet (the chart sets neither)
    assert all(
        p["metadata"].get("annotations", {}).get("kueue.x-k8s.io/pod-group-name") == wl["metadata"]["name"]
        for p in cluster.workers(ns, "first")
    ), pods
    assert wl["spec"]["podSets"][0]["count"] == 2, wl["spec"]
    # A resize Kueue would refuse mid-apply is refused by the chart first, in one line, with the way
    args = ["upgrade", "first", str(CHART), "-n", ns, "--reuse-values"]
    grow = cluster.helm(*args, "--set", "workers.replicas=3", check=False)
    assert grow.returncode != 0, grow.stdout
    assert "workers.replicas: 2 -> 3 under Kueue (scheduling.gang=kueue)" in grow.stderr, grow.stderr
    assert "make deploy goes through 0 for you" in grow.stderr, grow.stderr
    assert "kubectl delete statefulset first-tf-multiworker" in grow.stderr, grow.stderr
    # and so is a change of the pods' shape (a request), which Kueue's webhook would refuse mid-apply
    bigger = cluster.helm(*args, "--set", "workers.resources.requests.memory=1100Mi", check=False)
    assert bigger.returncode != 0, bigger.stdout
    assert "the workers' pod shape under Kueue (scheduling.gang=kueue)" in bigger.stderr, bigger.stderr
    assert "webhook" not in bigger.stderr, bigger.stderr
    sts = cluster.statefulset(ns, "first-tf-multiworker")
    assert sts["spec"]["replicas"] == 2 and sts["metadata"]["generation"] == 1, sts["metadata"]

    install(cluster, ns, "second")
    wait_for(lambda: len(cluster.workers(ns, "second")) == 2, 60, "second's two pods")
    wait_for(
        lambda: condition(workload(cluster, ns, "second"), "QuotaReserved").get("status") == "False",
        60,
        "second queued",
    )
    # first still holds the quota: its chief has not ended (it writes its first status once it starts)
    wait_for(
        lambda: status(cluster, ns, "first").get("phase") in ("Pending", "Running"),
        60,
        "first's status Pending or Running",
        1,
        lambda: str(status(cluster, ns, "first")),
    )
    waiting = condition(workload(cluster, ns, "second"), "QuotaReserved")
    assert "insufficient" in waiting.get("message", ""), waiting
    assert all(gated_and_not_started(p) for p in cluster.workers(ns, "second")), cluster.workers(ns, "second")
    assert not status(cluster, ns, "second"), "a gated worker ran"
    shown = cluster.tfmw("status", "--namespace", ns, "--release", "second")  # make status
    assert shown.returncode == 0, shown.stderr
    assert "Kueue: queued in tfmw, not admitted: couldn't assign flavors to pod set main" in shown.stdout, shown.stdout
    gated = [line for line in shown.stdout.splitlines() if line.startswith("worker second-tf-multiworker-")]
    assert len(gated) == 2 and all("Pending (SchedulingGated: held by the scheduling gate" in g for g in gated), gated
    assert all("kueue.x-k8s.io/admission" in g and "until Kueue admits the whole group" in g for g in gated), gated

    logs = PodLogs(
        Kube(cluster.kubeconfig),
        ns,
        "second-tf-multiworker",
        "app.kubernetes.io/instance=second,app.kubernetes.io/component=worker",
    )
    logs.start()
    try:
        first = wait_succeeded(cluster, ns, "first")
        assert first["step"] == str(STEPS), first
        wait_for(
            lambda: condition(workload(cluster, ns, "first"), "QuotaReserved").get("reason") == "OnHold",
            120,
            "first's quota released at its scale to 0",
            1,
            lambda: str(workload(cluster, ns, "first")),
        )
        wait_for(lambda: admitted(cluster, ns, "second"), 120, "second admitted once first's quota is free")
        second = wait_succeeded(cluster, ns, "second")
        wait_for(lambda: digests(logs), 60, "second's final weights")
    finally:
        logs.stop()
    assert second["step"] == str(STEPS) and second.get("restarts") == "0", second
    wait_for(
        lambda: condition(workload(cluster, ns, "second"), "QuotaReserved").get("reason") == "OnHold",
        120,
        "second's quota released at its scale to 0",
    )
    assert len(digests(logs)) == 1, digests(logs)
    DIGESTS["queued"] = digests(logs).pop()


def stops_and_resumes(logs: PodLogs) -> list[tuple[int, int]]:
    """(the step a `tfmw stopped` saved at, the step the next start resumed from), every worker."""
    pairs = []
    for stream in merge_incarnations(logs.snapshot()).values():
        stopped = None
        for line in stream.lines:
            if m := re.search(r"tfmw stopped step=(\d+)/", line):
                stopped = int(m.group(1))
            elif stopped is not None and (m := re.search(r"tfmw start .*resume_step=(\d+)", line)):
                pairs.append((stopped, int(m.group(1))))
                stopped = None
    return pairs


def test_a_higher_priority_release_preempts_the_group_which_resumes_at_its_step(queued, ns):
    """Low trains; High (a higher WorkloadPriorityClass) does not fit beside it, so Kueue
    evicts Low's whole group: each worker stops at the group's checkpoint (SIGTERM), the chief
    records Waiting (evicted by Kueue, requeued), the pods come back gated. High trains and
    ends; Low is readmitted and resumes at exactly the step it stopped at, Succeeds (never
    Failed), with the weights of an uninterrupted run."""
    cluster = queued
    install(cluster, ns, "low", "scheduling.kueue.priorityClass=tfmw-low")
    logs = follow(cluster, ns, "low")
    try:
        wait_for(lambda: int(status(cluster, ns, "low").get("lastCheckpointStep") or 0) >= 300, 180, "low trains")
        install(cluster, ns, "high", "scheduling.kueue.priorityClass=tfmw-high")

        def requeued():
            data = status(cluster, ns, "low")
            return data if data.get("phase") == "Waiting" else None

        waiting = wait_for(requeued, 120, "low recorded Waiting", 1, lambda: str(status(cluster, ns, "low")))
        assert waiting["message"].startswith("evicted by Kueue at step "), waiting
        evicted = condition(workload(cluster, ns, "low"), "Evicted")
        assert evicted.get("reason") == "Preempted", workload(cluster, ns, "low")
        wait_for(lambda: admitted(cluster, ns, "high"), 120, "high admitted")
        wait_succeeded(cluster, ns, "high")
        low = wait_succeeded(cluster, ns, "low")
        wait_for(lambda: digests(logs), 60, "low's final weights")
    finally:
        logs.stop()
    pairs = stops_and_resumes(logs)
    assert len(pairs) >= 2 and all(saved == resumed for saved, resumed in pairs), pairs  # 0 steps re-trained
    assert low["step"] == str(STEPS), low
    reasons = [e["reason"] for e in cluster.events(ns) if (e.get("involvedObject") or {}).get("kind") == "StatefulSet"]
    assert "Failed" not in reasons, reasons
    assert digests(logs) == {DIGESTS.get("queued", next(iter(digests(logs))))}, (digests(logs), DIGESTS)


def test_with_kueue_stopped_the_run_goes_on_and_a_deleted_worker_comes_back_with_it(queued, ns):
    """Kueue's manager stopped mid-run (its Deployment at 0): the admitted group trains on,
    nothing of Kueue's is in its path. A worker deleted meanwhile cannot be created again, since
    Kueue's pod webhook fails closed (failurePolicy Fail): the StatefulSet says so in its
    events, and the run waits (never Failed). Once Kueue is back the pod is created, ungated at
    once (its Workload is still admitted), and the group resumes at the step it stopped at."""
    cluster = queued
    manager = f"/apis/apps/v1/namespaces/{kueue.NAMESPACE}/deployments/kueue-controller-manager"
    install(cluster, ns, "solo", f"training.config.steps={STEPS * 2}", "peers.timeoutSeconds=600")
    logs = follow(cluster, ns, "solo")
    try:
        wait_for(lambda: int(status(cluster, ns, "solo").get("lastCheckpointStep") or 0) >= 200, 180, "solo trains")
        cluster.api.patch(f"{manager}/scale", {"spec": {"replicas": 0}})
        wait_for(lambda: not cluster.pods(kueue.NAMESPACE), 120, "Kueue's manager gone")
        before = int(status(cluster, ns, "solo").get("lastCheckpointStep") or 0)
        wait_for(
            lambda: int(status(cluster, ns, "solo").get("lastCheckpointStep") or 0) > before + EVERY,
            120,
            "the group training on without Kueue",
        )
        cluster.api.delete(ns_path(ns, "pods", "solo-tf-multiworker-1"))

        def refused() -> str | None:
            messages = [
                e.get("message", "")
                for e in cluster.events(ns)
                if e.get("reason") == "FailedCreate" and "solo-tf-multiworker-1" in e.get("message", "")
            ]
            return next((m for m in messages if "webhook" in m), None)

        said = wait_for(refused, 90, "the StatefulSet's refused create")
        assert "mpod.kb.io" in said or "kueue" in said, said
        assert status(cluster, ns, "solo").get("phase") != "Failed", status(cluster, ns, "solo")
        cluster.api.patch(f"{manager}/scale", {"spec": {"replicas": 1}})
        final = wait_succeeded(cluster, ns, "solo", timeout=600)
    finally:
        cluster.api.patch(f"{manager}/scale", {"spec": {"replicas": 1}})
        logs.stop()
    pairs = stops_and_resumes(logs)
    assert pairs and all(saved == resumed for saved, resumed in pairs), pairs
    assert final["step"] == str(STEPS * 2), final


def test_suspend_releases_the_quota_and_resume_requeues_at_the_step(queued, ns):
    """`make suspend` under Kueue: the group stops at its checkpoint, the scale to 0 puts the
    Workload on hold (quota released); `make resume` scales back, Kueue admits the same
    Workload again, and the run goes on from that checkpoint to the end."""
    cluster = queued
    install(cluster, ns, "pause", f"training.config.steps={STEPS * 2}")
    logs = follow(cluster, ns, "pause")
    target = ("--env", "local", "--namespace", ns, "--release", "pause")
    try:
        wait_for(lambda: int(status(cluster, ns, "pause").get("lastCheckpointStep") or 0) >= 300, 180, "pause trains")
        suspended = cluster.tfmw("suspend", *target)
        assert suspended.returncode == 0, suspended.stdout + suspended.stderr
        assert status(cluster, ns, "pause")["phase"] == "Suspended", status(cluster, ns, "pause")
        wait_for(
            lambda: condition(workload(cluster, ns, "pause"), "QuotaReserved").get("reason") == "OnHold",
            60,
            "the quota released",
        )
        resumed = cluster.tfmw("resume", *target)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        final = wait_succeeded(cluster, ns, "pause")
    finally:
        logs.stop()
    pairs = stops_and_resumes(logs)
    assert len(pairs) >= 2 and all(saved == resumed for saved, resumed in pairs), pairs
    assert final["step"] == str(STEPS * 2), final


def test_make_deploy_resizes_and_reshapes_under_kueue_through_zero_at_the_step(queued, ns):
    """`make deploy` with workers.replicas=3 and a larger memory request on a running Kueue
    release: both are changes Kueue refuses in place, so deploy goes through 0 (the chart's
    suspend: the group stops at its checkpoint), deletes the StatefulSet (its Workload of 2 goes
    with it), and the upgrade makes it anew: Kueue admits a new Workload of 3 with the new
    request, and the run resumes at its checkpoint step on three workers."""
    cluster = queued
    steps = f"training.config.steps={STEPS * 2}"
    install(cluster, ns, "grow", steps)
    logs = follow(cluster, ns, "grow")
    first_uid = cluster.statefulset(ns, "grow-tf-multiworker")["metadata"]["uid"]
    try:
        wait_for(lambda: int(status(cluster, ns, "grow").get("lastCheckpointStep") or 0) >= 300, 180, "grow trains")
        sets = " ".join((*SETS, steps, "workers.replicas=3", "workers.resources.requests.memory=1100Mi"))
        target = ("--env", "local", "--namespace", ns, "--release", "grow", "--poll-seconds", "1")
        grown = cluster.tfmw("deploy", *target, "--timeout", "4m", "--set", sets)
        assert grown.returncode == 0, grown.stdout + grown.stderr
        said = grown.stdout
        assert "under Kueue its size (2 -> 3 workers) cannot change on a running StatefulSet" in said, said
        assert "stopped: run " in said and " Suspended" in said, said
        assert "StatefulSet grow-tf-multiworker deleted at 0 workers" in said, said
        sts = cluster.statefulset(ns, "grow-tf-multiworker")
        assert sts["metadata"]["uid"] != first_uid and sts["spec"]["replicas"] == 3, sts["metadata"]
        wl = workload(cluster, ns, "grow")
        assert wl["spec"]["podSets"][0]["count"] == 3, wl["spec"]
        requests = wl["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"]
        assert requests["memory"] == "1100Mi", requests
        final = wait_succeeded(cluster, ns, "grow")
    finally:
        logs.stop()
    pairs = stops_and_resumes(logs)
    assert pairs and all(saved == resumed for saved, resumed in pairs), pairs
    assert final["step"] == str(STEPS * 2), final
    wait_for(
        lambda: condition(workload(cluster, ns, "grow"), "QuotaReserved").get("reason") == "OnHold",
        120,
        "the Workload of 3 on hold once the run scaled to 0 (quota released)",
    )


@pytest.fixture(scope="module")
def tas_queue(queued, kwok_nodes):
    """A topology-aware ClusterQueue over kwok's fake GPU nodes (their block, rack and hostname
    labels the Topology's levels); a test reaches it through a LocalQueue of the same name.
    Deleted after the module's tests (their namespaces, and so their Workloads, gone), while
    Kueue still runs."""
    from tfmw.devcluster import kwok

    levels = [kwok.BLOCK_LABEL, kwok.RACK_LABEL, kwok.HOSTNAME_LABEL]
    quota = {"cpu": "64", "memory": "64Gi", "nvidia.com/gpu": "32"}
    objects = kueue.topology_queue_objects("tas", levels, {kwok.FAKE_LABEL: "kwok"}, quota)
    for path, obj in objects:
        queued.api.create_or_keep(path, obj)
    yield "tas"
    kueue.delete_objects(queued.api, list(reversed(objects)))


def test_kueue_places_a_group_whole_in_one_rack_with_room_beside_a_half_used_one(queued, kwok_nodes, tas_queue, ns):
    """Kueue's topology-aware scheduling places the whole group at once: an 8-worker release
    (required: one rack) takes half a rack, then a 16-worker one (preferred: one rack) goes
    whole into a rack with room for all of it, never beside the first where only 8 fit; `make
    status` says so. kwok's nodes: no container runs, the placement is what is shown."""
    from tfmw.devcluster import kwok

    cluster, rack_of = queued, {node.name: node.rack for node in kwok_nodes}
    cluster.api.create_or_keep(*kueue.local_queue(ns, tas_queue))
    placed_sets = (
        "scheduling.gang=kueue",
        f"scheduling.kueue.queueName={tas_queue}",
        *kwok.release_sets(),
        f"scheduling.topology.key={kwok.RACK_LABEL}",
    )

    def racks(release: str, replicas: int):
        pods = cluster.workers(ns, release)
        nodes = [p["spec"].get("nodeName") for p in pods]
        if len(pods) != replicas or not all(nodes) or any(p["spec"].get("schedulingGates") for p in pods):
            return None
        return {rack_of[n] for n in nodes}

    for release, replicas, mode in (("half", 8, "required"), ("whole", 16, "preferred")):
        args = ["install", release, str(CHART), "-n", ns, "-f", str(REPO / "values" / "local.yaml")]
        for item in (*placed_sets, f"workers.replicas={replicas}", f"scheduling.topology.mode={mode}"):
            args += ["--set", item]
        cluster.helm(*args)
        where = wait_for(
            lambda r=release, n=replicas: racks(r, n),
            120,
            f"{release}'s {replicas} workers admitted and placed",
            1,
            lambda r=release: str(workload(cluster, ns, r)),
        )
        assert len(where) == 1, (release, where)
        if release == "half":
            (half,) = where
    (whole,) = where
    assert whole != half, "the 16 went where only 8 fit"
    shown = cluster.tfmw("status", "--namespace", ns, "--release", "whole")
    assert f"placement by {kwok.RACK_LABEL}: 16 workers in 1 domain ({whole} x 16)" in shown.stdout, shown.stdout

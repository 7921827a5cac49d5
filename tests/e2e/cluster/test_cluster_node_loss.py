"""A lost node on a real cluster, with real TensorFlow: a 2-worker run, one worker per node,
and then one node is lost as a machine is lost (every process on it killed, its link cut:
tfmw.devcluster.controlplane.lose_node). No admin acts. The node lifecycle controller taints
the node unreachable, the taint manager deletes the pod once its toleration (the chart's
workers.nodeLossToleration.seconds) runs out, and the pod stays Terminating, since no kubelet
confirms. A surviving launcher sees the pod lost (entrypoint/nodeloss.py) and force-deletes
it; the StatefulSet controller creates it again on a node that answers; the group re-forms
and resumes from its last checkpoint, and the run completes with identical weights.

A partitioned node (the fault harness's node-partition, scripts/tfmw/faults/nodes.py: its link
cut, its kubelet and pods running on, unheard) goes the same way, and then the network heals
while the old pod still runs: it must write nothing. Its launcher, cut off, has given up on
its peers by then (peers.timeoutSeconds) and holds a Failed status, an Event and a scale to 0
it could not send; the replacement's group finished meanwhile. After the heal its kubelet
stops it, and its status writes are fenced by its pod UID (entrypoint/status.py). The run
stays Succeeded and no Failed, Restarted or PeerLost Event appears. It cannot have written a checkpoint
or the completion marker: those need the group, and it had none (docs/failure-model.md).

When worker 1's node is lost, the one other node that answers is full (a pod there takes its
CPU): the replacement stays Pending, the chief's status says which pod and the scheduler's
reason, the phase Waiting and the checkpoint kept; once that pod is gone the group resumes.

The chief's node is lost while the chief writes a checkpoint: its files are written, the
`checkpoint` state file does not name them yet (the test hook TFMW_FAULT_CHECKPOINT_PAUSE_SECONDS
holds the chief there, given to the pods by a Helm post-renderer since the chart refuses TFMW_*
names). The new group must resume from the last complete checkpoint, the one before.

With elastic training on (training.elastic.minReplicas=1), the same loss with no room does not
leave the chief waiting: after the grace it trains alone at the same global batch (2
micro-batches where each worker took 1), and once there is room the replacement joins and the
group grows back to 2 at its next checkpoint; the run Succeeds with the model.

These tests lose nodes, so they run on a cluster of their own (four nodes: the partitions
first, since a healed node answers again; then each loss takes one node for good, and the
workers keep two to spread over, and one to fill), in the suite's side lane beside the shared cluster's tests
(tests/support/lanes.py). Nothing they do to their nodes can reach another test's. Their
cluster calls a silent node unreachable after 20 s, not make cluster's 40 s: what is tested is
what the chart and the launchers do from there."""

from __future__ import annotations

import re
import sys
import time

import pytest
import yaml
from clusterkit import CHART, REPO, Cluster, all_running, delete_namespace, new_namespace, unfit_nodes, wait_for

from tfmw.devcluster import controlplane
from tfmw.devcluster.build import ensure_binaries
from tfmw.faults.cluster import run_cluster_scenario
from tfmw.faults.nodes import SPREAD
from tfmw.k8s.api import ns_path, time_seconds

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.own_cluster]

RELEASE = "lost"
# The partitions train the mlp, not the harness's cnn (values/local.yaml: ~2 steps/s on a busy machine, 2 cores
# for minutes): what is tested is the node's fate and the resume, not the model. The fault after the first
# checkpoint, >= 1000 steps before the end.
CUT_STEPS, CUT_EVERY, CUT_FAULT_AFTER = 1500, 100, 150
CUT_SETS = ("training.config.model.name=mlp",)
STEPS = 1500  # mlp: ~50 steps/s here; the fault lands after the first checkpoints, >= 900 steps before the end
MID_WRITE_STEPS = 800  # every save of that run pauses 2 s: the fault lands at about step 400
# The cluster's own wait before it calls a silent node unreachable (make cluster's is 40 s): what
# is tested is what the chart does once the node is marked, not how long the controller waits.
NODE_MONITOR_GRACE_SECONDS = 20
# The cut-off launcher gives up on its peers after this (values/local.yaml: 120 s), and the test
# heals the link only then: sooner, so that it has given up by the time the new group is done.
CUT_PEERS_TIMEOUT = "peers.timeoutSeconds=45"
WRITE_PAUSE_S = 2  # the chief's pause between a checkpoint's files and its publication
EVERY = 100
SETS = (
    "training.config.model.name=mlp",
    "training.config.logEverySteps=50",
    f"training.config.checkpoint.everySteps={EVERY}",
    "completion.onSuccess=idle",  # the pods stay, with their logs
)
POST_RENDERER = REPO / "tests" / "support" / "postrender_env.py"


@pytest.fixture(scope="module")
def lossy(tmp_path_factory, worker_image) -> Cluster:
    import os

    if os.geteuid() != 0:
        pytest.skip("the local cluster needs root (network and mount namespaces, a bridge)")
    ref, archive = worker_image
    state = controlplane.up(
        tmp_path_factory.mktemp("lossy") / "state",
        nodes=4,
        bins=ensure_binaries(),
        say=print,
        images=[archive],
        node_monitor_grace_seconds=NODE_MONITOR_GRACE_SECONDS,
    )
    try:
        yield Cluster(state, image=ref)
    finally:
        import shutil

        shutil.copytree(state.dir / "logs", tmp_path_factory.getbasetemp() / "lossy-logs", dirs_exist_ok=True)
        # Its three nodes' image caches (3.4 GB each) serve no later cluster of this session.
        controlplane.down(state.dir, say=print, drop_image_caches=True)


@pytest.fixture
def ns(lossy, request) -> str:
    name = new_namespace(lossy, request.node.name.replace("test_", "t-"))
    yield name
    delete_namespace(lossy, name)


def _status(cluster: Cluster, ns: str) -> dict:
    cm = cluster.api.get_or_none(ns_path(ns, "configmaps", f"{RELEASE}-tf-multiworker-status"))
    return (cm or {}).get("data") or {}


def _node_of(cluster: Cluster, ns: str, pod: str) -> str:
    return cluster.api.get(ns_path(ns, "pods", pod))["spec"].get("nodeName") or ""


def _install(cluster: Cluster, ns: str, tmp_path, steps: int, mid_write: bool, extra=()) -> None:
    values = tmp_path / "spread.yaml"
    values.write_text(yaml.safe_dump(SPREAD))
    args = ["install", RELEASE, str(CHART), "-n", ns, "-f", str(REPO / "values" / "local.yaml"), "-f", str(values)]
    for item in (*SETS, f"training.config.steps={steps}", *extra):
        args += ["--set", item]
    if not mid_write:
        cluster.helm(*args)
        return
    # Helm 3 runs a post-renderer by path (Helm 4 only as a plugin).
    script = tmp_path / "postrender"
    script.write_text(
        f'#!/bin/sh\nexec "{sys.executable}" "{POST_RENDERER}" TFMW_FAULT_CHECKPOINT_PAUSE_SECONDS={WRITE_PAUSE_S}\n'
    )
    script.chmod(0o755)
    cluster.helm(*args, "--post-renderer", str(script), helm="helm3")


def _lose_when_writing(cluster: Cluster, ns: str, chief: dict, after: int) -> int:
    """Lose the chief's node the moment the chief says `tfmw checkpoint writing` of a step past
    `after` (its log read host-side, as its kubelet writes it): the step being written."""
    name, node, uid = chief["metadata"]["name"], chief["spec"]["nodeName"], chief["metadata"]["uid"]
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        log = controlplane.node_pod_log(cluster.state.dir, node, ns, name, uid)
        writing = [int(m) for m in re.findall(r"tfmw checkpoint writing step=(\d+)", log)]
        if writing and writing[-1] > after:
            controlplane.lose_node(cluster.state.dir, node)
            return writing[-1]
        time.sleep(0.02)
    raise AssertionError(f"the chief wrote no checkpoint past step {after} in 300 s")


def _fill_node(cluster: Cluster, ns: str, node: str) -> str:
    """A pod that takes all but 100m of `node`'s free CPU (bound there by nodeName), so no
    worker (500m) fits: a node without room. Its name."""
    allocatable = _millicores(cluster.api.get(f"/api/v1/nodes/{node}")["status"]["allocatable"]["cpu"])
    used = sum(
        _millicores(c.get("resources", {}).get("requests", {}).get("cpu", "0"))
        for p in cluster.api.items("/api/v1/pods", fieldSelector=f"spec.nodeName={node}")
        if p["status"].get("phase") not in ("Succeeded", "Failed")
        for c in p["spec"]["containers"]
    )
    name = "ballast"
    cluster.api.create(
        ns_path(ns, "pods"),
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": 0,
                "securityContext": {
                    "runAsNonRoot": True,
                    "runAsUser": 1000,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "containers": [
                    {
                        "name": "ballast",
                        "image": cluster.image,
                        "imagePullPolicy": "Never",
                        "command": ["python3", "-c", "import time; time.sleep(10**6)"],
                        "resources": {"requests": {"cpu": f"{allocatable - used - 100}m", "memory": "16Mi"}},
                        "securityContext": {
                            "allowPrivilegeEscalation": False,
                            "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]},
                        },
                    }
                ],
            },
        },
    )
    wait_for(
        lambda: cluster.api.get(ns_path(ns, "pods", name))["status"].get("phase") == "Running",
        60,
        f"the ballast pod on {node}",
    )
    return name


def _millicores(quantity: str) -> int:
    return int(quantity[:-1]) if quantity.endswith("m") else int(float(quantity) * 1000)


def _wait_for_nodes_that_run_pods(cluster: Cluster, count: int, timeout: float = 180) -> None:
    """Until `count` nodes can run pods (Ready, schedulable, untainted: clusterkit.unfit_nodes);
    the nodes lost by earlier tests of this module never come back and are not waited for."""

    def fit() -> int:
        nodes = cluster.api.items("/api/v1/nodes")
        return len(nodes) - len(unfit_nodes(nodes))

    wait_for(
        lambda: fit() >= count,
        timeout,
        f"{count} nodes that run pods",
        1,
        lambda: "\n".join(unfit_nodes(cluster.api.items("/api/v1/nodes"))),
    )


def _lose_a_node_and_recover(
    cluster: Cluster, ns: str, tmp_path, victim_ordinal: int, mid_write: bool = False, no_room: bool = False
) -> None:
    steps = MID_WRITE_STEPS if mid_write else STEPS
    # A node healed by the partition tests just before answers again only once its kubelet has
    # posted Ready and the node lifecycle controller has lifted its unreachable taint: until
    # then the scheduler places the workers elsewhere, and "no room" would have no spare node.
    _wait_for_nodes_that_run_pods(cluster, 3 if no_room else 2)
    _install(cluster, ns, tmp_path, steps, mid_write)
    chief, victim = f"{RELEASE}-tf-multiworker-0", f"{RELEASE}-tf-multiworker-{victim_ordinal}"
    survivor = f"{RELEASE}-tf-multiworker-{1 - victim_ordinal}"

    def describe() -> str:
        story = [
            f"[{pod}] {line}"
            for pod in (chief, f"{RELEASE}-tf-multiworker-1")
            for line in cluster.logs(ns, pod).splitlines()
            if line.startswith(("tfmw launcher", "tfmw lifecycle", "tfmw error"))
        ]
        return cluster.kubectl("get", "pods,events,cm", "-n", ns, "-o", "wide", check=False).stdout + (
            "\n" + "\n".join(story[-60:])
        )

    wait_for(lambda: int(_status(cluster, ns).get("lastCheckpointStep") or 0) >= 300, 300, "a checkpoint", 1, describe)
    pods = cluster.workers(ns, RELEASE)
    assert all_running(pods, 2)
    nodes = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
    assert len(set(nodes.values())) == 2, nodes  # one per node: the spread constraint
    old_uid = next(p["metadata"]["uid"] for p in pods if p["metadata"]["name"] == victim)
    lost = nodes[victim]

    ballast = None
    if no_room:  # the one other node that answers is full: the replacement has nowhere to go
        spare = [
            n["metadata"]["name"]
            for n in cluster.api.items("/api/v1/nodes")
            if n["metadata"]["name"] not in nodes.values() and not n["spec"].get("taints")
        ]
        assert len(spare) == 1, spare
        ballast = _fill_node(cluster, ns, spare[0])
    published = int(_status(cluster, ns)["lastCheckpointStep"])
    writing = None
    if mid_write:  # the chief's node, while the chief holds a written, unpublished checkpoint
        writing = _lose_when_writing(cluster, ns, next(p for p in pods if p["metadata"]["name"] == chief), published)
        faulted = time.time()
        old_chief_log = controlplane.node_pod_log(cluster.state.dir, lost, ns, chief, old_uid)
    else:
        faulted = time.time()
        controlplane.lose_node(cluster.state.dir, lost)

    def replaced() -> bool:
        pod = cluster.api.get_or_none(ns_path(ns, "pods", victim))
        return bool(
            pod
            and pod["metadata"]["uid"] != old_uid
            and pod["spec"].get("nodeName") not in (None, "", lost)
            and pod["status"].get("phase") == "Running"
        )

    if ballast:
        # No room: the chief says, while it waits, which pod and why; the run is Waiting
        # and its checkpoint. Then room is made and the group resumes.
        waiting = f"waiting for workers that are not running ({victim}: Unschedulable: "
        wait_for(lambda: waiting in _status(cluster, ns).get("message", ""), 300, "the reason", 1, describe)
        status = _status(cluster, ns)
        # Waiting while the group that trained waits for its worker; Restarting while a restart
        # waits for the pod's name. Never Running (nothing trains), never Failed.
        assert status["phase"] in ("Waiting", "Restarting"), status
        assert "Insufficient cpu" in status["message"], status["message"]
        assert int(status["lastCheckpointStep"]) >= published, status
        print(f"no room for {victim}: said after {time.time() - faulted:.0f}s: {status['message']}")
        cluster.api.delete(
            ns_path(ns, "pods", ballast), {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
        )
    wait_for(replaced, 300, f"{victim} replaced on a node that answers (no admin)", 1, describe)
    replaced_after = time.time() - faulted
    wait_for(lambda: _status(cluster, ns).get("phase") == "Succeeded", 600, "the run to succeed", 2, describe)

    # fault -> resumed: the replacement's first step, by its log's own clock
    stamped = cluster.kubectl("logs", "--timestamps", "-n", ns, victim).stdout
    first_step = next(line.split()[0] for line in stamped.splitlines() if " tfmw progress " in line)
    resumed_after = time_seconds(first_step) - faulted
    print(f"node loss of {lost} ({victim}): replaced after {replaced_after:.0f}s, resumed after {resumed_after:.0f}s")

    status = _status(cluster, ns)
    assert status["step"] == str(steps), describe()
    events = [e for e in cluster.events(ns) if e.get("involvedObject", {}).get("kind") == "StatefulSet"]
    lost_events = [e["message"] for e in events if e["reason"] == "PeerLost"]
    assert lost_events and all(victim in m and lost in m for m in lost_events), describe()
    assert "Failed" not in [e["reason"] for e in events], describe()
    # Exact resume: the re-formed group started, on both workers, from a checkpoint at least as
    # new as the one published before the fault (at most one interval lost); when the chief
    # survived, from one its log saved. Then identical weights.
    survivor_log, new_log = cluster.logs(ns, survivor), cluster.logs(ns, victim)
    new_starts = [int(m) for m in re.findall(r"^tfmw start .* resume_step=(\d+)", new_log, re.M)]
    survivor_starts = [int(m) for m in re.findall(r"^tfmw start .* resume_step=(\d+)", survivor_log, re.M)]
    assert new_starts and new_starts[0] >= published > 0 and new_starts[0] % EVERY == 0, (new_starts, published)
    if writing is not None:
        # Lost mid-write: the step's files were written, never published. The group resumed
        # from the last complete checkpoint, the one before, which the old chief saved.
        assert f"tfmw checkpoint writing step={writing}" in old_chief_log
        assert f"tfmw checkpoint saved step={writing}" not in old_chief_log, old_chief_log[-2000:]
        assert f"tfmw checkpoint saved step={writing - EVERY}" in old_chief_log
        assert new_starts[0] == writing - EVERY, (new_starts, writing)
        print(f"the chief's node lost while it wrote step {writing}: resumed from step {new_starts[0]}")
    assert survivor_starts[-1] == new_starts[-1], (survivor_starts, new_starts)
    if survivor == chief:
        saved = [int(m) for m in re.findall(r"^tfmw checkpoint saved step=(\d+)", survivor_log, re.M)]
        assert new_starts[0] in saved, (new_starts, saved)
    digests = {
        m for log in (survivor_log, new_log) for m in re.findall(r"^tfmw done .*weights_digest=(\S+)", log, re.M)
    }
    assert len(digests) == 1, digests


@pytest.mark.parametrize("victim", [1, 0], ids=["worker", "chief"])
def test_a_node_cut_off_is_replaced_and_its_old_pod_writes_nothing_once_healed(lossy, ns, victim):
    """The fault harness's node-partition (scripts/tfmw/faults/nodes.py): cut, replaced, the
    run finished by the new group; then, once the old launcher gave up on its peers and holds
    a Failed, an Event and a scale to 0 it could not send, the link heals."""
    result = run_cluster_scenario(
        "node-partition",
        lossy.kubeconfig,
        namespace=ns,
        release="cut",
        steps=CUT_STEPS,
        checkpoint_every=CUT_EVERY,
        fault_after_step=CUT_FAULT_AFTER,
        timeout=600,
        victim_ordinal=victim,
        extra_sets=(*CUT_SETS, CUT_PEERS_TIMEOUT),
        out=print,
    )
    context = "\n".join(result.log_tail)
    print(
        f"node-partition of {result.victim}'s node: pod Running again after {result.seconds_to_pod_running:.0f}s, "
        f"resumed after {result.seconds_to_resume:.0f}s, fenced side wrote: {result.fenced_writes}; "
        f"in parts: {', '.join(f'{k} {v:.0f}s' for k, v in result.node_parts.items())}"
    )
    assert result.completed, f"{result.reason}\n{context}"
    assert result.recreated_pod == result.victim, context
    assert result.fenced_writes == "none", context
    assert 0 < result.resume_step <= result.step_at_fault and result.resume_step % CUT_EVERY == 0, context
    assert 0 <= result.steps_lost <= CUT_EVERY
    assert result.final_steps == {CUT_STEPS}, context
    assert result.marker_digest and result.identical_weights, (result.digests, result.marker_digest)


# values/local.yaml's cnn (the mlp trains 5000 steps alone in half a minute): long enough that the
# lone worker still trains when its peer is replaced and runs again (about a minute)
ELASTIC_STEPS = 2000
ELASTIC_SETS = ("training.elastic.minReplicas=1", "training.elastic.graceSeconds=10")


# Losses last: a lost node never comes back. The elastic one first: it needs three nodes that answer.
def test_elastic_a_workers_node_lost_with_no_room_shrinks_trains_on_and_grows_back(lossy, ns, tmp_path):
    cluster = lossy
    _wait_for_nodes_that_run_pods(cluster, 3)
    _install(cluster, ns, tmp_path, ELASTIC_STEPS, False, (*ELASTIC_SETS, "training.config.model.name=cnn"))
    chief, victim = f"{RELEASE}-tf-multiworker-0", f"{RELEASE}-tf-multiworker-1"

    def describe() -> str:
        story = [
            f"[{pod}] {line}"
            for pod in (chief, victim)
            for line in cluster.logs(ns, pod).splitlines()
            if line.startswith(("tfmw launcher", "tfmw lifecycle", "tfmw error", "tfmw elastic"))
        ]
        return cluster.kubectl("get", "pods,events,cm", "-n", ns, "-o", "wide", check=False).stdout + (
            "\n" + "\n".join(story[-60:])
        )

    wait_for(lambda: int(_status(cluster, ns).get("lastCheckpointStep") or 0) >= 300, 300, "a checkpoint", 1, describe)
    pods = cluster.workers(ns, RELEASE)
    nodes = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
    assert len(set(nodes.values())) == 2, nodes
    spare = [
        n["metadata"]["name"]
        for n in cluster.api.items("/api/v1/nodes")
        if n["metadata"]["name"] not in nodes.values() and not unfit_nodes([n])
    ]

    # A worker that started later than the grace makes the group form without it and grow once it
    # runs (ci58 saw it): the group is whole before the fault, and only what the chief logs after
    # the fault counts (its launcher restarts the trainer in place: one log).
    def whole() -> bool:
        said = re.findall(r"^tfmw elastic members=(\d+)/(\d+)", cluster.logs(ns, chief), re.M)
        return bool(said) and said[-1][0] == said[-1][1]

    wait_for(whole, 300, "the group whole before the fault", 1, describe)
    ballast = _fill_node(cluster, ns, spare[0])
    faulted = time.time()
    before = len(cluster.logs(ns, chief))
    controlplane.lose_node(cluster.state.dir, nodes[victim])

    def chief_since_fault() -> str:
        return cluster.logs(ns, chief)[before:]

    def training_alone() -> bool:
        return "tfmw elastic members=1/2" in chief_since_fault() and _status(cluster, ns).get("phase") == "Running"

    wait_for(training_alone, 300, "the chief training alone", 1, describe)
    print(f"shrunk to 1 of 2 after {time.time() - faulted:.0f}s")
    # Room again: the lost pod, force-deleted by the chief while it trains alone, is replaced there.
    cluster.api.delete(
        ns_path(ns, "pods", ballast), {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
    )
    room = time.time()
    wait_for(
        lambda: "(grow)" in chief_since_fault(),
        300,
        "the group grown back",
        2,
        describe,
    )
    print(f"grew back {time.time() - room:.0f}s after the room came")
    wait_for(lambda: _status(cluster, ns).get("phase") == "Succeeded", 600, "the run to succeed", 2, describe)
    status = _status(cluster, ns)
    assert status["step"] == str(ELASTIC_STEPS), describe()
    reasons = [e["reason"] for e in cluster.events(ns) if e.get("involvedObject", {}).get("kind") == "StatefulSet"]
    assert "ElasticShrink" in reasons and "ElasticGrow" in reasons and "Failed" not in reasons, reasons
    chief_log, victim_log = chief_since_fault(), cluster.logs(ns, victim)
    assert "tfmw elastic members=1/2 micro_batches=1->2" in chief_log, describe()
    alone = chief_log.split("tfmw elastic members=1/2", 1)[1].split("(grow)", 1)[0]
    assert re.search(r"^tfmw progress ", alone, re.M), "the chief did not train alone before the group grew back"
    digests = {
        m for log in (chief_log, victim_log) for m in re.findall(r"^tfmw done .*weights_digest=(\S+)", log, re.M)
    }
    assert len(digests) == 1, digests


# Losses last: a lost node never comes back.
def test_a_workers_node_is_lost_with_no_room_elsewhere_says_why_and_resumes_once_there_is(lossy, ns, tmp_path):
    _lose_a_node_and_recover(lossy, ns, tmp_path, victim_ordinal=1, no_room=True)


def test_the_chiefs_node_is_lost_mid_checkpoint_and_the_group_resumes_from_the_last_complete_one(lossy, ns, tmp_path):
    _lose_a_node_and_recover(lossy, ns, tmp_path, victim_ordinal=0, mid_write=True)

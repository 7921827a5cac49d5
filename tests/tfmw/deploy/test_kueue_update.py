"""Which upgrades of a Kueue release `make deploy` takes through zero (tfmw.deploy.kueue_update),
on StatefulSets rendered by the real chart with the real helm. The steps themselves (suspend,
delete, upgrade) run against a real Kueue in tests/e2e/cluster/test_cluster_kueue.py."""

from __future__ import annotations

import copy

import pytest

from tfmw.chart import render
from tfmw.deploy import kueue_update, observe

KUEUE = ["scheduling.gang=kueue", "scheduling.kueue.queueName=tfmw"]


def rendered(*sets: str) -> dict:
    values = render.user_values([render.overlay_path("local")], list(sets))
    return observe.worker_statefulset(render.render_values(values))


def live(sts: dict, replicas: int | None = None) -> dict:
    """As the API server returns it: defaults filled in (what through_zero must not read as a change)."""
    out = copy.deepcopy(sts)
    out["metadata"]["uid"] = "u1"
    for container in out["spec"]["template"]["spec"]["containers"]:
        for port in container.get("ports") or []:
            port.setdefault("protocol", "TCP")
    if replicas is not None:
        out["spec"]["replicas"] = replicas
    return out


def workload(count: int) -> dict:
    return {"spec": {"podSets": [{"name": "main", "count": count}]}}


@pytest.fixture(scope="module")
def two():
    return rendered(*KUEUE)


def test_same_release_or_a_change_kueue_allows_goes_in_place(two):
    assert kueue_update.through_zero(live(two), workload(2), two, two) is None
    longer = rendered(*KUEUE, "training.config.steps=80")  # env only: not part of Kueue's shape
    assert kueue_update.through_zero(live(two), workload(2), two, longer) is None
    # suspend (N -> 0) and resume at the Workload's size (0 -> N) are Kueue's own ways
    suspended = rendered(*KUEUE, "suspend=true")
    assert kueue_update.through_zero(live(two), workload(2), two, suspended) is None
    assert kueue_update.through_zero(live(suspended), workload(2), suspended, two) is None


def test_not_under_kueue_or_not_installed_is_never_through_zero(two):
    plain = rendered()
    assert kueue_update.through_zero(live(plain), None, plain, rendered("workers.replicas=3")) is None
    assert kueue_update.through_zero(None, None, None, two) is None


def test_a_size_change_goes_through_zero_also_from_zero(two):
    three = rendered(*KUEUE, "workers.replicas=3")
    assert kueue_update.through_zero(live(two), workload(2), two, three) == "its size (2 -> 3 workers)"
    # after a suspend the StatefulSet is at 0 but its Workload (on hold) keeps the first size
    suspended = rendered(*KUEUE, "suspend=true")
    assert kueue_update.through_zero(live(suspended), workload(2), suspended, three) == "its size (2 -> 3 workers)"


def test_a_shape_change_names_the_fields(two):
    bigger = rendered(*KUEUE, "workers.resources.requests.memory=2Gi")
    said = kueue_update.through_zero(live(two), workload(2), two, bigger)
    assert said == "its pods' shape (containers[0].requests)"
    tolerant = rendered(*KUEUE, "workers.tolerations[0].key=x,workers.tolerations[0].operator=Exists")
    assert kueue_update.through_zero(live(two), workload(2), two, tolerant) == "its pods' shape (tolerations)"


def test_joining_leaving_or_changing_the_queue_goes_through_zero(two):
    plain = rendered()
    assert kueue_update.through_zero(live(plain), None, plain, two) == "its Kueue queue (none -> tfmw)"
    assert kueue_update.through_zero(live(two), workload(2), two, plain) == "its Kueue queue (tfmw -> none)"
    other = rendered("scheduling.gang=kueue", "scheduling.kueue.queueName=big")
    assert kueue_update.through_zero(live(two), workload(2), two, other) == "its Kueue queue (tfmw -> big)"


def test_pod_shape_follows_kueues_spec_shape():
    spec = {
        "containers": [{"name": "a", "image": "x", "env": [{"name": "E"}], "resources": {"requests": {"cpu": "1"}}}],
        "nodeSelector": {"k": "v"},
        "priorityClassName": "high",  # not in Kueue's shape (the resolved `priority` is)
    }
    shape = kueue_update.pod_shape(spec)
    assert shape["containers"] == [{"requests": {"cpu": "1"}, "ports": []}]
    assert shape["nodeSelector"] == {"k": "v"} and shape["affinity"] is None
    assert "resources" not in shape  # pod-level requests count only when set
    changed = dict(spec, containers=[dict(spec["containers"][0], image="y", env=[])])
    assert kueue_update.shape_changes(spec, changed) == []


def test_a_topology_request_set_changed_or_removed_goes_through_zero(two):
    rack = rendered(*KUEUE, "scheduling.topology.key=example.com/rack")
    required = rendered(*KUEUE, "scheduling.topology.key=example.com/rack", "scheduling.topology.mode=required")
    assert kueue_update.through_zero(live(two), workload(2), two, rack) == (
        "its topology request (none -> preferred-topology=example.com/rack)"
    )
    assert kueue_update.through_zero(live(rack), workload(2), rack, required) == (
        "its topology request (preferred-topology=example.com/rack -> required-topology=example.com/rack)"
    )
    assert kueue_update.through_zero(live(required), workload(2), required, two) == (
        "its topology request (required-topology=example.com/rack -> none)"
    )
    assert kueue_update.through_zero(live(rack), workload(2), rack, rack) is None

"""The rule for force-deleting a peer's pod: lost with its node, never only slow."""

from __future__ import annotations

import pytest

from entrypoint.nodeloss import lost_with_node, pod_address


def pod(deleting=True, disruption="DeletionByTaintManager", ready="False", node="node-2") -> dict:
    conditions = [{"type": "Ready", "status": ready, "lastTransitionTime": "2026-12-02T10:00:40Z"}]
    if disruption is not None:
        conditions.append({"type": "DisruptionTarget", "status": "True", "reason": disruption})
    return {
        "metadata": {"name": "w-1", "uid": "u1", **({"deletionTimestamp": "2026-12-02T10:03:00Z"} if deleting else {})},
        "spec": {"nodeName": node},
        "status": {"podIP": "10.1.2.3", "conditions": conditions},
    }


def test_a_pod_evicted_by_the_taint_manager_from_an_unreachable_node_is_lost():
    why = lost_with_node(pod())
    assert why is not None
    assert "node-2" in why and "2026-12-02T10:03:00Z" in why and "2026-12-02T10:00:40Z" in why
    assert pod_address(pod()) == "10.1.2.3"


@pytest.mark.parametrize(
    "slow",
    [
        pod(deleting=False, disruption=None, ready="True"),  # a long step or checkpoint: all healthy
        pod(deleting=False, disruption=None, ready="False"),  # a hung trainer, a starved CPU: not ready
        pod(deleting=False),  # tainted, but its toleration has not run out: not deleted yet
        pod(disruption=None),  # deleted by someone (helm upgrade, a user): its kubelet stops it
        pod(disruption="PreemptionByScheduler"),  # preempted: its kubelet stops it
        pod(disruption="EvictionByEvictionAPI"),  # drained: its kubelet stops it
        pod(ready="True"),  # its kubelet still reports it ready: the node answers
    ],
)
def test_a_pod_that_is_only_slow_or_stopped_by_its_kubelet_is_never_lost(slow):
    assert lost_with_node(slow) is None


def test_a_pod_without_status_is_not_lost():
    assert lost_with_node({"metadata": {"name": "w-1"}}) is None
    assert pod_address({"metadata": {"name": "w-1"}}) is None

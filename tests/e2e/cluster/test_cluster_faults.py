"""`kubectl delete pod` of a worker mid-training on the real local cluster: the StatefulSet
controller recreates the pod under the same name, a real kubelet runs it in a container, and the group
resumes from the checkpoint on the shared claim and finishes with identical weights.

The fault harness (scripts/tfmw/faults/cluster.py) does the run and the measuring; this
test asserts what it found, and checks the controller's own record (Events) beside it.
About a minute and a half on 2 cores.
"""

from __future__ import annotations

import pytest

from tfmw.faults.cluster import run_cluster_scenario

pytestmark = [pytest.mark.slow, pytest.mark.cluster]
STEPS, EVERY = 100, 20


def test_deleted_worker_pod_is_recreated_and_the_group_resumes_from_the_checkpoint(cluster, namespace):
    result = run_cluster_scenario(
        "delete-worker",
        cluster.kubeconfig,
        namespace=namespace,
        release="del",
        steps=STEPS,
        checkpoint_every=EVERY,
        fault_after_step=50,
        timeout=300,
    )
    context = "\n".join(result.log_tail)
    assert result.completed, f"{result.reason}\n{context}"
    # The same pod name, made again by the StatefulSet controller (a new UID: the harness only
    # counts a pod it had not seen before the delete).
    assert result.victim == "del-tf-multiworker-1"
    assert result.recreated_pod == result.victim, context
    creates = [
        e
        for e in cluster.events(namespace)
        if e.get("reason") == "SuccessfulCreate" and f"Pod {result.victim} " in e.get("message", "")
    ]
    assert sum(e.get("count", 1) for e in creates) >= 2, creates
    # Resumed from a published checkpoint, not from step 0, losing at most one interval.
    assert 0 < result.resume_step <= result.step_at_fault, context
    assert result.resume_step % EVERY == 0
    assert 0 <= result.steps_lost <= EVERY
    assert result.trainer_restarts >= 1, "the delete never broke the group: nothing was tested"
    # Every worker finished every step with the same weights as the model the chief published.
    assert result.final_steps == {STEPS}, context
    assert result.marker_digest, "the chief's COMPLETED marker was not found on the claim's volume"
    assert result.identical_weights, (result.digests, result.marker_digest)

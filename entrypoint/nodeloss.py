"""When a survivor may force-delete a peer's pod: the pod was lost with its node.

On Kubernetes a node that stops answering does not kill its pods: the node lifecycle
controller taints it `node.kubernetes.io/unreachable:NoExecute`, the taint manager deletes
its pods once their toleration runs out (`workers.nodeLossToleration.seconds`), and they stay
Terminating for good, since no kubelet confirms the deletion. The StatefulSet controller never
creates a second pod under the same name while the old one exists (its at-most-one
guarantee), so the group waits for an admin. A survivor's launcher ends that wait with a
force delete (grace 0), but only for a pod that is provably lost (docs/failure-model.md):

1. The API says so, on the pod itself (namespaced: no Node read):
   - it is being deleted (`metadata.deletionTimestamp`),
   - by the taint manager, for its node's NoExecute taint (condition `DisruptionTarget`,
     reason `DeletionByTaintManager`), and
   - it is not Ready (the node lifecycle controller marks the pods of an unreachable node).
2. The network says so: the peer's TF port does not take a TCP connection (launcher).

A pod that is only slow (a long step, a long checkpoint, a hung trainer, a starved CPU) has
none of (1): its kubelet still posts status, so its node is never tainted. A pod evicted by
anything else (preemption, a drain, a helm upgrade) has another reason or none. A pod whose
node is not-ready but whose processes run still answers (2), and its kubelet terminates it.

Pure: the launcher fetches the pod and probes the port.
"""

from __future__ import annotations

TAINT_EVICTION = "DeletionByTaintManager"


def _condition(pod: dict, kind: str) -> dict | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return condition
    return None


def lost_with_node(pod: dict) -> str | None:
    """The API's evidence that `pod` was lost with its node, in words, or None when it is
    not (every part of rule 1 above must hold) (pure)."""
    deleting = (pod.get("metadata") or {}).get("deletionTimestamp")
    disruption = _condition(pod, "DisruptionTarget")
    ready = _condition(pod, "Ready")
    if not deleting or disruption is None or disruption.get("status") != "True":
        return None
    if disruption.get("reason") != TAINT_EVICTION:
        return None
    if ready is None or ready.get("status") == "True":
        return None
    node = (pod.get("spec") or {}).get("nodeName") or "?"
    return (
        f"its node {node} was tainted NoExecute (unreachable or not ready) and the taint manager "
        f"deleted it at {deleting}; not Ready since {ready.get('lastTransitionTime') or '?'}"
    )


def pod_address(pod: dict) -> str | None:
    """The pod's IP, where its TF port would answer (pure)."""
    return (pod.get("status") or {}).get("podIP") or None

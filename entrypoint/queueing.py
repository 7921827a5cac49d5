"""A worker stopped by its queue (pure): Kueue evicting the whole group.

Kueue stops an admitted group (preempted by a higher-priority Workload, its ClusterQueue
reclaiming borrowed quota, WaitForPodsReady's timeout, a stopped ClusterQueue) by writing the
pod condition `TerminationTarget` (status True, reason the stop reason, message Kueue's Event
text) on every pod of the group and then deleting them, each with its own grace period
(sigs.k8s.io/kueue v0.19 pkg/controller/jobs/pod/pod_controller.go, Stop). The StatefulSet keeps
its replicas: its controller recreates the pods, which Kueue gates
(`kueue.x-k8s.io/admission`) until the Workload is admitted again. So the chief, told to stop,
reads its own pod: with that condition the run is Waiting (requeued), not Running, and
resumes from the group's checkpoint once readmitted.
"""

from __future__ import annotations

TERMINATION_TARGET = "TerminationTarget"  # Kueue's pod condition type (ConditionTypeTerminationTarget)


def evicted_by_queue(pod: dict) -> str | None:
    """Kueue's reason and message when it is stopping this pod's group, else None."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == TERMINATION_TARGET and condition.get("status") == "True":
            reason, message = condition.get("reason") or "", " ".join((condition.get("message") or "").split())
            return f"{reason}: {message}" if reason and message else (reason or message or TERMINATION_TARGET)
    return None


def requeued_message(why: str, step: int) -> str:
    return (
        f"evicted by Kueue at step {step} ({why}): the group is requeued and resumes from this checkpoint "
        "once Kueue admits it again"
    )

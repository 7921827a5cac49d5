"""What Kueue says about a release's workers (`make status`): the one reader of its Workload.

Under `scheduling.gang: kueue` the StatefulSet carries `kueue.x-k8s.io/queue-name`, and Kueue
keeps one Workload for it (labelled `kueue.x-k8s.io/job-uid: <the StatefulSet's UID>`). While
the group is not admitted its pods exist but are gated (`kueue.x-k8s.io/admission`), so no
launcher runs and the run's status ConfigMap cannot say it is queued: the Workload can.
"""

from __future__ import annotations

from tfmw.k8s.api import Api, ApiError

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
WORKLOADS = "/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/workloads"


def queue_of(statefulset: dict | None) -> str | None:
    """The Kueue LocalQueue the StatefulSet is queued in, or None (not under Kueue)."""
    return (((statefulset or {}).get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL)


def _condition(workload: dict, kind: str) -> dict:
    conditions = (workload.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), {})


def workload_summary(queue: str, workload: dict | None) -> str:
    """One clause for `make status` (pure): admitted, queued with Kueue's reason, on hold, or
    evicted and requeued."""
    if workload is None:
        return f"Kueue: queue {queue}, no Workload yet (Kueue makes it once the StatefulSet has replicas)"
    name = (workload.get("metadata") or {}).get("name", "?")
    if _condition(workload, "Admitted").get("status") == "True":
        return f"Kueue: admitted through queue {queue} (Workload {name})"
    reserved = _condition(workload, "QuotaReserved")
    evicted = _condition(workload, "Evicted")
    why = " ".join((reserved.get("message") or "").split())
    if reserved.get("reason") == "OnHold":
        return f"Kueue: Workload {name} on hold, its quota released ({why or 'scaled to 0'})"
    if evicted.get("status") == "True":
        said = " ".join((evicted.get("message") or "").split())
        return f"Kueue: evicted ({evicted.get('reason', '?')}: {said}), requeued in queue {queue} (Workload {name})"
    why = why or reserved.get("reason") or "waiting for quota"
    return f"Kueue: queued in {queue}, not admitted: {why} (Workload {name})"


def workload_of(api: Api, statefulset: dict) -> dict | None:
    """The Workload Kueue keeps for the StatefulSet (by its UID), None while there is none;
    ApiError when Workloads cannot be read."""
    meta = statefulset.get("metadata") or {}
    path = WORKLOADS.format(namespace=meta.get("namespace", ""))
    found = api.items(path, labelSelector=f"{JOB_UID_LABEL}={meta.get('uid', '')}")
    return found[0] if found else None


def workload_clause(api: Api, statefulset: dict | None) -> str | None:
    """The clause for the release's StatefulSet, None when it is not under Kueue."""
    queue = queue_of(statefulset)
    if not queue:
        return None
    try:
        found = workload_of(api, statefulset)
    except ApiError as err:
        return f"Kueue: queue {queue}, its Workload not readable ({err})"
    return workload_summary(queue, found)

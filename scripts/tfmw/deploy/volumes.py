"""A worker that waits on its volume, for `tfmw deploy` (its fail-fast) and `tfmw status`.

A pod whose volume cannot be attached or mounted says only ContainerCreating; why is in its
Events: the attach/detach controller's FailedAttachVolume ("Multi-Attach error for volume ...":
a ReadWriteOnce volume already attached to another node) and the kubelet's FailedMount ("Unable to
attach or mount volumes ..."). Only pods placed on a node and not started are looked at, at most
LOOKED_UP_AT_MOST of them, one request each, filtered by the server to that pod (its UID: the
Events of an earlier pod of the same name are not its): the cost stays flat whatever the group's
size, and nothing is read while the workers run.
"""

from __future__ import annotations

import dataclasses

from tfmw.deploy.observe import PodState, event_epoch, shorten
from tfmw.k8s.api import Api, ApiError, ns_path

# The Events that say a pod's volume cannot be attached or mounted.
REASONS = ("FailedAttachVolume", "FailedMount")
LOOKED_UP_AT_MOST = 5  # pods whose Events are read in one look
LOOK_AFTER_SECONDS = 15.0  # a deploy reads a pod's Events once it has been creating this long
CREATING = ("", "ContainerCreating")  # what such a pod's containers say (nothing, before the sandbox)
FIX = (
    "use a ReadWriteMany claim (storage.existingClaim.claimName, storage.createClaim.accessModes) or pin "
    "every worker to one node (workers.nodeSelector kubernetes.io/hostname: <node>)"
)


def creating(p: PodState) -> bool:
    """Placed on a node, its containers not started and no other reason given: where a volume
    that cannot be attached or mounted leaves a pod (pure)."""
    return p.phase == "Pending" and p.scheduled and p.reason in CREATING


def hint(message: str, node: str = "") -> str:
    """The fix for a volume Event's message (pure)."""
    if "Multi-Attach" in message:
        return f"its ReadWriteOnce volume is attached to another node already, and serves one node at a time: {FIX}"
    if "not found" in message and ('secret "' in message or 'configmap "' in message):
        return "create the Secret or ConfigMap it names, or fix the value that names it"
    where = f" on node {node}" if node else ""
    return (
        f"the volume cannot be attached or mounted{where}: check its claim and StorageClass (`kubectl describe "
        f"pvc`); if the claim is ReadWriteOnce, {FIX}"
    )


def latest(events: list[dict], uid: str = "") -> tuple[str, str] | None:
    """(reason, message) of a pod's latest volume Warning, a Multi-Attach one before any other;
    None when there is none. With `uid`, Events about another pod of that name are left out (pure)."""
    found = [
        e
        for e in events
        if e.get("type") == "Warning"
        and e.get("reason") in REASONS
        and (not uid or (e.get("involvedObject") or {}).get("uid") in (None, "", uid))
    ]
    if not found:
        return None
    event = max(found, key=lambda e: ("Multi-Attach" in (e.get("message") or ""), event_epoch(e)))
    return event["reason"], " ".join((event.get("message") or "").split())


def waiting_on_volume(p: PodState, events: list[dict], uid: str = "") -> PodState:
    """`p` with its volume's trouble as its reason, message and hint; `p` itself when it is not
    creating or no volume Event says so (pure)."""
    found = latest(events, uid) if creating(p) else None
    if found is None:
        return p
    reason, message = found
    return dataclasses.replace(p, reason=reason, message=message, hint=hint(message, p.node))


def pod_events(api: Api, namespace: str, name: str, uid: str = "") -> list[dict]:
    """One pod's Events: one request, filtered by the API server."""
    selector = f"involvedObject.kind=Pod,involvedObject.name={name}" + (f",involvedObject.uid={uid}" if uid else "")
    return api.items(ns_path(namespace, "events"), fieldSelector=selector)


def sandbox_ready(pod: dict) -> bool:
    """The kubelet has the pod's sandbox up (PodReadyToStartContainers, Kubernetes 1.29+): its
    volumes are mounted, and what keeps it creating is something else (an image pull) (pure)."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "PodReadyToStartContainers" and c.get("status") == "True" for c in conditions)


def looked_up(
    api: Api, namespace: str, items: list[dict], states: list[PodState], only: set[str] | None = None
) -> list[PodState]:
    """`states` (observe.pod_state of `items`, in order) with the pods still creating (those in
    `only`, when given) re-read from their Events, at most LOOKED_UP_AT_MOST of them; a pod whose
    Events cannot be read stays as it was."""
    out, asked = [], 0
    for item, p in zip(items, states, strict=True):
        wanted = creating(p) and not sandbox_ready(item) and (only is None or p.name in only)
        if wanted and asked < LOOKED_UP_AT_MOST:
            asked += 1
            uid = (item.get("metadata") or {}).get("uid") or ""
            try:
                p = waiting_on_volume(p, pod_events(api, namespace, p.name, uid), uid)
            except ApiError:
                pass  # no word on it this time
        out.append(p)
    return out


def failure(pods: list[PodState], creating_since: dict[str, float], now: float, grace: float) -> str | None:
    """Why a deploy should stop now (pure), or None: the first worker that has waited on its volume
    (a volume Event its reason) for `grace` seconds since it was first seen creating
    (`creating_since`: pod -> when)."""
    for p in pods:
        since = creating_since.get(p.name)
        if p.reason in REASONS and since is not None and now - since >= grace:
            return _stopped(p, now - since)
    return None


def _stopped(p: PodState, seconds: float) -> str:
    return (
        f"worker pod {p.name} has waited {int(seconds)}s on node {p.node or '?'} for its volume: {p.reason}: "
        f"{shorten(p.message, 300)}; {p.hint} (UNSCHEDULABLE_GRACE=<seconds> waits longer)"
    )

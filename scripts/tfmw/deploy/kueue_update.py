"""What Kueue lets a StatefulSet it manages change in place, and what must go through zero.

Kueue v0.19's StatefulSet webhook (pkg/controller/jobs/statefulset/statefulset_webhook.go,
ValidateUpdate) refuses, on a StatefulSet with `kueue.x-k8s.io/queue-name`:
- a size change N -> M with both above 0 (only N -> 0 and 0 -> N pass);
- any change of the pod template's "shape" (pkg/util/pod SpecShape: the containers' and init
  containers' requests and ports, nodeSelector, affinity, tolerations, runtimeClassName,
  priority, topologySpreadConstraints, overhead, resourceClaims, pod-level requests), at any
  size;
- a queue-name change while a pod is ready, and removing the label at all.
Even 0 -> M is not what it seems: the Workload Kueue put on hold at 0 keeps its first size and
shape, and is admitted again as it was.

So `make deploy` makes such a change through zero: the group stops at its checkpoint (the
chart's suspend), the StatefulSet is deleted (its Workload goes with it: Kueue names the
Workload after the StatefulSet's UID and owns it by reference), and the upgrade creates the
StatefulSet anew, for which Kueue makes a new Workload of the new size and shape. The run
resumes from its checkpoint like after any suspend. The decision is pure and lives here; the
steps are in tfmw.deploy.apply (kueue_through_zero, remove_statefulset_at_zero), the suspend in
tfmw.deploy.suspension.
"""

from __future__ import annotations

# The pod spec fields of Kueue's SpecShape, in its order; containers count by requests and ports.
SHAPE_FIELDS = (
    "nodeSelector",
    "affinity",
    "tolerations",
    "runtimeClassName",
    "priority",
    "topologySpreadConstraints",
    "overhead",
    "resourceClaims",
)
TOPOLOGY_PREFIX = "kueue.x-k8s.io/podset-"


def _requests(container: dict) -> dict:
    """A container's requests as its pods get them: the API server fills a request left unset
    from its limit on a pod (not on a template), and Kueue sizes the group from the pods. So a
    GPU count, a limit only, is part of the shape too."""
    resources = container.get("resources") or {}
    return {**(resources.get("limits") or {}), **(resources.get("requests") or {})}


def _containers_shape(containers: list[dict] | None) -> list[dict]:
    return [{"requests": _requests(c), "ports": c.get("ports") or []} for c in containers or []]


def pod_shape(pod_spec: dict) -> dict:
    """Kueue's SpecShape of a pod spec (pure): what Kueue keeps immutable on a managed StatefulSet.
    Empty values count as unset, as Go's nil and empty compare equal once serialized."""
    shape = {
        "initContainers": _containers_shape(pod_spec.get("initContainers")),
        "containers": _containers_shape(pod_spec.get("containers")),
    }
    for name in SHAPE_FIELDS:
        shape[name] = pod_spec.get(name) or None
    if pod_spec.get("resources"):
        shape["resources"] = (pod_spec["resources"] or {}).get("requests") or {}
    return shape


def shape_changes(old_spec: dict, new_spec: dict) -> list[str]:
    """The shape fields that differ between two pod specs, as paths (e.g. containers[0].requests)."""
    old, new = pod_shape(old_spec), pod_shape(new_spec)
    changed = []
    for name in sorted(set(old) | set(new)):
        before, after = old.get(name), new.get(name)
        if before == after:
            continue
        if name in ("containers", "initContainers") and len(before) == len(after):
            for i, (b, a) in enumerate(zip(before, after, strict=True)):
                changed += [f"{name}[{i}].{part}" for part in ("requests", "ports") if b[part] != a[part]]
        else:
            changed.append(name)
    return changed


def _labels(obj: dict | None) -> dict:
    return ((obj or {}).get("metadata") or {}).get("labels") or {}


def _pod_spec(sts: dict | None) -> dict:
    return (((sts or {}).get("spec") or {}).get("template") or {}).get("spec") or {}


def _replicas(sts: dict | None) -> int:
    value = ((sts or {}).get("spec") or {}).get("replicas")
    return 1 if value is None else int(value)


def workload_size(workload: dict | None) -> int | None:
    """The size Kueue admits the group at: its Workload's one pod set (None: no Workload)."""
    pod_sets = ((workload or {}).get("spec") or {}).get("podSets") or []
    return int(pod_sets[0].get("count", 0)) if pod_sets else None


def through_zero(live: dict | None, workload: dict | None, recorded: dict | None, rendered: dict) -> str | None:
    """Why this upgrade of the worker StatefulSet must go through zero, or None (pure).

    `live` is the StatefulSet as it is, `workload` its Kueue Workload (or None), `recorded` the
    StatefulSet of the release's current manifest (what helm last applied: the shape compare is
    chart output against chart output, free of the API server's defaults), `rendered` the one
    about to be applied."""
    if live is None:
        return None
    queue = _labels(live).get("kueue.x-k8s.io/queue-name")
    new_queue = _labels(rendered).get("kueue.x-k8s.io/queue-name")
    if not queue and not new_queue:
        return None
    if queue != new_queue:
        return f"its Kueue queue ({queue or 'none'} -> {new_queue or 'none'})"
    new_size = _replicas(rendered)
    size = workload_size(workload)
    size = _replicas(live) if size is None else size
    # A Workload's size matters only once pods come back: 0 -> M re-admits the Workload as it was.
    if new_size > 0 and size > 0 and new_size != size:
        return f"its size ({size} -> {new_size} workers)"
    changed = shape_changes(_pod_spec(recorded or live), _pod_spec(rendered))
    if changed:
        return f"its pods' shape ({', '.join(changed)})"
    old_request, new_request = topology_request(recorded or live), topology_request(rendered)
    if old_request != new_request:
        return f"its topology request ({_said(old_request)} -> {_said(new_request)})"
    return None


def topology_request(sts: dict | None) -> dict[str, str]:
    """The pod template's Kueue topology annotations (kueue.x-k8s.io/podset-*-topology): Kueue
    reads them once, when it makes the Workload, so a change takes a new one (pure)."""
    annotations = ((((sts or {}).get("spec") or {}).get("template") or {}).get("metadata") or {}).get("annotations")
    return {
        key: value
        for key, value in (annotations or {}).items()
        if key.startswith(TOPOLOGY_PREFIX) and key.endswith("-topology")
    }


def _said(request: dict[str, str]) -> str:
    return ", ".join(f"{key.removeprefix(TOPOLOGY_PREFIX)}={value}" for key, value in sorted(request.items())) or "none"

"""The cluster's voluntary disruptions, as the fault harness's cluster scenarios: a drain of the
victim's node, a priority preemption of the victim, a suspend and resume of the whole group.
Each is done the way the cluster does it (the Eviction API with the PodDisruptionBudget, the
scheduler's preemption, `make suspend`'s own checked upgrade of the release's `suspend`), through
the API server.

    drain-worker    cordon worker 1's node and evict worker 1 (retried while the budget says no);
                    the node is uncordoned once the run has ended
    preempt-worker  a pod of a higher priority that fits worker 1's node only without it (one
                    worker per node, so the worker has nowhere else to go); removed once the run
                    is Waiting: "capacity returned"
    suspend         `suspend: true`; once the run is Suspended, `suspend: false`

For the last two the harness also measures how long the group was held (fault -> capacity
returned, or -> resume asked), so the recovery after it is `seconds_to_resume - seconds_held`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from entrypoint.lifecycle import Phase
from tfmw.deploy import suspension
from tfmw.deploy.release import Release
from tfmw.deploy.upgrade import Upgrade
from tfmw.k8s.api import ApiError, ns_path

DISRUPTIONS = ("drain-worker", "preempt-worker", "suspend")
# what each needs beside the harness's own values
EXTRA_SETS = {"preempt-worker": ("workers.podAntiAffinity=hard",)}
# the run's phase while it is held, before the harness gives the room (or the workers) back
HELD_PHASE = {"preempt-worker": Phase.WAITING, "suspend": Phase.SUSPENDED}
PRIORITY_CLASS = "tfmw-fault-high"
HOG = "tfmw-fault-hog"
EVICTION_RETRY_SECONDS = 120.0


@dataclass
class Disruption:
    fault_time: float  # time.monotonic() of the disruption
    give_back: Callable[[], None]  # return what was taken (the room, the workers); idempotent
    cleanup: Callable[[], None]  # undo what is left at the end (a cordon, a PriorityClass)


def millicores(quantity: str) -> int:
    """A CPU quantity in millicores (pure): "2" -> 2000, "500m" -> 500."""
    quantity = str(quantity)
    return int(quantity[:-1]) if quantity.endswith("m") else int(float(quantity) * 1000)


def hog_pod(node: str, cpu_millicores: int, image: str) -> dict:
    """A pod of PRIORITY_CLASS that asks for `cpu_millicores` on `node` (pure)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": HOG},
        "spec": {
            "priorityClassName": PRIORITY_CLASS,
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {"kubernetes.io/hostname": node},
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "hog",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["python3", "-c", "import time; time.sleep(10**6)"],
                    "resources": {"requests": {"cpu": f"{cpu_millicores}m", "memory": "16Mi"}},
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                }
            ],
        },
    }


def disrupt(kube, scenario: str, namespace: str, release: str, victim: str, chart: str) -> Disruption:
    """Do `scenario` to the run; FaultError (from kube) or ApiError when the cluster refuses, a
    ToolError when the checked deploy path does (suspend)."""
    pod = kube.get(ns_path(namespace, "pods", victim)) or {}
    node = (pod.get("spec") or {}).get("nodeName", "")
    if scenario == "drain-worker":
        return _drain(kube, namespace, victim, node)
    if scenario == "preempt-worker":
        return _preempt(kube, namespace, pod, node)
    if scenario == "suspend":
        return _suspend(kube, namespace, release, chart)
    raise ValueError(scenario)


def _drain(kube, namespace: str, victim: str, node: str) -> Disruption:
    """What `kubectl drain` does to the victim: cordon its node, then evict it (the API server
    answers 429 while the PodDisruptionBudget allows no disruption: retried)."""
    kube.api.patch(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": True}})
    fault_time = time.monotonic()
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": victim, "namespace": namespace}}
    deadline = fault_time + EVICTION_RETRY_SECONDS
    while True:
        try:
            kube.api.request("POST", ns_path(namespace, "pods", victim) + "/eviction", eviction)
            break
        except ApiError as err:
            if err.status != 429 or time.monotonic() > deadline:
                raise
            time.sleep(2)

    def uncordon() -> None:
        kube.api.patch(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": False}})

    return Disruption(fault_time, give_back=lambda: None, cleanup=uncordon)


def _preempt(kube, namespace: str, victim: dict, node: str) -> Disruption:
    """A higher-priority pod that fits the victim's node only once the victim is gone."""
    kube.call(
        "POST",
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": PRIORITY_CLASS},
         "value": 1000000},
    )  # fmt: skip
    allocatable = millicores(kube.get(f"/api/v1/nodes/{node}")["status"]["allocatable"]["cpu"])
    pods = (kube.call("GET", "/api/v1/pods", fieldSelector=f"spec.nodeName={node}") or {}).get("items") or []
    used = sum(
        millicores(c.get("resources", {}).get("requests", {}).get("cpu", "0"))
        for p in pods
        if p["status"].get("phase") not in ("Succeeded", "Failed")
        for c in p["spec"]["containers"]
    )
    container = victim["spec"]["containers"][0]
    own = millicores(container.get("resources", {}).get("requests", {}).get("cpu", "0"))
    fault_time = time.monotonic()
    kube.call("POST", ns_path(namespace, "pods"), hog_pod(node, allocatable - used + own, container["image"]))

    def give_back() -> None:
        try:
            kube.api.delete(ns_path(namespace, "pods", HOG), {"apiVersion": "v1", "kind": "DeleteOptions",
                                                              "gracePeriodSeconds": 0})  # fmt: skip
        except ApiError:
            pass  # gone already

    def cleanup() -> None:
        give_back()
        try:
            kube.api.delete(f"/apis/scheduling.k8s.io/v1/priorityclasses/{PRIORITY_CLASS}")
        except ApiError:
            pass

    return Disruption(fault_time, give_back, cleanup)


def _suspend(kube, namespace: str, release: str, chart: str) -> Disruption:
    """`suspend: true` as `make suspend` does it (tfmw.deploy.suspension: the release's own values,
    its checks, its watch), returned once the workers are gone and the run is recorded Suspended;
    give_back resumes (`suspend: false`) through the same checked upgrade, not waited for: the
    harness times the hold up to the resume asked. Both talk to the harness's cluster (its
    kubeconfig, given to the release: helm and the API client read that file). A refusal is the
    checked path's one-line ToolError, which the harness reports as the run's reason."""
    rel = Release(
        name=release,
        namespace=namespace,
        helm=kube.helm_bin,
        chart_dir=Path(chart),
        any_context=True,
        kubeconfig=kube.kubeconfig,
    )
    fault_time = time.monotonic()
    suspension.suspend_and_wait(rel, kube.helm_bin, Upgrade(), out=_quiet)
    resumed = []

    def resume() -> None:
        if not resumed:
            suspension.resume(rel, kube.helm_bin, Upgrade(wait=False), report=False, out=_quiet)
            resumed.append(True)

    return Disruption(fault_time, give_back=resume, cleanup=lambda: None)


def _quiet(line: str) -> None:
    """The checked path's progress lines: the harness reports the run, not the helm steps."""

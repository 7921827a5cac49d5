"""Node faults on `make cluster`'s own nodes (tfmw.devcluster): the node of a worker lost, or
cut off and then healed. Unlike the pod faults (tfmw.faults.inject), these act on a node's
processes and network link on this machine, so they need that cluster's state folder, found
next to its kubeconfig.

  node-loss       every process of the node SIGKILLed and its link cut, as a machine is lost
                  (controlplane.lose_node). The node stays lost until `make cluster-down`.
  node-partition  the node's link cut while its kubelet and pods run on
                  (controlplane.partition_node); healed once the run ended. Then the old pod,
                  still running there and holding writes it could not send, must write
                  nothing: the run stays Succeeded and no Failed Event appears.

Both need a node with room for the replacement: the workers are spread one per node
(a topology spread constraint) so the other worker survives.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from pathlib import Path

import yaml

from entrypoint import loglines
from tfmw.devcluster import controlplane
from tfmw.k8s.api import ns_path, time_seconds

NODE_LOSS = "node-loss"  # the node stays lost: one run per cluster
NODE_SCENARIOS = ("node-partition", NODE_LOSS)
VICTIM_ORDINAL = 1  # worker 1's node
# One worker per node while the nodes answer; a tainted (lost) node does not count, so the
# replacement may join the survivor on its node.
SPREAD = {
    "workers": {
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "DoNotSchedule",
                "nodeTaintsPolicy": "Honor",
            }
        ]
    }
}
STOPPED_WITHIN_SECONDS = 240  # after the heal: the node's kubelet is back and stops the old pod
GAVE_UP_WITHIN_SECONDS = 400  # cut off: the old launcher gives up on its peers (peers.timeoutSeconds)


class NodeFaultError(Exception):
    """Why a node fault cannot be done here (exit 2: the cluster is not `make cluster`'s)."""


def cluster_dir(kubeconfig: Path) -> Path:
    """The state folder of `make cluster` whose kubeconfig this is; NodeFaultError otherwise."""
    directory = Path(kubeconfig).resolve().parent
    if controlplane.ClusterState.load(directory) is None:
        raise NodeFaultError(
            f"--kubeconfig {kubeconfig}: node-loss and node-partition act on the nodes of `make cluster` "
            "on this machine (their processes and links), and this kubeconfig is not in one's state folder"
        )
    return directory


def spread_values(folder: Path) -> Path:
    """A values file spreading the workers one per node (written into `folder`)."""
    path = Path(folder) / "spread-workers.yaml"
    path.write_text(yaml.safe_dump(SPREAD))
    return path


def pod_processes(uid: str) -> list[int]:
    """The PIDs on this machine that run in pod `uid` (their TFMW_POD_UID, set by the chart)."""
    needle = f"TFMW_POD_UID={uid}".encode()
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if needle in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
        except OSError:
            continue
    return found


def fault_node(directory: Path, scenario: str, node: str) -> None:
    if scenario == "node-loss":
        controlplane.lose_node(directory, node)
    elif scenario == "node-partition":
        controlplane.partition_node(directory, node)
    else:
        raise ValueError(f"not a node scenario: {scenario!r}")


# fault -> resumed on a lost or cut-off node, in parts, each ending at one mark: the node
# lifecycle controller's NodeNotReady (its grace), the taint manager's eviction (the
# toleration), a survivor's PeerLost (its next look and the port probe), the replacement
# Running (scheduling and the pod's start), the group's first step (re-forming, restore).
NODE_PARTS = ("detection", "eviction", "force delete", "pod start", "re-form and restore")


def _event_time(event: dict) -> float | None:
    stamp = event.get("eventTime") or event.get("firstTimestamp") or event.get("lastTimestamp")
    if not stamp:
        return None
    return time_seconds(stamp)


def node_parts(
    events: list[dict], victim: tuple[str, str], fault_wall: float, pod_running: float, resumed: float
) -> dict:
    """fault -> resumed in NODE_PARTS (pure): `events` the namespace's Events, `victim` the
    cut-off or lost pod's (name, UID), `fault_wall` the fault's wall-clock time, `pod_running`
    and `resumed` seconds after it. A mark not found is left out and its time goes to the next
    part. Event times have a resolution of one second."""

    def about_victim(event: dict) -> bool:
        # The taint manager's Events name the pod without its UID; its replacement (same
        # name) is never evicted, and only Events after the fault count.
        obj = event.get("involvedObject") or {}
        return obj.get("uid") == victim[1] if obj.get("uid") else obj.get("name") == victim[0]

    def first(reason: str, pod: bool = True) -> float | None:
        times = [
            t
            for e in events
            if e.get("reason") == reason
            and (not pod or about_victim(e))
            and (t := _event_time(e)) is not None
            and t >= fault_wall - 1
        ]
        return min(times) if times else None

    marks = (
        first("NodeNotReady"),
        first("TaintManagerEviction"),
        first("PeerLost", pod=False),
        fault_wall + pod_running,
        fault_wall + resumed,
    )
    parts, clock = {}, fault_wall
    for name, when in zip(NODE_PARTS, marks, strict=True):
        if when is None or math.isnan(when):
            continue
        parts[name] = max(when - clock, 0.0)
        clock = max(when, clock)
    return parts


def writes_after_heal(events_before: list[str], status: dict, events_after: list[str]) -> str:
    """What the fenced side wrote, from the run's status and its StatefulSet's Event reasons
    before and after the heal: "none", or what changed (pure)."""
    found = []
    if status.get("phase") != "Succeeded":
        found.append(f"status phase {status.get('phase') or '-'}")
    new = Counter(events_after) - Counter(events_before)
    written = sorted(reason for reason in new if reason in ("Failed", "Restarted", "PeerLost"))
    if written:
        found.append("Events " + ", ".join(written))
    return "; ".join(found) or "none"


def wait_until_given_up(directory: Path, node: str, namespace: str, pod: str, uid: str) -> str:
    """The cut-off pod's log (read on its node) once its launcher gave up on its peers and so
    holds a Failed status, an Event and a scale to 0 it cannot send; "" if it never did."""
    deadline = time.monotonic() + GAVE_UP_WITHIN_SECONDS
    while time.monotonic() < deadline:
        log = controlplane.node_pod_log(directory, node, namespace, pod, uid)
        if loglines.find(log.splitlines(), loglines.FAILED, prefixed=True):  # after the kubelet's prefix
            return log
        time.sleep(2)
    return ""


def heal_and_check(kube, directory: Path, node: str, namespace: str, pod: str, uid: str, say) -> str:
    """Once the cut-off pod `uid` holds writes it could not send: heal `node`'s link, wait
    until its kubelet stopped the pod, and say what it wrote after the heal ("none" is the
    only right answer)."""
    statefulset = pod.rsplit("-", 1)[0]
    if not wait_until_given_up(directory, node, namespace, pod, uid):
        say(f"the cut-off {pod} never gave up on its peers within {GAVE_UP_WITHIN_SECONDS}s; healing anyway")

    def reasons() -> list[str]:
        items = (kube.get(ns_path(namespace, "events")) or {}).get("items") or []
        return [
            e.get("reason", "")
            for e in items
            if (e.get("involvedObject") or {}).get("kind") == "StatefulSet"
            and (e.get("involvedObject") or {}).get("name") == statefulset
        ]

    before = reasons()
    still_running = bool(pod_processes(uid))
    controlplane.partition_node(directory, node, cut=False)
    deadline = time.monotonic() + STOPPED_WITHIN_SECONDS
    while pod_processes(uid) and time.monotonic() < deadline:
        time.sleep(2)
    if pod_processes(uid):
        return f"the old pod was still running {STOPPED_WITHIN_SECONDS}s after the heal"
    time.sleep(5)  # a last write would have landed by now
    cm = kube.get(ns_path(namespace, "configmaps", f"{statefulset}-status")) or {}
    found = writes_after_heal(before, cm.get("data") or {}, reasons())
    say(f"node {node} healed; the old pod {'was running until then, ' if still_running else ''}wrote: {found}")
    return found

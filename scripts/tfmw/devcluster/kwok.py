"""Fake nodes under the local cluster's real control plane, for the topology tests and the scale
bench: the pinned kwok controller (scripts/tfmw/devcluster/build_kwok.py builds it from its Go
module, its stages beside it) run as a host process against the API server, as Flux's
controllers are. The scheduler, the StatefulSet and EndpointSlice controllers, CoreDNS and
Kueue do their real work on these nodes; only the kubelet is missing, and kwok plays its part
through its stages:

- node-initialize and node-heartbeat-with-lease keep each node Ready (its Lease renewed every
  LEASE_SECONDS / 4, well inside the controller manager's grace);
- pod-ready takes a pod bound to one of them to Running and Ready with an address from POD_CIDR
  (no process runs, nothing listens there); pod-delete removes a deleted pod at once.

kwok manages only the nodes annotated ANNOTATION (so the real kubelets' nodes stay theirs), and
every fake node carries TAINT, so no pod lands on one unless it tolerates it: the other tests
on the same cluster never see them. A fake node carries GPU capacity and the topology labels
BLOCK_LABEL and RACK_LABEL (with kubernetes.io/hostname, the levels of a Kueue Topology).

    python -m tfmw.devcluster.kwok start|stop [--state DIR]   (on a running `make cluster`)
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from tfmw.devcluster import controlplane, onebinary
from tfmw.devcluster.addoncli import addon_main
from tfmw.devcluster.build_kwok import KWOK, stage_path
from tfmw.k8s.api import Api, ApiError

NAME = "kwok"  # its PID's name in the cluster state (controlplane.HOST_ADDONS)
ANNOTATION = "kwok.x-k8s.io/node"
TAINT = {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}
TOLERATION = {"key": TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}
FAKE_LABEL = "type"  # kwok's own convention: type=kwok
BLOCK_LABEL = "tfmw.local/topology-block"
RACK_LABEL = "tfmw.local/topology-rack"
HOSTNAME_LABEL = "kubernetes.io/hostname"
# The fake pods' addresses: outside every cluster slot's 198.19.0.0/16 and the host's networks.
# Nothing answers there: a connection to one fails, as to a pod that is gone.
POD_CIDR = "100.64.0.0/16"
NODE_IP = "192.0.2.1"  # TEST-NET-1: a fake node's InternalIP
LEASE_SECONDS = 20
# The stages kwok runs (kustomize/stage/ of its module zip): Ready nodes, Ready pods, deletes at once.
STAGES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-delete.yaml",
)


class KwokError(Exception):
    def __init__(self, message: str, exit_code: int = 4):
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class FakeNode:
    name: str
    block: str
    rack: str
    gpus: int = 8
    cpu: str = "64"
    memory: str = "512Gi"


# ---------------------------------------------------------------- what kwok is given (pure)


def topology(
    blocks: int, racks_per_block: int, nodes_per_rack: int, gpus: int = 8, prefix: str = "kwok"
) -> list[FakeNode]:
    """blocks x racks x nodes fake nodes, named by their place: <prefix>-b<block>-r<rack>-n<node>."""
    return [
        FakeNode(f"{prefix}-b{b}-r{r}-n{n}", f"block-{b}", f"block-{b}-rack-{r}", gpus)
        for b in range(blocks)
        for r in range(racks_per_block)
        for n in range(nodes_per_rack)
    ]


def node_object(node: FakeNode) -> dict:
    """The Node as created: kwok's annotation and taint, the topology labels, its capacity (the
    API server keeps a created node's status; kwok's node-initialize keeps what is there)."""
    resources = {
        "cpu": node.cpu,
        "memory": node.memory,
        "pods": "110",
        "ephemeral-storage": "1Ti",
        "nvidia.com/gpu": str(node.gpus),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "annotations": {ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                FAKE_LABEL: "kwok",
                HOSTNAME_LABEL: node.name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                BLOCK_LABEL: node.block,
                RACK_LABEL: node.rack,
            },
        },
        "spec": {"taints": [dict(TAINT)]},
        "status": {
            "addresses": [{"type": "InternalIP", "address": NODE_IP}, {"type": "Hostname", "address": node.name}],
            "capacity": resources,
            "allocatable": dict(resources),
        },
    }


def configuration() -> dict:
    """kwok's own options: only the annotated nodes, pod addresses from POD_CIDR, Leases."""
    return {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        "options": {
            "manageAllNodes": False,
            "manageNodesWithAnnotationSelector": f"{ANNOTATION}=fake",
            "cidr": POD_CIDR,
            "nodeIP": NODE_IP,
            "nodeLeaseDurationSeconds": LEASE_SECONDS,
            # kwok's documented defaults, said here: a configuration file given on its own
            # command line is not defaulted (0 workers is refused at start)
            "podPlayStageParallelism": 4,
            "nodePlayStageParallelism": 4,
            "nodeLeaseParallelism": 4,
            "podsOnNodeSyncParallelism": 1,
            "enablePodsOnNodeSyncListPager": True,
            "enablePodsOnNodeSyncStreamWatch": False,
        },
    }


def kwok_args(binary: Path, kubeconfig: Path, configs: list[Path]) -> list[str]:
    """kwok's command line: the admin kubeconfig, its configuration and stages; no server of
    its own (it binds no port unless told to)."""
    return [str(binary), f"--kubeconfig={kubeconfig}", *(f"--config={path}" for path in configs), "--v=INFO"]


def release_sets() -> list[str]:
    """The chart's --set items that put a release's workers on the fake nodes, one GPU each: they
    select and tolerate kwok's nodes, hold the memory a GPU worker is refused below, and share
    nothing through a claim (its volume would be bound to a real node)."""
    return [
        "workers.gpus=1",
        "workers.resources.requests.memory=2Gi",
        "workers.resources.limits.memory=4Gi",
        "storage.type=emptyDir",
        f"workers.nodeSelector.{FAKE_LABEL}=kwok",
        f"workers.tolerations[0].key={TOLERATION['key']}",
        "workers.tolerations[0].operator=Exists",
        "workers.tolerations[0].effect=NoSchedule",
    ]


# ---------------------------------------------------------------- running it


def running(state: controlplane.ClusterState) -> bool:
    return controlplane.is_ours(state.pids.get(NAME, 0), state.created.get(NAME))


def start(state: controlplane.ClusterState, say=print) -> None:
    """kwok running on the host against the cluster (built first if it is not yet)."""
    if running(state):
        return
    install = onebinary.ensure(KWOK, progress=say)
    root = state.dir / NAME
    root.mkdir(exist_ok=True)
    config = root / "kwok.yaml"
    config.write_text(yaml.safe_dump(configuration(), sort_keys=False))
    stages = [stage_path(install) / stage for stage in STAGES]
    log = state.dir / "logs" / f"{NAME}.log"
    proc = controlplane.spawn(kwok_args(onebinary.binary_path(KWOK, install), state.kubeconfig, [config, *stages]), log)
    state.pids[NAME], state.created[NAME] = proc.pid, controlplane.started_at(proc.pid)
    state.save()
    time.sleep(1.0)
    if proc.poll() is not None:
        raise KwokError(f"kwok exited at start ({proc.returncode}): {controlplane.log_tail(log)}")
    say(f"kwok: {onebinary.read_pins(KWOK).version} running on the host; log in {log}")


def stop(state: controlplane.ClusterState) -> None:
    controlplane.stop_pid(state.pids.get(NAME, 0), state.created.get(NAME), 10.0)


def _ready(node: dict) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def add_nodes(api: Api, nodes: list[FakeNode], timeout: float = 60.0) -> None:
    """Create `nodes` (an existing one is left as it is) and wait until kwok has made every one Ready."""
    for node in nodes:
        api.create_or_keep("/api/v1/nodes", node_object(node))
    names = {node.name for node in nodes}
    deadline = time.monotonic() + timeout
    while True:
        ready = {
            n["metadata"]["name"] for n in api.items("/api/v1/nodes", labelSelector=f"{FAKE_LABEL}=kwok") if _ready(n)
        }
        if names <= ready:
            return
        if time.monotonic() > deadline:
            missing = sorted(names - ready)
            raise KwokError(
                f"kwok made {len(names) - len(missing)} of {len(names)} fake nodes Ready in {timeout:.0f}s; "
                f"not: {', '.join(missing[:5])}"
            )
        time.sleep(0.5)


def remove_nodes(api: Api, names: list[str]) -> None:
    """Delete the fake nodes (their pods are the node lifecycle's and kwok's to clean up)."""
    for name in names:
        api.delete(f"/api/v1/nodes/{name}")  # one already gone is fine


def main(argv: list[str] | None = None) -> int:
    verbs = {"start": start, "stop": stop}
    return addon_main(argv, NAME, __doc__, verbs, (KwokError, ApiError), without_api=("stop",))


if __name__ == "__main__":
    import sys

    sys.exit(main())

"""The faults done to a pod on a cluster, whoever runs it (the chart's release or a peer's
workload): deleted through the API server, its trainer killed from the host, disrupted as the
cluster does it (tfmw.faults.disruptions), its node lost or cut off (tfmw.faults.nodes)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from entrypoint.standby import WAITING_NAME
from tfmw.chart import render
from tfmw.chart.helmkit import ToolError
from tfmw.faults import disruptions
from tfmw.faults.kube import FaultError, Kube
from tfmw.faults.nodes import NODE_SCENARIOS, NodeFaultError, cluster_dir, fault_node
from tfmw.k8s.api import ApiError, ns_path

# node-loss last: it stays lost
CLUSTER_SCENARIOS = ("kill-trainer", "delete-worker", "delete-chief", *disruptions.DISRUPTIONS, *NODE_SCENARIOS)
CHART = Path(render.CHART_DIR)  # the chart a suspend upgrades (the chart's release)

TRAINER_ARGV = [b"-m", b"entrypoint.training"]
STANDBY_ARGV = [b"-m", b"entrypoint.standby"]


def _runs_the_trainer(entry: Path) -> bool:
    """`python -m entrypoint.training`, started cold, or in a warm standby told to run it (the
    first attempt's always is): a standby keeps its command line, `... -m entrypoint.standby ...
    -- python -m entrypoint.training`, and is named WAITING_NAME only while it waits."""
    argv = (entry / "cmdline").read_bytes().split(b"\0")
    if argv[1:3] == TRAINER_ARGV:
        return True
    if argv[1:3] != STANDBY_ARGV or b"--" not in argv:
        return False
    command = argv[argv.index(b"--") + 1 :]
    return command[1:3] == TRAINER_ARGV and (entry / "comm").read_text().strip() != WAITING_NAME


def trainer_pids(pod_uid: str, proc: Path = Path("/proc")) -> list[int]:
    """The PIDs, seen from this host, of the process running `python -m entrypoint.training` in
    the pod whose UID is `pod_uid` (its cgroup path names the pod: `pod<uid>`, with dashes or
    underscores). Only where the cluster's nodes run on this host (`make cluster`)."""
    wanted = {f"pod{pod_uid}", f"pod{pod_uid.replace('-', '_')}"}
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if not _runs_the_trainer(entry):
                continue
            cgroup = (entry / "cgroup").read_text()
        except OSError:
            continue
        if any(name in cgroup for name in wanted):
            found.append(int(entry.name))
    return found


def kill_trainer(kube: Kube, namespace: str, victim: str) -> float:
    """SIGKILL the victim pod's training process from the host (a pod's own PID 1 cannot be
    SIGKILLed from inside it, and under a peer the trainer is PID 1); the fault's time."""
    pod = kube.get(ns_path(namespace, "pods", victim)) or {}
    uid = (pod.get("metadata") or {}).get("uid", "")
    pids = trainer_pids(uid) if uid else []
    if not pids:
        raise FaultError(f"kill-trainer: no training process of pod {victim} ({uid or 'no uid'}) on this host")
    fault_time = time.monotonic()
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return fault_time


def inject(
    kube: Kube,
    scenario: str,
    namespace: str,
    victim: str,
    held: list,
    node: str = "",
    node_dir: Path | None = None,
    release: str = "",
) -> float:
    """Do `scenario` to pod `victim` (on `node`; looked up when not given), whoever runs it (the
    chart's `release`, or a peer's workload); the fault's time (monotonic). A disruption goes to
    `held`, to be given back after the run. Node faults act on `make cluster`'s nodes (`node_dir`:
    its state folder, found from the kubeconfig when not given)."""
    if scenario in disruptions.DISRUPTIONS:
        try:
            disruption = disruptions.disrupt(kube, scenario, namespace, release, victim, str(CHART))
        except (ApiError, ToolError) as err:
            raise FaultError(f"{scenario} of {victim}: {err}") from None
        held.append(disruption)
        return disruption.fault_time
    if scenario == "kill-trainer":
        return kill_trainer(kube, namespace, victim)
    if scenario in NODE_SCENARIOS:
        if node_dir is None:
            try:
                node_dir = cluster_dir(kube.kubeconfig)
            except NodeFaultError as err:
                raise FaultError(str(err), 2) from None
        node = node or ((kube.get(ns_path(namespace, "pods", victim)) or {}).get("spec") or {}).get("nodeName", "")
        if not node:
            raise FaultError(f"{scenario}: pod {victim} is on no node")
        fault_time = time.monotonic()
        fault_node(node_dir, scenario, node)
        return fault_time
    if scenario not in CLUSTER_SCENARIOS:
        raise ValueError(f"not a cluster scenario: {scenario!r}")
    fault_time = time.monotonic()
    kube.delete(ns_path(namespace, "pods", victim))
    return fault_time


def hold_then_give_back(
    kube: Kube, namespace: str, sts: dict, scenario: str, disruption: disruptions.Disruption, timeout: float
) -> None:
    """Once the run is in the phase the disruption holds it in (Waiting, Suspended), give back
    what was taken (the room, the workers); FaultError when it never gets there."""
    phase, path = (
        disruptions.HELD_PHASE[scenario],
        ns_path(namespace, "configmaps", f"{sts['metadata']['name']}-status"),
    )
    deadline = time.monotonic() + timeout
    while (((kube.get(path) or {}).get("data") or {}).get("phase")) != phase:
        if time.monotonic() > deadline:
            raise FaultError(f"{scenario}: the run was never {phase} within {timeout:g}s")
        time.sleep(0.5)
    disruption.give_back()

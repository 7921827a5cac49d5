"""The chart's run on a Kubernetes cluster (`make cluster`'s, or any a kubeconfig reaches): the
chart installed with helm, its victim given the fault (tfmw.faults.inject), through the one
faulted run (tfmw.faults.faultedrun)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from entrypoint.rundir import RunDir
from tfmw.chart import render
from tfmw.chart.helmkit import ToolError
from tfmw.deploy import install
from tfmw.faults import disruptions
from tfmw.faults.analysis import FaultResult
from tfmw.faults.faultedrun import FaultedRun, Pods, faulted_run, fill_from_logs, log_tail
from tfmw.faults.inject import CLUSTER_SCENARIOS, hold_then_give_back, inject
from tfmw.faults.kube import FaultError, Kube
from tfmw.faults.local import run_sets
from tfmw.faults.nodes import (
    NODE_SCENARIOS,
    VICTIM_ORDINAL,
    NodeFaultError,
    cluster_dir,
    heal_and_check,
    node_parts,
    spread_values,
)
from tfmw.faults.podlogs import merge_incarnations, run_end
from tfmw.k8s.api import ns_path

# The chart's worker each scenario faults (peers' runs pick their own: tfmw.peers.run).
VICTIM = {
    "kill-trainer": 1,
    "delete-worker": 1,
    "delete-chief": 0,
    **dict.fromkeys(disruptions.DISRUPTIONS, 1),
    **dict.fromkeys(NODE_SCENARIOS, VICTIM_ORDINAL),
}
DEFAULT_KUBECONFIG = Path(render.REPO) / ".cluster" / "kubeconfig"  # what `make cluster` writes


def install_sets(
    steps: int, checkpoint_every: int, hang_timeout_seconds: int | None, extra_sets: tuple[str, ...] = ()
) -> list[str]:
    """The harness's --set items for a cluster run: shared storage from the cluster's default
    StorageClass (a ReadWriteMany claim), so a recreated pod finds the group's checkpoints (pure)."""
    return [
        "storage.type=createClaim",
        "storage.createClaim.size=1Gi",
        *run_sets(steps, checkpoint_every, hang_timeout_seconds, extra_sets),
    ]


def completed_marker(kube: Kube, namespace: str, statefulset: dict) -> dict | None:
    """The chief's COMPLETED marker, read from the shared claim's PersistentVolume when that
    is a hostPath on this machine (the local cluster's StorageClass); None otherwise."""
    spec = statefulset["spec"]["template"]["spec"]
    claims = [
        v["persistentVolumeClaim"]["claimName"] for v in spec.get("volumes") or [] if "persistentVolumeClaim" in v
    ]
    env = {e["name"]: e.get("value") for e in spec["containers"][0].get("env") or []}
    run_id = env.get("TFMW_RUN_ID")
    if not claims or not run_id:
        return None
    claim = kube.get(ns_path(namespace, "persistentvolumeclaims", claims[0]))
    volume = (claim or {}).get("spec", {}).get("volumeName")
    pv = kube.get(f"/api/v1/persistentvolumes/{volume}") if volume else None
    host_path = ((pv or {}).get("spec", {}).get("hostPath") or {}).get("path")
    marker = Path(RunDir.of(host_path, run_id).completed) if host_path else None
    if marker is None or not marker.is_file():
        return None
    try:
        return json.loads(marker.read_text())
    except (OSError, ValueError):
        return None


def worker_selector(release: str) -> str:
    return f"app.kubernetes.io/instance={release},app.kubernetes.io/component=worker"


class ChartRun(FaultedRun):
    """The chart installed with helm, its victim pod deleted through the API server (or its
    trainer killed, the pod disrupted, its node lost or cut off). It has ended once every pod
    logged `tfmw done` after the fault, or one `tfmw failed`; then the logs, the status ConfigMap
    and the COMPLETED marker say how it recovered."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        result: FaultResult,
        timeout: float,
        out,
        release: str,
        sets: list[str],
        node_dir: Path | None,
        victim_ordinal: int,
    ):
        super().__init__(kube, namespace, result, timeout, out)
        self.scenario, self.release, self.sets = result.scenario, release, sets
        self.node_dir, self.victim_ordinal = node_dir, victim_ordinal
        self.sts: dict = {}
        self.before: set[str] = set()  # the victim's pod UIDs before the fault
        self.node, self.old_uid = "", ""  # the victim's node and UID at the fault

    def install(self) -> Pods:
        values = [spread_values(self.node_dir)] if self.node_dir else []
        self.sts = _install_run(self.kube, self.release, self.namespace, self.sets, values=values)
        name = self.sts["metadata"]["name"]
        self.result.victim = f"{name}-{self.victim_ordinal}"
        return Pods(name, worker_selector(self.release))

    def fault(self) -> float:
        """The victim pod deleted through the API server, or its node lost or cut off."""
        victim = self.result.victim
        self.before = {inc.uid for inc in self.logs.snapshot() if inc.name == victim}
        pod = self.kube.get(ns_path(self.namespace, "pods", victim)) or {}
        self.node = (pod.get("spec") or {}).get("nodeName", "")
        self.old_uid = (pod.get("metadata") or {}).get("uid", "")
        return inject(
            self.kube,
            self.scenario,
            self.namespace,
            victim,
            self.held,
            node=self.node,
            node_dir=self.node_dir,
            release=self.release,
        )

    def wait_end(self, fault_time: float):
        if self.scenario in disruptions.HELD_PHASE:
            hold_then_give_back(self.kube, self.namespace, self.sts, self.scenario, self.held[0], self.timeout)
            self.result.seconds_held = time.monotonic() - fault_time
        return self.logs.wait_for(lambda pl: run_end(merge_incarnations(pl.snapshot()), fault_time), self.timeout)

    def record(self, started: float, fault_time: float, outcome) -> None:
        result, kube = self.result, self.kube
        self._record_recovery(started, fault_time, outcome)
        if self.node_dir is not None:  # before a heal: the Events of the cut are all there by now
            fault_wall = time.time() - (time.monotonic() - fault_time)
            events = (kube.get(ns_path(self.namespace, "events")) or {}).get("items") or []
            victim = (result.victim, self.old_uid)
            result.node_parts = node_parts(
                events, victim, fault_wall, result.seconds_to_pod_running, result.seconds_to_resume
            )
        if self.scenario == "node-partition":
            result.fenced_writes = heal_and_check(
                kube, self.node_dir, self.node, self.namespace, result.victim, self.old_uid, self.out
            )
            if result.fenced_writes != "none":
                result.completed, result.reason = False, f"the cut-off pod wrote after the heal: {result.fenced_writes}"
        elif self.scenario == "node-loss":
            result.reason += f"; node {self.node} stays lost (make cluster-down, then make cluster)"

    def _record_recovery(self, started: float, fault_time: float, outcome: str | None) -> None:
        """What the logs, the status ConfigMap and the COMPLETED marker say about the recovery."""
        result, kube, logs = self.result, self.kube, self.logs
        victim = result.victim
        new = [
            inc
            for inc in logs.snapshot()
            if inc.name == victim and inc.uid not in self.before and inc.running_since == inc.running_since
        ]
        if new:
            result.recreated_pod = new[0].name
            result.seconds_to_pod_running = new[0].running_since - fault_time
        status = kube.get(ns_path(self.namespace, "configmaps", f"{self.sts['metadata']['name']}-status"))
        phase = ((status or {}).get("data") or {}).get("phase", "")
        fill_from_logs(result, logs, started, fault_time)
        result.marker_digest = (completed_marker(kube, self.namespace, self.sts) or {}).get("weightsDigest", "")
        if outcome == "done" and not new and result.scenario != "kill-trainer":
            result.reason = f"pod {victim} was not recreated"
        elif outcome == "done":
            result.completed = True
            result.reason = f"status phase {phase}" if phase else "every worker logged tfmw done"
        else:
            result.reason = outcome or (
                f"no `tfmw done` from every worker within {self.timeout:g}s (status phase {phase or '-'})"
            )
        result.log_tail = log_tail(logs, 12)

    def clean_up(self, own_namespace: bool) -> None:
        super().clean_up(own_namespace)
        if not own_namespace:
            self.kube.helm("uninstall", self.release, "-n", self.namespace, check=False)


def run_cluster_scenario(
    scenario: str,
    kubeconfig: Path,
    namespace: str | None = None,
    steps: int = 120,
    checkpoint_every: int = 20,
    fault_after_step: int = 50,
    hang_timeout_seconds: int | None = None,
    extra_sets: tuple[str, ...] = (),
    timeout: float = 300,
    release: str | None = None,
    kube: Kube | None = None,
    out=lambda line: None,
    victim_ordinal: int | None = None,
) -> FaultResult:
    """One real 2-worker run of the chart installed with helm on a cluster, with one pod
    deleted through the API server once a checkpoint exists and training passed
    `fault_after_step`. The StatefulSet controller recreates the pod under the same name;
    the group resumes from the shared checkpoint. In `namespace` (default: a new one, deleted
    afterwards). `victim_ordinal`: another pod than the scenario's (node faults: 1, the chief
    0). Never raises on a failed recovery: the result says what happened."""
    if scenario not in CLUSTER_SCENARIOS:
        raise FaultError(f"unknown cluster scenario {scenario!r}; known: {', '.join(CLUSTER_SCENARIOS)}", 2)
    kube = kube or Kube(kubeconfig)
    result = FaultResult(scenario, False, "", steps, checkpoint_every)
    node_dir = None
    if scenario in NODE_SCENARIOS:
        try:
            node_dir = cluster_dir(kubeconfig)
        except NodeFaultError as err:
            raise FaultError(str(err), 2) from None
    own_namespace = namespace is None
    run = ChartRun(
        kube,
        namespace or f"tfmw-faults-{os.getpid()}-{scenario}"[:63],
        result,
        timeout,
        out,
        release=release or f"fault-{scenario}"[:40],
        sets=install_sets(
            steps, checkpoint_every, hang_timeout_seconds, (*disruptions.EXTRA_SETS.get(scenario, ()), *extra_sets)
        ),
        node_dir=node_dir,
        victim_ordinal=VICTIM[scenario] if victim_ordinal is None else victim_ordinal,
    )
    faulted_run(run, fault_after_step, own_namespace)
    return result


def _install_run(kube: Kube, release: str, namespace: str, sets: list[str], values: list[Path] = ()) -> dict:
    """`helm install` of the chart with the local overlay, `values` files and `sets`; its
    worker StatefulSet."""
    try:
        args = install.checked_args(release, namespace, sets, list(values), helm=kube.helm_bin)
    except ToolError as err:
        raise FaultError(f"the run's values are refused: {err}") from None
    kube.helm(*args)
    statefulsets = kube.items(ns_path(namespace, "statefulsets", group="apps/v1"), worker_selector(release))
    if len(statefulsets) != 1:
        raise FaultError(f"expected one worker StatefulSet for release {release}, found {len(statefulsets)}")
    return statefulsets[0]

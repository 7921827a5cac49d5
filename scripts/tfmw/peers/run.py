"""One run of the same training under a peer (TFJob or JobSet) or the chart, on the local
cluster, with one fault, through the fault harness's one faulted run of the chart
(tfmw.faults.faultedrun.faulted_run: every pod incarnation's log followed through the API server,
the measurements from the trainer's own lines by tfmw.faults.analysis.fill_result); only the
install (a TFJob or a JobSet), what "ended" means (its controller's word) and what is
recorded differ.

Faults (worker 1 is the victim, once the chief has published a checkpoint and passed the
fault step):
    kill-trainer   the training process SIGKILLed from the host (the pod stays)
    delete-worker  the pod deleted through the API server
    drain-worker   its node cordoned and the pod evicted (tfmw.faults.disruptions)
    node-loss      its node lost as a machine is: every process SIGKILLed, its link cut
                   (tfmw.faults.nodes; the node stays lost, so one run per cluster). The
                   workers are spread one per node, off the nodes given as the controller's.

Each run reports: install -> the chief's first step; fault -> the group's first step after it;
steps re-trained; whether the run ended Succeeded without anyone's help, and its weights.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from tfmw.faults.analysis import FaultResult
from tfmw.faults.cluster import run_cluster_scenario
from tfmw.faults.faultedrun import FaultedRun, Pods, faulted_run, fill_from_logs, log_tail
from tfmw.faults.inject import inject
from tfmw.faults.kube import Kube
from tfmw.faults.nodes import NODE_LOSS
from tfmw.faults.podlogs import PodLogs
from tfmw.k8s.api import ns_path
from tfmw.peers import workloads

# the chart, a TFJob with each restart policy its users set, a JobSet
SYSTEMS = ("chart", "tfjob-onfailure", "tfjob-exitcode", "jobset")
FAULTS = ("kill-trainer", "delete-worker", "drain-worker")
VICTIM = 1


def workload_kind(system: str) -> str:
    """The API kind a peer's `system` runs as: jobset or tfjob (pure)."""
    return "jobset" if system == "jobset" else "tfjob"


def workload(
    system: str, image: str, config: str, claim: str, resources: dict, extra: dict | None = None
) -> tuple[str, dict]:
    """(its API kind, the object) of `system` (pure); `extra`: pod-spec fields added."""
    name, kind = f"peer-{system}", workload_kind(system)
    if kind == "jobset":
        return kind, workloads.jobset(name, image, config, claim, resources, extra=extra)
    policy = {"tfjob-onfailure": "OnFailure", "tfjob-exitcode": "ExitCode"}[system]
    return kind, workloads.tfjob(name, image, config, claim, resources, policy=policy, extra=extra)


@dataclass
class PeerRun:
    system: str
    fault: str
    result: FaultResult  # result.seconds_to_first_step: the install -> the chief's first step
    phase: str = ""  # Succeeded / Failed / '' (neither within the timeout)
    seconds_to_end: float = float("nan")  # the fault -> the controller said Succeeded or Failed


def _victim_name(logs: PodLogs) -> str:
    names = [inc.name for inc in logs.snapshot() if inc.ordinal == VICTIM]
    return names[-1] if names else ""


class PeerFaultedRun(FaultedRun):
    """The run as a TFJob or a JobSet (its ConfigMap and shared claim first), the fault done
    to worker 1 by the harness's own inject(). It has ended once its controller says Succeeded
    or Failed; the reason says which, in the controller's words, and where its pods were left."""

    needs_first_step = True

    def __init__(self, kube: Kube, namespace: str, run: PeerRun, timeout: float, out, config: dict, workload: dict):
        """`config` the training config (its ConfigMap's), `workload` the TFJob or JobSet (run.workload)."""
        super().__init__(kube, namespace, run.result, timeout, out)
        self.run, self.config, self.workload = run, config, workload
        self.name = f"peer-{run.system}"
        self.collection = workloads.collection(workload_kind(run.system), namespace)

    def install(self) -> Pods:
        name, namespace = self.name, self.namespace
        self.kube.call("POST", ns_path(namespace, "configmaps"), workloads.config_map(f"{name}-training", self.config))
        self.kube.call("POST", ns_path(namespace, "persistentvolumeclaims"), workloads.shared_claim(f"{name}-shared"))
        created = time.monotonic()
        self.kube.call("POST", self.collection, self.workload)
        ordinal_of = workloads.ordinal_of(workload_kind(self.run.system))
        return Pods(name, f"app.kubernetes.io/name={name}", ordinal_of, since=created)

    def fault(self) -> float:
        self.result.victim = _victim_name(self.logs)
        return inject(self.kube, self.run.fault, self.namespace, self.result.victim, self.held)  # the harness's own

    def wait_end(self, fault_time: float):
        kind, path = workload_kind(self.run.system), f"{self.collection}/{self.name}"
        ended = self.logs.wait_for(lambda pl: workloads.phase(kind, self.kube.get(path)), self.timeout, interval=0.5)
        self.run.phase = ended or ""
        if ended:
            self.run.seconds_to_end = time.monotonic() - fault_time
        return ended

    def record(self, started: float, fault_time: float, outcome) -> None:
        run, result = self.run, self.result
        fill_from_logs(result, self.logs, started, fault_time)
        result.completed = run.phase == "Succeeded"
        said = workloads.phase_message(self.kube.get(f"{self.collection}/{self.name}"))
        ended = run.phase or f"neither Succeeded nor Failed within {self.timeout:g}s"
        result.reason = f"{run.system} {ended}" + (f" ({said})" if said else "")
        if run.phase != "Succeeded":  # where it was left: what an admin would find
            pods = self.kube.items(ns_path(self.namespace, "pods"), f"app.kubernetes.io/name={self.name}")
            result.reason += f"; pods: {workloads.pods_line(pods)}"
            if workload_kind(run.system) == "jobset":
                jobs = self.kube.items(ns_path(self.namespace, "jobs", group="batch/v1"), "")  # the run's namespace
                result.reason += f"; Jobs: {workloads.jobs_line(jobs)}"
        result.log_tail = log_tail(self.logs, 8)

    def clean_up(self, own_namespace: bool) -> None:
        # A pod on a lost node stays Terminating for good (no kubelet confirms it stopped), and
        # so would its namespace: the cluster goes instead (one node-loss run per cluster).
        if self.run.fault != NODE_LOSS:
            super().clean_up(own_namespace)


def run_peer(
    kube: Kube,
    system: str,
    fault: str,
    image: str,
    values: dict,
    resources: dict,
    steps: int = 120,
    checkpoint_every: int = 20,
    fault_after_step: int = 50,
    timeout: float = 300,
    out=lambda line: None,
    avoid_nodes: tuple[str, ...] = (),
) -> PeerRun:
    """A TFJob or a JobSet of the run in a namespace of its own (deleted after), with `fault`,
    through the harness's faulted run (tfmw.faults.faultedrun.faulted_run). Under node-loss the
    workers are spread one per node, never on `avoid_nodes` (where the peer's controller runs)."""
    run = PeerRun(system, fault, FaultResult(fault, False, "", steps, checkpoint_every))
    name = f"peer-{system}"
    extra = workloads.placement(name, avoid_nodes) if fault == NODE_LOSS else None
    _, obj = workload(system, image, f"{name}-training", f"{name}-shared", resources, extra)
    config = workloads.training_config(values, steps, checkpoint_every)
    namespace = f"tfmw-peers-{os.getpid()}-{system}-{fault}"[:63]
    faulted_run(PeerFaultedRun(kube, namespace, run, timeout, out, config, obj), fault_after_step)
    return run


def run_chart(
    kube: Kube,
    kubeconfig: Path,
    fault: str,
    steps: int = 120,
    checkpoint_every: int = 20,
    fault_after_step: int = 50,
    timeout: float = 300,
    out=lambda line: None,
) -> PeerRun:
    """The chart's run with the same fault, through the fault harness's cluster mode."""
    result = run_cluster_scenario(
        fault,
        kubeconfig,
        steps=steps,
        checkpoint_every=checkpoint_every,
        fault_after_step=fault_after_step,
        timeout=timeout,
        kube=kube,
        out=out,
    )
    return PeerRun("chart", fault, result, phase="Succeeded" if result.completed else "")

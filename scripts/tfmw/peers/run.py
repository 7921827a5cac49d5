"""One run of the same training under a peer (TFJob or JobSet) or the chart, on the local
cluster, with one fault, measured the way the fault harness measures the chart
(tfmw.faults.cluster: every pod incarnation's log followed through the API server, the
measurements from the trainer's own lines by tfmw.faults.analysis.fill_result).

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

from tfmw.faults import disruptions
from tfmw.faults.analysis import FaultResult, fill_result
from tfmw.faults.cluster import (
    FaultError,
    Kube,
    PodLogs,
    Stream,
    first_index_after,
    first_step_after,
    inject,
    merge_incarnations,
    ready_for_fault,
    run_cluster_scenario,
)
from tfmw.faults.nodes import NODE_LOSS
from tfmw.k8s.api import ApiError, ns_path
from tfmw.peers import workloads

# the chart, a TFJob with each restart policy its users set, a JobSet
SYSTEMS = ("chart", "tfjob-onfailure", "tfjob-exitcode", "jobset")
FAULTS = ("kill-trainer", "delete-worker", "drain-worker")
VICTIM = 1
API = {
    "tfjob": ("/apis/kubeflow.org/v1", "tfjobs"),
    "jobset": ("/apis/jobset.x-k8s.io/v1alpha2", "jobsets"),
}


def workload(
    system: str, image: str, config: str, claim: str, resources: dict, extra: dict | None = None
) -> tuple[str, dict]:
    """(its API kind, the object) of `system` (pure); `extra`: pod-spec fields added."""
    name = f"peer-{system}"
    if system == "jobset":
        return "jobset", workloads.jobset(name, image, config, claim, resources, extra=extra)
    policy = {"tfjob-onfailure": "OnFailure", "tfjob-exitcode": "ExitCode"}[system]
    return "tfjob", workloads.tfjob(name, image, config, claim, resources, policy=policy, extra=extra)


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
    """A TFJob or a JobSet of the run in a namespace of its own (deleted after), with `fault`.
    Under node-loss the workers are spread one per node, never on `avoid_nodes` (where the
    peer's controller runs)."""
    name = f"peer-{system}"
    namespace = f"tfmw-peers-{os.getpid()}-{system}-{fault}"[:63]
    run = PeerRun(system, fault, FaultResult(fault, False, "", steps, checkpoint_every))
    result = run.result
    kube.call("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
    logs = None
    held: list[disruptions.Disruption] = []
    started = time.monotonic()
    try:
        config = workloads.training_config(values, steps, checkpoint_every)
        kube.call("POST", ns_path(namespace, "configmaps"), workloads.config_map(f"{name}-training", config))
        kube.call("POST", ns_path(namespace, "persistentvolumeclaims"), workloads.shared_claim(f"{name}-shared"))
        # Pods of a namespace whose default ServiceAccount is not there yet are refused (and
        # retried by the controller): not what the measured start should include.
        deadline = time.monotonic() + 60
        while kube.get(ns_path(namespace, "serviceaccounts", "default")) is None and time.monotonic() < deadline:
            time.sleep(0.2)
        extra = workloads.placement(name, avoid_nodes) if fault == NODE_LOSS else None
        kind, obj = workload(system, image, f"{name}-training", f"{name}-shared", resources, extra)
        group, plural = API[kind]
        created = time.monotonic()
        kube.call("POST", f"{group}/namespaces/{namespace}/{plural}", obj)
        selector = f"app.kubernetes.io/name={name}"
        logs = PodLogs(kube, namespace, name, selector, out=out, ordinal_of=workloads.ordinal_of(kind))
        logs.start()

        result.seconds_to_first_step = first_step_after(logs, created, timeout)
        if result.seconds_to_first_step != result.seconds_to_first_step:  # NaN
            why = f" ({logs.last_error})" if logs.last_error else ""
            raise FaultError(f"no first step within {timeout:g}s{why}")

        def checkpoint_and_step(pl: PodLogs):
            return ready_for_fault(merge_incarnations(pl.snapshot()).get(0, Stream()), fault_after_step)

        if logs.wait_for(checkpoint_and_step, timeout) is None:
            raise FaultError(f"never reached a checkpoint and step {fault_after_step} before the fault")
        result.victim = _victim_name(logs)
        fault_time = inject(kube, fault, namespace, result.victim, held)  # the harness's own
        path = f"{group}/namespaces/{namespace}/{plural}/{name}"
        ended = logs.wait_for(lambda pl: workloads.phase(kind, kube.get(path)), timeout, interval=0.5)
        run.phase = ended or ""
        if ended:
            run.seconds_to_end = time.monotonic() - fault_time
        time.sleep(1.0)  # the last lines arrive before the streams are read
        result.seconds_total = time.monotonic() - started
        streams = merge_incarnations(logs.snapshot())
        if 0 in streams:
            marks = {o: first_index_after(st.times, fault_time) for o, st in streams.items()}
            fill_result(result, streams, marks, fault_time)
        result.completed = run.phase == "Succeeded"
        said = workloads.phase_message(kube.get(path))
        ended = run.phase or f"neither Succeeded nor Failed within {timeout:g}s"
        result.reason = f"{system} {ended}" + (f" ({said})" if said else "")
        if run.phase != "Succeeded":  # where it was left: what an admin would find
            result.reason += f"; pods: {workloads.pods_line(kube.items(ns_path(namespace, 'pods'), selector))}"
            if kind == "jobset":
                jobs = kube.items(ns_path(namespace, "jobs", group="batch/v1"), "")  # the run's namespace
                result.reason += f"; Jobs: {workloads.jobs_line(jobs)}"
        result.log_tail = [f"[{inc.name} {inc.uid[:8]}] {line}" for inc in logs.snapshot() for line in inc.lines[-8:]]
        return run
    except (FaultError, ApiError) as err:
        result.reason = str(err)
        return run
    finally:
        for disruption in held:
            disruption.cleanup()
        if logs is not None:
            logs.stop()
        # A pod on a lost node stays Terminating for good (no kubelet confirms it stopped), and
        # so would its namespace: the cluster goes instead (one node-loss run per cluster).
        if fault != NODE_LOSS:
            kube.delete_namespace(namespace)


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

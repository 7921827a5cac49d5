"""The one faulted-run skeleton of the cluster mode (tfmw.faults.faultedrun.faulted_run), against an
API answered from memory (no cluster): the order of its steps, what is undone whatever happens,
and a peer's run through it (tfmw.peers.run). The real runs are in tests/e2e/cluster."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from entrypoint import loglines
from tfmw.chart.helmkit import ToolError
from tfmw.faults import faultedrun
from tfmw.faults import kube as fault_kube
from tfmw.faults.analysis import FaultResult
from tfmw.faults.disruptions import Disruption
from tfmw.peers import run as peers_run


def chief_lines(checkpoint_step: int | None) -> list[str]:
    lines = [loglines.line(loglines.START, run="r", worker="0/2", replicas=2, resume_step=0, steps=10)]
    lines += [loglines.line(loglines.PROGRESS, step=f"{s}/10", loss="0.5") for s in range(1, 7)]
    if checkpoint_step is not None:
        lines.append(loglines.line(loglines.CHECKPOINT, "saved", step=checkpoint_step, path="/c"))
    return lines


class _Log(list):
    """A followed log that has ended: its lines."""

    def close(self):
        pass


class _Cluster:
    """What a faulted run asks of the cluster, answered from memory: worker pods whose logs are
    `logs[name]`, every call and deletion recorded."""

    def __init__(self, logs: dict[str, list[str]], labels: dict[str, dict] | None = None, objects=None):
        self.logs, self.labels, self.objects = logs, labels or {}, objects or {}
        self.calls: list[tuple[str, str]] = []
        self.deleted: list[str] = []
        self.namespaces: list[str] = []
        self.deleted_namespaces: list[str] = []
        self.api = SimpleNamespace(follow_log=lambda namespace, pod, container=None: _Log(self.logs[pod]))

    def make_namespace(self, namespace):
        self.namespaces.append(namespace)

    def delete_namespace(self, namespace):
        self.deleted_namespaces.append(namespace)

    def call(self, method, path, body=None, **query):
        self.calls.append((method, path))
        return {}

    def items(self, path, selector):
        return [
            {
                "metadata": {"name": name, "uid": f"uid-{name}", "labels": self.labels.get(name, {})},
                "spec": {"containers": [{"name": "worker"}], "nodeName": "node-1"},
                "status": {"phase": "Running", "containerStatuses": [{"restartCount": 0, "state": {"running": {}}}]},
            }
            for name in self.logs
            if path.endswith("/pods")
        ]

    def get(self, path):
        return self.objects.get(path)

    def delete(self, path):
        self.deleted.append(path)


class _Run(faultedrun.FaultedRun):
    """A run whose steps only say they happened."""

    def __init__(self, kube, timeout=5.0):
        super().__init__(kube, "ns", FaultResult("delete-worker", False, "", 10, 2), timeout)
        self.steps: list[str] = []

    def install(self):
        self.steps.append("install")
        return faultedrun.Pods("w", "sel")

    def fault(self):
        self.steps.append("fault")
        self.held.append(Disruption(time.monotonic(), lambda: None, lambda: self.steps.append("disruption undone")))
        return time.monotonic()

    def wait_end(self, fault_time):
        self.steps.append("wait_end")
        return "done"

    def record(self, started, fault_time, outcome):
        self.steps.append(f"record {outcome}")
        self.result.completed = True

    def clean_up(self, own_namespace):
        self.steps.append(f"clean_up own={own_namespace}")
        super().clean_up(own_namespace)


def test_a_faulted_run_installs_follows_faults_once_ready_waits_records_and_cleans_up():
    kube = _Cluster({"w-0": chief_lines(checkpoint_step=4), "w-1": chief_lines(None)})
    run = _Run(kube)
    faultedrun.faulted_run(run, fault_after_step=5)
    assert kube.namespaces == ["ns"] and kube.deleted_namespaces == ["ns"]
    assert run.steps == ["install", "fault", "wait_end", "record done", "disruption undone", "clean_up own=True"]
    assert run.result.completed and run.result.reason == ""
    assert run.result.seconds_to_first_step >= 0
    assert run.logs.stopping.is_set()


def test_a_run_that_never_reaches_the_fault_point_says_so_and_is_still_removed():
    kube = _Cluster({"w-0": chief_lines(checkpoint_step=None), "w-1": chief_lines(None)})
    run = _Run(kube, timeout=1.0)
    faultedrun.faulted_run(run, fault_after_step=5, own_namespace=False)
    assert run.steps == ["install", "clean_up own=False"]
    assert run.result.reason == "never reached a checkpoint and step 5 before the fault"
    assert kube.namespaces == [] and kube.deleted_namespaces == []


def test_a_run_that_needs_its_first_step_stops_without_one():
    kube = _Cluster({"w-0": [], "w-1": []})
    run = _Run(kube, timeout=0.5)
    run.needs_first_step = True
    faultedrun.faulted_run(run, fault_after_step=5)
    assert run.steps == ["install", "clean_up own=True"]
    assert run.result.reason == "no first step within 0.5s" and not run.result.completed


def test_a_refusal_of_the_checked_deploy_path_is_the_runs_one_line_reason():
    """A suspend's resume (tfmw.deploy.suspension) refused: its ToolError's line is the reason."""
    kube = _Cluster({"w-0": chief_lines(checkpoint_step=4), "w-1": chief_lines(None)})
    line = "release r is not installed in namespace ns (deploy it with `make deploy ...`)"

    def refused_resume():
        raise ToolError(line, exit_code=3)

    class _Suspended(_Run):
        def fault(self):
            self.steps.append("fault")
            self.held.append(Disruption(time.monotonic(), refused_resume, self.undone))
            return time.monotonic()

        def wait_end(self, fault_time):
            self.steps.append("wait_end")
            self.held[0].give_back()  # as ChartRun gives the workers back once the run is Suspended

        def undone(self):
            self.steps.append("disruption undone")

    run = _Suspended(kube)
    faultedrun.faulted_run(run, fault_after_step=5)
    assert run.result.reason == line and not run.result.completed
    assert run.steps == ["install", "fault", "wait_end", "disruption undone", "clean_up own=True"]


def test_a_peers_run_goes_through_the_same_skeleton():
    labels = {f"peer-jobset-w-{i}": {"batch.kubernetes.io/job-completion-index": str(i)} for i in (0, 1)}
    logs = {"peer-jobset-w-0": chief_lines(checkpoint_step=4), "peer-jobset-w-1": chief_lines(None)}
    completed = {"type": "Completed", "status": "True", "reason": "AllJobsCompleted", "message": "jobset completed"}
    done = {"status": {"conditions": [completed]}}
    kube = _Cluster(logs, labels)
    kube.get = lambda path: done if "/jobsets/peer-jobset" in path else None
    values = {"training": {"config": {"model": {"name": "cnn"}}}}
    run = peers_run.run_peer(kube, "jobset", "delete-worker", "img:1", values, {}, 10, 2, 5, timeout=5)
    assert (run.system, run.fault, run.phase) == ("jobset", "delete-worker", "Succeeded")
    assert run.result.completed
    assert run.result.reason == "jobset Succeeded (Completed: AllJobsCompleted: jobset completed)"
    assert run.result.victim == "peer-jobset-w-1" and run.seconds_to_end >= 0
    assert kube.deleted == [f"/api/v1/namespaces/{kube.namespaces[0]}/pods/peer-jobset-w-1"]
    assert kube.namespaces[0].startswith("tfmw-peers-") and kube.deleted_namespaces == kube.namespaces
    posted = [path.rsplit("/", 1)[-1] for method, path in kube.calls if method == "POST"]
    assert posted == ["configmaps", "persistentvolumeclaims", "jobsets"]


FAKE_HELM = """#!/bin/sh
echo "KUBECONFIG=$KUBECONFIG HOME=$HOME"
echo "WARNING: noise" >&2
echo "Error: INSTALLATION FAILED: boom" >&2
exit 1
"""


def test_the_harnesss_helm_runs_against_its_kubeconfig_and_fails_in_one_line(tmp_path):
    helm = tmp_path / "helm"
    helm.write_text(FAKE_HELM)
    helm.chmod(0o755)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: x}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
        "current-context: x\n"
    )
    kube = fault_kube.Kube(kubeconfig, helm=str(helm))
    with pytest.raises(fault_kube.FaultError) as err:
        kube.helm("install", "rel", "chart", "--wait")
    assert str(err.value) == "`helm install rel chart ...` exited 1: INSTALLATION FAILED: boom"
    proc = kube.helm("uninstall", "rel", check=False)
    assert proc.returncode == 1 and proc.stdout.startswith(f"KUBECONFIG={kubeconfig} ")

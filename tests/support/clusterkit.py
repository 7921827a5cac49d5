"""Helpers for tests against the real local control plane (scripts/tfmw/devcluster): kubectl and helm
with the test cluster's kubeconfig, waiting on API state, per-test namespaces."""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from repo import REPO

from tfmw.devcluster.controlplane import ClusterState
from tfmw.devcluster.kwok import ANNOTATION as KWOK_ANNOTATION
from tfmw.faults.kube import Kube
from tfmw.faults.podlogs import PodLogs
from tfmw.k8s import namespaces
from tfmw.k8s.api import Api, ApiError, ns_path

CHART = REPO / "charts" / "tf-multiworker"
TOOLS = REPO / ".tools" / "bin"
# Pods that only need to exist and keep running (lifecycle tests): the launcher runs this
# user command instead of training, so a test costs seconds of CPU, not minutes. It listens
# on the workers' port as a training worker would, so `helm test` can pass (http.server's
# default port 8000 is the workers' port here: a "2222" in --set would become a number).
SLEEPER = ["training.command={python,-m,http.server,--directory,/tmp}", "workers.port=8000"]
# GPU workers (the nodes' fake GPUs) on values/local.yaml, whose resources fit CPU workers: the chart
# refuses a GPU worker with less than 2Gi of memory requested and 2Gi + /dev/shm (1Gi there) as limit.
GPU_MEMORY = ["workers.resources.requests.memory=2Gi", "workers.resources.limits.memory=3Gi"]

# Run with `kubectl exec ... -- python -c KILL_TRAINER` in a worker's container: SIGKILLs the
# process running the built-in trainer and prints how many it killed. That is `python -m
# entrypoint.training` started cold, or a warm standby told to run it (the first attempt's always
# is): a standby keeps its command line (`-m entrypoint.standby ... -- python -m
# entrypoint.training`) and is named tfmw-standby only while it waits (tfmw.faults.inject, the
# same rule seen from the host).
KILL_TRAINER = """
import os, signal
def runs_trainer(pid):
    argv = open(f'/proc/{pid}/cmdline', 'rb').read().split(b'\\0')
    if argv[1:3] == [b'-m', b'entrypoint.training']:
        return True
    if argv[1:3] != [b'-m', b'entrypoint.standby'] or b'--' not in argv:
        return False
    command = argv[argv.index(b'--') + 1:]
    waiting = open(f'/proc/{pid}/comm').read().strip() == 'tfmw-standby'
    return command[1:3] == [b'-m', b'entrypoint.training'] and not waiting
killed = 0
for pid in [int(p) for p in os.listdir('/proc') if p.isdigit() and int(p) not in (1, os.getpid())]:
    try:
        if runs_trainer(pid):
            os.kill(pid, signal.SIGKILL)
            killed += 1
    except OSError:
        continue
print(killed)
"""


@dataclass
class Cluster:
    state: ClusterState
    image: str = ""  # the worker image every node holds (the chart's default for workers.gpus 0)

    @property
    def kubeconfig(self) -> Path:
        return self.state.kubeconfig

    @functools.cached_property
    def api(self) -> Api:
        """The admin client, made once (its TLS context loads the certificates from disk)."""
        return self.state.api("admin")

    def env(self, **extra) -> dict:
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig))
        env.update(extra)
        return env

    def run(self, argv: list[str], check: bool = True, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
        proc = subprocess.run(argv, capture_output=True, text=True, env=self.env(), timeout=timeout, **kw)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(map(str, argv))} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
        return proc

    def kubectl(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        return self.run([str(TOOLS / "kubectl"), *args], check=check, timeout=timeout)

    def helm(
        self, *args: str, helm: str = "helm", check: bool = True, timeout: float = 300
    ) -> subprocess.CompletedProcess:
        return self.run([str(TOOLS / helm), *args], check=check, timeout=timeout)

    def tfmw(self, *args: str, check: bool = False, timeout: float = 600) -> subprocess.CompletedProcess:
        import sys

        return self.run([sys.executable, "-m", "tfmw.cli", *args], check=check, timeout=timeout, cwd=REPO)

    # -- reading state ----------------------------------------------------------------
    def pods(self, namespace: str, selector: str = "") -> list[dict]:
        return self.api.items(ns_path(namespace, "pods"), labelSelector=selector or None)

    def workers(self, namespace: str, release: str) -> list[dict]:
        pods = self.pods(namespace, f"app.kubernetes.io/instance={release},app.kubernetes.io/component=worker")
        return sorted(pods, key=lambda p: p["metadata"]["name"])

    def statefulset(self, namespace: str, name: str) -> dict | None:
        return self.api.get_or_none(ns_path(namespace, "statefulsets", name, group="apps/v1"))

    def logs(self, namespace: str, pod: str, previous: bool = False) -> str:
        args = ["logs", "-n", namespace, pod] + (["--previous"] if previous else [])
        return self.kubectl(*args, check=False).stdout

    def events(self, namespace: str) -> list[dict]:
        return self.api.items(ns_path(namespace, "events"))


# ---------------------------------------------------------------- one-time builds, ahead

# What a later fixture builds once (python -m <module>), by the fixture that needs it: built
# ahead, at the lowest priority, while the first cluster tests wait on Kubernetes.
BUILDS_AHEAD = {
    "queued": "tfmw.devcluster.build_kueue",  # Kueue's manager: ~6 min on a new machine
    # Flux's source- and helm-controller: ~14 min on a loaded 2-core machine (12 CPU-minutes)
    "flux": "tfmw.devcluster.build_flux",
    "kwok_nodes": "tfmw.devcluster.build_kwok",  # kwok's controller: ~4 min
}
_AHEAD: dict[str, subprocess.Popen] = {}


def build_ahead(session, folder) -> None:
    """Start, in the background, the builds BUILDS_AHEAD names for the fixtures this session's
    tests use (the shared cluster is up: its tests' waits leave the cores idle)."""
    wanted = {name for item in session.items for name in getattr(item, "fixturenames", ())}
    for fixture, module in BUILDS_AHEAD.items():
        if fixture in wanted and fixture not in _AHEAD:
            with open(folder / f"build-ahead-{fixture}.log", "wb") as log:
                _AHEAD[fixture] = subprocess.Popen(
                    ["nice", "-n", "19", sys.executable, "-m", module],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its go build with it, when stopped
                )


def stop_builds_ahead() -> None:
    """The session is ending: a build ahead no test waited for (they did not run) is stopped."""
    while _AHEAD:
        proc = _AHEAD.popitem()[1]
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait()


def built_ahead(fixture: str) -> None:
    """Wait for what was built ahead for `fixture`, if anything was, at the priority of the
    tests from now on (nothing else is to be done meanwhile): its own build (a lock there) then
    finds it done, or says why it is not."""
    proc = _AHEAD.pop(fixture, None)
    if proc is None:
        return
    if proc.poll() is None:
        try:
            os.setpriority(os.PRIO_PGRP, proc.pid, 0)
        except OSError:
            pass  # not allowed to raise it here: it finishes at its own pace
    proc.wait()


def wait_for(
    predicate: Callable[[], object],
    timeout: float,
    what: str,
    interval: float = 0.5,
    describe: Callable[[], str] | None = None,
):
    """Poll until predicate() is truthy; fail naming `what` (and describe()'s output)."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except (ApiError, AssertionError, KeyError, IndexError) as exc:
            last_exc = exc
        time.sleep(interval)
    detail = describe() if describe else ""
    raise AssertionError(
        f"timed out after {timeout:g}s waiting for {what}"
        + (f" (last error: {last_exc})" if last_exc else "")
        + (f"\n{detail}" if detail else "")
    )


def unfit_nodes(nodes: list[dict]) -> list[str]:
    """What keeps each node from running a test's pods (pure), a line per node that cannot: not
    Ready, cordoned, a taint that repels pods, a pressure condition. Empty when every node can."""
    lines = []
    for node in nodes:
        if (node["metadata"].get("annotations") or {}).get(KWOK_ANNOTATION) == "fake":
            continue  # kwok's, tainted on purpose: no test pod lands there unless it asks to
        conditions = {c["type"]: c for c in (node.get("status") or {}).get("conditions") or []}
        ready = conditions.get("Ready", {})
        why = []
        if ready.get("status") != "True":
            why.append(f"not Ready ({ready.get('reason')}: {ready.get('message')})")
        why += [
            f"{kind} ({conditions[kind].get('message')})"
            for kind in ("DiskPressure", "MemoryPressure", "PIDPressure")
            if conditions.get(kind, {}).get("status") == "True"
        ]
        if (node.get("spec") or {}).get("unschedulable"):
            why.append("cordoned")
        why += [
            f"taint {t['key']}:{t['effect']}"
            for t in (node.get("spec") or {}).get("taints") or []
            if t.get("effect") in ("NoSchedule", "NoExecute")
        ]
        if why:
            lines.append(f"{node['metadata']['name']}: {'; '.join(why)}")
    return lines


def wait_nodes_fit(cluster: Cluster, timeout: float) -> None:
    """Until every node of `cluster` can run pods. A node a test broke (or the host took away)
    fails the next test here, naming why, instead of each later test waiting out its own
    timeouts with pods that cannot run."""
    wait_for(
        lambda: not unfit_nodes(cluster.api.items("/api/v1/nodes")),
        timeout,
        "the test cluster's nodes to run pods (every one Ready and schedulable)",
        1,
        lambda: (
            "\n".join(unfit_nodes(cluster.api.items("/api/v1/nodes")))
            + f"\n{shutil.disk_usage(cluster.state.dir).free / 2**30:.1f} GiB free on the cluster's disk"
        ),
    )


def new_namespace(cluster: Cluster, prefix: str, labels: dict | None = None) -> str:
    """A namespace of the test's own (tfmw.k8s.namespaces), ready for pods."""
    name = f"{prefix[:40].lower().replace('_', '-').strip('-')}-{uuid.uuid4().hex[:5]}"
    wait = namespaces.SERVICE_ACCOUNT_SECONDS
    if not namespaces.create(cluster.api, name, labels, timeout=wait):
        raise AssertionError(f"timed out after {wait:g}s waiting for the default ServiceAccount in {name}")
    return name


def delete_namespace(cluster: Cluster, name: str, timeout: float = 120) -> None:
    """Delete the namespace and its pods at once (tfmw.k8s.namespaces) and wait until they are
    gone, so one test's workers never eat the next test's CPU. The namespace controller
    finishes the rest in the background."""
    namespaces.delete(cluster.api, name, force_pods=True)
    wait_for(
        lambda: not cluster.pods(name),
        timeout,
        f"the pods of namespace {name} to stop",
        describe=lambda: json.dumps([p["metadata"]["name"] for p in cluster.pods(name)]),
    )


def pod_phase_counts(pods: list[dict]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for pod in pods:
        phase = (pod.get("status") or {}).get("phase", "?")
        counts[phase] = counts.get(phase, 0) + 1
    return counts


def all_running(pods: list[dict], count: int) -> bool:
    return len(pods) == count and all(
        (p.get("status") or {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp") for p in pods
    )


# ---------------------------------------------------------------- a run, as its chart release records it


def status(cluster: Cluster, ns: str, release: str) -> dict:
    """The release's run status (its status ConfigMap's data; {} before worker 0 records it)."""
    cm = cluster.api.get_or_none(ns_path(ns, "configmaps", f"{release}-tf-multiworker-status"))
    return (cm or {}).get("data") or {}


def wait_succeeded(cluster: Cluster, ns: str, release: str, timeout: float = 400) -> dict:
    """The status once the run Succeeded; fails at once if it is recorded Failed."""

    def done():
        data = status(cluster, ns, release)
        assert data.get("phase") != "Failed", data
        return data if data.get("phase") == "Succeeded" else None

    return wait_for(done, timeout, f"run {release} to succeed", 1, lambda: str(status(cluster, ns, release)))


def follow(cluster: Cluster, ns: str, release: str) -> PodLogs:
    """Every incarnation of every worker pod of the release, followed from its first line."""
    selector = f"app.kubernetes.io/instance={release},app.kubernetes.io/component=worker"
    logs = PodLogs(Kube(cluster.kubeconfig), ns, f"{release}-tf-multiworker", selector)
    logs.start()
    return logs

"""The node agent: registers the cluster's Nodes and runs the pods bound to them.

One process for every node of a local cluster (they share one machine and one bridge).
Per node it does a kubelet's API work with that node's own identity (system:node:<name>,
so the Node authorizer and NodeRestriction admission apply): create the Node, renew its
Lease, report Ready, read the pods bound to it, run them (pods.py), patch their status,
do the final delete of a terminated pod, and serve `kubectl logs` (kubelet_api.py).
With the separate cluster-services identity it also keeps every pod's hosts file from the
EndpointSlices (hosts.py: the cluster DNS) and provisions hostPath PersistentVolumes for
claims of the local StorageClass (provisioner.py).

Loop: every TICK seconds, list each node's pods, reconcile, advance every pod, patch
changed statuses. Stops on SIGTERM/SIGINT: every pod gets SIGTERM and its grace period
(at most STOP_GRACE), then its network namespace is removed.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

from scripts.kube.api import Api, ApiError, ns_path
from scripts.kube.controlplane import (CLUSTER_DOMAIN, KUBERNETES_VERSION, PROVISIONER, STORAGE_CLASS,
                                       ClusterState, node_pod_prefix, slot_network)
from scripts.kube.node import hosts as hosts_mod
from scripts.kube.node import kubelet_api, provisioner
from scripts.kube.node.podstatus import now_rfc3339, parse_quantity
from scripts.kube.node.pods import NodeContext, Pod, PodSetupError, interpreter_reachable_by_others

TICK = 0.25
SERVICES_TICK = 0.5
LEASE_SECONDS = 40
STOP_GRACE = 60.0
REPO = Path(__file__).resolve().parents[3]


def log(line: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)


def base_env(python: str) -> dict:
    """What every container starts with: the project image's ENV (Dockerfile), a PATH that
    finds this venv's tools first, and the host's locale; nothing else of the host's."""
    from scripts.localrun.podspec import image_env
    env = {"PATH": os.pathsep.join([str(Path(python).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
           "LANG": os.environ.get("LANG", "C.UTF-8"), "PYTHONDONTWRITEBYTECODE": "1",
           "TF_CPP_MIN_LOG_LEVEL": "2",
           # The "image" is this checkout: its code wins over whatever the venv's editable
           # install points at (a second clone on the same machine runs its own code).
           "PYTHONPATH": str(REPO)}
    for key in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):  # this machine's numpy needs them
        if key in os.environ:
            env[key] = os.environ[key]
    dockerfile = REPO / "Dockerfile"
    if dockerfile.exists():
        env.update(image_env(dockerfile.read_text()))
    return env


class Node:
    def __init__(self, state: ClusterState, name: str, index: int, python: str, run_as_ok: bool):
        self.state = state
        self.name = name
        self.api = state.api(f"node-{name}")
        net = slot_network(state.slot)
        cpus = os.cpu_count() or 1
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        self.capacity = {"cpu": str(cpus), "memory": f"{mem // 1024}Ki", "pods": "110",
                         "ephemeral-storage": "100Gi"}
        if state.gpus_per_node:
            self.capacity["nvidia.com/gpu"] = str(state.gpus_per_node)
        self.ctx = NodeContext(
            name=name, slot=state.slot, bridge=net["bridge"], host_ip=state.address,
            api_host=state.address, api_port=state.api_port, prefix=node_pod_prefix(state.slot, index),
            netmask=net["prefix"], directory=state.dir / "nodes" / name, volumes_root=state.dir / "volumes",
            allocatable={k: parse_quantity(v) for k, v in self.capacity.items()}, base_env=base_env(python),
            python=python, cluster_domain=CLUSTER_DOMAIN, run_as_ok=run_as_ok,
            log=lambda line: log(f"[{name}] {line}"))
        self.pods: dict[str, Pod] = {}   # uid -> Pod
        self.free_ips = list(range(2, 255))
        self.last_lease = 0.0
        self.last_node_status = 0.0
        self.port = state.kubelet_ports[name]
        self.server = None
        self.errors: dict[str, str] = {}   # pod uid -> last agent error logged for it

    # ---------------------------------------------------------------- node object
    def node_status(self) -> dict:
        now = now_rfc3339()
        conditions = [
            {"type": "Ready", "status": "True", "reason": "KubeletReady",
             "message": "tf-multiworker node agent is posting ready status"},
            {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
            {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure"},
            {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID"},
        ]
        for c in conditions:
            c.update(lastHeartbeatTime=now, lastTransitionTime=self.started_at, message=c.get("message", ""))
        return {
            "capacity": self.capacity, "allocatable": self.capacity, "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": self.state.address},
                          {"type": "Hostname", "address": self.name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.port}},
            "nodeInfo": {"kubeletVersion": KUBERNETES_VERSION, "kubeProxyVersion": "",
                         "containerRuntimeVersion": "tfmw-node://0.1 (host processes, no images)",
                         "operatingSystem": "linux", "architecture": "amd64",
                         "osImage": platform.platform(), "kernelVersion": platform.release(),
                         "machineID": "", "systemUUID": "", "bootID": ""},
        }

    def register(self) -> None:
        self.started_at = now_rfc3339()
        labels = {"kubernetes.io/hostname": self.name, "kubernetes.io/os": "linux",
                  "kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": "tfmw-local"}
        self.api.create_or_keep("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                                  "metadata": {"name": self.name, "labels": labels}})
        self.post_node_status()
        self.renew_lease()
        ca = self.state.pki_dir
        self.server = kubelet_api.make_server(self.state.address, self.port, ca / f"node-{self.name}-serving.crt",
                                              ca / f"node-{self.name}-serving.key", ca / "ca.crt",
                                              self.find_log)
        kubelet_api.serve_in_background(self.server)
        log(f"[{self.name}] registered: capacity {json.dumps(self.capacity)}, kubelet API on "
            f"{self.state.address}:{self.port}, runAsUser {'applied' if self.ctx.run_as_ok else 'not applied (the interpreter is not reachable by other users: containers run as the agent user)'}")

    def post_node_status(self) -> None:
        self.api.request("PATCH", f"/api/v1/nodes/{self.name}/status", {"status": self.node_status()},
                         content_type="application/merge-patch+json")
        self.last_node_status = time.monotonic()

    def renew_lease(self) -> None:
        path = ns_path("kube-node-lease", "leases", self.name, group="coordination.k8s.io/v1")
        spec = {"holderIdentity": self.name, "leaseDurationSeconds": LEASE_SECONDS,
                "renewTime": time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())}
        try:
            self.api.patch(path, {"spec": spec})
        except ApiError as err:
            if err.status != 404:
                raise
            self.api.create(ns_path("kube-node-lease", "leases", group="coordination.k8s.io/v1"),
                            {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                             "metadata": {"name": self.name, "namespace": "kube-node-lease"}, "spec": spec})
        self.last_lease = time.monotonic()

    # ---------------------------------------------------------------- logs
    def find_log(self, ns: str, pod_name: str, container: str, previous: bool):
        for pod in list(self.pods.values()):
            if pod.namespace == ns and pod.name == pod_name:
                for c in pod.inits + pod.containers:
                    if c.name != container:
                        continue
                    # Until a pending restart happens, the current instance is the one that exited.
                    n = c.record.restart_count - (1 if previous else 0)
                    if n < 0:
                        return None
                    path = pod.log_file(c, n)
                    current = n == c.record.restart_count

                    def running(c=c, current=current) -> bool:
                        return current and c.proc is not None
                    return path, running
        return None

    # ---------------------------------------------------------------- pods
    def sync(self, cluster_lines: list[str]) -> None:
        now = time.monotonic()
        if now - self.last_lease > 10:
            self.renew_lease()
        if now - self.last_node_status > 60:
            self.post_node_status()
        listed = self.api.items("/api/v1/pods", fieldSelector=f"spec.nodeName={self.name}")
        seen = set()
        for obj in listed:
            seen.add(obj["metadata"]["uid"])
            try:
                self._sync_pod(obj, cluster_lines, now)
            except ApiError:
                raise
            except Exception:  # noqa: BLE001 - one pod's bug must not stop the node's other pods
                meta = obj["metadata"]
                message = traceback.format_exc()
                if message != self.errors.get(meta["uid"]):
                    log(f"[{self.name}] pod {meta['namespace']}/{meta['name']}: agent error:\n{message}")
                    self.errors[meta["uid"]] = message
        for uid in list(self.pods):
            if uid not in seen:  # deleted with grace 0, or gone: nothing left to report
                pod = self.pods[uid]
                log(f"[{self.name}] pod {pod.namespace}/{pod.name} is gone from the API: stopping it")
                self._forget(pod)

    def _sync_pod(self, obj: dict, cluster_lines: list[str], now: float) -> None:
        uid = obj["metadata"]["uid"]
        pod = self.pods.get(uid)
        if pod is None:
            if obj["metadata"].get("deletionTimestamp"):
                self._final_delete(obj)  # nothing of it runs here
                return
            if (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                return  # a finished pod from before this agent started: nothing to run
            if not self.free_ips:
                return
            pod = Pod(obj, self.ctx, self.api, self.free_ips.pop(0))
            self.pods[uid] = pod
            log(f"[{self.name}] pod {pod.namespace}/{pod.name} bound here: ip {pod.ip}")
        pod.obj = obj
        meta = obj["metadata"]
        if meta.get("deletionTimestamp") and pod.terminating_since is None:
            grace = meta.get("deletionGracePeriodSeconds")
            grace = float(grace if grace is not None else pod.spec.get("terminationGracePeriodSeconds", 30))
            log(f"[{self.name}] pod {pod.namespace}/{pod.name} deleted: stopping (grace {grace:g}s)")
            pod.terminate(grace)
        if not pod.ready_for_containers and pod.terminating_since is None and now >= pod.next_setup_try:
            try:
                pod.setup(pod.hosts_text(cluster_lines))
                pod.setup_error = None
            except PodSetupError as exc:
                if str(exc) != str(pod.setup_error or ""):
                    log(f"[{self.name}] pod {pod.namespace}/{pod.name}: {exc.reason}: {exc}")
                    pod.events.append(("Warning", exc.reason, str(exc)))
                pod.setup_error = exc
                pod.next_setup_try = now + 2
        pod.tick()
        if pod.finished:
            self._final_delete(obj)
            self._forget(pod)
            return
        if pod.net is not None and pod.terminating_since is None and \
                all(c.record.done for c in pod.containers) and pod.containers:
            pod.release_network()   # Succeeded/Failed: nothing runs; its logs stay readable
        self._report(pod)

    def _report(self, pod: Pod) -> None:
        status = pod.status()
        if status != pod.last_status:
            try:
                self.api.patch(ns_path(pod.namespace, "pods", pod.name) + "/status", {"status": status})
                pod.last_status = status
            except ApiError as err:
                if err.status != 404:
                    log(f"[{self.name}] pod {pod.namespace}/{pod.name}: status update failed: {err}")
        while pod.events:
            self.event(pod, *pod.events.pop(0))

    def event(self, pod: Pod, etype: str, reason: str, message: str) -> None:
        ts = now_rfc3339()
        try:
            self.api.create(ns_path(pod.namespace, "events"), {
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{pod.name}.", "namespace": pod.namespace},
                "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": pod.name,
                                   "namespace": pod.namespace, "uid": pod.uid},
                "reason": reason, "message": message[:1024], "type": etype,
                "source": {"component": "kubelet", "host": self.name},
                "firstTimestamp": ts, "lastTimestamp": ts, "count": 1})
        except ApiError:
            pass  # events are best effort, as the kubelet's

    def _final_delete(self, obj: dict) -> None:
        meta = obj["metadata"]
        self.api.delete(ns_path(meta["namespace"], "pods", meta["name"]),
                        {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                         "preconditions": {"uid": meta["uid"]}})

    def _forget(self, pod: Pod) -> None:
        pod.teardown()
        self.pods.pop(pod.uid, None)
        self.free_ips.append(pod.ip_index)

    def update_hosts(self, cluster_lines: list[str]) -> None:
        for pod in self.pods.values():
            if pod.net is not None:
                text = pod.hosts_text(cluster_lines)
                if text != pod.hosts_written:
                    pod.net.write_file("hosts", text)
                    pod.hosts_written = text

    def stop(self) -> None:
        for pod in self.pods.values():
            pod.terminate(min(float(pod.spec.get("terminationGracePeriodSeconds", 30)), STOP_GRACE))
        deadline = time.monotonic() + STOP_GRACE
        while any(not p.finished for p in self.pods.values()) and time.monotonic() < deadline:
            for pod in self.pods.values():
                pod.tick()
            time.sleep(0.1)
        for pod in list(self.pods.values()):
            pod.teardown()
        self.pods.clear()
        if self.server is not None:
            self.server.shutdown()


def run(state: ClusterState) -> int:
    python = sys.executable
    run_as_ok = interpreter_reachable_by_others(python)
    nodes = [Node(state, name, i + 1, python, run_as_ok) for i, name in enumerate(state.nodes)]
    services = state.api("cluster-services")
    stopping = threading.Event()

    def on_signal(signum, _frame):
        # Not stopping.set() here: the handler may interrupt this thread inside stopping.wait()
        # while it holds the Event's non-reentrant lock (a deadlock); a thread waits its turn.
        threading.Thread(target=stopping.set, name="agent-stop", daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    for node in nodes:
        node.register()
    prov = provisioner.Provisioner(services, state.dir / "volumes", STORAGE_CLASS, PROVISIONER, log)
    cluster_lines: list[str] = []
    last_error = ""
    last_services = 0.0
    while not stopping.is_set():
        try:
            # Names and volumes change rarely: every SERVICES_TICK; pods every TICK.
            if time.monotonic() - last_services >= SERVICES_TICK:
                lines = hosts_mod.hosts_lines(services.items("/apis/discovery.k8s.io/v1/endpointslices"),
                                              services.items("/api/v1/services"), CLUSTER_DOMAIN)
                if lines != cluster_lines:
                    cluster_lines = lines
                    for node in nodes:
                        node.update_hosts(cluster_lines)
                prov.sync()
                last_services = time.monotonic()
            for node in nodes:
                node.sync(cluster_lines)
            last_error = ""
        except ApiError as err:
            if str(err) != last_error:   # the API server restarting: say it once, keep going
                log(f"API error (will retry): {err}")
                last_error = str(err)
        except Exception:  # noqa: BLE001 - a bug must not orphan running pods: log and go on
            log("node agent error:\n" + traceback.format_exc())
            time.sleep(1)
        stopping.wait(TICK)
    log("stopping: terminating every pod")
    for node in nodes:
        node.stop()
    log("stopped")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.kube.node",
                                     description="Run the local cluster's nodes (started by `make cluster`).")
    parser.add_argument("--state", type=Path, required=True, help="the cluster's state folder")
    args = parser.parse_args(argv)
    state = ClusterState.load(args.state)
    if state is None:
        print(f"node agent: no cluster state in {args.state}", file=sys.stderr)
        return 2
    return run(state)

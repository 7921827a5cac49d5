"""A real Kubernetes cluster on this machine: etcd, kube-apiserver, kube-controller-manager
and kube-scheduler (built from their upstream Go modules by scripts/tfmw/devcluster/build.py), CoreDNS
(scripts/tfmw/devcluster/build_coredns.py), a hostPath volume provisioner (scripts/tfmw/devcluster/provisioner.py),
and real nodes: a kubelet, containerd (+ runc, CNI), kube-proxy and kube-router's network
policy controller each (NetworkPolicies are enforced, ingress and egress), every node in its
own network and mount namespace (scripts/tfmw/devcluster/nodes.py), running the project's own image.

Network: each cluster takes a free "slot" s (0..15) and a Linux bridge `tfmwk<s>` with the
host address 198.19.(16s).1/24 (RFC 2544's benchmarking range: nothing routes it). The API
server and CoreDNS listen on that address; node k sits on the bridge at 198.19.(16s).(10+k)
and gives its pods 198.19.(16s+k).0/24; Services get ClusterIPs from 198.19.(16s+8).0/21,
which each node's kube-proxy (nftables) serves: `kubernetes` at .1, the cluster DNS
(`kube-system/kube-dns`, whose endpoint is CoreDNS on the bridge address) at .10. etcd
listens on 127.0.0.1 only, TLS with client certificates.

Everything lives in one state folder (default `.cluster/` in the repo, git-ignored): pki/,
etcd/, logs/, nodes/<name>/ (configs, the kubelet's root, containerd's data), the admin
kubeconfig, state.json (addresses, ports, PIDs, the kernel settings to put back). Processes
are stopped by the PIDs recorded there, after checking each is still the program we started.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from tfmw import REPO
from tfmw.devcluster import nodes as nodemod
from tfmw.devcluster import pki
from tfmw.devcluster.build import ensure_binaries, read_pins
from tfmw.devcluster.build_coredns import ensure_coredns
from tfmw.devcluster.images import pause_archive
from tfmw.devcluster.nodes import cni_bin_dir
from tfmw.iproute import ip_command
from tfmw.k8s.api import Api, ApiError, Credentials

DEFAULT_STATE = REPO / ".cluster"
# The node lifecycle controller's grace for a node that stopped answering (ClusterState)
NODE_MONITOR_GRACE_SECONDS = 40
# Image archives made for the nodes, and the nodes' containerd roots (their unpacked
# images): caches, like the builds, kept across clusters.
IMAGE_CACHE = REPO / ".tools" / "image" / "archives"
CONTAINERD_CACHE = REPO / ".tools" / "containerd"
# The release the pinned wrapper go.mod builds (scripts/tfmw/devcluster/gomod): one place for the version.
KUBERNETES_VERSION = read_pins().kubernetes
CLUSTER_DOMAIN = "cluster.local"
SLOTS = 16
STORAGE_CLASS = "local-shared"
PROVISIONER = "tf-multiworker.local/hostpath"
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
# Host programs every node needs (Debian packages: containerd, runc, util-linux, iproute2).
NODE_PROGRAMS = {
    "containerd": "containerd",
    "containerd-shim-runc-v2": "containerd",
    "runc": "runc",
    "ctr": "containerd",
    "nsenter": "util-linux",
    "unshare": "util-linux",
    "catatonit": "catatonit",
    "ip": "iproute2",
    # kube-router's network policy controller runs these
    "iptables": "iptables",
    "iptables-save": "iptables",
    "iptables-restore": "iptables",
    "ipset": "ipset",
}


class ClusterError(Exception):
    """One-line, operator-facing reason; exit code 2 bad input, 3 state, 4 a component failed."""

    def __init__(self, message: str, exit_code: int = 4):
        super().__init__(" ".join(message.split()))
        self.exit_code = exit_code


# ---------------------------------------------------------------- addresses (pure)


def slot_network(slot: int) -> dict[str, str]:
    """Addresses of cluster slot `slot`: the bridge/API address, its prefix, the service CIDR."""
    if not 0 <= slot < SLOTS:
        raise ValueError(f"slot {slot} outside 0..{SLOTS - 1}")
    third = 16 * slot
    return {
        "bridge": f"tfmwk{slot}",
        "address": f"198.19.{third}.1",
        "prefix": "24",
        "cluster_cidr": f"198.19.{third}.0/20",
        "service_cidr": f"198.19.{third + 8}.0/21",
        "service_ip": f"198.19.{third + 8}.1",
        "dns_ip": f"198.19.{third + 8}.10",
    }


def node_names(count: int) -> list[str]:
    return [f"node-{i}" for i in range(1, count + 1)]


# ---------------------------------------------------------------- state


@dataclass
class ClusterState:
    directory: str
    slot: int
    address: str
    api_port: int
    etcd_port: int
    etcd_peer_port: int
    nodes: list[str]
    gpus_per_node: int = 0
    pids: dict[str, int] = field(default_factory=dict)
    created: dict[str, float] = field(default_factory=dict)  # each pid's start time (psutil)
    # kernel settings the kubelets change machine-wide, as they were before (put back by down)
    sysctls: dict[str, str] = field(default_factory=dict)
    # host folders made as mount points for the nodes (removed by down when still empty)
    made_dirs: list[str] = field(default_factory=list)
    dns_ports: dict[str, int] = field(default_factory=dict)
    started_at: float = 0.0
    ready_seconds: float = 0.0
    # Seconds a node may stop answering before the node lifecycle controller marks it
    # unreachable (its pods are then evicted after their toleration): the first part of
    # every node fault's recovery. The kubelets post their status every 4 s (nodes.kubelet_config).
    node_monitor_grace_seconds: int = NODE_MONITOR_GRACE_SECONDS

    @property
    def dir(self) -> Path:
        return Path(self.directory)

    @property
    def server(self) -> str:
        return f"https://{self.address}:{self.api_port}"

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    @property
    def pki_dir(self) -> Path:
        return self.dir / "pki"

    def credentials(self, name: str) -> Credentials:
        """Client credentials of one pki identity (admin, cluster-services, node-<n>, ...)."""
        return Credentials(
            self.server, self.pki_dir / "ca.crt", self.pki_dir / f"{name}.crt", self.pki_dir / f"{name}.key"
        )

    def api(self, name: str = "admin", timeout: float = 10.0) -> Api:
        return Api.from_credentials(self.credentials(name), timeout=timeout)

    def save(self) -> None:
        path = self.dir / "state.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2, sort_keys=True))
        tmp.replace(path)

    @classmethod
    def load(cls, directory: Path) -> ClusterState | None:
        path = Path(directory) / "state.json"
        try:
            return cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None


# ---------------------------------------------------------------- processes


def started_at(pid: int) -> float | None:
    """When process `pid` started (psutil's create_time), or None when there is none."""
    try:
        return psutil.Process(pid).create_time() if pid > 0 else None
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def is_ours(pid: int, created: float | None) -> bool:
    """pid is alive and still the process we started: the same PID and the same start time,
    so a recycled PID is never signalled."""
    return created is not None and started_at(pid) == created


def stop_pid(pid: int, created: float | None, grace: float) -> bool:
    """SIGTERM, wait up to `grace`, SIGKILL. Returns whether the process was ours and alive."""
    if not is_ours(pid, created):
        return False
    process = psutil.Process(pid)
    try:
        process.terminate()
        process.wait(grace)
    except psutil.TimeoutExpired:
        process.kill()
    except psutil.NoSuchProcess:
        return False
    _reap(pid)
    return True


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def spawn(argv: list[str], log: Path, env: dict | None = None) -> subprocess.Popen:
    """Start a daemon in its own session, output to `log`; it outlives this process. While
    `up` runs, the Popen handle (not /proc's command line, which names this interpreter
    until the child has exec'd) tells whether it is alive."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        return subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
            close_fds=True,
        )


def _stop_started(procs: dict[str, subprocess.Popen], grace: float = 10.0) -> None:
    """Stop what this `up` started, newest first, by its own handles (a failed start)."""
    for proc in reversed(list(procs.values())):
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + grace
    for proc in procs.values():
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def free_port(host: str = "127.0.0.1", preferred: int = 0) -> int:
    """`preferred` when nothing listens there, else a free port. SO_REUSEADDR as the servers
    set it: the connections of a cluster stopped a moment ago (TIME_WAIT) must not move the
    API server off 6443, the port the chart's egress rule opens for it."""
    for candidate in ([preferred] if preferred else []) + [0]:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, candidate))
            except OSError:
                continue
            return s.getsockname()[1]
    raise ClusterError(f"no free TCP port on {host}")


def log_tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(line.strip()[:300] for line in text[-lines:])


# ---------------------------------------------------------------- network


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:

    return ip_command(*args, check=check, error=ClusterError)


def link_exists(name: str) -> bool:
    return _ip("link", "show", name, check=False).returncode == 0


def free_slot() -> int:
    """The first slot no cluster holds now (its bridge absent); claim_slot takes one."""
    for slot in range(SLOTS):
        if not link_exists(slot_network(slot)["bridge"]):
            return slot
    raise _all_slots_taken()


def _all_slots_taken() -> ClusterError:
    return ClusterError(
        f"all {SLOTS} cluster slots are taken (bridges tfmwk0..tfmwk{SLOTS - 1}): "
        "stop a cluster with `make cluster-down`",
        exit_code=3,
    )


def claim_slot() -> int:
    """A slot of this cluster's own, claimed by making its bridge: `ip link add` refuses a
    bridge that exists, so two clusters starting at once (a test lane's beside the shared one)
    never take the same slot, nor does one clean up the other's."""
    for slot in range(SLOTS):
        bridge = slot_network(slot)["bridge"]
        if link_exists(bridge):
            continue
        made = _ip("link", "add", bridge, "type", "bridge", check=False)
        if made.returncode != 0:
            if link_exists(bridge):
                continue  # taken between the look and the claim
            raise ClusterError(f"cannot make bridge {bridge}: {made.stderr.strip() or made.stdout.strip()}")
        try:
            create_bridge(slot)
        except BaseException:
            delete_bridge(slot)
            raise
        return slot
    raise _all_slots_taken()


def create_bridge(slot: int) -> None:
    """The slot's bridge with its address, up (made now unless claim_slot made it)."""
    net = slot_network(slot)
    if not link_exists(net["bridge"]):
        _ip("link", "add", net["bridge"], "type", "bridge")
    _ip("addr", "replace", f"{net['address']}/{net['prefix']}", "dev", net["bridge"])
    _ip("link", "set", net["bridge"], "up")


def delete_bridge(slot: int) -> None:
    name = slot_network(slot)["bridge"]
    if link_exists(name):
        _ip("link", "del", name, check=False)


# ---------------------------------------------------------------- kubeconfig


def kubeconfig_text(state: ClusterState, identity: str, user: str) -> str:
    import base64

    import yaml

    def b64(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    pki_dir = state.pki_dir
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "tfmw-local",
                "cluster": {"server": state.server, "certificate-authority-data": b64(pki_dir / "ca.crt")},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": b64(pki_dir / f"{identity}.crt"),
                    "client-key-data": b64(pki_dir / f"{identity}.key"),
                },
            }
        ],
        "contexts": [
            {"name": "tfmw-local", "context": {"cluster": "tfmw-local", "user": user, "namespace": "default"}}
        ],
        "current-context": "tfmw-local",
    }
    return yaml.safe_dump(config, sort_keys=False)


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


# ---------------------------------------------------------------- component command lines


def etcd_args(bins: dict, state: ClusterState) -> list[str]:
    p = state.pki_dir
    return [
        str(bins["etcd"]),
        "--name",
        "tfmw",
        "--data-dir",
        str(state.dir / "etcd"),
        "--listen-client-urls",
        f"https://127.0.0.1:{state.etcd_port}",
        "--advertise-client-urls",
        f"https://127.0.0.1:{state.etcd_port}",
        "--listen-peer-urls",
        f"http://127.0.0.1:{state.etcd_peer_port}",
        "--initial-advertise-peer-urls",
        f"http://127.0.0.1:{state.etcd_peer_port}",
        "--initial-cluster",
        f"tfmw=http://127.0.0.1:{state.etcd_peer_port}",
        "--listen-metrics-urls",
        "",
        "--cert-file",
        str(p / "etcd.crt"),
        "--key-file",
        str(p / "etcd.key"),
        "--client-cert-auth",
        "--trusted-ca-file",
        str(p / "ca.crt"),
        "--log-level",
        "warn",
        "--unsafe-no-fsync",
    ]  # a disposable dev cluster: speed over durability


def apiserver_args(bins: dict, state: ClusterState) -> list[str]:
    p = state.pki_dir
    net = slot_network(state.slot)
    return [
        str(bins["kube-apiserver"]),
        "--bind-address",
        state.address,
        "--advertise-address",
        state.address,
        "--secure-port",
        str(state.api_port),
        "--etcd-servers",
        f"https://127.0.0.1:{state.etcd_port}",
        "--etcd-cafile",
        str(p / "ca.crt"),
        "--etcd-certfile",
        str(p / "apiserver-etcd-client.crt"),
        "--etcd-keyfile",
        str(p / "apiserver-etcd-client.key"),
        "--tls-cert-file",
        str(p / "apiserver.crt"),
        "--tls-private-key-file",
        str(p / "apiserver.key"),
        "--client-ca-file",
        str(p / "ca.crt"),
        "--authorization-mode",
        "Node,RBAC",
        # PodSecurity is on by default; NodeRestriction limits each node to its own pods.
        "--enable-admission-plugins",
        "NodeRestriction",
        "--allow-privileged=false",
        "--anonymous-auth=false",
        "--service-account-issuer",
        f"https://kubernetes.default.svc.{CLUSTER_DOMAIN}",
        "--service-account-key-file",
        str(p / "sa.pub"),
        "--service-account-signing-key-file",
        str(p / "sa.key"),
        "--service-cluster-ip-range",
        net["service_cidr"],
        "--kubelet-client-certificate",
        str(p / "apiserver-kubelet-client.crt"),
        "--kubelet-client-key",
        str(p / "apiserver-kubelet-client.key"),
        "--kubelet-certificate-authority",
        str(p / "ca.crt"),
        "--kubelet-preferred-address-types",
        "InternalIP",
        "--profiling=false",
        "--event-ttl",
        "2h",
        # Aggregated APIs and webhooks served by pods (Kueue's): the API server on the host
        # calls a Service's endpoint, a pod IP the host routes to its node, since only the
        # nodes' kube-proxy serves ClusterIPs; the front-proxy identity is what such an API
        # server trusts for the requests the API server forwards (kubeadm's flags).
        "--enable-aggregator-routing=true",
        "--requestheader-client-ca-file",
        str(p / "front-proxy-ca.crt"),
        "--requestheader-allowed-names",
        pki.FRONT_PROXY_CLIENT,
        "--requestheader-username-headers",
        "X-Remote-User",
        "--requestheader-group-headers",
        "X-Remote-Group",
        "--requestheader-extra-headers-prefix",
        "X-Remote-Extra-",
        "--proxy-client-cert-file",
        str(p / "front-proxy-client.crt"),
        "--proxy-client-key-file",
        str(p / "front-proxy-client.key"),
    ]


def controller_manager_args(bins: dict, state: ClusterState) -> list[str]:
    p = state.pki_dir
    return [
        str(bins["kube-controller-manager"]),
        "--kubeconfig",
        str(state.dir / "kubeconfigs" / "controller-manager"),
        "--secure-port",
        "0",
        "--leader-elect=false",
        "--use-service-account-credentials=true",
        "--service-account-private-key-file",
        str(p / "sa.key"),
        "--root-ca-file",
        str(p / "ca.crt"),
        "--cluster-name",
        "tfmw-local",
        "--profiling=false",
        # Pods of a node that stops renewing its lease are evicted after this:
        "--node-monitor-grace-period",
        f"{state.node_monitor_grace_seconds}s",
        # One zone of a few nodes: with the default 0.55, three nodes lost of four or five make the
        # zone "unhealthy" and, in a cluster under 50 nodes, taint-based eviction stops altogether,
        # so a lost node's pods are never deleted (the loss tests lose three of four). 1.0: only a
        # zone with every node lost stops evicting.
        "--unhealthy-zone-threshold=1.0",
    ]


def scheduler_args(bins: dict, state: ClusterState) -> list[str]:
    return [
        str(bins["kube-scheduler"]),
        "--kubeconfig",
        str(state.dir / "kubeconfigs" / "scheduler"),
        "--secure-port",
        "0",
        "--leader-elect=false",
        "--profiling=false",
    ]


def corefile(state: ClusterState, kubeconfig: Path) -> str:
    """CoreDNS serves the cluster domain from the API server (Services, headless
    StatefulSet names from EndpointSlices) on the bridge address only. Nothing is forwarded:
    the cluster's traffic stays on this machine, so another name gets no answer. No cache: a
    peer's name must resolve as soon as its slice lists it."""
    return f""".:53 {{
    bind {state.address}
    errors
    health {state.address}:{state.dns_ports["health"]}
    ready {state.address}:{state.dns_ports["ready"]}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig} tfmw-local
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
    loadbalance
}}
"""


def coredns_args(coredns: Path, state: ClusterState) -> list[str]:
    return [str(coredns), "-conf", str(state.dir / "Corefile")]


def provisioner_args(state: ClusterState) -> list[str]:
    return [sys.executable, "-m", "tfmw.devcluster.provisioner", "--state", str(state.dir)]


# ---------------------------------------------------------------- bootstrap (pure objects)


def user_binding(name: str, cluster_role: str, user: str) -> tuple[str, dict]:
    """A ClusterRoleBinding of one certificate identity (a User) to a ClusterRole."""
    return (
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )


def bootstrap_objects() -> list[tuple[str, dict]]:
    """(collection path, object) the cluster needs before it runs workloads: the default
    StorageClass scripts/tfmw/devcluster/provisioner.py provisions (hostPath volumes under the state
    folder, seen by every node on the machine: ReadWriteMany works), and least-privilege RBAC
    for the cluster services identity (the provisioner)."""
    return [
        (
            "/apis/storage.k8s.io/v1/storageclasses",
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {
                    "name": STORAGE_CLASS,
                    "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
                },
                "provisioner": PROVISIONER,
                "reclaimPolicy": "Delete",
                "volumeBindingMode": "Immediate",
            },
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": "tfmw:cluster-services"},
                "rules": [
                    {
                        "apiGroups": ["discovery.k8s.io"],
                        "resources": ["endpointslices"],
                        "verbs": ["get", "list", "watch"],
                    },
                    {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "watch"]},
                    {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get", "list", "watch"]},
                    {
                        "apiGroups": [""],
                        "resources": ["persistentvolumes"],
                        "verbs": ["get", "list", "watch", "create", "delete"],
                    },
                    {
                        "apiGroups": ["storage.k8s.io"],
                        "resources": ["storageclasses"],
                        "verbs": ["get", "list", "watch"],
                    },
                    {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
                ],
            },
        ),
        user_binding("tfmw:cluster-services", "tfmw:cluster-services", "tfmw:cluster-services"),
        *network_policy_rbac(),
    ]


def network_policy_rbac() -> list[tuple[str, dict]]:
    """Read-only access for kube-router's network policy controller (tfmw:network-policy): the
    policies, and the pods, namespaces and nodes they select; kube-router starts its informers
    for Services and their endpoints too, and waits for them to sync."""
    read = ["get", "list", "watch"]
    return [
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": "tfmw:network-policy"},
                "rules": [
                    {
                        "apiGroups": [""],
                        "resources": ["pods", "namespaces", "nodes", "services", "endpoints"],
                        "verbs": read,
                    },
                    {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": read},
                    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": read},
                ],
            },
        ),
        user_binding("tfmw:network-policy", "tfmw:network-policy", "tfmw:network-policy"),
    ]


def dns_objects(state: ClusterState) -> list[tuple[str, dict]]:
    """The cluster DNS as pods see it: Service kube-system/kube-dns at the kubelets'
    clusterDNS address, whose one endpoint is CoreDNS on the bridge (it runs on the host,
    outside the nodes), plus CoreDNS's read-only RBAC (CoreDNS's own ClusterRole)."""
    net = slot_network(state.slot)
    ports = [{"name": "dns", "port": 53, "protocol": "UDP"}, {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]
    return [
        (
            "/api/v1/namespaces/kube-system/services",
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {
                    "name": "kube-dns",
                    "namespace": "kube-system",
                    "labels": {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"},
                },
                "spec": {"clusterIP": net["dns_ip"], "ports": [{**p, "targetPort": 53} for p in ports]},
            },
        ),
        (
            "/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices",
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": "kube-dns-host",
                    "namespace": "kube-system",
                    "labels": {
                        "kubernetes.io/service-name": "kube-dns",
                        "endpointslice.kubernetes.io/managed-by": "tf-multiworker.local-cluster",
                    },
                },
                "addressType": "IPv4",
                "endpoints": [{"addresses": [state.address], "conditions": {"ready": True}}],
                "ports": ports,
            },
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": "system:coredns"},
                "rules": [
                    {
                        "apiGroups": [""],
                        "resources": ["endpoints", "services", "pods", "namespaces"],
                        "verbs": ["list", "watch"],
                    },
                    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
                ],
            },
        ),
        user_binding("system:coredns", "system:coredns", "tfmw:coredns"),
        # The API server calls kubelets (logs, exec, port-forward) as this identity; the
        # kubelets authorize it through the API server (webhook).
        user_binding("tfmw:kube-apiserver-kubelet-client", "system:kubelet-api-admin", "kube-apiserver-kubelet-client"),
    ]


# ---------------------------------------------------------------- up / down


def running(state: ClusterState | None) -> bool:
    return bool(state) and is_ours(state.pids.get("kube-apiserver", 0), state.created.get("kube-apiserver"))


def running_cluster(directory: Path) -> ClusterState | None:
    """The cluster whose state folder is `directory`, when it runs; else None."""
    state = ClusterState.load(Path(directory).resolve())
    return state if running(state) else None


def wait_until(
    check,
    timeout: float,
    what: str,
    logs: list[Path],
    interval: float = 0.2,
    alive: dict[str, subprocess.Popen] | None = None,
):
    """Poll `check` until it returns something true; fail fast, naming the log, if one of
    the `alive` processes (name -> pid) exits meanwhile."""
    deadline = time.monotonic() + timeout
    last_error = ""
    while time.monotonic() < deadline:
        for name, proc in (alive or {}).items():
            if proc.poll() is not None:
                raise ClusterError(
                    f"{name} exited while starting (code {proc.returncode}): {log_tail(logs[0].parent / f'{name}.log')}"
                )
        try:
            result = check()
            if result:
                return result
        except (ApiError, OSError) as exc:
            last_error = str(exc)
        time.sleep(interval)
    tails = "; ".join(f"{p.name}: {log_tail(p)}" for p in logs)
    raise ClusterError(f"{what} not ready after {timeout:g}s ({last_error or 'no answer'}); {tails}")


def missing_node_programs() -> list[str]:
    """`program (package)` for each host program a node needs that is not installed."""

    missing = [f"{prog} ({pkg})" for prog, pkg in NODE_PROGRAMS.items() if shutil.which(prog) is None]
    if cni_bin_dir() is None:
        missing.append("the CNI plugins bridge/host-local (containernetworking-plugins)")
    return missing


def preflight(nodes: int, gpus_per_node: int) -> None:
    if os.geteuid() != 0:
        raise ClusterError(
            "make cluster needs root: nodes run in network and mount namespaces on a "
            "bridge (ip netns, unshare, cgroups); run it as root",
            exit_code=2,
        )
    if not 1 <= nodes <= 7:
        raise ClusterError(f"--nodes {nodes}: a local cluster has 1 to 7 nodes", exit_code=2)
    if gpus_per_node < 0:
        raise ClusterError(f"--gpus-per-node {gpus_per_node}: must be 0 or more", exit_code=2)
    missing = missing_node_programs()
    if missing:
        packages = sorted({m.split("(")[-1].rstrip(")").split()[-1] for m in missing})
        raise ClusterError(
            f"make cluster needs {', '.join(missing)}: apt-get install {' '.join(packages)} (or `make host-packages`)",
            exit_code=2,
        )


@dataclass
class Startup:
    """What `up`'s steps share: the state being built, the binaries, the daemons started so far."""

    state: ClusterState
    bins: dict
    say: Callable[[str], None]
    timeout: float
    net: dict[str, str]
    node_nets: list
    started: float = field(default_factory=time.monotonic)
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def logs(self) -> Path:
        return self.state.dir / "logs"

    def spawn(self, name: str, argv: list[str], log: str | None = None) -> None:
        self.procs[name] = spawn(argv, self.logs / (log or f"{name}.log"))
        self.state.pids[name] = self.procs[name].pid
        self.state.created[name] = started_at(self.procs[name].pid)  # what tells it from a recycled PID
        self.state.save()

    def wait(self, check, what: str, logs: list[str], alive: list[str] | None = None) -> None:
        """Until `check()`, naming `what` and the logs to read if not in time; fails early when a
        daemon of `alive` (default: all started) exits."""
        names = alive if alive is not None else list(self.procs)
        wait_until(
            check, self.timeout, what, [self.logs / log for log in logs], alive={n: self.procs[n] for n in names}
        )


def up(
    directory: Path = DEFAULT_STATE,
    nodes: int = 1,
    gpus_per_node: int = 0,
    bins: dict | None = None,
    say=print,
    api_port: int = 6443,
    timeout: float = 90.0,
    images: list[Path] = (),
    node_monitor_grace_seconds: int = NODE_MONITOR_GRACE_SECONDS,
) -> ClusterState:
    """Start a cluster in `directory` (or report the one running there) with `images`
    (docker-save archives) in every node. Returns its state. The steps, in order: the state
    folder, credentials, etcd and the API server, the nodes (which start while the API server
    comes up), the cluster's own objects, the controllers, the images, ready.
    `node_monitor_grace_seconds`: how long a node may stop answering before it is marked
    unreachable (ClusterState.node_monitor_grace_seconds)."""
    directory = Path(directory).resolve()
    preflight(nodes, gpus_per_node)
    existing = _running_or_cleared(directory, say)
    if existing is not None:
        return existing
    start = _new_startup(
        directory, nodes, gpus_per_node, _binaries(bins, say), say, timeout, node_monitor_grace_seconds
    )
    try:
        _write_credentials(start, api_port)
        _start_api_server(start)
        _start_nodes(start)
        admin = _bootstrap(start)
        _start_controllers(start)
        _load_node_images(start, images)
        _wait_until_ready(start, admin)
        return start.state
    except BaseException:
        _stop_started(start.procs)
        down(directory, say=lambda line: None)
        raise


def _running_or_cleared(directory: Path, say) -> ClusterState | None:
    """The cluster running in `directory`, or None after clearing what a dead one left."""
    existing = ClusterState.load(directory)
    if running(existing):
        say(
            f"cluster: already running in {directory} (API server {existing.server}, pid "
            f"{existing.pids.get('kube-apiserver')}); `make cluster-down` stops it"
        )
        return existing
    if existing is not None or directory.exists():
        down(directory, say=lambda line: None)
    return None


def _binaries(bins: dict | None, say) -> dict:
    """The pinned Kubernetes and CoreDNS binaries (built once), and Debian's containerd."""
    bins = bins if bins is not None else ensure_binaries(progress=say)
    if "coredns" not in bins:
        bins = {**bins, "coredns": ensure_coredns(progress=say)}
    return {**bins, "containerd": shutil.which("containerd")}  # checked by preflight


def _new_startup(
    directory: Path, nodes: int, gpus_per_node: int, bins: dict, say, timeout: float, node_monitor_grace_seconds: int
) -> Startup:
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o711)  # the nodes' folders are reached by the containers' users too
    slot = claim_slot()  # its bridge made: the slot is this cluster's
    net = slot_network(slot)
    try:
        state = ClusterState(
            directory=str(directory),
            slot=slot,
            address=net["address"],
            api_port=0,
            etcd_port=free_port(),
            etcd_peer_port=free_port(),
            nodes=node_names(nodes),
            gpus_per_node=gpus_per_node,
            started_at=time.time(),
            node_monitor_grace_seconds=node_monitor_grace_seconds,
            sysctls=nodemod.read_kernel_sysctls(),
        )
        state.save()  # from here on, `down` can clean up whatever was made
    except BaseException:
        delete_bridge(slot)
        raise
    node_nets = [nodemod.node_net(slot, i) for i in range(1, nodes + 1)]
    return Startup(state=state, bins=bins, say=say, timeout=timeout, net=net, node_nets=node_nets)


def _write_credentials(start: Startup, api_port: int) -> None:
    """The API server's port (on the slot's bridge, claim_slot's), the cluster's PKI, a
    kubeconfig per identity."""
    state = start.state
    for name in nodemod.clear_stale_slot(state.slot):
        start.say(
            f"cluster: cgroup {name} of an earlier cluster still holds processes or could not be removed; left alone"
        )
    state.api_port = free_port(state.address, api_port)
    state.dns_ports = {"health": free_port(state.address), "ready": free_port(state.address)}
    pki.make_cluster_pki(
        state.pki_dir,
        state.address,
        start.net["service_ip"],
        state.nodes,
        CLUSTER_DOMAIN,
        node_ips={n.name: n.address for n in start.node_nets},
    )
    _write_private(state.kubeconfig, kubeconfig_text(state, "admin", "tfmw-admin"))
    for identity, user in (
        ("controller-manager", "system:kube-controller-manager"),
        ("scheduler", "system:kube-scheduler"),
        ("kube-proxy", "system:kube-proxy"),
        ("network-policy", "tfmw:network-policy"),
        ("coredns", "tfmw:coredns"),
        ("cluster-services", "tfmw:cluster-services"),
        *((f"node-{n}", f"system:node:{n}") for n in state.nodes),
    ):
        _write_private(state.dir / "kubeconfigs" / identity, kubeconfig_text(state, identity, user))


def _start_api_server(start: Startup) -> None:
    start.say(f"cluster: starting etcd, kube-apiserver ({KUBERNETES_VERSION}) on {start.state.server}")
    start.spawn("etcd", etcd_args(start.bins, start.state))
    start.spawn("kube-apiserver", apiserver_args(start.bins, start.state))


def _start_nodes(start: Startup) -> None:
    """Each node's namespaces, cgroups, folders and its kubelet, containerd, kube-proxy and
    network policy controller."""
    state = start.state
    for dir_name in ("/var/lib/kubelet", "/run/containerd"):
        if not Path(dir_name).exists():
            Path(dir_name).mkdir(parents=True)
            state.made_dirs.append(dir_name)
    Path("/run/netns").mkdir(exist_ok=True)
    for node in start.node_nets:
        nodemod.make_cgroups(node.cgroup)
        nodemod.create_network(node, start.net["bridge"], start.node_nets)
        script = nodemod.prepare_node(
            node,
            state.dir,
            start.bins,
            start.net["dns_ip"],
            CLUSTER_DOMAIN,
            start.net["cluster_cidr"],
            state.dir / "kubeconfigs" / f"node-{node.name}",
            state.dir / "kubeconfigs" / "kube-proxy",
            CONTAINERD_CACHE,
            nodemod.network_policy_argv(
                start.bins, node, state.dir / "kubeconfigs" / "network-policy", start.net["service_cidr"]
            ),
        )
        start.spawn(node.name, nodemod.node_argv(node, script))


def _bootstrap(start: Startup) -> Api:
    """Once the API server answers: the cluster's own objects (RBAC, CoreDNS's Service ...)."""
    admin = start.state.api("admin", timeout=5)
    start.wait(
        lambda: admin.request("GET", "/readyz", raw=True) == b"ok",
        "kube-apiserver",
        ["kube-apiserver.log", "etcd.log"],
        alive=["etcd", "kube-apiserver"],
    )
    for path, obj in bootstrap_objects() + dns_objects(start.state):
        admin.create_or_keep(path, obj)
    return admin


def _start_controllers(start: Startup) -> None:
    state, nodes, gpus = start.state, len(start.state.nodes), start.state.gpus_per_node
    start.say(
        f"cluster: starting kube-controller-manager, kube-scheduler, CoreDNS, {nodes} node"
        f"{'s' if nodes > 1 else ''} (kubelet, containerd, kube-proxy, kube-router's network policy controller"
        f"{f', {gpus} nvidia.com/gpu each' if gpus else ''})"
    )
    start.spawn("kube-controller-manager", controller_manager_args(start.bins, state))
    start.spawn("kube-scheduler", scheduler_args(start.bins, state))
    (state.dir / "Corefile").write_text(corefile(state, state.dir / "kubeconfigs" / "coredns"))
    start.spawn("coredns", coredns_args(start.bins["coredns"], state))
    start.spawn("provisioner", provisioner_args(state))


def _load_node_images(start: Startup, images: list[Path]) -> None:
    """The sandbox (pause) image and `images` into every node's containerd, once it runs."""
    names = start.state.nodes
    node_dirs = [start.state.dir / "nodes" / n for n in names]
    start.wait(
        lambda: all((d / "containerd.ready").exists() for d in node_dirs),
        "containerd on every node",
        [f"{n}-containerd.log" for n in names] + [f"{n}.log" for n in names],
        alive=list(names),
    )
    archives = [pause_archive(nodemod.SANDBOX_IMAGE, start.state.dir / "images"), *images]
    load_images(start.state, archives, say=start.say)
    for d in node_dirs:
        (d / "images.ready").touch()


def _nodes_ready(admin: Api, count: int) -> bool:
    """`count` nodes Ready and without a node.kubernetes.io/* taint."""
    ready = 0
    for node in admin.items("/api/v1/nodes"):
        conds = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions", [])}
        taints = [
            t for t in node.get("spec", {}).get("taints") or [] if t.get("key", "").startswith("node.kubernetes.io/")
        ]
        ready += conds.get("Ready") == "True" and not taints
    return ready == count


def _wait_until_ready(start: Startup, admin: Api) -> None:
    """Nodes Ready (with their GPUs advertised), CoreDNS ready, the default ServiceAccount and
    the cluster CA ConfigMap made: what a pod of the chart needs."""
    state, names = start.state, start.state.nodes
    start.wait(
        lambda: _nodes_ready(admin, len(names)),
        f"{len(names)} node(s)",
        [f"{n}-kubelet.log" for n in names] + ["kube-controller-manager.log"],
    )
    if state.gpus_per_node:
        advertise_gpus(admin, names, state.gpus_per_node)
    start.wait(
        lambda: all(_http_ok(n.address, nodemod.NETWORK_POLICY_HEALTH_PORT, "/healthz") for n in start.node_nets),
        "the network policy controller on every node",
        [f"{n}-kube-router.log" for n in names],
    )
    start.wait(
        lambda: _http_ok(state.address, state.dns_ports["ready"], "/ready"), "CoreDNS", ["coredns.log"], ["coredns"]
    )
    start.wait(
        lambda: (
            admin.get_or_none("/api/v1/namespaces/default/serviceaccounts/default")
            and admin.get_or_none("/api/v1/namespaces/default/configmaps/kube-root-ca.crt")
        ),
        "the default ServiceAccount and kube-root-ca.crt",
        ["kube-controller-manager.log"],
    )
    state.ready_seconds = round(time.monotonic() - start.started, 2)
    state.save()
    start.say(
        f"cluster: ready in {state.ready_seconds:.1f}s: Kubernetes {KUBERNETES_VERSION}, "
        f"{len(names)} node(s), API server {state.server}, logs in {start.logs}"
    )


def _http_ok(host: str, port: int, path: str) -> bool:
    import http.client

    conn = http.client.HTTPConnection(host, port, timeout=2)
    try:
        conn.request("GET", path)
        return conn.getresponse().status == 200
    finally:
        conn.close()


def advertise_gpus(admin: Api, names: list[str], count: int) -> None:
    """nvidia.com/gpu capacity on each Node (an extended resource, as Kubernetes documents
    for advertising one by hand): GPU values schedule; no GPU is used."""
    for name in names:
        admin.request(
            "PATCH",
            f"/api/v1/nodes/{name}/status",
            [{"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": str(count)}],
            content_type="application/json-patch+json",
        )
    wait_until(
        lambda: all(
            (admin.get(f"/api/v1/nodes/{n}").get("status", {}).get("allocatable") or {}).get("nvidia.com/gpu")
            == str(count)
            for n in names
        ),
        30,
        "nvidia.com/gpu capacity on the nodes",
        [],
    )


def load_images(state: ClusterState, archives: list[Path], say=print) -> None:
    """Import docker-save archives into every node's containerd (the nodes pull nothing:
    no registry is reachable), skipping an image a node already holds under the same id
    (its containerd root is a cache). Nodes import in parallel."""
    import concurrent.futures

    ctr = shutil.which("ctr")
    started = time.monotonic()
    contents = {archive: nodemod.archive_image(archive) for archive in archives}
    imported: list[str] = []

    def running(name: str) -> int:
        pid = state.pids.get(name, 0)
        if not is_ours(pid, state.created.get(name)):
            raise ClusterError(f"{name} is not running; `make cluster-down` then `make cluster`", exit_code=3)
        return pid

    def missing(name: str) -> list[Path]:
        present = nodemod.node_images(running(name), ctr)
        return [
            archive for archive, (refs, image_id) in contents.items() if not nodemod.has_image(present, refs, image_id)
        ]

    def one(name: str, archives: list[Path]) -> None:
        pid = running(name)
        for archive in archives:
            refs, image_id = contents[archive]
            try:
                nodemod.import_image(pid, ctr, archive, refs, image_id)
            except nodemod.NodeError as err:
                raise ClusterError(f"{name}: {err}") from None
            imported.append(f"{', '.join(refs)} into {name}")
        # Older builds of the worker image stay in the cache otherwise (1.8 GB a build a node).
        nodemod.remove_images(
            pid, ctr, nodemod.stale_ids(nodemod.node_images(pid, ctr), {image_id for _, image_id in contents.values()})
        )

    with concurrent.futures.ThreadPoolExecutor(len(state.nodes)) as pool:
        to_import = dict(zip(state.nodes, pool.map(missing, state.nodes), strict=True))
        need = nodemod.IMPORT_COPIES * sum(a.stat().st_size for archives in to_import.values() for a in archives)
        if need and (no_room := nodemod.import_room_error(need, _free_bytes(CONTAINERD_CACHE), CONTAINERD_CACHE)):
            raise ClusterError(no_room, exit_code=3)
        for future in [pool.submit(one, name, archives) for name, archives in to_import.items()]:
            future.result()
    big = [a for a in archives if a.stat().st_size > 10 << 20]
    for archive in big:
        refs = ", ".join(contents[archive][0])
        where = [line for line in imported if line.startswith(refs + " into ")]
        say(
            f"cluster: image {refs} "
            + (
                f"imported into {len(where)} node(s) in {time.monotonic() - started:.1f}s"
                if where
                else "already in every node"
            )
        )


def _free_bytes(path: Path) -> int:
    """Free bytes on the disk that holds `path` (or would, once made)."""
    return shutil.disk_usage(next(p for p in (path, *path.parents) if p.exists())).free


def _node(state: ClusterState, name: str) -> nodemod.NodeNet:
    if name not in state.nodes:
        raise ClusterError(f"no node {name!r} in the cluster of {state.dir}; its nodes: {', '.join(state.nodes)}")
    return nodemod.node_net(state.slot, state.nodes.index(name) + 1)


def image_caches(state: ClusterState) -> list[Path]:
    """Each node's containerd root: its image cache, kept for the next cluster on the slot."""
    return [nodemod.containerd_root(CONTAINERD_CACHE, _node(state, name)) for name in state.nodes]


def lose_node(directory: Path, name: str) -> None:
    """A node lost as a machine is lost: every process on it killed at once (kubelet,
    containerd, every container; no Terminating, no status update) and its link cut. The
    control plane learns it only from the missing heartbeats. `down` removes the rest."""
    state = _load(directory)
    net = _node(state, name)
    nodemod.kill_cgroup(net.cgroup)
    nodemod.set_node_link(net, up=False)


def partition_node(directory: Path, name: str, cut: bool = True) -> None:
    """Cut (cut=False: restore) a node's network and nothing else: its kubelet and pods run
    on, unheard, as on the far side of a network partition."""
    net = _node(_load(directory), name)
    nodemod.set_node_link(net, up=not cut)


def node_pod_log(directory: Path, node: str, namespace: str, pod: str, uid: str) -> str:
    """Pod `uid`'s container logs as its node's kubelet keeps them (read from the host side,
    so also while the node is cut off); "" when there are none (not started, or removed)."""
    found = sorted((_load(directory).dir / "nodes" / node / "log" / "pods").glob(f"{namespace}_{pod}_{uid}/*/*.log"))
    try:
        return "".join(path.read_text(errors="replace") for path in found)
    except OSError:  # removed while read: the kubelet cleaned the pod up
        return ""


def _load(directory: Path) -> ClusterState:
    state = ClusterState.load(Path(directory).resolve())
    if state is None:
        raise ClusterError(f"no cluster in {directory}: start one with `make cluster`")
    return state


# The add-ons that run on the host, by the names their PIDs are recorded under (registry.py,
# prometheus.py, flux.py: build_flux's names, kwok.py), stopped by `down` after the nodes.
HOST_ADDONS = (
    "registry",
    "prometheus",
    "prometheus-discover",
    "flux-helm-controller",
    "flux-source-controller",
    "kwok",
)


def down(directory: Path = DEFAULT_STATE, say=print, drop_image_caches: bool = False) -> bool:
    """Stop the cluster in `directory`: the nodes first (kubelet, kube-proxy, every container,
    containerd), then CoreDNS, the provisioner and the control plane; then the nodes'
    cgroups and namespaces (with `drop_image_caches`, their image caches too: a cluster no later
    one on its slot will need), the bridge, the kernel settings the kubelets changed, and the
    state folder. Returns whether anything was running."""

    directory = Path(directory).resolve()
    state = ClusterState.load(directory)
    if state is None:
        if directory.exists():
            shutil.rmtree(directory, ignore_errors=True)
        say(f"cluster: none running in {directory}")
        return False
    stopped = []
    order = (
        [(n, 30.0) for n in state.nodes]
        + [(name, 10.0) for name in HOST_ADDONS]
        + [
            ("provisioner", 10.0),
            ("coredns", 10.0),
            ("kube-scheduler", 10.0),
            ("kube-controller-manager", 10.0),
            ("kube-apiserver", 15.0),
            ("etcd", 10.0),
        ]
    )
    for name, grace in order:
        if stop_pid(state.pids.get(name, 0), state.created.get(name), grace):
            stopped.append(name)
    left = [
        d
        for index in range(1, len(state.nodes) + 1)
        for d in nodemod.remove_cgroups(nodemod.node_net(state.slot, index).cgroup)
    ]
    nodemod.remove_networks(state.slot)
    if drop_image_caches:  # while the slot is still this cluster's: a new one on it gets none of it
        for root in image_caches(state):
            shutil.rmtree(root, ignore_errors=True)
    delete_bridge(state.slot)
    if state.sysctls:
        nodemod.restore_kernel_sysctls(state.sysctls)
    for made in state.made_dirs:
        try:
            Path(made).rmdir()
        except OSError:
            pass
    shutil.rmtree(directory, ignore_errors=True)
    say(
        f"cluster: stopped ({', '.join(stopped) or 'nothing was running'}); removed {directory}"
        + (f"; could not remove cgroups {', '.join(left)}" if left else "")
    )
    return bool(stopped)

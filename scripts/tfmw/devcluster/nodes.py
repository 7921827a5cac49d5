"""The local cluster's nodes: a real kubelet, containerd (+ runc and the CNI plugins) and
kube-proxy per node, each node in a network and a mount namespace of its own.

Why namespaces: a kubelet bind-mounts its root directory onto itself and uses fixed paths
(/var/lib/kubelet/device-plugins, /var/log/pods, /var/log/containers, /run/containerd, the
pod network namespaces under /run/netns); kube-proxy programs the netfilter tables of the
network namespace it runs in. Two nodes on one machine therefore each get:

    network namespace  tfmwk<slot>-n<k>, a veth into the cluster bridge, the node address
                       198.19.(16s).(10+k)/24 and the pod subnet 198.19.(16s+k).0/24 on its
                       own CNI bridge (routes to the other nodes' pod subnets go straight
                       over the cluster bridge; the host routes each pod subnet to its node;
                       no default route: nothing a node runs reaches beyond the bridge)
    mount namespace    private: a tmpfs on /run/containerd and /run/netns, the node's own
                       folders bind-mounted on /var/lib/kubelet and /var/log. Every mount a
                       node makes (volumes, container root file systems, pod namespaces)
                       dies with its processes; none can leak onto the host.
    cgroup             /tfmwk<slot>-n<k> in every cgroup-v1 hierarchy (the kubelet's
                       cgroupRoot): the node's processes, containerd's shims and every
                       container live below it, so stopping a node can find them all.

One shell script per node (node.sh, written below) is the node's first process: it makes
the mounts, starts containerd, then the kubelet and kube-proxy, and on SIGTERM stops them in
the reverse order. The cluster records its PID; scripts/tfmw/devcluster/controlplane.py starts and
stops nodes, this module holds what a node is (pure config text) and the host-side plumbing.

Machine facts this relies on (../shared/DESIGN.md): cgroups are hybrid v1, so runc (crun
refuses) and the kubelet's `failCgroupV1: false`, `cgroupDriver: cgroupfs`; no
CAP_SYS_RESOURCE, so containerd's `restrict_oom_score_adj`, the kubelet's `maxOpenFiles`
under the hard limit and `oomScoreAdj: 0`. The kubelet rewrites vm.overcommit_memory,
kernel.panic and kernel.panic_on_oops (machine-wide): the cluster saves them before its first
node starts and puts them back when it stops.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tfmw.iproute import ip_command

CGROUP_ROOT = Path("/sys/fs/cgroup")
# Machine-wide settings the kubelet changes at start (pkg/kubelet/cm: setupKernelTunables).
KERNEL_SYSCTLS = ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops")
SANDBOX_IMAGE = "tfmw.local/pause:catatonit"
# What the kubelets keep free on the disk they share with the host before they evict pods.
IMAGE_FS_RESERVE = "1Gi"
IMAGE_FS_RESERVE_BYTES = 1 << 30
# A node's cache holds an imported image twice: its layers as the archive has them and their
# unpacked files (a 1.8 GB worker image takes 3.6 GB a node).
IMPORT_COPIES = 2
CNI_BIN_DIRS = ("/usr/lib/cni", "/opt/cni/bin")
KUBELET_MAX_OPEN_FILES = 16384  # at most the hard RLIMIT_NOFILE here (20000)
NODE_PORT = 10250
# kube-router's /healthz in each node's network namespace (its own default port), reached from
# the host at the node's address: `make cluster` waits for it before it says ready.
NETWORK_POLICY_HEALTH_PORT = 20244


class NodeError(Exception):
    """One line for the operator."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return ip_command(*args, check=check, error=NodeError)


# ---------------------------------------------------------------- addresses (pure)


@dataclass(frozen=True)
class NodeNet:
    name: str  # node-<k>
    index: int  # k, 1..7
    slot: int
    netns: str  # tfmwk<s>-n<k>
    host_veth: str  # tk<s>n<k> (on the cluster bridge)
    address: str  # 198.19.(16s).(10+k)
    gateway: str  # the cluster bridge's host address
    pod_subnet: str  # 198.19.(16s+k).0/24

    @property
    def cgroup(self) -> str:
        return f"tfmwk{self.slot}-n{self.index}"

    @property
    def pod_gateway(self) -> str:
        return self.pod_subnet.replace(".0/24", ".1")


def node_net(slot: int, index: int) -> NodeNet:
    if not 1 <= index <= 7:
        raise ValueError("a cluster has at most 7 nodes")
    base = 16 * slot
    return NodeNet(
        name=f"node-{index}",
        index=index,
        slot=slot,
        netns=f"tfmwk{slot}-n{index}",
        host_veth=f"tk{slot}n{index}",
        address=f"198.19.{base}.{10 + index}",
        gateway=f"198.19.{base}.1",
        pod_subnet=f"198.19.{base + index}.0/24",
    )


# ---------------------------------------------------------------- config text (pure)


def cni_conflist(net: NodeNet, ipam_dir: Path) -> str:
    """The node's pod network: a bridge in the node's namespace, one address per pod from
    the node's subnet (host-local, its state in the node's folder), the node as gateway."""
    return json.dumps(
        {
            "cniVersion": "0.4.0",
            "name": "tfmw",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "cni0",
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": str(ipam_dir),
                        "ranges": [[{"subnet": net.pod_subnet, "gateway": net.pod_gateway}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        },
        indent=2,
    )


def registry_hosts_dir(state_dir: Path) -> Path:
    """containerd's registry hosts directory of every node: the cluster's registry
    (registry.py) writes <address:port>/hosts.toml there, naming the CA it trusts."""
    return state_dir / "registry" / "certs.d"


def containerd_config(node_dir: Path, cni_bin_dir: str, root: Path, hosts_dir: Path) -> str:
    """containerd 1.6 (config version 2): its images and snapshots in `root` (kept across
    clusters, see containerd_root), its sockets and state on the node's private
    /run/containerd, runc through the CRI plugin, CNI from the node's folder, registries'
    TLS from `hosts_dir` (read at each pull: a registry may start after the node)."""
    return f"""version = 2
root = "{root}"
state = "/run/containerd"
oom_score = 0

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{SANDBOX_IMAGE}"
  # No CAP_SYS_RESOURCE here: a container may not get a lower oom_score_adj than containerd.
  restrict_oom_score_adj = true
  max_container_log_line_size = 16384
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin_dir}"
    conf_dir = "{node_dir / "cni"}"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{hosts_dir}"
"""


def kubelet_config(net: NodeNet, node_dir: Path, pki_dir: Path, cluster_dns: str, cluster_domain: str) -> str:
    """KubeletConfiguration (kubelet.config.k8s.io/v1beta1) as YAML-compatible JSON."""
    return json.dumps(
        {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": net.address,
            "port": NODE_PORT,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": 10248,
            "tlsCertFile": str(pki_dir / f"node-{net.name}-serving.crt"),
            "tlsPrivateKeyFile": str(pki_dir / f"node-{net.name}-serving.key"),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(pki_dir / "ca.crt")},
            },
            "authorization": {"mode": "Webhook"},
            "clusterDNS": [cluster_dns],
            "clusterDomain": cluster_domain,
            "resolvConf": str(node_dir / "resolv.conf"),
            # This machine: hybrid cgroup v1, no systemd, no CAP_SYS_RESOURCE.
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{net.cgroup}",
            "cgroupsPerQOS": True,
            "enforceNodeAllocatable": ["pods"],
            "maxOpenFiles": KUBELET_MAX_OPEN_FILES,
            "oomScoreAdj": 0,
            "failSwapOn": False,
            "protectKernelDefaults": False,
            "containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock",
            "serializeImagePulls": False,
            "registerNode": True,
            # Quick feedback on a developer's machine: status every 4 s, config maps within 10 s.
            "nodeStatusUpdateFrequency": "4s",
            "nodeStatusReportFrequency": "20s",
            "syncFrequency": "10s",
            "fileCheckFrequency": "20s",
            # One disk for every node and the host, and the kubelet counts its use against the
            # whole disk's size (which on a thinly provisioned machine can be far more than is
            # free): evict only when it is truly full, an absolute 1 GiB rather than a share.
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": IMAGE_FS_RESERVE,
                "imagefs.available": IMAGE_FS_RESERVE,
                "nodefs.inodesFree": "2%",
            },
            # No image garbage collection: every image here was imported (the sandbox image
            # too), none can be pulled again, so an image the kubelet frees to make room is a
            # node that can start no pod ("failed to get sandbox image") until it is rebuilt.
            # 100 is the kubelet's documented "off"; the node caches are ours to trim.
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "containerLogMaxSize": "20Mi",
            "containerLogMaxFiles": 3,
            "shutdownGracePeriod": "0s",
            "logging": {"format": "text"},
        },
        indent=2,
    )


def kube_proxy_config(net: NodeNet, kubeconfig: Path, cluster_cidr: str) -> str:
    """KubeProxyConfiguration: nftables mode in the node's namespace; conntrack limits left
    as the machine has them (the sysctls they touch are not per-namespace)."""
    return json.dumps(
        {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "mode": "nftables",
            "hostnameOverride": net.name,
            "bindAddress": net.address,
            "clusterCIDR": cluster_cidr,
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "healthzBindAddress": "127.0.0.1:10256",
            "metricsBindAddress": "127.0.0.1:10249",
            "nodePortAddresses": ["primary"],
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
            "oomScoreAdj": 0,
            "logging": {"format": "text"},
        },
        indent=2,
    )


def network_policy_argv(bins: dict, net: NodeNet, kubeconfig: Path, service_cidr: str) -> list[str]:
    """kube-router with only its network policy controller: it programs the node's iptables
    (FORWARD, INPUT, OUTPUT, with ipsets) so that the NetworkPolicies of the pods on this node
    hold, ingress and egress. Pod networking stays the CNI bridge's, Services kube-proxy's."""
    return [
        str(bins["kube-router"]),
        "--kubeconfig",
        str(kubeconfig),
        "--hostname-override",
        net.name,
        "--run-firewall=true",
        "--run-router=false",
        "--run-service-proxy=false",
        "--enable-cni=false",
        "--enable-pod-egress=false",
        f"--service-cluster-ip-range={service_cidr}",
        f"--health-port={NETWORK_POLICY_HEALTH_PORT}",
        "--metrics-port=0",
        "--v=1",
    ]


def node_script(
    net: NodeNet,
    node_dir: Path,
    log_dir: Path,
    bins: dict,
    kubeconfig: Path,
    proxy_kubeconfig: Path,
    policy: list[str],
) -> str:
    """The node's first process (run as `unshare --mount ... bash node.sh` inside the node's
    network namespace): private mounts, then containerd, kubelet, kube-proxy and the network
    policy controller (`policy`, its argv); SIGTERM stops them newest first, and the
    containers with them."""
    q = shlex.quote
    kubelet = [
        str(bins["kubelet"]),
        "--config",
        str(node_dir / "kubelet.json"),
        "--kubeconfig",
        str(kubeconfig),
        "--hostname-override",
        net.name,
        "--node-ip",
        net.address,
        "--root-dir",
        "/var/lib/kubelet",
        "--cert-dir",
        str(node_dir / "kubelet-pki"),
        "--v",
        "1",
    ]
    proxy = [str(bins["kube-proxy"]), "--config", str(node_dir / "kube-proxy.json"), "--v", "1"]
    containerd = [str(bins["containerd"]), "--config", str(node_dir / "containerd.toml")]
    cgroups = " ".join(q(str(p)) for p in cgroup_dirs(net.cgroup))
    top = q(str(cgroup_dirs(net.cgroup)[0]))
    return f"""#!/bin/bash
# {net.name} of a tf-multiworker local cluster (scripts/tfmw/devcluster/nodes.py writes this file).
set -uo pipefail
die() {{ echo "{net.name}: $*" >&2; exit 1; }}
for dir in {cgroups}; do echo $$ > "$dir/cgroup.procs" || die "cannot join $dir"; done
mount --make-rprivate / || die "mount --make-rprivate / failed"
mount -t tmpfs -o mode=0711 tfmw-run-containerd /run/containerd || die "cannot mount /run/containerd"
mount -t tmpfs -o mode=0755 tfmw-run-netns /run/netns || die "cannot mount /run/netns"
mount --bind {q(str(node_dir / "kubelet"))} /var/lib/kubelet || die "cannot bind /var/lib/kubelet"
mount --bind {q(str(node_dir / "log"))} /var/log || die "cannot bind /var/log"
sysctl -qw net.ipv4.ip_forward=1 || die "cannot enable forwarding in the node's namespace"
sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || true
export PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

pids=()
stop() {{
  trap - TERM INT
  # kube-router, kube-proxy and the kubelet first (a stopped kubelet leaves its containers running) ...
  for i in 3 2 1; do [ -n "${{pids[i]:-}}" ] && kill -TERM "${{pids[i]}}" 2>/dev/null; done
  for i in 3 2 1; do [ -n "${{pids[i]:-}}" ] && wait "${{pids[i]}}" 2>/dev/null; done
  # ... then every container (the cgroups below the node's) ...
  for dir in $(find {top} -mindepth 1 -type d | sort -r); do
    while read -r pid; do kill -KILL "$pid" 2>/dev/null; done < "$dir/cgroup.procs"
  done
  # ... containerd, and last its shims (they live in the node's own cgroup).
  kill -TERM "${{pids[0]}}" 2>/dev/null; wait "${{pids[0]}}" 2>/dev/null
  while read -r pid; do [ "$pid" != "$$" ] && kill -KILL "$pid" 2>/dev/null; done < {top}/cgroup.procs
  exit 0
}}
trap stop TERM INT

{" ".join(q(a) for a in containerd)} >> {q(str(log_dir / f"{net.name}-containerd.log"))} 2>&1 &
pids+=($!)
for _ in $(seq 200); do [ -S /run/containerd/containerd.sock ] && break; sleep 0.1; done
[ -S /run/containerd/containerd.sock ] || {{ echo "{net.name}: containerd did not start" >&2; stop; }}
touch {q(str(node_dir / "containerd.ready"))}
# The images the cluster imports (pause, the worker image) come before the kubelet, so no
# pod meets an image that is still on its way.
for _ in $(seq 1200); do [ -e {q(str(node_dir / "images.ready"))} ] && break; sleep 0.1; done
{" ".join(q(a) for a in kubelet)} >> {q(str(log_dir / f"{net.name}-kubelet.log"))} 2>&1 &
pids+=($!)
{" ".join(q(a) for a in proxy)} >> {q(str(log_dir / f"{net.name}-kube-proxy.log"))} 2>&1 &
pids+=($!)
# kube-router reads its Node at start, which the kubelet registers only now: like a kubelet
# restarting a DaemonSet pod, restart it (after 1 s) whenever it exits.
supervise() {{
  local child
  trap 'kill -TERM "$child" 2>/dev/null; wait "$child"; exit 0' TERM
  while :; do
    "$@" & child=$!
    wait "$child"; echo "{net.name}: $1 exited ($?); restarting it in 1s" >&2
    sleep 1
  done
}}
supervise {" ".join(q(a) for a in policy)} >> {q(str(log_dir / f"{net.name}-kube-router.log"))} 2>&1 &
pids+=($!)
while :; do
  for pid in "${{pids[@]}}"; do
    if ! kill -0 "$pid" 2>/dev/null; then echo "{net.name}: a component (pid $pid) exited" >&2; stop; fi
  done
  sleep 1 & wait $!
done
"""


# ---------------------------------------------------------------- cgroups


def cgroup_hierarchies(types: tuple[str, ...] = ("cgroup",)) -> list[Path]:
    """Every mounted cgroup hierarchy of these file system types: by default the v1 ones a
    node joins (pids first: it lists every process below a node)."""
    found = []
    try:
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            fields = right.split()
            if fields and fields[0] in types:
                found.append(Path(left.split()[4]))
    except OSError:
        pass
    found.sort(key=lambda p: (p.name != "pids", str(p)))
    return found


def cgroup_cleanup_roots() -> list[Path]:
    """Where a node's cgroups can be: the v1 hierarchies, and in the hybrid layout also the
    cgroup2 mount (/sys/fs/cgroup/unified), where the kubelet makes its kubepods tree under
    the node's name too; down must remove both."""
    return cgroup_hierarchies(("cgroup", "cgroup2"))


def cgroup_dirs(name: str) -> list[Path]:
    return [h / name for h in cgroup_hierarchies()]


def make_cgroups(name: str) -> None:
    for path in cgroup_dirs(name):
        path.mkdir(exist_ok=True)
        if path.parent.name == "cpuset" or (path.parent / "cpuset.cpus").exists():
            for key in ("cpuset.cpus", "cpuset.mems"):  # a new cpuset cgroup starts empty
                parent = (path.parent / key).read_text().strip()
                (path / key).write_text(parent)


def cgroup_pids(name: str) -> list[int]:
    pids: set[int] = set()
    for top in cgroup_dirs(name)[:1]:
        if top.is_dir():
            for procs in top.rglob("cgroup.procs"):
                try:
                    pids.update(int(x) for x in procs.read_text().split())
                except (OSError, ValueError):
                    pass
    return sorted(pids)


def remove_cgroups(name: str, timeout: float = 10.0) -> list[str]:
    """Kill whatever still runs below the node's cgroup, then remove its directories,
    deepest first, in every hierarchy. Returns what could not be removed."""
    deadline = time.monotonic() + timeout
    while (pids := cgroup_pids(name)) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    left = []
    for top in (root / name for root in cgroup_cleanup_roots()):
        if not top.is_dir():
            continue
        dirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True) + [top]
        for path in dirs:
            for _ in range(50):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)
            else:
                left.append(str(path))
    return left


def kill_cgroup(name: str, timeout: float = 10.0) -> int:
    """SIGKILL everything below the node's cgroup (node.sh, the kubelet, containerd, its
    shims, every container) until nothing is left; the directories stay for `down`. Returns
    how many processes were killed. With them goes the node's mount namespace."""
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while (pids := cgroup_pids(name)) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    if cgroup_pids(name):
        raise NodeError(f"cgroup {name}: processes left after {timeout:g}s of SIGKILL")
    return len(killed)


def set_node_link(net: NodeNet, up: bool) -> None:
    """Cut (or restore) the node's only link, its veth on the cluster bridge: nothing reaches
    the node or its pods, and they reach nothing."""
    _ip("link", "set", net.host_veth, "up" if up else "down")


def clear_stale_slot(slot: int) -> list[str]:
    """What a cluster that once had slot `slot` left behind (a `down` that could not finish):
    its node namespaces and veths, and its nodes' cgroups once empty. Called when a new
    cluster takes the slot, whose free bridge says no cluster runs there. Signals nothing:
    returns the cgroups left, those still running processes and any the kernel kept."""
    remove_networks(slot)
    left = []
    for name in sorted({p.name for root in cgroup_cleanup_roots() for p in root.glob(f"tfmwk{slot}-n*")}):
        if cgroup_pids(name):
            left.append(name)
        elif remove_cgroups(name, timeout=0):  # no process found: nothing is killed
            left.append(name)
    return left


def leftover_cgroups(prefix: str) -> list[str]:
    return [str(p) for h in cgroup_cleanup_roots() for p in h.glob(f"{prefix}*")]


# ---------------------------------------------------------------- kernel settings


def read_kernel_sysctls() -> dict[str, str]:
    return {key: (Path("/proc/sys") / key).read_text().strip() for key in KERNEL_SYSCTLS}


def restore_kernel_sysctls(saved: dict[str, str]) -> None:
    for key, value in saved.items():
        try:
            (Path("/proc/sys") / key).write_text(value)
        except OSError:
            pass


# ---------------------------------------------------------------- network plumbing


def create_network(net: NodeNet, bridge: str, others: list[NodeNet]) -> None:
    """The node's namespace and its veth on the cluster bridge; routes to the other nodes'
    pod subnets over the bridge; the host's route to this node's pods. No default route: a
    node reaches the bridge's subnet (the API server, CoreDNS, the other nodes) and nothing
    else, so an image pull or a pod's stray connection fails at once, on this machine."""
    _ip("netns", "add", net.netns)
    _ip("link", "add", net.host_veth, "type", "veth", "peer", "name", "eth0", "netns", net.netns)
    _ip("link", "set", net.host_veth, "master", bridge, "up")
    _ip("-n", net.netns, "addr", "add", f"{net.address}/24", "dev", "eth0")
    _ip("-n", net.netns, "link", "set", "eth0", "up")
    _ip("-n", net.netns, "link", "set", "lo", "up")
    for other in others:
        if other.index != net.index:
            _ip("-n", net.netns, "route", "add", other.pod_subnet, "via", other.address)
    _ip("route", "replace", net.pod_subnet, "via", net.address, "dev", bridge)


def leftover_networks(slot: int) -> list[tuple[str, str]]:
    """("netns" | "link", name) of slot `slot`'s node namespaces and veths that exist."""
    found = [
        ("netns", name) for name in _ip("netns", "list", check=False).stdout.split() if name.startswith(f"tfmwk{slot}-")
    ]
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        parts = line.split(":")
        name = parts[1].strip().split("@")[0] if len(parts) > 1 else ""
        if name.startswith(f"tk{slot}n"):  # tk1n2, never tk12n1
            found.append(("link", name))
    return found


def remove_networks(slot: int) -> None:
    """Every node namespace and veth of the slot, a crashed cluster's too (the host's routes
    to the pod subnets go with the veths and the bridge)."""
    for kind, name in leftover_networks(slot):
        _ip(kind, "del", name, check=False)


# ---------------------------------------------------------------- a node's files and process


def cni_bin_dir() -> str | None:
    for directory in CNI_BIN_DIRS:
        if (Path(directory) / "bridge").exists() and (Path(directory) / "host-local").exists():
            return directory
    return None


def containerd_root(cache: Path, net: NodeNet) -> Path:
    """Where node k of slot s keeps its images: a cache outside the state folder, so the next
    cluster on that slot finds the worker image already unpacked (importing 1.8 GB into a
    node takes about half a minute). One slot is one running cluster at a time (its bridge
    name is unique), so two containerds never share a root."""
    return cache / f"k{net.slot}-n{net.index}"


def prepare_node(
    net: NodeNet,
    state_dir: Path,
    bins: dict,
    cluster_dns: str,
    cluster_domain: str,
    cluster_cidr: str,
    kubeconfig: Path,
    proxy_kubeconfig: Path,
    image_cache: Path,
    policy: list[str],
) -> Path:
    """Write the node's folder: configs, resolv.conf, node.sh. Returns node.sh's path."""
    node_dir = state_dir / "nodes" / net.name
    containerd_root(image_cache, net).mkdir(parents=True, exist_ok=True)
    for sub in ("kubelet", "log", "cni", "cni-ipam", "kubelet-pki"):
        (node_dir / sub).mkdir(parents=True, exist_ok=True)
    cni_dir = cni_bin_dir()
    if cni_dir is None:
        raise NodeError(
            "the CNI plugins (bridge, host-local) are not installed: apt-get install containernetworking-plugins"
        )
    (node_dir / "cni" / "10-tfmw.conflist").write_text(cni_conflist(net, node_dir / "cni-ipam"))
    (node_dir / "containerd.toml").write_text(
        containerd_config(node_dir, cni_dir, containerd_root(image_cache, net), registry_hosts_dir(state_dir))
    )
    (node_dir / "kubelet.json").write_text(
        kubelet_config(net, node_dir, state_dir / "pki", cluster_dns, cluster_domain)
    )
    (node_dir / "kube-proxy.json").write_text(kube_proxy_config(net, proxy_kubeconfig, cluster_cidr))
    # Upstream resolver for dnsPolicy Default pods; ClusterFirst pods get the cluster DNS.
    (node_dir / "resolv.conf").write_text(f"nameserver {net.gateway}\n")
    script = node_dir / "node.sh"
    script.write_text(node_script(net, node_dir, state_dir / "logs", bins, kubeconfig, proxy_kubeconfig, policy))
    return script


def node_argv(net: NodeNet, script: Path) -> list[str]:
    """Enter the node's network namespace, then a private mount namespace, then run node.sh
    (nsenter and unshare exec in place: the PID recorded is node.sh's)."""
    return [
        "nsenter",
        f"--net=/run/netns/{net.netns}",
        "--",
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        "bash",
        str(script),
    ]


def run_in_node(
    pid: int, argv: list[str], timeout: float = 600, input_path: Path | None = None
) -> subprocess.CompletedProcess:
    """Run a command in a node's mount and network namespaces (ctr against its containerd)."""
    full = ["nsenter", f"--target={pid}", "--mount", "--net", "--", *argv]
    if input_path is not None:
        with open(input_path, "rb") as fh:
            return subprocess.run(full, stdin=fh, capture_output=True, timeout=timeout)
    return subprocess.run(full, capture_output=True, timeout=timeout)


def ctr_images(
    pid: int, ctr: str, *args: str, what: str = "", timeout: float = 600, input_path: Path | None = None
) -> str:
    """`ctr -n k8s.io images ARGS` against the node's containerd (CRI's namespace); stdout.
    With `what`, a failure is a NodeError naming it; without, it reads as no output."""
    proc = run_in_node(
        pid,
        [ctr, "--address", "/run/containerd/containerd.sock", "-n", "k8s.io", "images", *args],
        timeout=timeout,
        input_path=input_path,
    )
    if proc.returncode != 0 and what:
        last = (proc.stderr.decode(errors="replace").strip().splitlines() or ["?"])[-1]
        raise NodeError(f"{what} in the node's containerd failed: {last}")
    return proc.stdout.decode() if proc.returncode == 0 else ""


# containerd's garbage collector, started with containerd on a cache whose older image was
# removed last time, can delete a layer snapshot while an import is unpacking onto it ("parent
# snapshot ... does not exist"). The import is whole or nothing: once the collector is done, a
# second one succeeds. Seen once in ~20 cluster starts here.
IMPORT_TRIES = 2
IMPORT_RETRY_SECONDS = 3.0


def import_image(pid: int, ctr: str, archive: Path, refs: list[str], image_id: str) -> None:
    """Import a docker-save archive (holding `refs`, image `image_id`) into the node, and label
    each ref with the id: what has_image reads back next time."""
    for attempt in range(1, IMPORT_TRIES + 1):
        try:
            ctr_images(pid, ctr, "import", "--all-platforms", "-", input_path=archive, what=f"importing {archive.name}")
            break
        except NodeError as err:
            if attempt == IMPORT_TRIES or "snapshot" not in str(err):
                raise
            time.sleep(IMPORT_RETRY_SECONDS)
    for ref in refs:
        ctr_images(pid, ctr, "label", ref, f"{IMAGE_ID_LABEL}={image_id}", timeout=60, what=f"labelling {ref}")


def archive_image(archive: Path) -> tuple[list[str], str]:
    """(references, image id) a docker-save archive holds, read from its manifest.json
    (tarfile skips over the layers without reading them)."""
    import tarfile

    with tarfile.open(archive) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())
    entry = manifest[0]
    return list(entry.get("RepoTags") or []), "sha256:" + entry["Config"].split("/")[-1].removesuffix(".json")


IMAGE_ID_LABEL = "tf-multiworker.local/image-id"


def parse_image_labels(ctr_ls_output: str) -> dict[str, dict[str, str]]:
    """`ctr images ls` (REF TYPE DIGEST SIZE PLATFORMS LABELS) -> ref -> its labels (pure)."""
    images: dict[str, dict[str, str]] = {}
    for line in ctr_ls_output.splitlines()[1:]:
        fields = line.split()
        if not fields:
            continue
        labels = fields[-1] if "=" in fields[-1] else ""
        images[fields[0]] = dict(item.split("=", 1) for item in labels.split(",") if "=" in item)
    return images


def node_images(pid: int, ctr: str) -> dict[str, dict[str, str]]:
    """The images a node's containerd holds: ref -> labels."""
    return parse_image_labels(ctr_images(pid, ctr, "ls", timeout=60))


def stale_ids(images: dict[str, dict[str, str]], keep: set[str]) -> list[str]:
    """The `sha256:<id>` records (CRI names each image by its id too) of images no tag of
    ours points at any more: an old build of the worker image, left behind in the cache (pure)."""
    current = {labels.get(IMAGE_ID_LABEL) for labels in images.values()} | keep
    return sorted(ref for ref in images if ref.startswith("sha256:") and ref not in current)


def remove_images(pid: int, ctr: str, refs: list[str]) -> None:
    if refs:
        ctr_images(pid, ctr, "rm", *refs, timeout=120)


def import_room_error(need: int, free: int, where: Path) -> str | None:
    """Why importing images taking `need` bytes into the nodes' caches in `where` would leave
    the disk too full for the kubelets (they evict every pod once less than IMAGE_FS_RESERVE is
    free), or None when there is room (pure)."""
    if free - need >= IMAGE_FS_RESERVE_BYTES:
        return None
    return (
        f"importing the image(s) into the nodes needs about {need / 1e9:.1f} GB more on the disk of {where}, "
        f"and the kubelets evict every pod once less than {IMAGE_FS_RESERVE} is free: {free / 1e9:.1f} GB is free. "
        f"Free disk space, or delete node caches no running cluster uses (folders under {where})"
    )


def has_image(images: dict[str, dict[str, str]], refs: list[str], image_id: str) -> bool:
    """Every ref is there and was imported from the image `image_id` (the label import_image
    sets: a tag moved by anything else has lost it)."""
    return bool(refs) and all(images.get(ref, {}).get(IMAGE_ID_LABEL) == image_id for ref in refs)

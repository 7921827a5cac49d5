"""Where local pods live on the network.

netns mode (root, iproute2): one network namespace per pod on a private bridge, each with
its own address in 198.18.0.0/15 (RFC 2544's range for test networks; nothing routes out),
and a hosts file (`/etc/netns/<ns>/hosts`, bind-mounted by `ip netns exec`) mapping every
pod's cluster DNS name, as the headless Service would. Every pod uses the chart's one
port, exactly as in a cluster; cutting a pod's link is a real network partition.

loopback mode (no root): every pod on 127.0.0.1. TF's gRPC server binds the wildcard
address, so worker j listens on port+j (TFMW_LOOPBACK_PORTS=1 tells the launcher).
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tfmw import iproute

from .podspec import LocalPod, LocalRunError

SUBNET = "198.18.{block}.{host}"
_SERIAL = itertools.count()  # several networks, one after another, in one process


def netns_available() -> bool:
    return os.geteuid() == 0 and shutil.which("ip") is not None


def ip_command(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return iproute.ip_command(*args, check=check, error=LocalRunError)


_ip = ip_command


@dataclass
class NetnsNetwork:
    """A bridge plus one namespace per pod. Names carry the runner's PID, so parallel runs
    never collide and leftovers of a killed run are known by their dead PID
    (`cleanup_stale` removes those). Interface names stay within Linux's 15 characters."""

    tag: str = field(default_factory=lambda: f"{os.getpid()}{chr(97 + next(_SERIAL) % 26)}")
    block: int = 0
    bridge: str = field(init=False)
    created: list[str] = field(default_factory=list)

    def __post_init__(self):
        self.bridge = f"tfmw{self.tag}br"

    def ns_name(self, ordinal: int) -> str:
        return f"tfmw{self.tag}p{ordinal}"

    def veth_name(self, ordinal: int) -> str:
        return f"tfmw{self.tag}v{ordinal}"

    def address(self, ordinal: int) -> str:
        return SUBNET.format(block=self.block, host=ordinal + 2)

    def setup(self, pods: Sequence[LocalPod]) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        self.created.append("bridge")
        _ip("link", "set", self.bridge, "up")
        hosts = ["127.0.0.1 localhost", "::1 localhost"]
        hosts += [f"{self.address(p.ordinal)} {p.fqdn} {p.hostname}" for p in pods]
        for pod in pods:
            ns = self.ns_name(pod.ordinal)
            _ip("netns", "add", ns)
            self.created.append(ns)
            etc = Path("/etc/netns") / ns
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text("\n".join(hosts) + "\n")
            # No DNS server inside: any name outside the hosts file fails at once, and no
            # query ever leaves the namespace.
            (etc / "resolv.conf").write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
            _ip("link", "add", self.veth_name(pod.ordinal), "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", self.veth_name(pod.ordinal), "master", self.bridge, "up")
            _ip("-n", ns, "addr", "add", f"{self.address(pod.ordinal)}/16", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            pod.netns, pod.ip = ns, self.address(pod.ordinal)

    def wrap(self, pod: LocalPod, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", pod.netns, *argv]

    def set_link(self, ordinal: int, up: bool) -> None:
        """Cut or restore one pod's network (its veth on the bridge side)."""
        _ip("link", "set", self.veth_name(ordinal), "up" if up else "down")

    def teardown(self) -> None:
        for name in reversed(self.created):
            if name == "bridge":
                _ip("link", "del", self.bridge, check=False)
            else:
                _ip("netns", "del", name, check=False)
                shutil.rmtree(Path("/etc/netns") / name, ignore_errors=True)
        self.created.clear()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def cleanup_stale() -> list[str]:
    """Remove namespaces, bridges and hosts files that a killed run left behind (their
    owner PID is gone); a live run's are never touched. Returns what was removed."""
    removed = []
    names = _ip("netns", "list", check=False).stdout.split()
    links = [
        line.split(":")[1].strip().split("@")[0]
        for line in _ip("-o", "link", "show", check=False).stdout.splitlines()
        if ":" in line
    ]
    for name in set(names) | set(links) | {p.name for p in Path("/etc/netns").glob("tfmw*")}:
        match = re.match(r"^tfmw(\d+)[a-z](p|v|br)", name)
        if not match or _pid_alive(int(match.group(1))):
            continue
        if name in names:
            _ip("netns", "del", name, check=False)
        elif name in links:
            _ip("link", "del", name, check=False)
        shutil.rmtree(Path("/etc/netns") / name, ignore_errors=True)
        removed.append(name)
    return removed


@dataclass
class LoopbackNetwork:
    """All pods on 127.0.0.1, worker j on base_port + j; with metrics (TFMW_METRICS_PORT set by
    the chart) worker j serves them on metrics_port + j."""

    base_port: int
    metrics_port: int | None = None

    def setup(self, pods: Sequence[LocalPod]) -> None:
        for pod in pods:
            pod.ip = "127.0.0.1"
            pod.env["TFMW_LOOPBACK_PORTS"] = "1"
            pod.env["TFMW_PORT"] = str(self.base_port)
            if self.metrics_port is not None and pod.env.get("TFMW_METRICS_PORT", "0") != "0":
                pod.env["TFMW_METRICS_PORT"] = str(self.metrics_port)

    def wrap(self, pod: LocalPod, argv: list[str]) -> list[str]:
        return argv

    def set_link(self, ordinal: int, up: bool) -> None:
        raise LocalRunError("cutting a pod's network needs network namespaces (run as root)")

    def teardown(self) -> None:
        pass


def free_port_range(preferred: int, count: int) -> int:
    """`preferred` if preferred..preferred+count-1 are all free on loopback, else another
    free range: two runs on one machine must not collide."""

    def free(port: int) -> bool:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return True
            except OSError:
                return False

    candidates = [preferred] + list(range(20000, 60000, 97))
    for base in candidates:
        if base + count <= 65535 and all(free(base + j) for j in range(count)):
            return base
    raise LocalRunError(f"no {count} free consecutive loopback ports found")

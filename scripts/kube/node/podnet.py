"""A pod's network on the cluster bridge: its own network namespace, a veth into the
bridge, one address, and the hosts/resolv.conf files `ip netns exec` mounts over /etc.

Names: namespace `tfmwk<slot>-<pod uid prefix>`, host-side veth `tk<slot>v<n>` (Linux
allows 15 characters). No default route: a pod reaches its peers and the API server on the
bridge's subnet, nothing else.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from scripts.localrun.network import ip_command

NETNS_ETC = Path("/etc/netns")


class NetError(Exception):
    pass


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return ip_command(*args, check=check, error=NetError)


@dataclass
class PodNetwork:
    netns: str
    veth: str
    ip: str
    prefix: str

    @property
    def etc(self) -> Path:
        return NETNS_ETC / self.netns

    def write_file(self, name: str, text: str) -> None:
        """Rewrite /etc/<name> as the pod sees it, in place: `ip netns exec` bind-mounts
        this very file, so replacing it by rename would leave running pods on the old one."""
        path = self.etc / name
        data = text.encode()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
        finally:
            os.close(fd)

    def wrap(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *argv]


def netns_name(slot: int, uid: str) -> str:
    return f"tfmwk{slot}-{uid.replace('-', '')[:12]}"


def create(slot: int, bridge: str, uid: str, veth_index: int, ip: str, prefix: str,
           hosts: str, resolv: str) -> PodNetwork:
    net = PodNetwork(netns_name(slot, uid), f"tk{slot}v{veth_index}", ip, prefix)
    made = []
    try:
        _ip("netns", "add", net.netns)
        made.append("netns")
        net.etc.mkdir(parents=True, exist_ok=True)
        net.write_file("hosts", hosts)
        net.write_file("resolv.conf", resolv)
        _ip("link", "add", net.veth, "type", "veth", "peer", "name", "eth0", "netns", net.netns)
        _ip("link", "set", net.veth, "master", bridge, "up")
        _ip("-n", net.netns, "addr", "add", f"{ip}/{prefix}", "dev", "eth0")
        _ip("-n", net.netns, "link", "set", "eth0", "up")
        _ip("-n", net.netns, "link", "set", "lo", "up")
    except NetError:
        delete(net)
        raise
    return net


def delete(net: PodNetwork) -> None:
    _ip("link", "del", net.veth, check=False)
    _ip("netns", "del", net.netns, check=False)
    shutil.rmtree(net.etc, ignore_errors=True)


def remove_leftovers(slot: int) -> list[str]:
    """Every namespace, veth and /etc/netns folder of cluster slot `slot` (after its node agent
    is gone). Returns what was removed."""
    removed = []
    prefix_ns, prefix_veth = f"tfmwk{slot}-", f"tk{slot}v"
    for name in _ip("netns", "list", check=False).stdout.split():
        if name.startswith(prefix_ns):
            _ip("netns", "del", name, check=False)
            removed.append(name)
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        parts = line.split(":")
        if len(parts) > 1:
            name = parts[1].strip().split("@")[0]
            if name.startswith(prefix_veth):
                _ip("link", "del", name, check=False)
                removed.append(name)
    if NETNS_ETC.exists():
        for path in NETNS_ETC.glob(f"{prefix_ns}*"):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(str(path))
    return removed

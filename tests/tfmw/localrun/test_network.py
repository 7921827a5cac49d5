"""Per-pod network namespaces: DNS names resolve to each pod, leftovers of dead runs go."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tfmw.localrun.network import NetnsNetwork, cleanup_stale, netns_available
from tfmw.localrun.podspec import LocalPod

needs_root = pytest.mark.skipif(not netns_available(), reason="network namespaces need root (CI runs as root)")


def _pods(n):
    return [
        LocalPod(
            name=f"w-{i}",
            ordinal=i,
            argv=[],
            env={},
            pod_dir=Path("/tmp"),
            hostname=f"w-{i}",
            fqdn=f"w-{i}.svc.ns.svc.cluster.local",
        )
        for i in range(n)
    ]


@needs_root
def test_each_pod_resolves_every_peer_and_nothing_else():
    net = NetnsNetwork()
    pods = _pods(2)
    try:
        net.setup(pods)
        out = subprocess.run(
            net.wrap(pods[0], ["getent", "hosts", "w-1.svc.ns.svc.cluster.local"]),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert out.split()[0] == pods[1].ip
        # a name outside the hosts file fails inside the namespace (no DNS server reachable)
        miss = subprocess.run(net.wrap(pods[0], ["getent", "hosts", "example.invalid"]), capture_output=True, text=True)
        assert miss.returncode != 0
        # a TCP connection between the pods works over the bridge, and stops when cut
        server = subprocess.Popen(
            net.wrap(
                pods[1],
                [
                    "python3",
                    "-c",
                    "import socket; s=socket.socket(); s.bind(('0.0.0.0', 2222)); s.listen(); c,_=s.accept(); "
                    "c.send(b'ok')",
                ],
            )
        )
        try:
            probe = (
                "import socket,time\nfor _ in range(50):\n    try:\n"
                "        print(socket.create_connection(('w-1.svc.ns.svc.cluster.local', 2222), "
                "2).recv(2).decode()); break\n"
                "    except OSError: time.sleep(0.1)\n"
            )
            got = subprocess.run(
                net.wrap(pods[0], ["python3", "-c", probe]), capture_output=True, text=True, timeout=30
            ).stdout.strip()
            assert got == "ok"
        finally:
            server.kill()
    finally:
        net.teardown()
    assert not any(
        n.startswith(f"tfmw{net.tag}")
        for n in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    )


@needs_root
def test_cleanup_removes_only_leftovers_of_dead_runs():
    dead_pid = 4194000  # above any PID this machine hands out by default
    assert not os.path.exists(f"/proc/{dead_pid}")
    stale = f"tfmw{dead_pid}ap0"
    live = f"tfmw{os.getpid()}zp0"
    for name in (stale, live):
        subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        removed = cleanup_stale()
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
        assert stale in removed and stale not in listed
        assert live in listed
    finally:
        for name in (stale, live):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)

"""`make cluster` itself: the pinned versions it reports, its security defaults, what a
node advertises, starting twice, and that `make cluster-down` leaves nothing behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clusterkit import REPO, wait_for

from tfmw.devcluster import controlplane
from tfmw.devcluster.build import ensure_binaries
from tfmw.k8s.api import ApiError, ns_path

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


def test_server_reports_the_pinned_release(cluster):
    version = cluster.api.get("/version")
    assert version["gitVersion"] == controlplane.KUBERNETES_VERSION
    assert (version["major"], version["minor"]) == ("1", "35")


def test_starting_again_reports_the_running_cluster(cluster):
    lines = []
    state = controlplane.up(cluster.state.dir, bins={}, say=lines.append)
    assert state.pids == cluster.state.pids
    assert "already running" in lines[0] and cluster.state.server in lines[0]


def test_every_node_is_a_real_kubelet_advertising_gpus_and_ready(cluster):
    for name in cluster.state.nodes:
        node = cluster.api.get(f"/api/v1/nodes/{name}")
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "2"
        ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]
        assert ready == "True"
        info = node["status"]["nodeInfo"]
        assert info["kubeletVersion"] == controlplane.KUBERNETES_VERSION
        assert info["containerRuntimeVersion"].startswith("containerd://")
        assert info["kubeProxyVersion"] in ("", controlplane.KUBERNETES_VERSION)
        # The kubelet's lease controller renews the node's heartbeat Lease (made soon after Ready).
        lease = wait_for(
            lambda name=name: cluster.api.get_or_none(
                ns_path("kube-node-lease", "leases", name, group="coordination.k8s.io/v1")
            ),
            30,
            f"{name}'s Lease",
        )
        assert lease["spec"]["holderIdentity"] == name
    assert len(cluster.state.nodes) == 2


def test_node_identity_is_limited_by_the_node_authorizer(cluster):
    node = cluster.state.api("node-node-1")
    with pytest.raises(ApiError) as info:
        node.get("/api/v1/secrets")
    assert info.value.status == 403
    with pytest.raises(ApiError) as info:  # NodeRestriction: a node may not touch another Node
        node.patch("/api/v1/nodes/node-2", {"metadata": {"labels": {"x": "y"}}})
    assert info.value.status in (403, 404)


def test_anonymous_requests_are_refused(cluster):
    import ssl
    import urllib.request

    ctx = ssl.create_default_context(cafile=str(cluster.state.pki_dir / "ca.crt"))
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(f"{cluster.state.server}/api/v1/namespaces", context=ctx, timeout=10)
    assert info.value.code == 401


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def _procs_mentioning(text: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if text in cmdline and int(entry) != os.getpid():
                found.append(int(entry))
    return found


@pytest.fixture
def stale_cgroups(cluster):
    """An empty node cgroup, as a crashed cluster's `down` may leave one, in every slot but the
    shared cluster's (a node index a one-node cluster never has): which slot the test's cluster
    takes is known only once it is up, since the suite's side lane (tests/support/lanes.py) runs
    a cluster of its own beside. Those no cluster cleared are removed after the test."""
    from tfmw.devcluster import nodes

    planted = {slot: f"tfmwk{slot}-n5" for slot in range(controlplane.SLOTS) if slot != cluster.state.slot}
    for name in planted.values():
        nodes.make_cgroups(name)
        assert nodes.leftover_cgroups(name)
    yield planted
    for name in planted.values():
        nodes.remove_cgroups(name)


def test_cluster_down_after_a_crash_leaves_no_process_mount_or_namespace(cluster, tmp_path, stale_cgroups):
    """A second cluster (its own slot, one node) runs a pod; then it crashes (its node's first
    process and the API server are SIGKILLed, so the kubelet, containerd and the container are
    orphans nobody stops); `cluster down` still removes everything: processes, mounts, cgroups,
    namespaces, the bridge, nftables tables (they live in the node's namespace), the kernel
    settings the kubelet changed, the state folder. A crashed cluster's empty cgroup in the
    slot it takes (one `down` could not remove) is cleared by `up`."""
    from tfmw.devcluster import nodes

    directory = tmp_path / "second"
    env = dict(os.environ)
    sysctls_before = nodes.read_kernel_sysctls()
    up = subprocess.run(
        [
            sys.executable,
            "-m",
            "tfmw.devcluster",
            "up",
            "--state",
            str(directory),
            "--nodes",
            "1",
            "--no-image",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    assert up.returncode == 0, up.stderr
    assert up.stdout.strip().splitlines()[-1] == f"export KUBECONFIG={directory / 'kubeconfig'}"
    state = controlplane.ClusterState.load(directory)
    assert state.slot != cluster.state.slot
    assert state.slot in stale_cgroups and not nodes.leftover_cgroups(stale_cgroups[state.slot])
    api = state.api()
    api.create(
        ns_path("default", "pods"),
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "sleeper"},
            "spec": {"containers": [{"name": "c", "image": nodes.SANDBOX_IMAGE}]},
        },
    )  # catatonit -P: waits
    wait_for(
        lambda: (api.get(ns_path("default", "pods", "sleeper")).get("status") or {}).get("phase") == "Running",
        60,
        "the pod to run",
    )
    netns = f"tfmwk{state.slot}-"
    assert any(
        n.startswith(netns)
        for n in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    )
    kubelets = [pid for pid in _procs_mentioning(str(directory)) if "kubelet" in _cmdline(pid)]
    assert kubelets, "the node's kubelet"
    for name in ("node-1", "kube-apiserver"):
        os.kill(state.pids[name], signal.SIGKILL)
    time.sleep(1)
    assert all(Path(f"/proc/{pid}").exists() for pid in kubelets)  # orphaned, still running
    down = subprocess.run(
        [sys.executable, "-m", "tfmw.devcluster", "down", "--state", str(directory)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    assert down.returncode == 0, down.stderr
    assert "stopped" in down.stdout
    assert not directory.exists()
    assert not _procs_mentioning(str(directory))
    assert not [
        n
        for n in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
        if n.startswith(netns)
    ]
    assert subprocess.run(["ip", "link", "show", f"tfmwk{state.slot}"], capture_output=True).returncode != 0
    mounts = Path("/proc/mounts").read_text()
    assert str(directory) not in mounts and netns not in mounts
    assert not nodes.leftover_cgroups(f"tfmwk{state.slot}-")
    assert nodes.read_kernel_sysctls() == sysctls_before
    again = subprocess.run(
        [sys.executable, "-m", "tfmw.devcluster", "down", "--state", str(directory)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
    )
    assert again.returncode == 0 and "none running" in again.stdout


def test_a_component_that_dies_at_start_is_named_and_nothing_is_left(cluster, tmp_path):
    """A broken scheduler binary: `up` fails with one line naming it and its log, and stops
    everything it had started (etcd, the API server, the controller manager, the nodes)."""
    fake = tmp_path / "bin" / "kube-scheduler"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'flag provided but not defined: -boom' >&2\nexit 1\n")
    fake.chmod(0o755)
    bins = dict(ensure_binaries(), **{"kube-scheduler": fake})
    directory = tmp_path / "broken"
    with pytest.raises(controlplane.ClusterError) as info:
        controlplane.up(directory, bins=bins, say=lambda line: None, timeout=60)
    message = str(info.value)
    assert "kube-scheduler exited while starting (code 1)" in message and "-boom" in message
    assert "\n" not in message
    assert not directory.exists()
    assert not _procs_mentioning(str(directory))

"""The local cluster's pure parts: addresses, the nodes' configuration (kubelet, kube-proxy,
containerd, CNI, the node script), the sandbox image archive, provisioned volumes, RBAC,
and the refusals `make cluster` gives before it starts anything."""

from __future__ import annotations

import io
import ipaddress
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from tfmw.devcluster import controlplane, nodes, provisioner
from tfmw.devcluster.controlplane import ClusterError
from tfmw.devcluster.images import _layer, docker_archive
from tfmw.devcluster.pki import PkiError, subject

# ---------------------------------------------------------------- addresses


def test_slots_do_not_overlap():
    nets = [controlplane.slot_network(s) for s in range(controlplane.SLOTS)]
    assert len({n["address"] for n in nets}) == controlplane.SLOTS
    assert nets[1]["address"] == "198.19.16.1" and nets[1]["service_cidr"] == "198.19.24.0/21"
    assert ipaddress.ip_address(nets[1]["dns_ip"]) in ipaddress.ip_network(nets[1]["service_cidr"])
    with pytest.raises(ValueError):
        controlplane.slot_network(16)


def test_node_addresses_pod_subnets_and_services_never_overlap():
    for slot in (0, 1, 15):
        net = controlplane.slot_network(slot)
        bridge = ipaddress.ip_network(f"{net['address']}/{net['prefix']}", strict=False)
        services = ipaddress.ip_network(net["service_cidr"])
        cluster = ipaddress.ip_network(net["cluster_cidr"])
        subnets = [ipaddress.ip_network(nodes.node_net(slot, k).pod_subnet) for k in range(1, 8)]
        for k, subnet in enumerate(subnets, start=1):
            node = nodes.node_net(slot, k)
            assert ipaddress.ip_address(node.address) in bridge and node.gateway == net["address"]
            assert not subnet.overlaps(bridge) and not subnet.overlaps(services) and subnet.subnet_of(cluster)
            assert ipaddress.ip_address(node.pod_gateway) in subnet
            assert all(not subnet.overlaps(other) for other in subnets if other != subnet)
            assert len(node.netns) <= 15 and len(node.host_veth) <= 15  # Linux interface names
    with pytest.raises(ValueError):
        nodes.node_net(0, 8)  # node 8 would reach into the service range


# ---------------------------------------------------------------- node configuration


def _cfg(tmp_path):
    net = nodes.node_net(2, 1)
    return net, json.loads(nodes.kubelet_config(net, tmp_path, tmp_path / "pki", "198.19.40.10", "cluster.local"))


def test_kubelet_config_fits_this_machine_and_serves_only_authenticated_calls(tmp_path):
    net, cfg = _cfg(tmp_path)
    assert cfg["failCgroupV1"] is False and cfg["cgroupDriver"] == "cgroupfs"
    assert cfg["cgroupRoot"] == f"/{net.cgroup}"  # a node's pods stay below its own cgroup
    assert cfg["maxOpenFiles"] <= 20000 and cfg["oomScoreAdj"] == 0  # no CAP_SYS_RESOURCE here
    assert cfg["authentication"]["anonymous"]["enabled"] is False
    assert cfg["authorization"]["mode"] == "Webhook" and cfg["readOnlyPort"] == 0
    assert cfg["address"] == net.address and cfg["clusterDNS"] == ["198.19.40.10"]
    assert cfg["tlsCertFile"].endswith(f"node-{net.name}-serving.crt")


def test_kubelet_never_frees_an_image_it_could_not_pull_again(tmp_path):
    """Every image on a node was imported (no registry serves it): the kubelet's image garbage
    collection is off, and eviction waits for a truly full disk, not a share of a disk the
    host also fills."""
    _, cfg = _cfg(tmp_path)
    assert cfg["imageGCHighThresholdPercent"] == 100  # the kubelet's "off"
    assert cfg["imageGCLowThresholdPercent"] < cfg["imageGCHighThresholdPercent"]  # kubelet validation
    assert cfg["evictionHard"]["nodefs.available"] == cfg["evictionHard"]["imagefs.available"] == "1Gi"


def test_kube_proxy_config_leaves_machine_wide_conntrack_alone(tmp_path):
    net = nodes.node_net(0, 2)
    cfg = json.loads(nodes.kube_proxy_config(net, tmp_path / "kc", "198.19.0.0/20"))
    assert cfg["mode"] == "nftables" and cfg["hostnameOverride"] == "node-2"
    assert cfg["conntrack"]["maxPerCore"] == 0 and cfg["conntrack"]["min"] == 0


def test_containerd_config_restricts_oom_score_and_uses_the_node_folder(tmp_path):
    text = nodes.containerd_config(tmp_path, "/usr/lib/cni", tmp_path / "containerd", tmp_path / "certs.d")
    assert "restrict_oom_score_adj = true" in text
    assert f'config_path = "{tmp_path / "certs.d"}"' in text  # the cluster's registry: its CA, read per pull
    assert f'root = "{tmp_path / "containerd"}"' in text and f'conf_dir = "{tmp_path / "cni"}"' in text
    assert f'sandbox_image = "{nodes.SANDBOX_IMAGE}"' in text and "SystemdCgroup = false" in text


def test_cni_gives_pods_the_node_subnet(tmp_path):
    net = nodes.node_net(1, 3)
    conf = json.loads(nodes.cni_conflist(net, tmp_path))
    ipam = conf["plugins"][0]["ipam"]
    assert ipam["ranges"] == [[{"subnet": "198.19.19.0/24", "gateway": "198.19.19.1"}]]
    assert ipam["dataDir"] == str(tmp_path)  # not the machine-wide /var/lib/cni


def test_node_script_keeps_every_mount_private_and_stops_components_newest_first(tmp_path):
    net = nodes.node_net(0, 1)
    bins = {
        "kubelet": "/k/kubelet",
        "kube-proxy": "/k/kube-proxy",
        "containerd": "/usr/bin/containerd",
        "kube-router": "/k/kube-router",
    }
    policy = nodes.network_policy_argv(bins, net, tmp_path / "np", "198.19.8.0/21")
    text = nodes.node_script(net, tmp_path, tmp_path / "logs", bins, tmp_path / "kc", tmp_path / "pc", policy)
    for mount in ("/run/containerd", "/run/netns", "/var/lib/kubelet", "/var/log"):
        assert mount in text
    assert "trap stop TERM INT" in text
    assert (
        text.index("/usr/bin/containerd")
        < text.index("/k/kubelet")
        < text.index("/k/kube-proxy")
        < text.index("/k/kube-router")
    )
    assert "for i in 3 2 1; do" in text  # kube-router (pids[3]) stops first, containerd (pids[0]) last


def test_the_network_policy_controller_enforces_policies_and_nothing_else(tmp_path):
    """kube-router runs only its firewall: pod networking stays the CNI bridge's, Services kube-proxy's."""
    net = nodes.node_net(0, 1)
    argv = nodes.network_policy_argv({"kube-router": "/k/kube-router"}, net, tmp_path / "np", "198.19.8.0/21")
    assert argv[0] == "/k/kube-router" and argv[argv.index("--hostname-override") + 1] == net.name
    for flag in (
        "--run-firewall=true",
        "--run-router=false",
        "--run-service-proxy=false",
        "--enable-cni=false",
        "--enable-pod-egress=false",
        "--service-cluster-ip-range=198.19.8.0/21",
        f"--health-port={nodes.NETWORK_POLICY_HEALTH_PORT}",
    ):
        assert flag in argv
    argv = nodes.node_argv(net, tmp_path / "nodes" / net.name / "node.sh")
    assert argv[:2] == ["nsenter", f"--net=/run/netns/{net.netns}"] and "--mount" in argv


def test_sandbox_archive_is_a_docker_save_with_one_layer():
    layer = _layer({"/pause": (b"\x7fELF", 0o755)})
    archive = docker_archive("tfmw.local/pause:x", layer, ["/pause", "-P"])
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())
        config = json.loads(tar.extractfile(manifest[0]["Config"]).read())
        inner = tarfile.open(fileobj=tar.extractfile(manifest[0]["Layers"][0]))
        assert inner.getnames() == ["pause"] and inner.getmember("pause").mode == 0o755
    assert manifest[0]["RepoTags"] == ["tfmw.local/pause:x"]
    assert config["config"]["Entrypoint"] == ["/pause", "-P"] and len(config["rootfs"]["diff_ids"]) == 1
    assert docker_archive("tfmw.local/pause:x", layer, ["/pause", "-P"]) == archive  # reproducible


# ---------------------------------------------------------------- volumes and RBAC


def test_provisioned_volume_is_prebound_to_its_claim(tmp_path):
    claim = {
        "metadata": {"namespace": "n", "name": "shared", "uid": "1234"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "5Gi"}}},
    }
    pv = provisioner.volume_for(claim, tmp_path, "local-shared", "tf-multiworker.local/hostpath")
    assert pv["metadata"]["name"] == "pvc-1234"
    assert pv["spec"]["claimRef"] == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "namespace": "n",
        "name": "shared",
        "uid": "1234",
    }
    assert pv["spec"]["hostPath"]["path"] == str(tmp_path / "pvc-1234")
    assert pv["spec"]["accessModes"] == ["ReadWriteMany"] and pv["spec"]["capacity"] == {"storage": "5Gi"}


def test_bootstrap_rbac_is_least_privilege():
    objects = {(obj["kind"], obj["metadata"]["name"]): obj for _, obj in controlplane.bootstrap_objects()}
    rules = objects[("ClusterRole", "tfmw:cluster-services")]["rules"]
    verbs = {(g, r): set(rule["verbs"]) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]}
    assert verbs[("", "persistentvolumes")] >= {"create", "delete"}
    assert ("", "pods") not in verbs and ("", "secrets") not in verbs
    assert all("*" not in rule["verbs"] for rule in rules)
    sc = next(obj for (kind, _), obj in objects.items() if kind == "StorageClass")
    assert sc["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"


def test_the_network_policy_controller_only_reads():
    objects = {(obj["kind"], obj["metadata"]["name"]): obj for _, obj in controlplane.bootstrap_objects()}
    rules = objects[("ClusterRole", "tfmw:network-policy")]["rules"]
    granted = {(g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]}
    assert {("networking.k8s.io", "networkpolicies"), ("", "pods"), ("", "namespaces")} <= granted
    assert all(set(rule["verbs"]) == {"get", "list", "watch"} for rule in rules)
    assert ("", "secrets") not in granted
    binding = objects[("ClusterRoleBinding", "tfmw:network-policy")]
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "tfmw:network-policy"}
    ]


def test_cluster_dns_is_a_service_whose_endpoint_is_coredns_on_the_bridge(tmp_path):
    state = controlplane.ClusterState(
        directory=str(tmp_path),
        slot=3,
        address="198.19.48.1",
        api_port=1,
        etcd_port=2,
        etcd_peer_port=3,
        nodes=["node-1"],
    )
    objects = controlplane.dns_objects(state)
    service = next(o for _, o in objects if o["kind"] == "Service")
    slice_ = next(o for _, o in objects if o["kind"] == "EndpointSlice")
    assert service["spec"]["clusterIP"] == "198.19.56.10"
    assert slice_["endpoints"][0]["addresses"] == ["198.19.48.1"]
    assert slice_["metadata"]["labels"]["kubernetes.io/service-name"] == "kube-dns"
    coredns = next(o for _, o in objects if o["kind"] == "ClusterRole")
    assert all(set(rule["verbs"]) <= {"list", "watch"} for rule in coredns["rules"])


# ---------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    "kwargs, message",
    [({"nodes": 0}, "1 to 7 nodes"), ({"nodes": 8}, "1 to 7 nodes"), ({"gpus_per_node": -1}, "must be 0 or more")],
)
def test_up_refuses_bad_sizes_before_starting_anything(tmp_path, kwargs, message):
    with pytest.raises(ClusterError, match=message) as info:
        controlplane.up(tmp_path / "state", bins={}, say=lambda line: None, **kwargs)
    assert info.value.exit_code == 2
    assert not (tmp_path / "state").exists()


def test_up_refuses_without_root(tmp_path, monkeypatch):
    monkeypatch.setattr(controlplane.os, "geteuid", lambda: 1000)
    with pytest.raises(ClusterError, match="needs root") as info:
        controlplane.up(tmp_path / "state", bins={}, say=lambda line: None)
    assert info.value.exit_code == 2


def test_up_names_every_missing_node_program_and_its_package(tmp_path, monkeypatch):
    real_which = controlplane.shutil.which
    monkeypatch.setattr(
        controlplane.shutil, "which", lambda name: None if name in ("containerd", "runc") else real_which(name)
    )
    with pytest.raises(ClusterError) as info:
        controlplane.up(tmp_path / "state", bins={}, say=lambda line: None)
    message = str(info.value)
    assert info.value.exit_code == 2 and "\n" not in message
    assert "containerd (containerd)" in message and "runc (runc)" in message
    assert "apt-get install containerd runc" in message
    assert not (tmp_path / "state").exists()


def test_cluster_cli_refusal_is_one_line(tmp_path, capsys):
    from tfmw.devcluster import cli as cluster_cli

    code = cluster_cli.main(["up", "--state", str(tmp_path / "s"), "--nodes", "9"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--nodes 9" in err and "Traceback" not in err


def test_cluster_without_a_container_engine_names_the_fix_before_starting_anything(tmp_path, capsys, monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("preflight refuses non-root first")  # CI runs as root
    from tfmw.devcluster import cli as cluster_cli
    from tfmw.image import build as image

    real_which = image.shutil.which
    monkeypatch.setattr(image.shutil, "which", lambda name: None if name in ("docker", "podman") else real_which(name))
    code = cluster_cli.main(["up", "--state", str(tmp_path / "s")])
    err = capsys.readouterr().err
    assert code == image.EXIT_NO_ENGINE and err.count("\n") == 1 and "Traceback" not in err
    assert "apt-get install podman" in err and "--no-image" in err
    assert not (tmp_path / "s").exists()


def test_cluster_load_without_a_cluster_says_so(tmp_path, capsys):
    from tfmw.devcluster import cli as cluster_cli

    code = cluster_cli.main(["load", "--state", str(tmp_path / "s")])
    err = capsys.readouterr().err
    assert code == 3 and "make cluster" in err and err.count("\n") == 1


def test_down_with_nothing_running_says_so(tmp_path):
    lines = []
    assert controlplane.down(tmp_path / "none", say=lines.append) is False
    assert "none running" in lines[0]


def test_certificate_names_cannot_split_the_subject():
    with pytest.raises(PkiError):
        subject("a/O=system:masters")


# ---------------------------------------------------------------- the nodes' image cache

MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MANAGED = "linux/amd64 io.cri-containerd.image=managed"
CTR_LS = f"""REF TYPE DIGEST SIZE PLATFORMS LABELS
ghcr.io/x/w:0.1.0-cpu {MANIFEST} sha256:d66 1.7 GiB {MANAGED},tf-multiworker.local/image-id=sha256:new
sha256:old {MANIFEST} sha256:93f 1.7 GiB {MANAGED}
sha256:pause {MANIFEST} sha256:f76 690.8 KiB {MANAGED}
tfmw.local/pause:catatonit {MANIFEST} sha256:f76 690.8 KiB {MANAGED},tf-multiworker.local/image-id=sha256:pause
"""


def test_a_node_holds_an_image_only_under_the_id_it_was_imported_from():
    images = nodes.parse_image_labels(CTR_LS)
    assert images["ghcr.io/x/w:0.1.0-cpu"][nodes.IMAGE_ID_LABEL] == "sha256:new"
    assert nodes.has_image(images, ["ghcr.io/x/w:0.1.0-cpu"], "sha256:new")
    assert not nodes.has_image(images, ["ghcr.io/x/w:0.1.0-cpu"], "sha256:newer")  # a rebuilt image: import
    assert not nodes.has_image(images, ["ghcr.io/x/w:0.2.0"], "sha256:new")  # not there at all
    assert not nodes.has_image(images, [], "sha256:new")


def test_old_builds_are_pruned_from_the_cache_but_current_images_kept():
    images = nodes.parse_image_labels(CTR_LS)
    assert nodes.stale_ids(images, {"sha256:new"}) == ["sha256:old"]
    assert nodes.stale_ids(images, {"sha256:old"}) == []  # an id still wanted is kept


def test_a_recorded_process_is_ours_only_with_its_start_time():
    """A PID alone is not enough: a recycled PID has another start time and is never signalled."""
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        created = controlplane.started_at(child.pid)
        assert created is not None and controlplane.is_ours(child.pid, created)
        assert not controlplane.is_ours(child.pid, created - 1.0)  # the same PID, started at another time
        assert not controlplane.is_ours(child.pid, None)  # nothing recorded: never ours
        assert controlplane.stop_pid(child.pid, created, grace=5)
        assert child.wait(5) is not None and not controlplane.is_ours(child.pid, created)
        assert not controlplane.stop_pid(child.pid, created, grace=1)  # gone: nothing to stop
    finally:
        child.kill()


def test_a_port_left_in_time_wait_is_still_preferred_but_a_listening_one_is_not():
    """A cluster stopped a moment ago leaves its API server's connections in TIME_WAIT: the next
    one still gets 6443 (the port the chart's egress rule opens), not a random one."""
    import socket

    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Go's net.Listen, kube-apiserver's
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = server.accept()
    accepted.close()  # the server side closes first: its end of the connection is in TIME_WAIT
    server.close()
    client.close()
    assert controlplane.free_port("127.0.0.1", port) == port
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        assert controlplane.free_port("127.0.0.1", taken) != taken


@pytest.mark.parametrize(
    "failures,calls,raises",
    [
        # the garbage collector's race: a second import succeeds
        (['failed to prepare extraction snapshot "x": parent snapshot sha256:1 does not exist'], 2, False),
        # anything else is not retried
        (["archive is not a docker-save tarball"], 1, True),
        # nor a race that persists
        (["parent snapshot does not exist", "parent snapshot does not exist"], 2, True),
    ],
)
def test_an_import_is_retried_once_only_after_a_snapshot_race(monkeypatch, tmp_path, failures, calls, raises):
    seen = []

    def ctr_images(pid, ctr, *args, **kw):
        seen.append(args[0])
        if args[0] == "import" and len([a for a in seen if a == "import"]) <= len(failures):
            raise nodes.NodeError(f"importing a.tar in the node's containerd failed: {failures[len(seen) - 1]}")

    monkeypatch.setattr(nodes, "ctr_images", ctr_images)
    monkeypatch.setattr(nodes, "IMPORT_RETRY_SECONDS", 0)
    if raises:
        with pytest.raises(nodes.NodeError):
            nodes.import_image(1, "ctr", tmp_path / "a.tar", ["r:1"], "sha256:x")
    else:
        nodes.import_image(1, "ctr", tmp_path / "a.tar", ["r:1"], "sha256:x")
    assert seen.count("import") == calls
    assert ("label" in seen) is not raises


# ---------------------------------------------------------------- the cluster tests' node check


def test_a_node_that_cannot_run_pods_is_named_with_why():
    from clusterkit import unfit_nodes

    def node(name, ready="True", spec=None, **pressure):
        conditions = [{"type": "Ready", "status": ready, "reason": "KubeletNotReady", "message": "PLEG"}]
        conditions += [{"type": k, "status": "True", "message": v} for k, v in pressure.items()]
        return {"metadata": {"name": name}, "spec": spec or {}, "status": {"conditions": conditions}}

    fit = node("node-1", spec={"taints": [{"key": "soft", "effect": "PreferNoSchedule"}]})
    assert unfit_nodes([fit]) == []
    found = unfit_nodes(
        [
            fit,
            node("node-2", ready="Unknown"),
            node("node-3", spec={"unschedulable": True}, DiskPressure="ephemeral storage low"),
            node("node-4", spec={"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]}),
        ]
    )
    assert found == [
        "node-2: not Ready (KubeletNotReady: PLEG)",
        "node-3: DiskPressure (ephemeral storage low); cordoned",
        "node-4: taint node.kubernetes.io/unreachable:NoExecute",
    ]


def test_the_image_caches_are_the_roots_the_nodes_were_given(tmp_path):
    state = controlplane.ClusterState(str(tmp_path), 3, "198.19.48.1", 6443, 2379, 2380, ["node-1", "node-2"])
    caches = controlplane.image_caches(state)
    assert caches == [controlplane.CONTAINERD_CACHE / "k3-n1", controlplane.CONTAINERD_CACHE / "k3-n2"]
    net = nodes.node_net(3, 2)
    assert caches[1] == nodes.containerd_root(controlplane.CONTAINERD_CACHE, net)


def test_a_new_cluster_clears_its_slots_stale_empty_cgroups_and_leaves_running_ones(tmp_path, monkeypatch):
    roots = [tmp_path / "cpu", tmp_path / "memory"]
    for root in roots:
        (root / "tfmwk3-n2" / "kubepods" / "besteffort").mkdir(parents=True)
        (root / "tfmwk4-n2").mkdir()  # another slot's: not this cluster's to touch
    running = roots[0] / "tfmwk3-n4"
    running.mkdir()
    (running / "cgroup.procs").write_text("4242\n")  # a process still in it
    networks_cleared = []
    monkeypatch.setattr(nodes, "cgroup_hierarchies", lambda types=("cgroup",): roots)
    monkeypatch.setattr(nodes, "cgroup_cleanup_roots", lambda: roots)
    monkeypatch.setattr(nodes, "remove_networks", networks_cleared.append)
    monkeypatch.setattr(nodes.os, "kill", lambda *a: pytest.fail("no process is signalled"))

    assert nodes.clear_stale_slot(3) == ["tfmwk3-n4"]
    assert networks_cleared == [3]
    assert not any((root / "tfmwk3-n2").exists() for root in roots)
    assert running.is_dir() and all((root / "tfmwk4-n2").is_dir() for root in roots)


def test_room_for_an_import_leaves_the_kubelets_their_reserve():
    where = Path("/x/.tools/containerd")
    assert nodes.import_room_error(4 << 30, 6 << 30, where) is None
    error = nodes.import_room_error(4 << 30, (4 << 30) + (1 << 29), where)
    assert error and "4.3 GB more" in error and "4.8 GB is free" in error and str(where) in error
    assert nodes.IMAGE_FS_RESERVE in error and "\n" not in error


def test_an_import_with_no_room_is_refused_before_any_node_imports(tmp_path, monkeypatch):
    """Two nodes lack a 1 GB image (2 GB each once unpacked) and 4.5 GB is free: refused,
    naming the room it needs, and no node imports a byte."""
    archive = tmp_path / "worker.tar"
    with open(archive, "wb") as f:
        f.truncate(10**9)  # sparse: its size is what counts
    state = controlplane.ClusterState(str(tmp_path), 3, "198.19.48.1", 1, 2, 3, ["node-1", "node-2"])
    state.pids = {"node-1": 11, "node-2": 12}
    imports = []
    monkeypatch.setattr(controlplane, "is_ours", lambda pid, created: True)
    monkeypatch.setattr(nodes, "archive_image", lambda a: (["img:1"], "sha256:1"))
    monkeypatch.setattr(nodes, "node_images", lambda pid, ctr: {})
    monkeypatch.setattr(nodes, "import_image", lambda *a: imports.append(a))
    monkeypatch.setattr(controlplane, "_free_bytes", lambda path: 4_500_000_000)
    with pytest.raises(controlplane.ClusterError) as refused:
        controlplane.load_images(state, [archive], say=lambda line: None)
    assert (
        refused.value.exit_code == 3 and "4.0 GB more" in str(refused.value) and "4.5 GB is free" in str(refused.value)
    )
    assert imports == []


@pytest.mark.parametrize("grace", [None, 20])
def test_the_controller_manager_marks_a_silent_node_unreachable_after_the_clusters_grace(tmp_path, grace):
    """40 s unless the cluster was started with another (the node-loss tests' own cluster: 20 s);
    kept in the state, so a cluster reports what it was started with."""
    extra = {} if grace is None else {"node_monitor_grace_seconds": grace}
    state = controlplane.ClusterState(str(tmp_path), 3, "198.19.48.1", 1, 2, 3, ["node-1"], **extra)
    bins = {"kube-controller-manager": "/bin/kcm"}
    args = controlplane.controller_manager_args(bins, state)
    assert args[args.index("--node-monitor-grace-period") + 1] == f"{grace or 40}s"
    state.save()
    assert controlplane.ClusterState.load(tmp_path).node_monitor_grace_seconds == (grace or 40)


def test_a_slot_is_claimed_by_making_its_bridge_so_two_clusters_never_share_one(monkeypatch):
    """Slot 0 is held; slot 1 looks free but another cluster makes its bridge first (`ip link
    add` refuses): this one takes slot 2, and gives its bridge an address."""
    made, calls = {"tfmwk0"}, []

    def ip(*args, check=True):
        calls.append(args)
        if args[:2] == ("link", "add"):
            if args[2] == "tfmwk1":
                made.add("tfmwk1")  # the other cluster, between the look and the claim
                return subprocess.CompletedProcess(args, 2, "", "RTNETLINK answers: File exists")
            made.add(args[2])
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(controlplane, "_ip", ip)
    monkeypatch.setattr(controlplane, "link_exists", lambda name: name in made)
    assert controlplane.claim_slot() == 2
    assert ("link", "add", "tfmwk2", "type", "bridge") in calls
    assert any(c[:2] == ("addr", "replace") and c[-1] == "tfmwk2" for c in calls)
    assert not any(c[:2] == ("link", "add") and c[2] == "tfmwk0" for c in calls)


def test_a_slots_leftover_veths_are_its_own_not_those_of_slot_ten_to_fifteen(monkeypatch):
    links = "1: lo: <LOOPBACK>\n7: tk1n2@if3: <BROADCAST>\n8: tk12n1@if4: <BROADCAST>\n9: tk10n3@if5: <BROADCAST>\n"

    def ip(*args, check=True):
        out = links if args[:3] == ("-o", "link", "show") else "tfmwk1-n2\ntfmwk12-n1\n"
        return subprocess.CompletedProcess(args, 0, out, "")

    monkeypatch.setattr(nodes, "_ip", ip)
    assert nodes.leftover_networks(1) == [("netns", "tfmwk1-n2"), ("link", "tk1n2")]


def test_a_bridge_that_cannot_be_made_is_named_not_taken_for_a_full_house(monkeypatch):
    def ip(*args, check=True):
        return subprocess.CompletedProcess(args, 2, "", "RTNETLINK answers: Operation not permitted")

    monkeypatch.setattr(controlplane, "_ip", ip)
    monkeypatch.setattr(controlplane, "link_exists", lambda name: False)
    with pytest.raises(controlplane.ClusterError, match="cannot make bridge tfmwk0: RTNETLINK answers: Operation"):
        controlplane.claim_slot()

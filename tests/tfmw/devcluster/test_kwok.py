"""kwok on the local cluster, the parts that need no cluster: the pinned build, the fake nodes
and what kwok is started with (the topology tests run it for real:
tests/e2e/cluster/test_cluster_topology.py)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from clusterkit import unfit_nodes

from tfmw.devcluster import build_kwok, controlplane, kwok, onebinary
from tfmw.devcluster.build import KubeBuildError

GO_VERSION_M = """/x/kwok: go1.26.8
\tpath\tsigs.k8s.io/kwok/cmd/kwok
\tmod\tsigs.k8s.io/kwok\t{version}\th1:abc=
"""


def test_the_pin_is_read_from_the_wrapper_module_and_a_binary_of_another_is_refused():
    pins = onebinary.read_pins(build_kwok.KWOK)
    assert onebinary.install_name(build_kwok.KWOK, pins) == f"kwok-{pins.version[1:]}"
    onebinary.check_embedded_module(build_kwok.KWOK, GO_VERSION_M.format(version=pins.version), pins.version)
    with pytest.raises(KubeBuildError, match=f"embeds sigs.k8s.io/kwok v0.7.0, not {pins.version}"):
        onebinary.check_embedded_module(build_kwok.KWOK, GO_VERSION_M.format(version="v0.7.0"), pins.version)


def test_kwok_stamps_only_its_version_as_its_release_script_does():
    flags = onebinary.ldflags(build_kwok.KWOK, "v0.8.0", "h1:sum", "2026-01-01", {"Version", "KubeVersion"})
    assert flags == "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=v0.8.0"


def test_the_topology_names_each_node_by_its_place_and_labels_its_levels():
    nodes = kwok.topology(blocks=2, racks_per_block=2, nodes_per_rack=3, gpus=4)
    assert len(nodes) == 12 and len({n.name for n in nodes}) == 12
    assert [n.rack for n in nodes].count("block-1-rack-0") == 3 and len({n.rack for n in nodes}) == 4
    labels = kwok.node_object(nodes[4])["metadata"]["labels"]
    assert labels[kwok.BLOCK_LABEL] == "block-0" and labels[kwok.RACK_LABEL] == "block-0-rack-1"
    assert labels["kubernetes.io/hostname"] == nodes[4].name == "kwok-b0-r1-n1"


def test_a_fake_node_is_kwoks_tainted_and_has_its_gpus():
    node = kwok.node_object(kwok.FakeNode("n", "b", "r", gpus=8))
    assert node["metadata"]["annotations"][kwok.ANNOTATION] == "fake"
    assert node["spec"]["taints"] == [kwok.TAINT]
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == node["status"]["capacity"]["nvidia.com/gpu"] == "8"


def test_kwok_manages_only_its_nodes_and_its_pod_addresses_are_no_clusters():
    options = kwok.configuration()["options"]
    assert options["manageAllNodes"] is False
    assert options["manageNodesWithAnnotationSelector"] == f"{kwok.ANNOTATION}=fake"
    # renewed every quarter of it: well inside the controller manager's grace
    assert options["nodeLeaseDurationSeconds"] / 4 < controlplane.NODE_MONITOR_GRACE_SECONDS / 2
    pods = ipaddress.ip_network(options["cidr"])
    for slot in range(controlplane.SLOTS):
        assert not pods.overlaps(ipaddress.ip_network(controlplane.slot_network(slot)["cluster_cidr"]))
    assert pods.num_addresses >= 4096  # a 1,024-worker release, and more


def test_kwok_is_started_with_its_configuration_and_stages_and_no_port_of_its_own():
    argv = kwok.kwok_args(Path("/k/bin/kwok"), Path("/s/kubeconfig"), [Path("/s/kwok.yaml"), Path("/k/stage/x.yaml")])
    assert argv == [
        "/k/bin/kwok",
        "--kubeconfig=/s/kubeconfig",
        "--config=/s/kwok.yaml",
        "--config=/k/stage/x.yaml",
        "--v=INFO",
    ]
    assert not any("address" in arg or "port" in arg for arg in argv)
    assert all(stage.endswith(".yaml") and stage.split("/")[0] in ("node", "pod") for stage in kwok.STAGES)


def test_kwoks_tainted_nodes_are_not_the_shared_clusters_unfit_ones():
    ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    fake = kwok.node_object(kwok.FakeNode("kwok-1", "b", "r")) | ready
    real = {"metadata": {"name": "node-1"}, "spec": {"taints": [kwok.TAINT]}} | ready
    assert unfit_nodes([fake]) == []
    assert unfit_nodes([real]) == ["node-1: taint kwok.x-k8s.io/node:NoSchedule"]

"""Kueue on the local cluster, the parts that need no cluster: the pinned build's checks and
what the install hands Kueue's chart (the cluster tests install it for real:
tests/e2e/cluster/test_cluster_kueue.py)."""

from __future__ import annotations

import json

import pytest
import yaml

from tfmw.devcluster import build_kueue, controlplane, kueue, onebinary
from tfmw.devcluster.build import KubeBuildError

GO_VERSION_M = """/x/manager: go1.26.8
\tpath\tsigs.k8s.io/kueue/cmd/kueue
\tmod\tsigs.k8s.io/kueue\t{version}\th1:abc=
\tdep\tk8s.io/api\tv0.35.0\th1:def=
"""


def test_the_pin_is_read_from_the_wrapper_module():
    pins = onebinary.read_pins(build_kueue.KUEUE)
    assert (
        pins.version.startswith("v0.")
        and onebinary.install_name(build_kueue.KUEUE, pins) == f"kueue-{pins.version[1:]}"
    )
    assert kueue.image_ref() == f"tfmw.local/kueue:{pins.version}"


def test_a_binary_of_the_pinned_module_passes():
    onebinary.check_embedded_module(build_kueue.KUEUE, GO_VERSION_M.format(version="v0.19.2"), "v0.19.2")


@pytest.mark.parametrize("version", ["v0.18.0", None])
def test_a_binary_of_another_module_is_refused_naming_what_it_holds(version):
    output = GO_VERSION_M.format(version=version) if version else "/x/manager: go1.26.8\n\tpath\tother\n"
    with pytest.raises(KubeBuildError, match=f"embeds sigs.k8s.io/kueue {version or 'none'}, not v0.19.2"):
        onebinary.check_embedded_module(build_kueue.KUEUE, output, "v0.19.2")


def test_an_install_whose_stamp_differs_is_rebuilt(tmp_path):
    spec, pins = build_kueue.KUEUE, onebinary.read_pins(build_kueue.KUEUE)
    target = tmp_path / onebinary.install_name(spec, pins)
    assert not onebinary.is_complete(spec, target, pins)  # nothing there
    (target / "bin").mkdir(parents=True)
    (target / "chart").mkdir()
    (target / "chart" / "Chart.yaml").write_text("name: kueue\n")
    onebinary.binary_path(build_kueue.KUEUE, target).write_bytes(b"x" * 10)
    onebinary.binary_path(build_kueue.KUEUE, target).chmod(0o755)
    (target / "stamp.json").write_text(json.dumps(onebinary.stamp_record(spec, pins, 10)))
    assert onebinary.is_complete(spec, target, pins)
    other = onebinary.Pins("v0.19.1", pins.go_required, pins.gomod_sha256)
    assert not onebinary.is_complete(spec, target, other)  # another pin: build again


def test_kueue_manages_only_the_labelled_namespaces_with_the_statefulset_integration():
    config = yaml.safe_load(kueue.manager_config())
    assert config["managedJobsNamespaceSelector"] == {"matchLabels": kueue.MANAGED_LABEL}
    assert config["integrations"]["frameworks"] == ["statefulset", "pod"]
    assert "waitForPodsReady" not in config  # Kueue's default (on since 0.19) is what runs
    values = kueue.chart_values("tfmw.local/kueue:v0.19.2")
    image = values["controllerManager"]["manager"]["image"]
    assert image == {"repository": "tfmw.local/kueue", "tag": "v0.19.2", "pullPolicy": "Never"}


def test_the_cluster_queue_holds_three_local_workers_and_preempts_lower_priorities():
    objects = {obj["kind"]: obj for _, obj in kueue.queue_objects()}
    spec = objects["ClusterQueue"]["spec"]
    assert spec["preemption"] == {"withinClusterQueue": "LowerPriority"}
    quota = {r["name"]: r["nominalQuota"] for r in spec["resourceGroups"][0]["flavors"][0]["resources"]}
    assert quota["cpu"] == "1500m" and "nvidia.com/gpu" in quota
    path, queue = kueue.local_queue("ns-a")
    assert path.endswith("/namespaces/ns-a/localqueues") and queue["spec"]["clusterQueue"] == kueue.CLUSTER_QUEUE


def test_the_api_server_reaches_pod_served_webhooks_and_aggregated_apis(tmp_path):
    state = controlplane.ClusterState(str(tmp_path), 1, "198.19.16.1", 6443, 2379, 2380, ["node-1"])
    args = controlplane.apiserver_args({"kube-apiserver": "kube-apiserver"}, state)
    assert "--enable-aggregator-routing=true" in args
    assert args[args.index("--requestheader-allowed-names") + 1] == "front-proxy-client"
    assert args[args.index("--proxy-client-cert-file") + 1].endswith("front-proxy-client.crt")


def test_kueues_chart_is_installed_by_helm_with_the_clusters_kubeconfig_and_fails_in_one_line(tmp_path, monkeypatch):
    from types import SimpleNamespace

    helm = tmp_path / "helm"
    helm.write_text('#!/bin/sh\necho "Error: UPGRADE FAILED: boom" >&2\nexit 1\n')
    helm.chmod(0o755)
    monkeypatch.setenv("HELM", str(helm))
    state = SimpleNamespace(kubeconfig=tmp_path / "kubeconfig", dir=tmp_path)
    with pytest.raises(kueue.KueueError, match=r"^helm upgrade of Kueue's chart failed: UPGRADE FAILED: boom$"):
        kueue._helm(state, "upgrade", "--install", kueue.RELEASE)
    monkeypatch.setenv("HELM", str(tmp_path / "none"))
    with pytest.raises(kueue.KueueError, match="helm not found"):
        kueue._helm(state, "uninstall", kueue.RELEASE)


def test_kueues_command_refuses_without_a_running_cluster_and_says_its_errors_in_one_line(
    tmp_path, capsys, monkeypatch
):
    assert kueue.main(["install", "--state", str(tmp_path / "none")]) == 1
    assert capsys.readouterr().err == (
        f"kueue: error: no running cluster at {tmp_path / 'none'} (start one with make cluster)\n"
    )
    monkeypatch.setattr(kueue.controlplane, "running_cluster", lambda directory: object())

    def refused(state):
        raise kueue.KueueError("the manager did not release it")

    monkeypatch.setattr(kueue, "uninstall", refused)
    assert kueue.main(["uninstall", "--state", str(tmp_path)]) == 1
    assert capsys.readouterr().err == "kueue: error: the manager did not release it\n"

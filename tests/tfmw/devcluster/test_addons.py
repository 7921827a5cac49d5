"""The local cluster's registry and Prometheus, the parts that need no cluster: the pods Prometheus
is given to scrape (the standard annotation relabelling), its config as the real promtool reads
it, the nodes' registry hosts file and the pull secret (the cluster tests run both for real:
tests/e2e/cluster/test_cluster_registry.py, test_cluster_prometheus.py)."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tfmw.devcluster import addoncli, prometheus, registry


def pod(name: str, phase: str = "Running", ip: str | None = "198.19.17.5", **annotations) -> dict:
    return {
        "metadata": {"name": name, "namespace": "ml", "annotations": annotations},
        "status": {"phase": phase, **({"podIP": ip} if ip else {})},
    }


def test_only_running_annotated_pods_with_an_address_are_scraped_at_their_port_and_path():
    scrape = {"prometheus.io/scrape": "true", "prometheus.io/port": "9090", "prometheus.io/path": "/metrics"}
    pods = [
        pod("w-1", **scrape),
        pod("w-0", **scrape),
        pod("pending", phase="Pending", **scrape),
        pod("no-ip", ip=None, **scrape),
        pod("not-asked", **{"prometheus.io/port": "9090"}),
        pod("bad-port", **{"prometheus.io/scrape": "true", "prometheus.io/port": "http"}),
    ]
    assert prometheus.targets_of(pods) == [
        {"targets": ["198.19.17.5:9090"], "labels": {"namespace": "ml", "pod": "w-0", "__metrics_path__": "/metrics"}},
        {"targets": ["198.19.17.5:9090"], "labels": {"namespace": "ml", "pod": "w-1", "__metrics_path__": "/metrics"}},
    ]


def test_promtool_accepts_the_config(tmp_path):
    promtool = shutil.which("promtool")
    assert promtool, "promtool is not installed: make host-packages installs Debian's prometheus"
    (tmp_path / "targets.json").write_text("[]")
    (tmp_path / "rules").mkdir()
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(prometheus.config(tmp_path / "targets.json", tmp_path / "rules")))
    proc = subprocess.run([promtool, "check", "config", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_nodes_trust_the_registry_by_its_ca_and_pull_with_the_secret():
    text = registry.hosts_toml("198.19.0.1:5000", Path("/state/pki/ca.crt"))
    assert 'server = "https://198.19.0.1:5000"' in text and 'ca = "/state/pki/ca.crt"' in text
    found = registry.Registry(
        "198.19.0.1:5000", "tfmw", "s3cret", Path("/ca.crt"), Path("/client"), Path("/auth.json")
    ).pull_secret("ml")
    assert found["type"] == "kubernetes.io/dockerconfigjson" and found["metadata"] == {
        "name": "regcred",
        "namespace": "ml",
    }
    auths = json.loads(found["stringData"][".dockerconfigjson"])["auths"]["198.19.0.1:5000"]
    assert base64.b64decode(auths["auth"]).decode() == "tfmw:s3cret"


@pytest.mark.parametrize("addon", ["registry", "prometheus"])
def test_an_addon_on_no_running_cluster_is_refused_in_one_line(addon, tmp_path, capsys):
    module = {"registry": registry, "prometheus": prometheus}[addon]
    assert module.main(["stop", "--state", str(tmp_path)]) == 1
    assert (
        capsys.readouterr().err == f"{addon}: error: no running cluster at {tmp_path} (start one with make cluster)\n"
    )


def test_an_addons_verb_runs_on_the_running_cluster_and_its_errors_are_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(addoncli.controlplane, "running_cluster", lambda directory: f"state of {directory.name}")
    done = []
    monkeypatch.setattr(registry, "start", done.append)
    assert registry.main(["start", "--state", str(tmp_path / "s")]) == 0 and done == ["state of s"]

    def refused(state):
        raise registry.RegistryError(f"cannot start on {state}")

    monkeypatch.setattr(registry, "start", refused)
    assert registry.main(["start", "--state", str(tmp_path / "s")]) == 1
    assert capsys.readouterr().err == "registry: error: cannot start on state of s\n"


@pytest.mark.parametrize("addon", ["registry", "prometheus"])
def test_an_addons_stop_runs_on_the_state_of_a_cluster_whose_api_server_is_gone(addon, tmp_path, monkeypatch):
    """Stopping the add-on's own processes must not need the API server (it may be what died)."""
    module = {"registry": registry, "prometheus": prometheus}[addon]
    monkeypatch.setattr(addoncli.controlplane, "running_cluster", lambda directory: None)
    monkeypatch.setattr(addoncli.controlplane.ClusterState, "load", lambda directory: f"state of {directory.name}")
    done = []
    monkeypatch.setattr(module, "stop", done.append)
    assert module.main(["stop", "--state", str(tmp_path / "s")]) == 0 and done == ["state of s"]
    assert module.main(["start", "--state", str(tmp_path / "s")]) == 1  # starting needs the running cluster

"""The chart deployed the GitOps way, by a real Flux (the pinned source-controller and
helm-controller, built from their Go modules and run on the host against the shared cluster:
tfmw.devcluster.flux, the `flux` fixture): an OCIRepository pulls the chart the working tree
packages from the cluster's OCI registry (TLS from the cluster's CA, htpasswd credentials) and
a HelmRelease installs it."""

from __future__ import annotations

import pytest
from clusterkit import all_running, wait_for
from fluxkit import local_values

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


def sleeper_values() -> dict:
    """values/local.yaml with clusterkit.SLEEPER's command: workers that only keep running."""
    values = local_values()
    values["training"]["command"] = ["python", "-m", "http.server", "--directory", "/tmp"]
    values["workers"]["port"] = 8000
    return values


def test_a_helmrelease_installs_the_chart_from_the_registry_to_ready_with_running_workers(flux, namespace):
    flux.release(namespace, "gitops", sleeper_values())
    release = flux.wait_ready(namespace, "gitops")
    # source-controller pulled that tag from the registry and served it to helm-controller
    source = flux.cluster.api.get(flux.ocirepository_path(namespace, "gitops"))
    artifact = source["status"]["artifact"]
    assert source["spec"]["url"] == flux.repository and flux.repository.startswith(f"oci://{flux.registry.host}/")
    tag, _, digest = artifact["revision"].partition("@sha256:")
    assert tag == flux.version and len(digest) == 64, artifact
    assert artifact["url"].startswith(flux.controllers.artifacts + "/"), artifact
    # helm-controller installed it (its history): the chart's version with the OCI digest's first
    # 12 characters appended (helm-controller's chart digest tracking, on by default)
    history = release["status"]["history"][0]
    assert (history["chartName"], history["chartVersion"], history["status"]) == (
        "tf-multiworker",
        f"{flux.version}+{digest[:12]}",
        "deployed",
    ), history
    # helm-controller waited for the StatefulSet: both workers run and are ready
    sts = flux.cluster.statefulset(namespace, "gitops-tf-multiworker")
    assert sts and sts["status"].get("readyReplicas") == sts["spec"]["replicas"] == 2, sts and sts["status"]
    assert all_running(flux.cluster.workers(namespace, "gitops"), 2)
    # a reconcile asked for is handled, and leaves the release as it is (nothing changed in Git)
    flux.reconcile(namespace, "gitops")
    again = flux.wait_ready(namespace, "gitops")
    assert len(again["status"]["history"]) == 1, again["status"]["history"]
    wait_for(lambda: all_running(flux.cluster.workers(namespace, "gitops"), 2), 30, "the workers still running")

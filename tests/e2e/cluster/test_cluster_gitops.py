"""The chart deployed the GitOps way, by a real Flux (the pinned source-controller and
helm-controller, built from their Go modules and run on the host against the shared cluster:
tfmw.devcluster.flux, the `flux` fixture): an OCIRepository pulls the chart the working tree
packages from the cluster's OCI registry (TLS from the cluster's CA, htpasswd credentials) and
a HelmRelease installs it."""

from __future__ import annotations

import time

import pytest
from clusterkit import all_running, wait_for
from fluxkit import local_values

from tfmw.k8s.api import ns_path

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


# ---------------------------------------------------------------- a finished run under GitOps

DRIFT_IGNORE_REPLICAS = {"paths": ["/spec/replicas"], "target": {"kind": "StatefulSet"}}


def finishing_values() -> dict:
    """values/local.yaml with a run that ends in seconds (the completion tests' FAST)."""
    values = local_values()
    config = values.setdefault("training", {}).setdefault("config", {})
    config.update({"model": {"name": "mlp"}, "steps": 30, "logEverySteps": 5})
    config.setdefault("checkpoint", {})["everySteps"] = 10
    return values


def _status(cluster, namespace: str, release: str) -> dict:
    cm = cluster.api.get_or_none(ns_path(namespace, "configmaps", f"{release}-tf-multiworker-status"))
    return (cm or {}).get("data") or {}


def _replicas(cluster, namespace: str, release: str) -> int:
    return cluster.statefulset(namespace, f"{release}-tf-multiworker")["spec"]["replicas"]


def _events(cluster, namespace: str, kind: str, name: str, reason: str) -> list[dict]:
    return [
        e
        for e in cluster.events(namespace)
        if e["involvedObject"]["kind"] == kind and e["involvedObject"]["name"] == name and e["reason"] == reason
    ]


def _count(events: list[dict]) -> int:
    return sum(int(e.get("count") or 1) for e in events)


def test_a_finished_run_under_flux_never_trains_again_and_its_gpus_stay_free(flux, namespace):
    """A run deployed by a HelmRelease with drift correction on. With the documented ignore rule
    for /spec/replicas the chief's scale to 0 stays. Without it, each drift correction brings the
    workers back, they see the run Succeeded and go away again untrained, once per reconcile
    (bounded, measured). A values change then re-renders the chart, which asks for no workers for
    a Succeeded run, and from there there is no drift left to correct."""
    cluster, release, sts = flux.cluster, "done", "done-tf-multiworker"
    flux.release(
        namespace,
        release,
        finishing_values(),
        driftDetection={"mode": "enabled", "ignore": [DRIFT_IGNORE_REPLICAS]},
        timeout="5m",
    )
    finished = wait_for(
        lambda: (lambda s: s if s.get("phase") == "Succeeded" else None)(_status(cluster, namespace, release)),
        240,
        "the run to succeed",
        describe=lambda: flux.describe(namespace, release),
    )
    wait_for(lambda: _replicas(cluster, namespace, release) == 0, 60, "the chief's scale to 0")
    wait_for(lambda: not cluster.workers(namespace, release), 120, "the workers to be gone")
    flux.wait_ready(namespace, release)
    created = _count(_events(cluster, namespace, "StatefulSet", sts, "SuccessfulCreate"))

    # The ignore rule: a reconcile leaves the scale to 0 alone.
    flux.reconcile(namespace, release)
    assert _replicas(cluster, namespace, release) == 0 and not cluster.workers(namespace, release)
    assert not _events(cluster, namespace, "HelmRelease", release, "DriftCorrected")

    # No rule: each reconcile corrects the drift; the workers come back and leave untrained.
    cluster.api.patch(flux.helmrelease_path(namespace, release), {"spec": {"driftDetection": {"ignore": None}}})
    blips = []
    for n in (1, 2):
        if n > 1:
            flux.reconcile(namespace, release)
        wait_for(
            lambda n=n: _count(_events(cluster, namespace, "HelmRelease", release, "DriftCorrected")) >= n,
            120,
            f"drift correction {n}",
            describe=lambda: flux.describe(namespace, release),
        )
        back = time.monotonic()
        wait_for(
            lambda n=n: _count(_events(cluster, namespace, "StatefulSet", sts, "SuccessfulCreate")) >= created + 2 * n,
            60,
            f"the workers back after correction {n}",
        )
        wait_for(lambda: _replicas(cluster, namespace, release) == 0, 120, f"the scale to 0 after correction {n}")
        wait_for(lambda: not cluster.workers(namespace, release), 120, f"the workers gone after correction {n}")
        blips.append(time.monotonic() - back)
    now = _status(cluster, namespace, release)
    assert (now["phase"], now["step"], now["finishedAt"]) == ("Succeeded", finished["step"], finished["finishedAt"])
    succeeded = _events(cluster, namespace, "StatefulSet", sts, "Succeeded")
    again = [e for e in succeeded if "already completed" in e["message"]]
    # the chief, each time it came back: "run done already completed: not training again"; Flux's
    # own interval reconcile may correct the drift once more between ours (ci59: 3)
    assert _count(again) >= 2, again
    print(f"gitops: drift correction to workers gone: {', '.join(f'{b:.1f}s' for b in blips)}")

    # A values change: Flux upgrades, the chart reads the Succeeded record and asks for none;
    # the release's manifest now says 0, so nothing drifts any more.
    created = _count(_events(cluster, namespace, "StatefulSet", sts, "SuccessfulCreate"))
    values = finishing_values()
    values["training"]["config"]["logEverySteps"] = 10
    cluster.api.patch(flux.helmrelease_path(namespace, release), {"spec": {"values": values}})
    upgraded = flux.wait_ready(namespace, release)
    assert len(upgraded["status"]["history"]) == 2, upgraded["status"]["history"]
    assert _replicas(cluster, namespace, release) == 0
    corrections = _count(_events(cluster, namespace, "HelmRelease", release, "DriftCorrected"))
    flux.reconcile(namespace, release)
    assert _count(_events(cluster, namespace, "HelmRelease", release, "DriftCorrected")) == corrections
    assert _count(_events(cluster, namespace, "StatefulSet", sts, "SuccessfulCreate")) == created
    assert not cluster.workers(namespace, release)

"""Flux on the shared test cluster (tfmw.devcluster.flux: the pinned source-controller and
helm-controller as host processes), the chart pushed to the cluster's OCI registry
(tfmw.devcluster.registry), and what a GitOps test does with them: per namespace, an
OCIRepository of the chart and a HelmRelease of it with the test's values; wait for the
HelmRelease's Ready condition; ask for a reconcile as `flux reconcile` does.

APIs: source.toolkit.fluxcd.io/v1 OCIRepository (a `layerSelector` picking the Helm chart's
layer) and helm.toolkit.fluxcd.io/v2 HelmRelease `chartRef` to it, as source-controller v1.7 and
helm-controller v1.4 (Flux 2.7) document; the registry's credentials reach source-controller in a
kubernetes.io/dockerconfigjson Secret (`secretRef`), its CA in a Secret with `ca.crt`
(`certSecretRef`)."""

from __future__ import annotations

import datetime
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml
from clusterkit import CHART, TOOLS, Cluster, wait_for
from repo import REPO

from tfmw.devcluster import flux as flux_mod
from tfmw.devcluster.registry import Registry
from tfmw.k8s.api import ns_path

HELM_CHART_LAYER = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
REGISTRY_SECRET = "flux-registry-auth"
CA_SECRET = "flux-registry-ca"
REQUESTED_AT = "reconcile.fluxcd.io/requestedAt"


def chart_version() -> str:
    return yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]


def local_values() -> dict:
    """values/local.yaml as a dict: what the cluster tests install with."""
    return yaml.safe_load((REPO / "values" / "local.yaml").read_text())


def push_chart(cluster: Cluster, registry: Registry, work: Path) -> str:
    """The working tree's chart packaged and pushed to `registry` (helm's own registry
    credentials in `work`); its repository, oci://<registry>/charts/tf-multiworker."""
    env = cluster.env(HELM_REGISTRY_CONFIG=str(work / "helm-registry.json"))
    helm = str(TOOLS / "helm")

    def run(*args: str, stdin: str | None = None) -> None:
        proc = subprocess.run([helm, *args], input=stdin, capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0, f"helm {args[0]}: {proc.stderr}"

    run("registry", "login", registry.host, "--username", registry.username, "--password-stdin",
        "--ca-file", str(registry.ca_file), stdin=registry.password)  # fmt: skip
    run("package", str(CHART), "--destination", str(work))
    archive = work / f"tf-multiworker-{chart_version()}.tgz"
    run("push", str(archive), f"oci://{registry.host}/charts", "--ca-file", str(registry.ca_file))
    return f"oci://{registry.host}/charts/tf-multiworker"


def ready_condition(obj: dict | None) -> dict | None:
    """The Ready condition of a Flux object when it describes its current generation."""
    status = (obj or {}).get("status") or {}
    if status.get("observedGeneration") != (obj or {}).get("metadata", {}).get("generation"):
        return None
    return next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)


@dataclass
class Flux:
    cluster: Cluster
    registry: Registry
    repository: str  # oci://<registry>/charts/tf-multiworker
    version: str  # the chart version pushed there (the working tree's)
    controllers: flux_mod.Flux

    # -- paths ------------------------------------------------------------------------
    @staticmethod
    def helmrelease_path(namespace: str, name: str = "") -> str:
        return ns_path(namespace, "helmreleases", name, group="helm.toolkit.fluxcd.io/v2")

    @staticmethod
    def ocirepository_path(namespace: str, name: str = "") -> str:
        return ns_path(namespace, "ocirepositories", name, group="source.toolkit.fluxcd.io/v1")

    # -- objects ----------------------------------------------------------------------
    def ocirepository(self, namespace: str, name: str, version: str | None = None) -> dict:
        return {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "OCIRepository",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "url": self.repository,
                "ref": {"tag": version or self.version},
                "interval": "10m",  # the tests ask for reconciles; nothing changes in the registry
                "layerSelector": {"mediaType": HELM_CHART_LAYER, "operation": "copy"},
                "secretRef": {"name": REGISTRY_SECRET},
                "certSecretRef": {"name": CA_SECRET},
            },
        }

    def helmrelease(self, namespace: str, name: str, values: dict, **spec) -> dict:
        """A HelmRelease of the chart from the OCIRepository of the same name; `spec` adds or
        replaces its fields (driftDetection, install, upgrade, timeout, suspend...)."""
        return {
            "apiVersion": "helm.toolkit.fluxcd.io/v2",
            "kind": "HelmRelease",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "interval": "10m",
                "chartRef": {"kind": "OCIRepository", "name": name},
                "values": values,
                **spec,
            },
        }

    def credentials(self, namespace: str) -> None:
        """The registry's pull secret and CA in `namespace`, for its OCIRepositories."""
        api = self.cluster.api
        api.create_or_keep(ns_path(namespace, "secrets"), self.registry.pull_secret(namespace, REGISTRY_SECRET))
        ca = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": CA_SECRET, "namespace": namespace},
            "stringData": {"ca.crt": Path(self.registry.ca_file).read_text()},
        }
        api.create_or_keep(ns_path(namespace, "secrets"), ca)

    def release(self, namespace: str, name: str, values: dict, version: str | None = None, **spec) -> None:
        """The credentials, an OCIRepository of the chart (`version`, default the pushed one)
        and a HelmRelease `name` of it with `values` (helm's release name is `name`)."""
        self.credentials(namespace)
        self.cluster.api.create(self.ocirepository_path(namespace), self.ocirepository(namespace, name, version))
        self.cluster.api.create(self.helmrelease_path(namespace), self.helmrelease(namespace, name, values, **spec))

    # -- reading and waiting -----------------------------------------------------------
    def get(self, namespace: str, name: str) -> dict | None:
        return self.cluster.api.get_or_none(self.helmrelease_path(namespace, name))

    def describe(self, namespace: str, name: str) -> str:
        """The HelmRelease's and its source's conditions, and the controllers' last log lines."""
        lines = []
        for what, path in (("HelmRelease", self.helmrelease_path), ("OCIRepository", self.ocirepository_path)):
            obj = self.cluster.api.get_or_none(path(namespace, name)) or {}
            for c in (obj.get("status") or {}).get("conditions") or []:
                lines.append(f"{what} {c.get('type')}={c.get('status')} {c.get('reason')}: {c.get('message')}")
        logs = self.cluster.state.dir / "logs"
        for log in sorted(logs.glob("flux-*.log")):
            lines.append(f"--- {log.name} (tail)")
            lines += log.read_text(errors="replace").splitlines()[-15:]
        return "\n".join(lines)

    def wait_ready(self, namespace: str, name: str, timeout: float = 300, status: str = "True") -> dict:
        """Until the HelmRelease's Ready condition for its current generation has `status`
        ("True", or "False" for a failure a test expects); the HelmRelease then."""

        def ready():
            obj = self.get(namespace, name)
            condition = ready_condition(obj)
            return obj if condition and condition.get("status") == status else None

        return wait_for(
            ready, timeout, f"HelmRelease {namespace}/{name} Ready={status}", 1, lambda: self.describe(namespace, name)
        )

    def reconcile(self, namespace: str, name: str, kind: str = "HelmRelease", wait: float = 120) -> str:
        """Ask for a reconcile now (the `reconcile.fluxcd.io/requestedAt` annotation, as `flux
        reconcile` sets it) and, unless wait is 0, wait until the controller has handled it
        (its status.lastHandledReconcileAt); the token."""
        token = datetime.datetime.now(datetime.UTC).isoformat()
        path = (self.helmrelease_path if kind == "HelmRelease" else self.ocirepository_path)(namespace, name)
        self.cluster.api.patch(path, {"metadata": {"annotations": {REQUESTED_AT: token}}})
        if wait:
            wait_for(
                lambda: (self.cluster.api.get(path).get("status") or {}).get("lastHandledReconcileAt") == token,
                wait,
                f"{kind} {namespace}/{name} to handle the reconcile asked at {token}",
                1,
                lambda: self.describe(namespace, name),
            )
        return token

    def remove_all(self, timeout: float = 120) -> None:
        """Every HelmRelease and OCIRepository left on the cluster deleted while the controllers
        still run, and gone: their finalizers (helm-controller uninstalls the release,
        source-controller drops the artifact) would otherwise keep a test's namespace
        Terminating for the rest of the session. What is still there after `timeout` has its
        finalizers removed, and fails the teardown."""
        stuck = self._remove("helm.toolkit.fluxcd.io/v2", "helmreleases", timeout)
        stuck += self._remove("source.toolkit.fluxcd.io/v1", "ocirepositories", timeout)
        assert not stuck, f"left by their controllers after {timeout:g}s (finalizers removed): {', '.join(stuck)}"

    def _remove(self, group: str, kind: str, timeout: float) -> list[str]:
        api, collection = self.cluster.api, f"/apis/{group}/{kind}"

        def path(obj: dict) -> str:
            return ns_path(obj["metadata"]["namespace"], kind, obj["metadata"]["name"], group=group)

        for obj in api.items(collection):
            api.delete(path(obj))
        try:
            wait_for(lambda: not api.items(collection), timeout, f"every {kind} deleted")
            return []
        except AssertionError:
            left = api.items(collection)
            for obj in left:
                api.patch(path(obj), {"metadata": {"finalizers": None}})
            return [f"{kind} {obj['metadata']['namespace']}/{obj['metadata']['name']}" for obj in left]

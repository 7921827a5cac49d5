"""The harness's client of a cluster: helm and the Kubernetes API (tfmw.k8s.Api) against one
kubeconfig, its failures one line (FaultError), and the check that the cluster answers."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tfmw.chart.helmkit import HelmFailed, ToolError, find_helm, run_helm
from tfmw.k8s import namespaces
from tfmw.k8s.api import Api, ApiError
from tfmw.k8s.kubeconfig import KubeconfigError


class FaultError(Exception):
    """One-line, operator-facing reason the harness could not run; exit 2 bad input, 3 cluster state."""

    def __init__(self, message: str, exit_code: int = 3):
        super().__init__(" ".join(message.split()))
        self.exit_code = exit_code


class Kube:
    """helm and the Kubernetes API (tfmw.k8s.Api) against one kubeconfig. API calls that fail
    raise FaultError, one line."""

    def __init__(self, kubeconfig: Path, helm: str | None = None):
        self.kubeconfig = Path(kubeconfig)
        self.helm_bin = find_helm(helm)
        try:
            self.api = Api.from_kubeconfig(kubeconfig_env=str(self.kubeconfig), timeout=30)
        except KubeconfigError as err:
            raise FaultError(f"--kubeconfig {kubeconfig}: {err}", exit_code=2) from None

    def helm(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
        try:
            return run_helm(self.kubeconfig, *args, helm=self.helm_bin, timeout=timeout, check=check)
        except HelmFailed as err:
            raise FaultError(f"`helm {' '.join(args[:3])} ...` exited {err.returncode}: {err.why}") from None

    def call(self, method: str, path: str, body: dict | None = None, **query):
        """One API call; FaultError naming it when the server refuses or does not answer."""
        try:
            if method == "GET":
                return self.api.get(path, **query)
            return self.api.request(method, path, body)
        except ApiError as err:
            raise FaultError(f"{method} {path}: {err}") from None

    def get(self, path: str) -> dict | None:
        """The object at `path`, or None when it does not exist."""
        try:
            return self.api.get_or_none(path)
        except ApiError as err:
            raise FaultError(f"GET {path}: {err}") from None

    def items(self, path: str, selector: str) -> list[dict]:
        return (self.call("GET", path, labelSelector=selector) or {}).get("items") or []

    def delete(self, path: str) -> None:
        try:
            self.api.delete(path)
        except ApiError as err:
            raise FaultError(f"DELETE {path}: {err}") from None

    def make_namespace(self, namespace: str) -> None:
        """A namespace of the harness's own, ready for pods (its default ServiceAccount there)."""
        try:
            namespaces.create(self.api, namespace)
        except ApiError as err:
            raise FaultError(f"POST {namespaces.NAMESPACES}: {err}") from None

    def delete_namespace(self, namespace: str, timeout: float = 180) -> None:
        """Delete the namespace and wait until it is gone (best effort: the harness's cleanup)."""
        try:
            namespaces.delete(self.api, namespace)
            namespaces.wait_gone(self.api, namespace, timeout)
        except ApiError:
            pass


def check_cluster(kubeconfig: Path) -> Kube:
    """A Kube for `kubeconfig` after checking the API server answers; FaultError otherwise."""
    if not Path(kubeconfig).is_file():
        raise FaultError(
            f"--kubeconfig {kubeconfig}: no such file; start a cluster with `make cluster` "
            "or pass the kubeconfig of one",
            exit_code=2,
        )
    try:
        kube = Kube(kubeconfig)
    except ToolError as err:
        raise FaultError(str(err), exit_code=err.exit_code) from None
    try:
        ready = kube.api.request("GET", "/readyz", raw=True).decode(errors="replace").strip()
    except ApiError as err:
        ready = str(err)
    if ready != "ok":
        raise FaultError(f"the cluster of {kubeconfig} does not answer: {ready}")
    return kube

"""A stand-in for the Kubernetes API server, just enough for Helm's `lookup`: `helm template
--dry-run=server` against it renders the chart with its install-time lookups answered, with no
cluster. It serves discovery of the groups the chart's objects and lookups use, the objects it
is given (GET by name; a list of those under a collection), an empty list for other collections,
and 404 for everything else. Render tests of the chart's lookups use it; the cluster tests show the same
against a real API server.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
from collections.abc import Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from chartkit import CHART, NAMESPACE, RELEASE

# group/version -> (resource, kind, namespaced) it serves
_RESOURCES = {
    "v1": [
        ("persistentvolumeclaims", "PersistentVolumeClaim", True),
        ("serviceaccounts", "ServiceAccount", True),
        ("services", "Service", True),
        ("configmaps", "ConfigMap", True),
        ("secrets", "Secret", True),
        ("pods", "Pod", True),
        ("namespaces", "Namespace", False),
    ],
    "discovery.k8s.io/v1": [("endpointslices", "EndpointSlice", True)],
    # the kinds the chart renders: Helm 4 maps each rendered object through discovery
    "apps/v1": [("statefulsets", "StatefulSet", True), ("deployments", "Deployment", True)],
    "batch/v1": [("jobs", "Job", True)],
    "policy/v1": [("poddisruptionbudgets", "PodDisruptionBudget", True)],
    "rbac.authorization.k8s.io/v1": [("roles", "Role", True), ("rolebindings", "RoleBinding", True)],
    "networking.k8s.io/v1": [("networkpolicies", "NetworkPolicy", True)],
}


def path_of(obj: dict) -> str:
    """The API path of an object: /api/v1/namespaces/<ns>/<resource>/<name>."""
    version = obj["apiVersion"]
    resource = next(r for r, kind, _ in _RESOURCES[version] if kind == obj["kind"])
    root = "/api/v1" if version == "v1" else f"/apis/{version}"
    namespace = obj["metadata"].get("namespace")
    where = f"/namespaces/{namespace}" if namespace else ""
    return f"{root}{where}/{resource}/{obj['metadata']['name']}"


def _discovery(path: str) -> dict | None:
    if path == "/version":
        return {"major": "1", "minor": "33", "gitVersion": "v1.33.0"}
    if path == "/api":
        return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
    groups = {gv.split("/")[0]: gv for gv in _RESOURCES if "/" in gv}  # one version each
    if path == "/apis":
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [
                {
                    "name": g,
                    "versions": [{"groupVersion": gv, "version": "v1"}],
                    "preferredVersion": {"groupVersion": gv},
                }
                for g, gv in groups.items()
            ],
        }
    for gv, resources in _RESOURCES.items():
        if path == ("/api/v1" if gv == "v1" else f"/apis/{gv}"):
            return {
                "kind": "APIResourceList",
                "groupVersion": gv,
                "resources": [
                    {"name": r, "singularName": "", "namespaced": ns, "kind": k, "verbs": ["get", "list"]}
                    for r, k, ns in resources
                ],
            }
    return None


@contextlib.contextmanager
def serving(objects: Iterable[dict], tmp_path: Path) -> Iterator[Path]:
    """Serve `objects` on a local port for the block; yields the kubeconfig that points at it."""
    by_path = {path_of(o): o for o in objects}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def _send(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # http.server's name for it
            path = self.path.split("?", 1)[0]
            found = _discovery(path) or by_path.get(path)
            if found is not None:
                return self._send(200, found)
            if any(path.endswith(f"/{r}") for resources in _RESOURCES.values() for r, _, _ in resources):
                items = [o for p, o in by_path.items() if p.rsplit("/", 1)[0] == path]
                return self._send(200, {"kind": "List", "apiVersion": "v1", "metadata": {}, "items": items})
            self._send(
                404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}
            )

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    kubeconfig = tmp_path / "stub-kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "stub", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}],
                "users": [{"name": "stub", "user": {"token": "stub"}}],
                "contexts": [{"name": "stub", "context": {"cluster": "stub", "user": "stub"}}],
                "current-context": "stub",
            }
        )
    )
    try:
        yield kubeconfig
    finally:
        server.shutdown()
        server.server_close()


def server_render(
    helm: str, kubeconfig: Path, sets: Iterable[str] = (), namespace: str = NAMESPACE
) -> subprocess.CompletedProcess:
    """`helm template --dry-run=server`: the chart rendered with its lookups answered."""
    argv = [helm, "template", RELEASE, str(CHART), "--namespace", namespace, "--dry-run=server"]
    argv += ["--disable-openapi-validation"]  # the stub serves no OpenAPI schema (Helm 4 asks for it)
    for item in sets:
        argv += ["--set", item]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HELM_KUBE", "KUBECONFIG"))}
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env={**env, "KUBECONFIG": str(kubeconfig)})

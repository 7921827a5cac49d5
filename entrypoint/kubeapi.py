"""A minimal in-cluster Kubernetes API client: the standard library only (http.client + ssl).

The launcher needs seven calls (docs/lifecycle.md): get/patch its status ConfigMap, get/patch
its StatefulSet's `scale` subresource, create an Event, get a peer's pod (why a new worker
of a resize is not running yet; whether a peer was lost with its node) and force-delete a
peer's pod lost with its node (entrypoint/nodeloss.py). Each request re-reads the projected
service-account token (the kubelet rotates it), verifies the API server against the mounted
`ca.crt`, and gives up after a short timeout: status is never worth stalled training.
Every failure is an APIError whose `kind` (e.g. "HTTP 403", "timeout", "connection refused")
lets the caller log it once per kind.
"""

from __future__ import annotations

import http.client
import json
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

MERGE_PATCH = "application/merge-patch+json"
MAX_RESPONSE_BYTES = 4 * 1024 * 1024


class APIError(Exception):
    def __init__(self, kind: str, detail: str = "", status: int | None = None):
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind
        self.detail = detail
        self.status = status


@dataclass(frozen=True)
class KubeAPI:
    host: str
    port: int
    api_dir: Path  # token, ca.crt (the projected volume's files)
    timeout: float = 5.0

    @classmethod
    def from_env(cls, env: Mapping[str, str], api_dir: str | None, timeout: float = 5.0) -> KubeAPI | None:
        """The API server the kubelet names in KUBERNETES_SERVICE_HOST/PORT; None without api_dir."""
        if not api_dir:
            return None
        port = env.get("KUBERNETES_SERVICE_PORT", "443")
        return cls(
            host=env.get("KUBERNETES_SERVICE_HOST", ""),
            # isdigit() alone admits '²', which int() refuses: a traceback for a bad env
            port=int(port) if port.isascii() and port.isdigit() else 0,
            api_dir=Path(api_dir),
            timeout=timeout,
        )

    # -- transport -------------------------------------------------------------------
    def _token(self) -> str:
        try:
            token = (self.api_dir / "token").read_text().strip()
        except OSError as err:
            raise APIError("token unreadable", f"{self.api_dir / 'token'}: {err.strerror}") from None
        if not token:
            raise APIError("token unreadable", f"{self.api_dir / 'token'} is empty")
        return token

    def _tls(self) -> ssl.SSLContext:
        try:
            return ssl.create_default_context(cafile=str(self.api_dir / "ca.crt"))
        except (OSError, ssl.SSLError) as err:
            raise APIError("CA unreadable", f"{self.api_dir / 'ca.crt'}: {err}") from None

    def request(self, method: str, path: str, body: dict | None = None, content_type: str = "application/json") -> dict:
        if not self.host or not 0 < self.port < 65536:
            raise APIError("no API server", "KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT not set")
        headers = {
            "Authorization": f"Bearer {self._token()}",
            "Accept": "application/json",
            "User-Agent": "tf-multiworker-launcher",
        }
        payload = None
        if body is not None:
            payload = json.dumps(body, separators=(",", ":")).encode()
            headers["Content-Type"] = content_type
        conn = http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout, context=self._tls())
        try:
            conn.request(method, path, body=payload, headers=headers)
            response = conn.getresponse()
            raw = response.read(MAX_RESPONSE_BYTES)
        except TimeoutError:
            raise APIError("timeout", f"no answer from {self.host}:{self.port} within {self.timeout:g}s") from None
        except ConnectionRefusedError:
            raise APIError("connection refused", f"{self.host}:{self.port}") from None
        except ssl.SSLError as err:
            raise APIError("TLS error", str(err.reason or err)) from None
        except (OSError, http.client.HTTPException) as err:
            raise APIError("connection error", f"{type(err).__name__}: {err}") from None
        finally:
            conn.close()
        if response.status >= 400:
            raise APIError(f"HTTP {response.status}", _status_message(raw, response.reason), response.status)
        try:
            return json.loads(raw) if raw else {}
        except ValueError:
            raise APIError("bad response", f"{method} {path}: not JSON") from None

    # -- the calls the launcher makes ---------------------------------------------
    def get_configmap(self, namespace: str, name: str) -> dict:
        return self.request("GET", f"/api/v1/namespaces/{quote(namespace)}/configmaps/{quote(name)}")

    def patch_configmap_data(
        self, namespace: str, name: str, data: Mapping[str, str], resource_version: str | None = None
    ) -> dict:
        """Merge-patch `data`; with resource_version the patch applies only to that version
        (the API server answers 409 Conflict if someone wrote in between)."""
        body: dict = {"data": dict(data)}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        return self.request(
            "PATCH", f"/api/v1/namespaces/{quote(namespace)}/configmaps/{quote(name)}", body, MERGE_PATCH
        )

    def get_scale(self, namespace: str, statefulset: str) -> dict:
        return self.request("GET", _scale_path(namespace, statefulset))

    def patch_scale(self, namespace: str, statefulset: str, replicas: int) -> dict:
        return self.request("PATCH", _scale_path(namespace, statefulset), {"spec": {"replicas": replicas}}, MERGE_PATCH)

    def get_pod(self, namespace: str, name: str) -> dict:
        return self.request("GET", f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}")

    def force_delete_pod(self, namespace: str, name: str, uid: str) -> dict:
        """Delete now (grace 0), and only the pod with this UID: never its replacement."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
        return self.request("DELETE", f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}", body)

    def create_event(self, namespace: str, event: dict) -> dict:
        return self.request("POST", f"/api/v1/namespaces/{quote(namespace)}/events", event)


def _scale_path(namespace: str, statefulset: str) -> str:
    return f"/apis/apps/v1/namespaces/{quote(namespace)}/statefulsets/{quote(statefulset)}/scale"


def _status_message(raw: bytes, reason: str) -> str:
    """The API server's Status message (e.g. 'configmaps "x" is forbidden: ...'), one line."""
    try:
        message = json.loads(raw).get("message", "")
    except (ValueError, AttributeError):
        message = ""
    text = " ".join(str(message or reason).split())
    return text[:300]

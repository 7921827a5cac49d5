"""A minimal in-cluster Kubernetes API client: the standard library only (http.client + ssl).

The launcher needs eight calls (docs/lifecycle.md): get/patch its status ConfigMap, get/patch
its StatefulSet's `scale` subresource, create an Event, get a pod (its own, for fencing; the
chief's, for a lost chief), list the release's worker pods (one request for why peers are not
running, or were lost with their node) and force-delete a peer's pod lost with its node
(entrypoint/nodeloss.py).

One client per launcher (docs/contracts.md, the request budget): its connections are kept open
and reused (HTTP/1.1 keep-alive: one TLS handshake per connection, not per request), the
projected service-account token is read again only when its file changes (the kubelet rotates
it by swapping the file) or the server answers 401, and the TLS context is built once from the
mounted `ca.crt` (again only if that file changes). Every request gives up after a short
timeout: status is never worth stalled training. Every failure is an APIError whose `kind`
(e.g. "HTTP 403", "timeout", "connection refused") lets the caller log it once per kind.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote, urlencode

MERGE_PATCH = "application/merge-patch+json"
MAX_RESPONSE_BYTES = 64 * 1024 * 1024  # a list of 1,024 pods is a few MB (managedFields included)
IDLE_CONNECTIONS = 2  # kept open between requests (the launcher's threads rarely overlap)
# The API server closes a keep-alive connection idle for long (90 s and more); one idle longer
# than this is closed here instead of trusted.
MAX_IDLE_SECONDS = 60.0
# How a reused connection that the server closed while idle fails. Failing while sending, the
# request never reached the server: it is sent again on a new connection. Failing while
# waiting for the answer, it may have been processed: only a GET is sent again.
_STALE = (
    http.client.RemoteDisconnected,
    ConnectionResetError,
    BrokenPipeError,
    http.client.CannotSendRequest,
    ssl.SSLEOFError,
    ssl.SSLZeroReturnError,
)


class APIError(Exception):
    def __init__(self, kind: str, detail: str = "", status: int | None = None):
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind
        self.detail = detail
        self.status = status


def _stamp(path: Path) -> tuple | None:
    """What tells a rewritten file from the one read before (the kubelet swaps a symlink)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


class KubeAPI:
    def __init__(self, host: str, port: int, api_dir: Path, timeout: float = 5.0):
        self.host = host
        self.port = port
        self.api_dir = Path(api_dir)  # token, ca.crt (the projected volume's files)
        self.timeout = timeout
        self._lock = threading.Lock()
        self._idle: list[tuple[float, http.client.HTTPSConnection]] = []  # (idle since, connection)
        self._token: tuple[tuple | None, str] | None = None  # (the file's stamp, the token)
        self._context: tuple[tuple | None, ssl.SSLContext] | None = None
        self.connections = 0  # made so far (each one TLS handshake): the request budget's witness

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
    def _current_token(self, reread: bool = False) -> str:
        path = self.api_dir / "token"
        stamp = _stamp(path)
        with self._lock:
            cached = self._token
        if cached is not None and cached[0] == stamp and stamp is not None and not reread:
            return cached[1]
        try:
            token = path.read_text().strip()
        except OSError as err:
            raise APIError("token unreadable", f"{path}: {err.strerror}") from None
        if not token:
            raise APIError("token unreadable", f"{path} is empty")
        with self._lock:
            self._token = (stamp, token)
        return token

    def _tls(self) -> ssl.SSLContext:
        path = self.api_dir / "ca.crt"
        stamp = _stamp(path)
        with self._lock:
            cached = self._context
            if cached is not None and cached[0] == stamp and stamp is not None:
                return cached[1]
        try:
            context = ssl.create_default_context(cafile=str(path))
        except (OSError, ssl.SSLError) as err:
            raise APIError("CA unreadable", f"{path}: {err}") from None
        with self._lock:
            old, self._idle = (self._idle, []) if self._context is not None else ([], self._idle)
            self._context = (stamp, context)
        for _, conn in old:  # connections of the old CA are not reused
            conn.close()
        return context

    def _connection(self, reuse: bool = True) -> tuple[http.client.HTTPSConnection, bool]:
        """(a connection, whether it was used before): a kept one idle for less than
        MAX_IDLE_SECONDS, else a new one."""
        context = self._tls()
        stale = []
        found = None
        with self._lock:
            while self._idle and found is None:
                since, conn = self._idle.pop()
                if reuse and conn.sock is not None and time.monotonic() - since < MAX_IDLE_SECONDS:
                    found = conn
                else:
                    stale.append(conn)
            if found is None:
                self.connections += 1
        for conn in stale:
            conn.close()
        if found is not None:
            return found, True
        return http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout, context=context), False

    def _release(self, conn: http.client.HTTPSConnection, response: http.client.HTTPResponse) -> None:
        """Keep the connection for the next request, if its answer was read whole."""
        if response.will_close or conn.sock is None or not response.isclosed():
            conn.close()
            return
        with self._lock:
            if len(self._idle) < IDLE_CONNECTIONS:
                self._idle.append((time.monotonic(), conn))
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for _, conn in idle:
            conn.close()

    def _exchange(self, method: str, path: str, payload: bytes | None, headers: dict) -> tuple[int, str, bytes]:
        """(status, reason, body) of one request on a kept connection; sent once more on a new
        connection when a reused one turns out closed by the server (see _STALE)."""
        for attempt in range(2):
            conn, reused = self._connection(reuse=attempt == 0)
            sent = False
            try:
                conn.request(method, path, body=payload, headers=headers)
                sent = True
                response = conn.getresponse()
                raw = response.read(MAX_RESPONSE_BYTES)
            except _STALE as err:
                conn.close()
                if reused and (not sent or method == "GET"):
                    continue
                raise APIError("connection error", f"{type(err).__name__}: {err}") from None
            except TimeoutError:
                conn.close()
                raise APIError("timeout", f"no answer from {self.host}:{self.port} within {self.timeout:g}s") from None
            except ConnectionRefusedError:
                conn.close()
                raise APIError("connection refused", f"{self.host}:{self.port}") from None
            except ssl.SSLError as err:
                conn.close()
                raise APIError("TLS error", str(err.reason or err)) from None
            except (OSError, http.client.HTTPException) as err:
                conn.close()
                raise APIError("connection error", f"{type(err).__name__}: {err}") from None
            self._release(conn, response)
            return response.status, response.reason, raw
        raise APIError("connection error", f"{self.host}:{self.port} closed two connections in a row")

    def request(
        self,
        method: str,
        path: str,
        body: dict | None = None,
        content_type: str = "application/json",
        query: Mapping[str, str] | None = None,
    ) -> dict:
        if not self.host or not 0 < self.port < 65536:
            raise APIError("no API server", "KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT not set")
        if query:
            path = f"{path}?{urlencode(query)}"
        payload = None
        headers = {"Accept": "application/json", "User-Agent": "tf-multiworker-launcher"}
        if body is not None:
            payload = json.dumps(body, separators=(",", ":")).encode()
            headers["Content-Type"] = content_type
        for reread in (False, True):
            headers["Authorization"] = f"Bearer {self._current_token(reread)}"
            status, reason, raw = self._exchange(method, path, payload, headers)
            if status != 401:
                break  # a 401 once more with the token read again: it may have rotated just now
        if status >= 400:
            raise APIError(f"HTTP {status}", _status_message(raw, reason), status)
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

    def list_pods(self, namespace: str, label_selector: str) -> list[dict]:
        """The pods `label_selector` selects, in one request (the release's workers)."""
        answer = self.request(
            "GET", f"/api/v1/namespaces/{quote(namespace)}/pods", query={"labelSelector": label_selector}
        )
        return list(answer.get("items") or [])

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

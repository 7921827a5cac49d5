"""The host side's one Kubernetes client: REST paths in, the API server's JSON out.

`tfmw deploy/status/logs`, the fault harness, the dev cluster's bootstrap, its provisioner,
the bench and the cluster tests all talk to the API server through `Api`. Its connection is
lightkube's: the kubeconfig's server, CA, and authentication (client certificates, bearer
tokens and token files, exec plugins such as `aws eks get-token`) become one httpx client
(`lightkube.config.client_adapter`), thread-safe with a connection pool. Objects stay plain
JSON dicts, as the API serves them, because the code that reads them (deploy.observe's pure
functions, the bootstrap's manifests) works on that shape.

Errors are ApiError with the HTTP status (0 when the server did not answer) and the server's
one-line message.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx2 as httpx
from lightkube.config import client_adapter
from lightkube.config.kubeconfig import KubeConfig, SingleConfig
from lightkube.config.models import Cluster, User
from lightkube.core.exceptions import ConfigError

from tfmw.k8s import kubeconfig


class ApiError(Exception):
    def __init__(self, status: int, message: str, reason: str = ""):
        super().__init__(f"HTTP {status}: {' '.join(message.split())}" if status else " ".join(message.split()))
        self.status = status
        self.reason = reason
        self.message = message


MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"


@dataclass
class Credentials:
    """A client certificate's identity on one server (the dev cluster's PKI)."""

    server: str  # https://host:port
    ca: Path
    cert: Path
    key: Path


class Api:
    """One identity talking to one API server. Thread-safe."""

    def __init__(self, config: SingleConfig, timeout: float = 10.0):
        self.config = config
        self.timeout = timeout
        try:
            self._http = client_adapter.Client(config, client_adapter.ConnectionParams(timeout=httpx.Timeout(timeout)))
        except (ConfigError, OSError, ValueError) as err:
            raise kubeconfig.KubeconfigError(
                f"{kubeconfig.describe(config)}: cannot set up its credentials ({' '.join(str(err).split())})"
            ) from None

    @classmethod
    def from_credentials(cls, creds: Credentials, timeout: float = 10.0) -> Api:
        config = KubeConfig.from_one(
            cluster=Cluster(server=creds.server, certificate_auth=str(creds.ca)),
            user=User(client_cert=str(creds.cert), client_key=str(creds.key)),
        ).get()
        assert config is not None
        return cls(config, timeout)

    @classmethod
    def from_kubeconfig(
        cls, context: str | None = None, *, kubeconfig_env: str | None = None, timeout: float = 10.0
    ) -> Api:
        """The kubeconfig in use ($KUBECONFIG or ~/.kube/config, or `kubeconfig_env`'s files) at
        `context` (default: its current one); KubeconfigError when that cannot be."""
        return cls(kubeconfig.select(kubeconfig.load(kubeconfig_env), context), timeout)

    @property
    def target(self) -> str:
        """ "kube context 'X', server Y"."""
        return kubeconfig.describe(self.config)

    def close(self) -> None:
        self._http.close()

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict | None = None,
        content_type: str = "application/json",
        raw: bool = False,
    ) -> Any:
        params = {k: _query_value(v) for k, v in (query or {}).items() if v is not None}
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        try:
            resp = self._http.request(method, path, content=data, headers=headers, params=params)
        except (httpx.HTTPError, ConfigError, OSError) as err:
            raise ApiError(0, f"{method} {self.config.cluster.server}{path}: {_why(err)}") from None
        if resp.status_code >= 400:
            raise _error(resp.status_code, resp.content)
        if raw:
            return resp.content
        return resp.json() if resp.content else None

    # -- conveniences ----------------------------------------------------------------
    def get(self, path: str, **query) -> Any:
        return self.request("GET", path, query=query or None)

    def get_or_none(self, path: str) -> Any:
        try:
            return self.get(path)
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    def create(self, path: str, obj: dict) -> Any:
        return self.request("POST", path, obj)

    def create_or_keep(self, path: str, obj: dict) -> Any:
        """POST, treating "already exists" as done (idempotent bootstrap)."""
        try:
            return self.create(path, obj)
        except ApiError as err:
            if err.status == 409:
                return None
            raise

    def patch(self, path: str, patch: dict, strategic: bool = False) -> Any:
        return self.request("PATCH", path, patch, content_type=STRATEGIC_PATCH if strategic else MERGE_PATCH)

    def delete(self, path: str, body: dict | None = None) -> Any:
        try:
            return self.request("DELETE", path, body)
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    def items(self, path: str, **query) -> list[dict]:
        return (self.get(path, **query) or {}).get("items") or []

    def log(self, namespace: str, pod: str, *, container: str | None = None, tail: int | None = None) -> str:
        """A container's log as it is now."""
        query = {"container": container, "tailLines": tail if tail is not None and tail >= 0 else None}
        return self.request("GET", ns_path(namespace, "pods", pod) + "/log", query=query, raw=True).decode(
            errors="replace"
        )

    def follow_log(
        self, namespace: str, pod: str, *, container: str | None = None, tail: int | None = None
    ) -> LogStream:
        """A container's log followed as it is written (`kubectl logs -f`): iterate its lines;
        close() from any thread ends it."""
        query = {
            "follow": "true",
            "container": container,
            "tailLines": tail if tail is not None and tail >= 0 else None,
        }
        path = ns_path(namespace, "pods", pod) + "/log"
        request = self._http.build_request(
            "GET", path, params={k: str(v) for k, v in query.items() if v is not None}, timeout=_no_read_timeout(self)
        )
        try:
            resp = self._http.send(request, stream=True)
        except (httpx.HTTPError, ConfigError, OSError) as err:
            raise ApiError(0, f"GET {self.config.cluster.server}{path}: {_why(err)}") from None
        if resp.status_code >= 400:
            body = resp.read()
            resp.close()
            raise _error(resp.status_code, body)
        return LogStream(resp)


class LogStream:
    """A followed log: its lines, without line ends, until the container stops or close().

    The thread that iterates owns the connection and closes it. close() from another thread
    only shuts the socket down, which wakes that reader: closing it under a reader blocked in
    OpenSSL's read frees the descriptor while OpenSSL still holds its number, and the next
    pipe or socket opened gets it (a helm's stdout once received a TLS alert that way)."""

    def __init__(self, resp: httpx.Response):
        self._resp = resp
        stream = resp.extensions.get("network_stream")
        self._socket = stream.get_extra_info("socket") if stream is not None else None
        self._lock = threading.Lock()
        self._reading = False
        self._done = False  # the response is closed, or close() asked the reader to close it

    def __iter__(self) -> Iterator[str]:
        with self._lock:
            if self._done:
                return
            self._reading = True
        try:
            for line in self._resp.iter_lines():
                yield line.rstrip("\r\n")
        except (httpx.HTTPError, OSError, ValueError):
            return  # closed from another thread, or the connection broke: the stream ends
        finally:
            with self._lock:
                self._reading, self._done = False, True
            self._resp.close()

    def close(self) -> None:
        with self._lock:
            if self._done:
                return
            self._done = True
            if not self._reading:
                self._resp.close()
                return
            # A reader is blocked in recv() until the server writes: shutting the socket down
            # wakes it at once, and it closes the response itself.
            if self._socket is not None:
                try:
                    self._socket.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # the connection broke already: the reader is on its way out


def time_seconds(stamp: str) -> float:
    """An API server or kubelet timestamp (RFC 3339, `Z`, with or without fractional seconds:
    firstTimestamp, eventTime, `logs?timestamps=true`) as seconds since the epoch."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def ns_path(namespace: str, resource: str, name: str | None = None, group: str = "") -> str:
    """REST path of a namespaced resource: ns_path("default", "pods", "w-0") ->
    /api/v1/namespaces/default/pods/w-0; group "apps/v1" -> /apis/apps/v1/namespaces/..."""
    base = "/api/v1" if not group else f"/apis/{group}"
    return f"{base}/namespaces/{namespace}/{resource}" + (f"/{name}" if name else "")


def _query_value(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _no_read_timeout(api: Api) -> httpx.Timeout:
    """Connect and write within the client's timeout; a followed log may be quiet for long."""
    return httpx.Timeout(api.timeout, read=None)


def _why(err: Exception) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def _error(status: int, payload: bytes) -> ApiError:
    """The API server's Status object (message, reason) or its text, as one ApiError."""
    message, reason = payload.decode(errors="replace"), ""
    try:
        doc = json.loads(payload)
        message, reason = doc.get("message", message), doc.get("reason", "")
    except (ValueError, AttributeError):
        pass
    return ApiError(status, message, reason)

"""A small Kubernetes REST client for the host tools (stdlib only: http.client + ssl).

The control plane's bootstrap, the provisioner and the cluster tests talk to the real API
server through this: client-certificate authentication, JSON in and out, merge patches.
Errors are ApiError with the HTTP status and the server's one-line message.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ApiError(Exception):
    def __init__(self, status: int, message: str, reason: str = ""):
        super().__init__(f"HTTP {status}: {' '.join(message.split())}" if status else message)
        self.status = status
        self.reason = reason
        self.message = message


MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"


@dataclass
class Credentials:
    server: str  # https://host:port
    ca: Path
    cert: Path
    key: Path


class Api:
    """One identity talking to one API server. Thread-safe: a connection per thread."""

    def __init__(self, creds: Credentials, timeout: float = 10.0):
        self.creds = creds
        self.timeout = timeout
        parsed = urllib.parse.urlsplit(creds.server)
        self.host, self.port = parsed.hostname, parsed.port or 443
        self._ctx = ssl.create_default_context(cafile=str(creds.ca))
        self._ctx.load_cert_chain(str(creds.cert), str(creds.key))
        self._local = threading.local()

    def _conn(self) -> http.client.HTTPSConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPSConnection(self.host, self.port, context=self._ctx, timeout=self.timeout)
            self._local.conn = conn
        return conn

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
        if query:
            path = f"{path}?{urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})}"
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        for attempt in (1, 2):  # a kept-alive connection the server closed: reconnect once
            conn = self._conn()
            try:
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                payload = resp.read()
                break
            except (http.client.HTTPException, ConnectionError, OSError) as exc:
                conn.close()
                self._local.conn = None
                if attempt == 2 or isinstance(exc, TimeoutError):
                    raise ApiError(0, f"{method} {path}: {exc or type(exc).__name__}") from None
        if resp.status >= 400:
            message, reason = payload.decode(errors="replace"), ""
            try:
                status = json.loads(payload)
                message, reason = status.get("message", message), status.get("reason", "")
            except ValueError:
                pass
            raise ApiError(resp.status, message, reason)
        if raw:
            return payload
        return json.loads(payload) if payload else None

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


def ns_path(namespace: str, resource: str, name: str | None = None, group: str = "") -> str:
    """REST path of a namespaced resource: ns_path("default", "pods", "w-0") ->
    /api/v1/namespaces/default/pods/w-0; group "apps/v1" -> /apis/apps/v1/namespaces/..."""
    base = "/api/v1" if not group else f"/apis/{group}"
    return f"{base}/namespaces/{namespace}/{resource}" + (f"/{name}" if name else "")

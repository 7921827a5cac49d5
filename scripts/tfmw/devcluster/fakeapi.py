"""An API server double for the launcher (tests/entrypoint, the scale bench): a small HTTPS server
on 127.0.0.1 that answers the API calls the launcher makes, keeps
what it was sent (and how many connections it took: it keeps them alive, as the API server
does), and can answer 403/500/409 or not at all. It tests our client's behaviour;
the real API server's answers are the cluster tests' business.

TLS is real: a certificate from the dev cluster's PKI (tfmw.devcluster.pki), whose CA the
client must trust through `ca.crt` in the API directory, as in a pod.
"""

from __future__ import annotations

import json
import re
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl

from tfmw.devcluster import pki


def make_certificate(directory: Path, name: str = "server") -> tuple[Path, Path]:
    """A serving certificate for 127.0.0.1 (its chain) and its key, made by the dev cluster's PKI."""
    pair = pki.serving_pair(directory / f"{name}-pki", name, ["127.0.0.1"])
    return pair.cert, pair.key


def unschedulable_pod(name: str, message: str, **metadata) -> dict:
    """A Pending pod the scheduler found no node for (its PodScheduled condition's message)."""
    return {
        "kind": "Pod",
        "metadata": {"name": name, **metadata},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}],
        },
    }


@dataclass
class Request:
    method: str
    path: str
    body: dict | None
    token: str
    content_type: str
    applied: bool = False  # a PATCH the server applied
    at: float = field(default_factory=time.monotonic)  # when it came (the scale bench's windows)


@dataclass
class Failure:
    method: str
    path_re: str
    status: int | None = None  # answer with this status
    hold: threading.Event | None = None  # or wait for this event first (a slow / hung server)
    times: int = 1  # how many matching requests it applies to (-1: all)


@dataclass
class FakeAPI:
    api_dir: Path
    cert: Path
    key: Path
    namespace: str = "ml"
    configmaps: dict = field(default_factory=dict)  # name -> {"data": {...}, "rv": int}
    replicas: dict = field(default_factory=dict)  # statefulset -> int
    pods: dict = field(default_factory=dict)  # name -> the Pod object a GET returns
    deleted_pods: list = field(default_factory=list)  # (name, gracePeriodSeconds) of each DELETE
    uid: str = "0b5e5a1c-sts-uid"
    events: list = field(default_factory=list)
    requests: list = field(default_factory=list)
    failures: list = field(default_factory=list)
    tokens: set = field(default_factory=lambda: {"token-1"})
    connections: int = 0  # TLS connections accepted

    def __post_init__(self):
        self.lock = threading.Lock()
        self.api_dir.mkdir(parents=True, exist_ok=True)
        (self.api_dir / "token").write_text("token-1\n")
        (self.api_dir / "ca.crt").write_bytes(self.cert.read_bytes())
        (self.api_dir / "namespace").write_text(self.namespace)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the API server
            timeout = 30  # an idle kept connection is closed after this

            def log_message(self, *args):  # quiet
                pass

            def setup(self):
                super().setup()
                with fake.lock:
                    fake.connections += 1

            def _serve(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                auth = self.headers.get("Authorization", "")
                status, answer = fake.handle(
                    self.command, self.path, body, auth.removeprefix("Bearer "), self.headers.get("Content-Type", "")
                )
                payload = json.dumps(answer).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    pass  # the client gave up (timeout)

            do_GET = do_PATCH = do_POST = do_DELETE = _serve

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(self.cert), str(self.key))
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        for failure in self.failures:
            if failure.hold is not None:
                failure.hold.set()
        self.server.shutdown()
        self.server.server_close()

    # -- test controls -------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        return {
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(self.port),
            "TFMW_API_DIR": str(self.api_dir),
        }

    def rotate_token(self, token: str) -> None:
        with self.lock:
            self.tokens = {token}
        (self.api_dir / "token").write_text(token)

    def fail(
        self, method: str, path_re: str, status: int | None = None, hold: threading.Event | None = None, times: int = 1
    ) -> Failure:
        failure = Failure(method, path_re, status, hold, times)
        with self.lock:
            self.failures.append(failure)
        return failure

    def status(self, name: str) -> dict:
        with self.lock:
            return dict(self.configmaps[name]["data"])

    def patches(self, name: str) -> list[dict]:
        """The data of every status PATCH that was applied, in order."""
        with self.lock:
            return [
                r.body["data"]
                for r in self.requests
                if r.method == "PATCH" and r.path.endswith(f"/configmaps/{name}") and r.applied
            ]

    # -- the API ---------------------------------------------------------------------------
    def handle(self, method: str, path: str, body: dict | None, token: str, content_type: str):
        request = Request(method, path, body, token, content_type)
        with self.lock:
            self.requests.append(request)
            failure = next(
                (f for f in self.failures if f.method == method and re.search(f.path_re, path) and f.times != 0), None
            )
            if failure is not None and failure.times > 0:
                failure.times -= 1
        if failure is not None:
            if failure.hold is not None:
                failure.hold.wait(30)
            if failure.status is not None:
                return failure.status, {
                    "kind": "Status",
                    "code": failure.status,
                    "message": f"{method} {path}: injected {failure.status}",
                }
        with self.lock:
            if token not in self.tokens:
                return 401, {"kind": "Status", "code": 401, "message": "Unauthorized"}
            return self._route(request)

    def _route(self, request: Request):
        ns = re.escape(self.namespace)
        path, _, query = request.path.partition("?")
        if request.method == "GET" and path == f"/api/v1/namespaces/{self.namespace}/pods":
            return self._list_pods(query)
        m = re.fullmatch(rf"/api/v1/namespaces/{ns}/configmaps/([-a-z0-9.]+)", request.path)
        if m:
            return self._configmap(request, m.group(1))
        m = re.fullmatch(rf"/apis/apps/v1/namespaces/{ns}/statefulsets/([-a-z0-9]+)/scale", request.path)
        if m:
            return self._scale(request, m.group(1))
        m = re.fullmatch(rf"/api/v1/namespaces/{ns}/pods/([-a-z0-9.]+)", request.path)
        if m and request.method in ("GET", "DELETE"):
            return self._pod(request, m.group(1))
        if request.method == "POST" and request.path == f"/api/v1/namespaces/{self.namespace}/events":
            self.events.append(request.body)
            return 201, request.body
        return 404, {"kind": "Status", "code": 404, "message": f"no route {request.method} {request.path}"}

    def _list_pods(self, query: str):
        """GET pods: those whose labels match the labelSelector's `k=v` terms."""
        selector = dict(parse_qsl(query)).get("labelSelector", "")
        wanted = dict(term.split("=", 1) for term in selector.split(",") if term)
        items = [
            pod
            for pod in self.pods.values()
            if all(((pod.get("metadata") or {}).get("labels") or {}).get(k) == v for k, v in wanted.items())
        ]
        return 200, {"kind": "PodList", "items": items}

    def _configmap(self, request: Request, name: str):
        """GET a ConfigMap, or merge-PATCH its data (with an optional resourceVersion precondition)."""
        if name not in self.configmaps:
            return 404, {"kind": "Status", "code": 404, "message": f'configmaps "{name}" not found'}
        cm = self.configmaps[name]
        if request.method == "PATCH":
            if request.content_type != "application/merge-patch+json":
                return 415, {"kind": "Status", "code": 415, "message": "unsupported media type"}
            wanted = (request.body.get("metadata") or {}).get("resourceVersion")
            if wanted is not None and wanted != str(cm["rv"]):
                return 409, {"kind": "Status", "code": 409, "message": "the object has been modified"}
            for key, value in request.body.get("data", {}).items():
                if value is None:
                    cm["data"].pop(key, None)
                else:
                    assert isinstance(value, str), (key, value)
                    cm["data"][key] = value
            cm["rv"] += 1
            request.applied = True
        return 200, {
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": self.namespace, "resourceVersion": str(cm["rv"])},
            "data": dict(cm["data"]),
        }

    def _scale(self, request: Request, name: str):
        """GET or PATCH a StatefulSet's scale subresource."""
        if name not in self.replicas:
            return 404, {"kind": "Status", "code": 404, "message": f'statefulsets.apps "{name}" not found'}
        if request.method == "PATCH":
            self.replicas[name] = request.body["spec"]["replicas"]
        return 200, {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {"name": name, "namespace": self.namespace, "uid": self.uid},
            # as the API server answers: a replicas of 0 is left out (omitempty)
            "spec": {"replicas": self.replicas[name]} if self.replicas[name] else {},
        }

    def _pod(self, request: Request, name: str):
        """GET a pod, or DELETE it (with an optional uid precondition)."""
        if name not in self.pods:
            return 404, {"kind": "Status", "code": 404, "message": f'pods "{name}" not found'}
        pod = self.pods[name]
        if request.method == "DELETE":
            wanted = ((request.body or {}).get("preconditions") or {}).get("uid")
            if wanted is not None and wanted != pod.get("metadata", {}).get("uid"):
                return 409, {"kind": "Status", "code": 409, "message": "Precondition failed: UID in precondition"}
            self.deleted_pods.append((name, (request.body or {}).get("gracePeriodSeconds")))
            del self.pods[name]
            request.applied = True
        return 200, pod

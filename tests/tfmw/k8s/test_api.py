"""tfmw.k8s.Api against a real HTTPS server on 127.0.0.1 that requires a client certificate
from its CA, as the API server does: the identities the client presents (certificate, bearer
token, exec plugin), the paths and queries it sends, errors as ApiError, a followed log."""

from __future__ import annotations

import json
import ssl
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tfmw.devcluster import pki
from tfmw.k8s.api import Api, ApiError, Credentials, ns_path


class Server:
    """Answers a few paths; records (method, path, query, client CN, Authorization)."""

    def __init__(self, directory: Path):
        directory.mkdir(parents=True, exist_ok=True)
        self.ca = pki.make_ca(directory)
        self.serving = pki.issue(self.ca, directory, "server", "127.0.0.1", server_ips=["127.0.0.1"])
        self.client = pki.issue(self.ca, directory, "client", "tfmw-test-admin", "system:masters")
        self.seen: list[tuple] = []
        self.release_log = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _answer(self, status: int, body) -> None:
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _serve(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                url = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(url.query))
                cert = self.connection.getpeercert() or {}
                cn = next((v for rdn in cert.get("subject", ()) for k, v in rdn if k == "commonName"), "")
                server.seen.append((self.command, url.path, query, cn, self.headers.get("Authorization", ""), body))
                if url.path == "/api/v1/namespaces/ml/pods" and self.command == "GET":
                    self._answer(200, {"kind": "PodList", "items": [{"metadata": {"name": "w-0"}}]})
                elif url.path == "/api/v1/namespaces/ml/pods" and self.command == "POST":
                    self._answer(409, {"kind": "Status", "reason": "AlreadyExists", "message": 'pods "w-0" exists'})
                elif url.path == "/api/v1/namespaces/ml/secrets":
                    self._answer(
                        403,
                        {
                            "kind": "Status",
                            "reason": "Forbidden",
                            "message": 'secrets is forbidden:\nUser "x" cannot list resource "secrets"',
                        },
                    )
                elif url.path == "/api/v1/namespaces/ml/pods/w-0/log":
                    self._log(query)
                else:
                    self._answer(404, {"kind": "Status", "reason": "NotFound", "message": f"{url.path} not found"})

            def _log(self, query: dict) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                if query.get("follow") != "true":
                    payload = b"one\ntwo\n"
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for chunk in (b"step 1\nstep", b" 2\n"):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                server.release_log.wait(30)  # a quiet container: the log stays open
                try:
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:
                    pass

            do_GET = do_POST = do_PATCH = do_DELETE = _serve

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(self.ca.cert))
        context.verify_mode = ssl.CERT_OPTIONAL  # token and exec identities come without a certificate
        context.load_cert_chain(str(self.serving.cert), str(self.serving.key))
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release_log.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server(tmp_path):
    srv = Server(tmp_path / "pki")
    yield srv
    srv.close()


def test_client_certificate_identity_paths_and_queries(server):
    api = Api.from_credentials(Credentials(server.url, server.ca.cert, server.client.cert, server.client.key))
    assert api.items(ns_path("ml", "pods"), labelSelector="app=w,role=worker") == [{"metadata": {"name": "w-0"}}]
    method, path, query, cn, auth, _ = server.seen[-1]
    assert (method, path, query, cn, auth) == (
        "GET",
        "/api/v1/namespaces/ml/pods",
        {"labelSelector": "app=w,role=worker"},
        "tfmw-test-admin",
        "",
    )
    assert api.get_or_none(ns_path("ml", "configmaps", "missing")) is None  # 404
    assert api.create_or_keep(ns_path("ml", "pods"), {"metadata": {"name": "w-0"}}) is None  # 409: kept
    assert server.seen[-1][5] == {"metadata": {"name": "w-0"}}
    assert api.delete(ns_path("ml", "pods", "gone")) is None  # 404: already gone


def test_refusals_are_one_line_with_status_and_reason(server):
    api = Api.from_credentials(Credentials(server.url, server.ca.cert, server.client.cert, server.client.key))
    with pytest.raises(ApiError) as err:
        api.items(ns_path("ml", "secrets"))
    assert (err.value.status, err.value.reason) == (403, "Forbidden")
    assert str(err.value) == 'HTTP 403: secrets is forbidden: User "x" cannot list resource "secrets"'


def test_an_untrusted_server_is_refused_by_name(server, tmp_path):
    (tmp_path / "other").mkdir()
    other_ca = pki.make_ca(tmp_path / "other")
    api = Api.from_credentials(Credentials(server.url, other_ca.cert, server.client.cert, server.client.key))
    with pytest.raises(ApiError) as err:
        api.get("/readyz")
    assert err.value.status == 0 and f"GET {server.url}/readyz" in str(err.value)
    assert "certificate" in str(err.value).lower() and "\n" not in str(err.value)


def _kubeconfig(path: Path, server: Server, user: dict) -> Path:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server.url, "certificate-authority": "ca.crt"}}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "ctx",
            }
        )
    )
    (path.parent / "ca.crt").write_bytes(server.ca.cert.read_bytes())
    return path


def test_kubeconfig_token_and_exec_plugin_identities(server, tmp_path):
    """A bearer token, and an exec credential plugin (as EKS and GKE kubeconfigs use)."""
    token = _kubeconfig(tmp_path / "token.yaml", server, {"token": "t-123"})
    Api.from_kubeconfig(kubeconfig_env=str(token)).get("/api/v1/namespaces/ml/pods")
    assert server.seen[-1][4] == "Bearer t-123"
    credential = {"apiVersion": "client.authentication.k8s.io/v1beta1", "status": {"token": "from-plugin"}}
    plugin = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": sys.executable,
            "args": ["-c", f"print({json.dumps(json.dumps(credential))})"],
        }
    }
    execs = _kubeconfig(tmp_path / "exec.yaml", server, plugin)
    api = Api.from_kubeconfig(kubeconfig_env=str(execs))
    assert api.target == f"kube context 'ctx', server {server.url}"
    api.get("/api/v1/namespaces/ml/pods")
    assert server.seen[-1][4] == "Bearer from-plugin"


def test_log_and_a_followed_log_closed_from_another_thread(server):
    api = Api.from_credentials(Credentials(server.url, server.ca.cert, server.client.cert, server.client.key))
    assert api.log("ml", "w-0", container="worker", tail=5) == "one\ntwo\n"
    assert server.seen[-1][2] == {"container": "worker", "tailLines": "5"}
    stream = api.follow_log("ml", "w-0", container="worker")
    assert server.seen[-1][2] == {"follow": "true", "container": "worker"}
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(stream), daemon=True)
    reader.start()
    deadline = time.monotonic() + 10
    while len(lines) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert lines == ["step 1", "step 2"]  # a line split across chunks arrives whole
    assert reader.is_alive()  # the container is quiet: the log stays open
    stream.close()
    reader.join(10)
    assert not reader.is_alive()
    assert stream._socket.fileno() == -1  # the reader closed the connection on its way out
    unread = api.follow_log("ml", "w-0")
    unread.close()  # no reader: close() closes the connection itself
    assert unread._socket.fileno() == -1 and list(unread) == []
    with pytest.raises(ApiError) as err:
        api.follow_log("ml", "w-9")
    assert err.value.status == 404

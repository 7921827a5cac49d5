"""The node's HTTPS endpoint the API server calls: `kubectl logs` goes
kubectl -> kube-apiserver -> GET https://<node>:<port>/containerLogs/<ns>/<pod>/<container>.

Only the API server may call it: TLS with a client certificate signed by the cluster CA
whose common name is the API server's kubelet-client identity. Supports the query
parameters kubectl sends: follow, previous, tailLines, limitBytes (timestamps and
sinceSeconds are accepted and ignored: the log files carry no timestamps).
"""
from __future__ import annotations

import ssl
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable

API_SERVER_CN = "kube-apiserver-kubelet-client"


def tail_bytes(data: bytes, lines: int) -> bytes:
    """The last `lines` lines of data (all of it for a negative count)."""
    if lines < 0:
        return data
    if lines == 0:
        return b""
    parts = data.splitlines(keepends=True)
    return b"".join(parts[-lines:])


# What the server needs from the node agent: (namespace, pod, container, previous) -> the log
# file of that container instance and whether it is still running, or None.
LogLookup = Callable[[str, str, str, bool], "tuple[Path, Callable[[], bool]] | None"]


def make_server(address: str, port: int, cert: Path, key: Path, ca: Path, lookup: LogLookup) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"   # the body ends when the connection closes (follow streams)

        def log_message(self, fmt, *args):  # quiet: the agent logs what matters
            pass

        def _peer_allowed(self) -> bool:
            cert_info = self.connection.getpeercert() or {}
            cn = dict(x[0] for x in cert_info.get("subject", ())).get("commonName")
            return cn == API_SERVER_CN

        def _send(self, code: int, text: str) -> None:
            body = (text + "\n").encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if not self._peer_allowed():
                return self._send(403, "forbidden: only the API server may call this node")
            url = urllib.parse.urlsplit(self.path)
            query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
            parts = url.path.strip("/").split("/")
            if parts == ["healthz"]:
                return self._send(200, "ok")
            if len(parts) != 4 or parts[0] != "containerLogs":
                return self._send(404, f"not found: {url.path}")
            _, ns, pod, container = parts
            previous = query.get("previous") in ("true", "1")
            found = lookup(ns, pod, container, previous)
            if found is None:
                what = "previous terminated container" if previous else "container"
                return self._send(404, f'{what} "{container}" in pod "{pod}" not found')
            path, running = found
            try:
                tail = int(query.get("tailLines", -1))
                limit = int(query.get("limitBytes", 0))
            except ValueError:
                return self._send(400, "tailLines and limitBytes must be integers")
            follow = query.get("follow") in ("true", "1") and not previous
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            try:
                data = path.read_bytes() if path.exists() else b""
                chunk = tail_bytes(data, tail)
                if limit > 0:
                    chunk = chunk[:limit]
                self.wfile.write(chunk)
                self.wfile.flush()
                offset = len(data)
                sent = len(chunk)
                while follow and (limit <= 0 or sent < limit):
                    alive = running()
                    with open(path, "rb") as fh:
                        fh.seek(offset)
                        more = fh.read()
                    if more:
                        if limit > 0:
                            more = more[:limit - sent]
                        self.wfile.write(more)
                        self.wfile.flush()
                        offset += len(more)
                        sent += len(more)
                    elif not alive:
                        break
                    else:
                        time.sleep(0.2)
            except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
                pass

    server = ThreadingHTTPServer((address, port), Handler)
    server.daemon_threads = True
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert), str(key))
    ctx.load_verify_locations(str(ca))
    ctx.verify_mode = ssl.CERT_REQUIRED
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    return server


def serve_in_background(server: ThreadingHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, name="kubelet-api", daemon=True)
    thread.start()
    return thread

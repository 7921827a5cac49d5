"""The HTTP server of the launcher's metrics port (/metrics, /ready): one thread and a selector,
whatever the number of clients.

The launcher is PID 1 and this port is reachable from the network (networkPolicy.metricsFrom):
a server that gives each connection a thread and waits on it without a timeout (the standard
library's and prometheus-client's) lets any client that connects and sends nothing hold a thread
for ever, and a few thousand such clients exhaust the pod's threads. Here one thread serves
every connection: it reads a request only as its bytes arrive, answers it at once (the WSGI app
reads the run tracker in memory: microseconds), and writes the answer as the client takes it.
Bounds: a connection that has not sent its whole request head within REQUEST_SECONDS, or not
taken its whole answer within REQUEST_SECONDS more, is closed; at most MAX_CONNECTIONS are open,
and a new one past that closes the one that has waited longest, so idle clients cannot lock
the kubelet's probe out. One request per connection (`Connection: close`), GET and HEAD only.
"""

from __future__ import annotations

import io
import selectors
import socket
import sys
import threading
import time
from collections.abc import Callable
from urllib.parse import unquote

REQUEST_SECONDS = 5.0  # to send the request head; as long again to take the answer
MAX_CONNECTIONS = 64
MAX_HEAD_BYTES = 8192
TICK_SECONDS = 0.5  # how often deadlines and shutdown are looked at


class _Connection:
    def __init__(self, sock: socket.socket, peer, now: float):
        self.sock = sock
        self.peer = peer
        self.deadline = now + REQUEST_SECONDS
        self.head = b""
        self.out = b""  # the answer, once the head is whole


class SelectorHTTPServer:
    """Serves a WSGI app on one listening socket; serve_forever() in one thread, shutdown() from
    another (the socketserver interface the launcher and its tests use)."""

    def __init__(self, address: tuple[str, int], family: int, app: Callable):
        self.app = app
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.socket.bind(address)
            self.socket.listen(128)
        except OSError:
            self.socket.close()
            raise
        self.socket.setblocking(False)
        self.server_address = self.socket.getsockname()
        self.connections: dict[socket.socket, _Connection] = {}
        self._stop = threading.Event()
        self._stopped = threading.Event()

    # -- the socketserver interface ------------------------------------------------------
    def serve_forever(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self.socket, selectors.EVENT_READ)
            try:
                while not self._stop.is_set():
                    for key, events in selector.select(TICK_SECONDS):
                        if key.fileobj is self.socket:
                            self._accept(selector)
                        else:
                            self._serve(selector, self.connections.get(key.fileobj), events)
                    self._expire(selector, time.monotonic())
            finally:
                for connection in list(self.connections.values()):
                    self._close(selector, connection)
                self._stopped.set()

    def shutdown(self) -> None:
        self._stop.set()
        self._stopped.wait()

    def server_close(self) -> None:
        self.socket.close()

    # -- connections -------------------------------------------------------------------------
    def _accept(self, selector) -> None:
        try:
            sock, peer = self.socket.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            return
        if len(self.connections) >= MAX_CONNECTIONS:  # the one that has waited longest makes room
            self._close(selector, min(self.connections.values(), key=lambda c: c.deadline))
        sock.setblocking(False)
        connection = _Connection(sock, peer, time.monotonic())
        self.connections[sock] = connection
        selector.register(sock, selectors.EVENT_READ)

    def _serve(self, selector, connection: _Connection | None, events: int) -> None:
        if connection is None:
            return
        try:
            if events & selectors.EVENT_READ and not connection.out:
                data = connection.sock.recv(4096)
                if not data:
                    self._close(selector, connection)
                    return
                connection.head += data
                if b"\r\n\r\n" in connection.head:
                    connection.out = self._answer(connection)
                    connection.deadline = time.monotonic() + REQUEST_SECONDS
                    selector.modify(connection.sock, selectors.EVENT_WRITE)
                elif len(connection.head) > MAX_HEAD_BYTES:
                    connection.out = _response("431 Request Header Fields Too Large", [], b"")
                    selector.modify(connection.sock, selectors.EVENT_WRITE)
                return
            if events & selectors.EVENT_WRITE and connection.out:
                sent = connection.sock.send(connection.out)
                connection.out = connection.out[sent:]
                if not connection.out:
                    self._close(selector, connection)
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self._close(selector, connection)

    def _expire(self, selector, now: float) -> None:
        for connection in [c for c in self.connections.values() if c.deadline <= now]:
            self._close(selector, connection)

    def _close(self, selector, connection: _Connection) -> None:
        self.connections.pop(connection.sock, None)
        try:
            selector.unregister(connection.sock)
        except (KeyError, ValueError):
            pass
        connection.sock.close()

    # -- one request -------------------------------------------------------------------------
    def _answer(self, connection: _Connection) -> bytes:
        head = connection.head.split(b"\r\n\r\n", 1)[0].decode("latin-1")
        lines = head.split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return _response("400 Bad Request", [], b"")
        method, target, protocol = parts
        if method not in ("GET", "HEAD"):
            return _response("405 Method Not Allowed", [("Allow", "GET, HEAD")], b"")
        path, _, query = target.partition("?")
        environ = {
            "REQUEST_METHOD": method,
            "PATH_INFO": unquote(path, "latin-1"),
            "QUERY_STRING": query,
            "SERVER_PROTOCOL": protocol,
            "SERVER_NAME": "tfmw",
            "SERVER_PORT": str(self.server_address[1]),
            "REMOTE_ADDR": str(connection.peer[0]),
            "SCRIPT_NAME": "",
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": "http",
            "wsgi.input": io.BytesIO(),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": False,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
        }
        for line in lines[1:]:
            name, _, value = line.partition(":")
            key = name.strip().upper().replace("-", "_")
            if key and key not in ("CONTENT_TYPE", "CONTENT_LENGTH"):
                environ[f"HTTP_{key}"] = value.strip()
        started: list = []

        def start_response(status, headers, exc_info=None):
            started[:] = [status, headers]

        try:
            body = b"".join(self.app(environ, start_response))
        except Exception as err:  # a broken scrape must not end the server: answer 500
            return _response("500 Internal Server Error", [], f"{type(err).__name__}: {err}\n".encode())
        status, headers = started
        return _response(status, headers, b"" if method == "HEAD" else body, length=len(body))


def _response(status: str, headers: list, body: bytes, length: int | None = None) -> bytes:
    kept = [(k, v) for k, v in headers if k.lower() not in ("content-length", "connection")]
    lines = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in kept)]
    lines += [f"Content-Length: {len(body) if length is None else length}", "Connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body

"""entrypoint.httpserve, the metrics port's server, as a local process serves it: clients that
connect and send nothing, or a request's first bytes and then nothing, neither hold a thread
nor lock out the kubelet's /ready or a scrape of /metrics; each is closed at its deadline; bad
requests get an answer, not a hang."""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from entrypoint import httpserve
from entrypoint.lifecycle import Phase, fresh
from entrypoint.metrics import RunCollector, serve
from entrypoint.tracker import RunTracker


class _Recorder:
    def record(self, *a, **kw):
        pass

    def event(self, *a, **kw):
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server():
    """serve() as the launcher calls it, with a tracker whose group trains: (port, tracker)."""
    tracker = RunTracker(
        fresh("r1", "rev", "2026-12-02T00:00:00Z"), _Recorder(), is_chief=False, worker_index=1, log=lambda _: None
    )
    tracker.transition(Phase.RUNNING)
    tracker.attempt_started()
    tracker.beat(3, "train")
    port = _free_port()
    running = serve(port, RunCollector(tracker, worker=1, role="worker"), log=pytest.fail, ready=tracker.ready)
    yield port, running
    running.shutdown()
    running.server_close()


def _get(port: int, path: str, timeout: float = 2.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def _raw(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=3) as s:
        s.sendall(request)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def _connect(port: int, send: bytes = b"") -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=3)
    if send:
        s.sendall(send)
    return s


def test_idle_and_slow_clients_neither_take_threads_nor_lock_out_ready_and_metrics(server):
    port, _ = server
    threads = threading.active_count()  # the test's own, and the server's one thread
    # Three times the connections the server keeps open: idle, and a request's first bytes only.
    slow = [_connect(port) for _ in range(3 * httpserve.MAX_CONNECTIONS)]
    slow += [_connect(port, b"GET /metr") for _ in range(20)]
    try:
        time.sleep(0.5)  # the server has accepted what it could
        assert threading.active_count() == threads
        for path, expected in (("/ready", "the group trains\n"), ("/metrics", "tfmw_phase")):
            started = time.monotonic()
            status, body = _get(port, path)
            assert status == 200 and expected in body, (path, status, body[:200])
            assert time.monotonic() - started < 1.0, path  # within the kubelet's default probe timeout
        assert threading.active_count() == threads
    finally:
        for s in slow:
            s.close()


def test_a_client_that_sends_nothing_is_closed_at_its_deadline(server, monkeypatch):
    port, running = server
    monkeypatch.setattr(httpserve, "REQUEST_SECONDS", 0.5)
    with _connect(port) as idle, _connect(port, b"GET /ready HTTP/1.1\r\nHost: x\r\n") as partial:
        started = time.monotonic()
        assert idle.recv(1) == b"" and partial.recv(1) == b""  # closed by the server, not the timeout
        assert time.monotonic() - started < 2.5
    assert _get(port, "/ready")[0] == 200
    # The client has its answer before the server's thread has dropped the connection: wait for it.
    deadline = time.monotonic() + 2
    while running.connections and time.monotonic() < deadline:
        time.sleep(0.01)
    assert running.connections == {}


def test_bad_requests_get_an_answer(server):
    port, _ = server
    assert _raw(port, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").startswith(b"HTTP/1.1 405 ")
    assert _raw(port, b"nonsense\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    start = b"GET /metrics HTTP/1.1\r\nX-Pad: "  # a head past the limit, never ended
    too_long = start + b"a" * (httpserve.MAX_HEAD_BYTES + 100 - len(start))
    assert _raw(port, too_long).startswith(b"HTTP/1.1 431 ")
    head = _raw(port, b"HEAD /ready HTTP/1.1\r\nHost: x\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and head.endswith(b"\r\n\r\n")  # headers, no body
    assert b"Content-Length: 17\r\n" in head and b"Connection: close\r\n" in head


def test_a_failing_app_is_a_500_and_the_server_goes_on():
    calls = []

    def app(environ, start_response):
        calls.append(environ["PATH_INFO"])
        if environ["PATH_INFO"] == "/boom":
            raise RuntimeError("broken collector")
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok\n"]

    running = httpserve.SelectorHTTPServer(("127.0.0.1", 0), socket.AF_INET, app)
    threading.Thread(target=running.serve_forever, daemon=True).start()
    port = running.server_address[1]
    try:
        assert _get(port, "/boom") == (500, "RuntimeError: broken collector\n")
        assert _get(port, "/a%20b") == (200, "ok\n")
    finally:
        running.shutdown()
        running.server_close()
    assert calls == ["/boom", "/a b"]

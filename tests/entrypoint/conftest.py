"""Fixtures for the launcher's tests: a real HTTPS server on 127.0.0.1 (fakeapi) for its API
client, and the test process's signal handlers kept as they were."""

from __future__ import annotations

import signal
import tempfile

import pytest

from tfmw.devcluster.fakeapi import FakeAPI, make_certificate


@pytest.fixture(scope="session")
def server_cert(tmp_path_factory):
    return make_certificate(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def fake_api(tmp_path, server_cert):
    cert, key = server_cert
    api = FakeAPI(
        api_dir=tmp_path / "api",
        cert=cert,
        key=key,
        configmaps={"train-status": {"data": {}, "rv": 1}},
        replicas={"train": 2},
    )
    yield api
    api.close()


@pytest.fixture(autouse=True)
def _signal_handlers_kept():
    """A launcher run in this process takes SIGTERM and SIGINT over (the pod's PID 1 must:
    entrypoint.stopsignal) and keeps them: the test process gets its own back after each test,
    so a Ctrl-C (and the suite's side lane's stop, tests/support/lanes.py) still stops it."""
    kept = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield
    for sig, handler in kept.items():
        if signal.getsignal(sig) is not handler and handler is not None:
            signal.signal(sig, handler)


@pytest.fixture(autouse=True)
def _own_temporary_directory(tmp_path_factory, monkeypatch):
    """A launcher run in this process removes training scratch from its temporary directory before
    each attempt (entrypoint.scratch): a test's own, never the machine's /tmp, where a trainer of a
    test running beside it may be saving. Beside the test's tmp_path, not in it: a test may assert
    what its tmp_path holds."""
    own = tmp_path_factory.mktemp("launcher-tmp")
    monkeypatch.setattr(tempfile, "tempdir", str(own))

"""Fixtures for the launcher's API client tests: a real HTTPS server on 127.0.0.1 (fakeapi)."""

from __future__ import annotations

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

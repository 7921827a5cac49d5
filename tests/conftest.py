"""Shared test fixtures (the repo, a loopback listener), the suite's order and its two lanes."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from repo import REPO
from testorder import run_order

from tfmw.chart.helmkit import ToolError, find_helm

# The suite's two lanes (tests/support/lanes.py): its hooks split the run once it is sorted.
pytest_plugins = ["lanes"]


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture()
def listener():
    """A loopback TCP port that accepts connections, standing in for a worker's gRPC server."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield server.getsockname()[1]
    server.close()


@pytest.fixture()
def refused_port():
    """A loopback port bound but never listening: a connection there is refused."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    yield closed.getsockname()[1]
    closed.close()


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: run_order({m.name for m in item.iter_markers()}))


@pytest.fixture(scope="session")
def helm_path() -> str:
    """The pinned helm (the image and lint tests render with it)."""
    try:
        return find_helm()
    except ToolError as error:
        pytest.fail(str(error))  # a missing tool fails, never skips

"""Shared by the image and lint tests: the pinned helm."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tfmw.chart.helmkit import ToolError, find_helm


@pytest.fixture(scope="session")
def helm_path() -> str:
    try:
        return find_helm()
    except ToolError as error:
        pytest.fail(str(error))  # a missing tool fails, never skips

"""Shared by the image and lint tests: the repo root on sys.path, the pinned helm."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:  # `import scripts.*` also under a bare `pytest`
    sys.path.insert(0, str(REPO_ROOT))

from scripts.helmkit import ToolError, find_helm  # noqa: E402  (needs the sys.path line above)


@pytest.fixture(scope="session")
def helm_path() -> str:
    try:
        return find_helm()
    except ToolError as error:
        pytest.fail(str(error))  # a missing tool fails, never skips

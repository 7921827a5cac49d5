"""Shared helpers for the image and lint tests: the repo root, the pinned tools."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:  # `import scripts.*` also under a bare `pytest`
    sys.path.insert(0, str(REPO_ROOT))


def helm_binary() -> str:
    return os.environ.get("HELM") or str(REPO_ROOT / ".tools" / "bin" / "helm")


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT

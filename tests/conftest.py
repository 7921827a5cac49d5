"""Shared test helpers: where the repo, the venv's python and the pinned helm are."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def helm_bin() -> str:
    helm = os.environ.get("HELM") or str(REPO / ".tools" / "bin" / "helm")
    if not Path(helm).is_file():
        pytest.fail(f"helm not found at {helm}: run `make setup`")  # a missing tool is a failure, not a skip
    return helm

"""Shared by the image and lint tests: the repo root on sys.path, the pinned helm."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:  # `import scripts.*` also under a bare `pytest`
    sys.path.insert(0, str(REPO_ROOT))


@pytest.fixture(scope="session")
def helm_path() -> str:
    helm = os.environ.get("HELM") or str(REPO_ROOT / ".tools" / "bin" / "helm")
    if not Path(helm).is_file():
        pytest.fail(f"helm not found at {helm}: run `make setup`")  # a missing tool fails, never skips
    return helm

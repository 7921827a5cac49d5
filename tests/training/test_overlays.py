"""Every training.config shipped in the chart and its overlays passes the trainer's schema."""
from __future__ import annotations

import glob
import os

import pytest
import yaml

from entrypoint.training.config import validate

from .workers import REPO

VALUES_FILES = sorted(glob.glob(os.path.join(REPO, "values", "*.yaml"))
                      + glob.glob(os.path.join(REPO, "charts", "*", "values.yaml")))


def test_there_are_values_files_to_check():
    assert any(path.endswith("local.yaml") for path in VALUES_FILES), VALUES_FILES


@pytest.mark.parametrize("path", VALUES_FILES, ids=[os.path.relpath(p, REPO) for p in VALUES_FILES])
def test_shipped_training_config_is_valid(path):
    with open(path, encoding="utf-8") as f:
        values = yaml.safe_load(f) or {}
    config = (values.get("training") or {}).get("config")
    validate(config or {})  # raises ConfigError naming the key

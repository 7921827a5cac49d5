"""scripts/tfmw/bench/checkpoint_save.py for real (slow): TensorFlow's sync and async checkpoint
saves of the trainer's own model, one line per model with every field measured."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from repo import REPO


@pytest.mark.slow
def test_sync_and_async_saves_are_measured_per_model(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "tfmw.bench.checkpoint_save", "mlp=784"],
        cwd=REPO,
        env=dict(os.environ, TMPDIR=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    [line] = [entry for entry in proc.stdout.splitlines() if entry.startswith("tfmw bench checkpoint=")]
    result = json.loads(line.split("=", 1)[1])
    assert result["model"] == "mlp" and result["bytes"] > 50_000 * 4  # the weights and Adam's two slots
    assert 0 < result["async_return_s"] <= result["async_written_s"] and result["sync_s"] > 0
    assert not list(tmp_path.glob("tfmw-bench-ckpt-*"))  # its checkpoints are removed afterwards

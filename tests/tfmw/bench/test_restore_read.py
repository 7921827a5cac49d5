"""scripts/tfmw/bench/restore_read.py: the arithmetic of a restore's bytes (pure), and the two
ways measured for real with two MWMS workers (slow): both restore the same values."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from repo import REPO

from tfmw.bench.restore_read import broadcast_bytes, shared_read_bytes

GB = 10**9


def test_at_1024_workers_every_worker_reads_a_terabyte_the_chief_one_gigabyte():
    assert shared_read_bytes(1024, GB, chief_only=False) == 1024 * GB
    assert shared_read_bytes(1024, GB, chief_only=True) == GB
    assert broadcast_bytes(1024, GB) == 1023 * GB  # the bytes move over the network instead
    assert broadcast_bytes(1, GB) == 0


@pytest.mark.slow
def test_both_ways_are_measured_and_restore_the_same_values(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "tfmw.bench.restore_read", "--workers", "2", "--rounds", "1", "mlp=28,28:hidden=64"],
        cwd=REPO,
        env=dict(os.environ, TMPDIR=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-2000:]
    [line] = [entry for entry in proc.stdout.splitlines() if entry.startswith("tfmw bench restore=")]
    result = json.loads(line.split("=", 1)[1])
    assert result["workers"] == 2 and result["bytes"] > (784 * 64 + 64 * 10) * 4 * 3  # weights + Adam's 2 slots
    assert len(result["every_all"]) == len(result["chief_all"]) == 1 and result["every_s"] > 0 < result["chief_s"]
    assert not list(tmp_path.glob("tfmw-bench-restore-*"))  # its checkpoint is removed afterwards

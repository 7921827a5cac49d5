"""The run directory's files (entrypoint.rundir): the COMPLETED marker, written by the trainer
or the launcher and read by both, atomic writes, and the heartbeat file."""

from __future__ import annotations

import json
import os

import pytest

from entrypoint.rundir import (
    COMPLETED_KEYS,
    Heartbeat,
    RunDir,
    read_beat,
    read_completed,
    write_atomic,
    write_completed,
)


def test_write_atomic_replaces_whole_file_and_leaves_no_temp(tmp_path):
    target = tmp_path / "sub" / "f.txt"
    write_atomic(str(target), "one")
    write_atomic(str(target), "two")
    assert target.read_text() == "two"
    assert os.listdir(target.parent) == ["f.txt"]


def test_completed_marker_roundtrip_and_unreadable_counts_as_done(tmp_path):
    run = RunDir.of(str(tmp_path), "r")
    assert read_completed(run) is None
    write_completed(run, {"steps": 3, "finalLoss": None}, now=1_800_000_000)
    record = {"steps": 3, "finalLoss": None, "finishedAt": "2027-01-15T08:00:00Z"}
    assert json.loads(open(run.completed).read()) == record
    assert read_completed(run) == record
    open(run.completed, "w").write("{trunc")
    assert read_completed(run) == {}
    open(run.completed, "w").write("[1, 2]")  # made by hand: any JSON still means done
    assert read_completed(run) == {}


def test_completed_has_one_key_spelling(tmp_path):
    run = RunDir.of(str(tmp_path), "r")
    with pytest.raises(ValueError, match="final_loss"):
        write_completed(run, {"steps": 3, "final_loss": 0.5})
    with pytest.raises(ValueError):
        write_completed(run, {"steps": 3, "finalLoss": float("nan")})  # strict JSON
    assert read_completed(run) is None and all("_" not in key for key in COMPLETED_KEYS)


def test_a_marker_an_older_launcher_wrote_reads_with_todays_keys(tmp_path):
    run = RunDir.of(str(tmp_path), "r")
    write_atomic(
        run.completed, json.dumps({"by": "launcher", "command": "python x.py", "finished_at": "2026-11-30T10:00:00Z"})
    )
    assert read_completed(run) == {"by": "launcher", "command": "python x.py", "finishedAt": "2026-11-30T10:00:00Z"}


def test_heartbeat_is_throttled_and_atomic(tmp_path):
    now = [100.0]
    path = tmp_path / "hb"
    beat = Heartbeat(str(path), interval=1.0, clock=lambda: now[0])
    assert beat.beat(1) is True
    assert beat.beat(2) is False  # within the interval
    now[0] += 1.5
    assert beat.beat(3) is True
    assert path.read_text() == "3 train\n" and read_beat(path) == (3, "train")
    assert beat.beat(4, force=True) is True
    assert read_beat(path) == (4, "train")
    assert beat.beat(4, phase="checkpoint") is True  # a phase change is written at once
    assert read_beat(path) == (4, "checkpoint")
    assert beat.beat(5) is True
    assert beat.beat(6) is False
    assert Heartbeat(None).beat(5) is False
    assert read_beat(tmp_path / "absent") is None

"""The run directory's files (entrypoint.rundir): the COMPLETED marker, written by the trainer
or the launcher and read by both, atomic writes, and the heartbeat file."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from entrypoint import rundir as rundir_module
from entrypoint.rundir import (
    COMPLETED_KEYS,
    Heartbeat,
    MarkerUnreadable,
    RunDir,
    completed_fields,
    marker_exists,
    marker_exists_retrying,
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


def test_completed_marker_roundtrip_and_any_content_counts_as_done(tmp_path):
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
    open(run.completed, "w").close()  # `touch COMPLETED`: done
    assert read_completed(run) == {}
    open(run.completed, "wb").write(b"\xff\xfe not utf-8")  # bytes were read: the marker is there
    assert read_completed(run) == {}
    assert marker_exists(Path(run.completed)) is True


def test_a_marker_that_cannot_be_read_is_neither_done_nor_absent(tmp_path, monkeypatch):
    run = RunDir.of(str(tmp_path), "r")
    os.makedirs(run.completed)  # a fault root can make: open() fails with EISDIR
    with pytest.raises(MarkerUnreadable, match=r"cannot read .*COMPLETED \(IsADirectoryError: Is a directory\)"):
        read_completed(run)
    with pytest.raises(MarkerUnreadable):
        marker_exists(Path(run.completed))  # the launcher's question gets the same answer
    os.rmdir(run.completed)
    write_completed(run, {"steps": 3})

    def eio(path, *args, **kwargs):  # NFS: a stale handle or an I/O error on a present file
        raise OSError(errno.EIO, "Input/output error", path)

    monkeypatch.setattr(rundir_module, "open", eio, raising=False)
    with pytest.raises(MarkerUnreadable, match=r"OSError: Input/output error.*fix the shared storage"):
        read_completed(run)
    assert completed_fields(Path(run.root)) == {}  # only shown: never raises
    # Absent (the file, or a directory on its path) is simply "no", never unknown.
    monkeypatch.undo()
    (tmp_path / "file").write_text("x")
    assert read_completed(RunDir(str(tmp_path / "file" / "r"))) is None
    assert read_completed(RunDir(str(tmp_path / "nothing"))) is None


def test_the_launcher_retries_an_unreadable_marker_then_fails_closed(tmp_path, monkeypatch):
    marker = tmp_path / "COMPLETED"
    reads, said, waited = [], [], []
    now = [0.0]

    def wait(seconds):
        waited.append(seconds)
        now[0] += seconds
        return False

    def flaky(path, *args, **kwargs):  # two EIOs, then the storage is back
        reads.append(path)
        if len(reads) <= 2:
            raise OSError(errno.EIO, "Input/output error", path)
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)

    monkeypatch.setattr(rundir_module, "open", flaky, raising=False)
    assert marker_exists_retrying(marker, 60, wait, said.append, clock=lambda: now[0]) is False
    assert waited == [0.5, 1.0] and len(said) == 1 and "Input/output error" in said[0] and "retrying" in said[0]

    def stale(path, *args, **kwargs):  # the storage never comes back: the error, once the time is up
        raise OSError(errno.ESTALE, "Stale file handle", path)

    monkeypatch.setattr(rundir_module, "open", stale, raising=False)
    now[0], waited[:] = 0.0, []
    with pytest.raises(MarkerUnreadable, match="Stale"):
        marker_exists_retrying(marker, 5, wait, said.append, clock=lambda: now[0])
    assert sum(waited) == pytest.approx(5.0)
    with pytest.raises(MarkerUnreadable):  # stopped while waiting: no more tries
        marker_exists_retrying(marker, 60, lambda seconds: True, said.append)


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

"""CheckpointWriter's background saves in one process (slow: imports TensorFlow): a save that is
not published fails the attempt, retryably, with its cause on one line."""

from __future__ import annotations

import os

import pytest
import tensorflow as tf

from entrypoint.cluster import Cluster
from entrypoint.rundir import RunDir
from entrypoint.training.failures import error_summary, is_retryable

pytestmark = pytest.mark.slow


def writer_for(tmp_path):
    from entrypoint.training.trainer import CheckpointWriter

    run = RunDir(str(tmp_path / "run"))
    os.makedirs(run.checkpoints, exist_ok=True)
    ckpt = tf.train.Checkpoint(v=tf.Variable(tf.zeros([256])), step=tf.Variable(0, dtype=tf.int64))
    return CheckpointWriter(ckpt, run, Cluster(1, 0), keep=2, kept=[], background=True), run


def state(run) -> str:
    path = os.path.join(run.checkpoints, "checkpoint")
    return open(path).read() if os.path.exists(path) else ""


def test_background_saves_are_published_in_order_and_retire_the_oldest(tmp_path, capfd):
    writer, run = writer_for(tmp_path)
    for step in (10, 20, 30):
        assert writer.save(step) >= 0
    writer.finish()
    assert 'model_checkpoint_path: "ckpt-30"' in state(run) and "ckpt-10" not in state(run)
    assert not any(name.startswith("ckpt-10") for name in os.listdir(run.checkpoints))
    saved = [line for line in capfd.readouterr().out.splitlines() if line.startswith("tfmw checkpoint saved")]
    assert [line.split()[3] for line in saved] == ["step=10", "step=20", "step=30"]
    assert all("write_seconds=" in line and "age_seconds=" in line for line in saved)


def fail_publish(monkeypatch):
    from entrypoint.training import trainer

    def disk_full(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(trainer.checkpoint_management, "update_checkpoint_state_internal", disk_full)


def test_an_unpublished_last_save_fails_the_attempt_retryably_before_anyone_leaves(tmp_path, monkeypatch):
    writer, run = writer_for(tmp_path)
    fail_publish(monkeypatch)
    writer.save(10)
    with pytest.raises(Exception) as caught:
        writer.finish()
    assert is_retryable(caught.value)
    summary = error_summary(caught.value)
    assert "checkpoint ckpt-10 was not published: OSError" in summary and "No space left" in summary
    assert "\n" not in summary and state(run) == ""


def test_an_unpublished_save_fails_the_attempt_at_the_next_boundary(tmp_path, monkeypatch):
    writer, _ = writer_for(tmp_path)
    fail_publish(monkeypatch)
    writer.save(10)
    with pytest.raises(Exception, match="ckpt-10 was not published") as caught:
        writer.save(20)
    assert is_retryable(caught.value)
    writer.close()

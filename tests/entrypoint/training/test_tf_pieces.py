"""In-process TensorFlow pieces: input pipelines, models by name, checkpoint restore (slow: imports TF)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import tensorflow as tf

from entrypoint.training import prepare_digits
from entrypoint.training.config import ConfigError, merge_defaults
from entrypoint.training.data import build_input
from entrypoint.training.failures import TrainingError
from entrypoint.training.models import build_model

pytestmark = pytest.mark.slow


def files_config(path, fmt, shuffle=0):
    return merge_defaults(
        {"data": {"source": "files", "path": str(path), "format": fmt, "numClasses": 10, "shuffleBuffer": shuffle}}
    )


def first_labels(spec, batch, count, start_step=0):
    ds = spec.dataset_fn(batch, start_step).unbatch().take(count)
    return [int(y) for _, y in ds]


@pytest.mark.parametrize("fmt", ["npz", "tfrecord"])
def test_fewer_files_than_workers_shards_by_data_disjointly(tmp_path, fmt):
    x, y, _, _ = prepare_digits.split_digits()
    x, y = x[:90], y[:90]
    prepare_digits.write_shards(str(tmp_path), "train", x, y, 1, fmt)
    config = files_config(tmp_path, fmt)
    specs = [build_input(config, "/", 2, i) for i in range(2)]
    assert [s.examples_per_worker for s in specs] == [45, 45]
    assert specs[0].input_shape == (8, 8) and specs[0].num_classes == 10
    assert specs[0].describe == f"{fmt}(files=1/1,shard_by=data)"
    assert first_labels(specs[0], 5, 45) == [int(v) for v in y[0::2]]  # every 2nd example, in order
    assert first_labels(specs[1], 5, 45) == [int(v) for v in y[1::2]]


def test_restart_continues_the_same_shuffled_sequence(tmp_path):
    x, y, _, _ = prepare_digits.split_digits()
    prepare_digits.write_shards(str(tmp_path), "train", x[:200], y[:200], 2, "npz")
    spec = build_input(files_config(tmp_path, "npz", shuffle=64), "/", 1, 0)
    whole = first_labels(spec, 10, 100)
    assert first_labels(spec, 10, 70, start_step=3) == whole[30:]


@pytest.mark.parametrize("cache", [False, True])
def test_a_truncated_tfrecord_fails_once_at_the_start_cached_or_not(tmp_path, cache):
    x, y, _, _ = prepare_digits.split_digits()
    (shard,) = prepare_digits.write_shards(str(tmp_path), "train", x[:40], y[:40], 1, "tfrecord")
    with open(shard, "r+b") as fh:  # the last record is cut short
        fh.truncate(fh.seek(0, 2) - 100)
    config = files_config(tmp_path, "tfrecord")
    config["data"]["cache"] = cache
    with pytest.raises(TrainingError, match="data.path: a TFRecord file of .* is corrupt or truncated"):
        build_input(config, "/", 1, 0)


def test_no_files_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="data.path: no npz files at"):
        build_input(files_config(tmp_path, "npz"), "/", 1, 0)


@pytest.mark.parametrize(
    "name,shape,args",
    [
        ("cnn", (28, 28), {}),
        ("cnn", (8, 8, 1), {"filters": 4}),
        ("mlp", (8, 8), {"hidden": 16, "layers": 2}),
        ("resnet", (16, 16, 3), {"width": 8, "blocks": 1, "stages": 2}),
    ],
)
def test_builtin_models_output_logits(name, shape, args):
    model = build_model(name, shape, 7, args)
    assert model(np.zeros((2, *shape), np.float32)).shape == (2, 7)


def test_user_model_by_module_and_function(tmp_path, monkeypatch):
    (tmp_path / "my_models.py").write_text(
        "import tf_keras as keras\n"
        "def tiny(input_shape, num_classes, units=4):\n"
        "    return keras.Sequential([keras.Input(input_shape), keras.layers.Flatten(),\n"
        "                             keras.layers.Dense(units), keras.layers.Dense(num_classes)])\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    model = build_model("my_models:tiny", (3, 3), 5, {"units": 2})
    assert model(np.zeros((1, 3, 3), np.float32)).shape == (1, 5)
    with pytest.raises(ConfigError, match=r"model.args: my_models:tiny: .*unexpected keyword argument 'depth'"):
        build_model("my_models:tiny", (3, 3), 5, {"depth": 2})
    with pytest.raises(ConfigError, match="model.name: 'my_models' has no function 'nope'"):
        build_model("my_models:nope", (3, 3), 5, {})
    with pytest.raises(ConfigError, match="model.name: cannot import module 'not_a_module_xyz'"):
        build_model("not_a_module_xyz:f", (3, 3), 5, {})
    sys.modules.pop("my_models", None)


def test_restore_skips_a_listed_checkpoint_whose_files_are_broken(tmp_path):
    from entrypoint.training.trainer import restore_latest

    v = tf.Variable(0.0)
    ckpt = tf.train.Checkpoint(v=v, step=tf.Variable(0, dtype=tf.int64))
    manager = tf.train.CheckpointManager(ckpt, str(tmp_path), max_to_keep=3)
    for step in (10, 20):
        v.assign(float(step))
        ckpt.step.assign(step)
        manager.save(checkpoint_number=step)
    # A half-written newest checkpoint: the data file is truncated.
    data = tmp_path / "ckpt-20.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[:3])
    v.assign(-1.0)
    assert restore_latest(ckpt, str(tmp_path), is_chief=True).step == 10
    assert float(v.numpy()) == 10.0


def test_restore_without_checkpoints_starts_at_zero(tmp_path):
    from entrypoint.training.trainer import restore_latest

    ckpt = tf.train.Checkpoint(step=tf.Variable(0, dtype=tf.int64))
    assert restore_latest(ckpt, str(tmp_path), is_chief=True).step == 0


def test_nccl_without_gpus_is_a_config_error():
    from entrypoint.training.trainer import make_strategy

    with pytest.raises(ConfigError, match="collective: nccl needs GPUs but none are visible"):
        make_strategy({"collective": "nccl", "allReduceDtype": "float32", "timeoutSeconds": None})


def test_steps_for_epochs_rounds_up_and_is_at_least_one():
    from entrypoint.training.trainer import steps_for_epochs

    assert steps_for_epochs(14, 1438, 64) == 315
    assert steps_for_epochs(1, 64, 64) == 1
    assert steps_for_epochs(1, 10, 64) == 1


def test_file_data_over_the_batch_limit_is_a_config_error(tmp_path):
    # Issue 12: the shape of file data is known only once read; the same limits apply then.
    np.savez(tmp_path / "big.npz", x=np.zeros((2, 1024, 1024), np.float32), y=np.zeros(2, np.int64))
    config = files_config(tmp_path, "npz")
    config["batchSizePerReplica"] = 1024
    with pytest.raises(
        ConfigError,
        match=r"batchSizePerReplica: 1024 examples of shape \[1024, 1024\] are "
        r"4294967296 bytes per replica batch, more than the limit of 2147483648",
    ):
        build_input(config, "/", 1, 0)


def _leaving_session(tmp_path, is_chief):
    from types import SimpleNamespace

    from entrypoint.cluster import Cluster
    from entrypoint.rundir import RunDir

    cluster = Cluster(num_workers=2, worker_index=0 if is_chief else 1)
    return SimpleNamespace(cluster=cluster, config=merge_defaults({}), run=RunDir.of(str(tmp_path), "r"))


@pytest.mark.parametrize("is_chief", [True, False])
def test_a_group_broken_at_the_finished_barrier_is_retryable_and_a_stop_only_logs(
    tmp_path, monkeypatch, capsys, is_chief
):
    from tensorflow.python.eager import context

    from entrypoint.training import leaving, trainer
    from entrypoint.training.failures import is_retryable

    calls = []

    def broken(barrier, timeout_ms):
        calls.append((barrier, timeout_ms))
        raise tf.errors.UnavailableError(None, None, "task 1 heartbeat timeout")

    monkeypatch.setattr(context.context(), "wait_at_barrier", broken)
    monkeypatch.setattr(leaving, "MARKER_WAIT_SECONDS", 0.0)
    session = _leaving_session(tmp_path, is_chief)
    with pytest.raises(tf.errors.UnavailableError) as raised:
        trainer.leave_together(session, leaving.FINISHED)
    assert is_retryable(raised.value) and "heartbeat timeout" in str(raised.value)
    trainer.leave_together(session, leaving.STOPPED)  # saved by every worker: nothing to retry
    assert "leaving=tfmw-stopped" in capsys.readouterr().out
    assert calls == [("tfmw-finished", 86_400_000), ("tfmw-stopped", 86_400_000)]

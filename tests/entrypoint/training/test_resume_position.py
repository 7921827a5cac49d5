"""A start at step S is the uninterrupted stream from S on, at a cost that does not grow with S
(slow: real tf.data)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf
from workers import REPO, base_env, parse_line

from entrypoint.training import data, positions, prepare_digits
from entrypoint.training.config import merge_defaults

pytestmark = pytest.mark.slow

BATCH = 4
REPLICAS = 2  # local replicas of one worker, simulated: a step is two batches of its stream
# How far the count of reads may move with thread timing (the run-ahead settles at a batch or two
# more or less on a loaded machine); a replayed start would read hundreds of thousands more.
JITTER = 4 * BATCH


def synthetic_spec(shuffle=1024):
    config = merge_defaults(
        {"data": {"synthetic": {"examples": 46, "inputShape": [3], "numClasses": 3}, "shuffleBuffer": shuffle}}
    )
    return data.build_input(config, "/", 2, 1)  # worker 1 of 2: 23 examples, so batches span epochs


def tfrecord_config(path, shuffle, **more):
    more = {
        "source": "files",
        "path": str(path),
        "format": "tfrecord",
        "numClasses": 10,
        "shuffleBuffer": shuffle,
        **more,
    }
    return merge_defaults({"data": more})


def tfrecord_spec(tmp_path, shuffle, cache=False):
    x, y, _, _ = prepare_digits.split_digits()
    prepare_digits.write_shards(str(tmp_path), "train", x[:90], y[:90], 1, "tfrecord")
    # one file, shared by data: 45 records, blocks of 8 end short
    return data.build_input(tfrecord_config(tmp_path, shuffle, cache=cache), "/", 2, 0)


def batches(spec, start_batch, count):
    return [(bx.numpy(), by.numpy()) for bx, by in spec.dataset_fn(BATCH, start_batch).take(count)]


def assert_suffix(spec, whole, step):
    start = positions.batches_consumed(step, REPLICAS)
    resumed = batches(spec, start, len(whole) - start)
    assert len(resumed) == len(whole) - start > 0
    for (rx, ry), (wx, wy) in zip(resumed, whole[start:], strict=True):
        np.testing.assert_array_equal(rx, wx)
        np.testing.assert_array_equal(ry, wy)


@pytest.mark.parametrize("shuffle", [1024, 0])
def test_synthetic_resume_is_the_uninterrupted_suffix(shuffle):
    spec = synthetic_spec(shuffle)
    whole = batches(spec, 0, 40)  # 160 examples: about 7 epochs of 23
    for step in (1, 3, 6, 13):  # steps whose position falls inside an epoch, and past several
        assert_suffix(spec, whole, step)
    labels = [int(v) for _, y in whole[:6] for v in y]
    if shuffle:  # every epoch is a permutation of the share, and the next epoch's is another
        first, second = labels[:23], [int(v) for _, y in whole for v in y][23:46]
        assert sorted(first) == sorted(second) and first != second
    else:
        assert labels[:23] == [int(v) for v in spec_labels_in_order()]


def spec_labels_in_order():
    from entrypoint.training.synthetic import make_synthetic, shard_arrays

    x, y = make_synthetic(46, (3,), 3, merge_defaults({})["seed"])
    return shard_arrays(x, y, 2, 1)[1]


@pytest.mark.parametrize("shuffle", [8, 0])
def test_tfrecord_resume_is_the_uninterrupted_suffix(tmp_path, shuffle):
    spec = tfrecord_spec(tmp_path, shuffle)
    assert spec.examples_per_worker == 45
    whole = batches(spec, 0, 36)  # 144 records: three epochs and more
    for step in (1, 5, 6, 11, 17):  # inside epoch 0, across the boundaries at 45 and 90 records
        assert_suffix(spec, whole, step)
    epoch0 = [int(v) for _, y in whole for v in y][:45]
    epoch1 = [int(v) for _, y in whole for v in y][45:90]
    assert sorted(epoch0) == sorted(epoch1)
    assert (epoch0 != epoch1) == bool(shuffle)


def numbered_shards(path, files=4, per_file=12):
    """Example k is k in every value, label k % 10; file i holds examples i, i + files, ..."""
    n = files * per_file
    x = np.repeat(np.arange(n, dtype=np.float32)[:, None], 3, axis=1)
    prepare_digits.write_shards(str(path), "train", x, np.arange(n) % 10, files, "tfrecord")


def one_by_one(path):
    """Each file read on its own and parsed record by record: the reference the pipeline's
    parallel reads and batched parse must reproduce."""
    spec = {"x": tf.io.FixedLenFeature([3], tf.float32), "y": tf.io.FixedLenFeature([], tf.int64)}
    files = data.list_files(str(path), "tfrecord")
    parsed = [tf.io.parse_single_example(r, spec) for f in files for r in tf.data.TFRecordDataset(f)]
    return [(p["x"].numpy(), int(p["y"])) for p in parsed]


@pytest.mark.parametrize("parallelism,ids", [(1, "by file"), (2, "pairs"), (4, "in turn"), (9, "in turn")])
def test_tfrecord_files_are_read_in_parallel_in_a_fixed_turn(tmp_path, parallelism, ids):
    numbered_shards(tmp_path)
    spec = data.build_input(tfrecord_config(tmp_path, 0, readParallelism=parallelism), "/", 1, 0)
    files = [list(range(i, 48, 4)) for i in range(4)]  # the example ids in each file
    if ids == "by file":
        want = [k for f in files for k in f]
    elif ids == "pairs":  # two files at a time, one record of each in turn; then the next two
        want = [k for a, b in ((0, 1), (2, 3)) for pair in zip(files[a], files[b], strict=True) for k in pair]
    else:  # every file at once (more parallelism than files: the same order)
        want = list(range(48))
    reference = {int(x[0]): (x, y) for x, y in one_by_one(tmp_path)}
    got = batches(spec, 0, 12)  # one epoch exactly: 48 records in batches of 4
    examples = [(x, int(y)) for bx, by in got for x, y in zip(bx, by, strict=True)]
    assert [int(x[0]) for x, _ in examples] == want
    for x, y in examples:  # values and label as a record-by-record parse has them
        np.testing.assert_array_equal(x, reference[int(x[0])][0])
        assert y == reference[int(x[0])][1]


@pytest.mark.parametrize("shuffle", [10, 0])
def test_tfrecord_parallel_reads_and_cache_resume_exactly(tmp_path, shuffle):
    numbered_shards(tmp_path)
    # 3 of 4 files at once: the fourth takes the first free turn; blocks of 10 over 48 end short
    plain, cached = (
        data.build_input(tfrecord_config(tmp_path, shuffle, readParallelism=3, cache=c), "/", 1, 0)
        for c in (False, True)
    )
    assert plain.describe == "tfrecord(files=4/4,shard_by=file)"
    assert cached.describe == "tfrecord(files=4/4,shard_by=file,cached)"
    whole = batches(plain, 0, 30)  # 120 records: two epochs and a half
    for spec in (plain, cached):
        for step in (1, 5, 6, 11):  # inside epoch 0, across the boundaries at 48 and 96 records
            assert_suffix(spec, whole, step)
    for (cx, cy), (wx, wy) in zip(batches(cached, 0, 30), whole, strict=True):  # the cache: the same stream
        np.testing.assert_array_equal(cx, wx)
        np.testing.assert_array_equal(cy, wy)
    ids = [int(x[0]) for bx, _ in whole for x in bx]
    assert sorted(ids[:48]) == sorted(ids[48:96]) == list(range(48))
    assert (ids[:48] != ids[48:96]) == bool(shuffle)


@pytest.mark.parametrize("shuffle", [8, 0])
def test_tfrecord_cache_over_a_data_shard_is_the_same_stream(tmp_path, shuffle):
    whole = batches(tfrecord_spec(tmp_path, shuffle), 0, 24)
    cached = tfrecord_spec(tmp_path, shuffle, cache=True)
    assert cached.examples_per_worker == 45
    for (cx, cy), (wx, wy) in zip(batches(cached, 0, 24), whole, strict=True):
        np.testing.assert_array_equal(cx, wx)
        np.testing.assert_array_equal(cy, wy)
    assert_suffix(cached, whole, 7)


class Reads:
    """Counts the elements the pipeline reads at its source: with a parallelism and prefetch
    of 1 (tf.data.AUTOTUNE patched), the count settles once the first batch is out."""

    def __init__(self):
        self.count = tf.Variable(0, dtype=tf.int64)

    def counted(self, ds):
        def one(*element):
            with tf.control_dependencies([self.count.assign_add(1)]):
                return tf.nest.map_structure(tf.identity, element if len(element) > 1 else element[0])

        return ds.map(one)

    def to_first_batch(self, spec, start_batch) -> int:
        self.count.assign(0)
        it = iter(spec.dataset_fn(BATCH, start_batch))
        next(it)
        settled, seen = time.monotonic(), -1
        while time.monotonic() - settled < 1.0:
            now = int(self.count.numpy())
            if now != seen:
                settled, seen = time.monotonic(), now
            time.sleep(0.05)
        del it
        return seen


def test_start_cost_does_not_grow_with_the_step(tmp_path, monkeypatch):
    monkeypatch.setattr(tf.data, "AUTOTUNE", 1)
    reads = Reads()
    real_positions = data._positions
    monkeypatch.setattr(data, "_positions", lambda start: reads.counted(real_positions(start)))
    spec = synthetic_spec()
    near, far = (reads.to_first_batch(spec, positions.batches_consumed(s, REPLICAS)) for s in (0, 100_000))
    assert 0 < near <= 8 * BATCH  # the first batch and what runs ahead of it: nothing skipped
    assert abs(far - near) <= JITTER  # as much read at step 100,000 as at step 0 (replay: 800,000)

    spec = tfrecord_spec(tmp_path, 8)
    real_records = tf.data.TFRecordDataset
    monkeypatch.setattr(tf.data, "TFRecordDataset", lambda files: reads.counted(real_records(files)))
    # Step 3 = position 3 x 2 replicas x 4 = 24, index 24 of epoch 0; step 100,038 = position 800,304,
    # index 24 of epoch 17,784: the same remaining work in the epoch, 17,784 epochs further on.
    steps = (3, 100_038)
    where = [
        positions.epoch_and_index(positions.first_example(positions.batches_consumed(s, REPLICAS), BATCH), 45)
        for s in steps
    ]
    assert where == [(0, 24), (17_784, 24)]
    ahead = reads.to_first_batch(spec, 0)  # a fresh start: the first batch and what runs ahead of it
    near, far = (reads.to_first_batch(spec, positions.batches_consumed(s, REPLICAS)) for s in steps)
    # plus the epoch up to the position, whole blocks: at most the share and a block
    assert ahead < near <= ahead + 45 + 8 + JITTER
    assert abs(far - near) <= JITTER  # 17,784 epochs further on (replay: 800,304 records)


def train(tmp_path, run_id, steps):
    env = base_env({"TFMW_SHARED_DIR": str(tmp_path), "TFMW_RUN_ID": run_id})
    env.pop("TF_CONFIG", None)
    settings = ["model.name=mlp", "data.synthetic.inputShape=[8,8]", "data.synthetic.examples=200"]
    settings += ["batchSizePerReplica=48", "checkpoint.keep=5"]
    settings += ["export.enabled=false", "checkpoint.everySteps=10", f"steps={steps}"]
    cmd = [sys.executable, "-m", "entrypoint.training", *(w for s in settings for w in ("--set", s))]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_resumed_run_ends_with_the_uninterrupted_runs_weights(tmp_path):
    # 200 examples, batch 48: the checkpoint at step 30 is at example 1,440, part-way through epoch 7.
    whole = train(tmp_path, "whole", 40)
    shutil.copytree(tmp_path / "whole", tmp_path / "cut")
    checkpoints = tmp_path / "cut" / "checkpoints"
    os.remove(tmp_path / "cut" / "COMPLETED")
    for name in os.listdir(checkpoints):
        if name.startswith("ckpt-40."):
            os.remove(checkpoints / name)
    (checkpoints / "checkpoint").write_text('model_checkpoint_path: "ckpt-30"\n')
    resumed = train(tmp_path, "cut", 40)
    assert parse_line(resumed, "start")[0]["resume_step"] == "30"
    assert parse_line(resumed, "done")[0]["weights_digest"] == parse_line(whole, "done")[0]["weights_digest"]


def test_a_batch_of_positions_is_permuted_as_index_shuffle_permutes_each():
    # The in-memory stream permutes a batch at once with the op itself; the public wrapper, one
    # position at a time, is the definition.
    n, seed = 23, 43
    p = tf.range(0, 120, dtype=tf.int64)  # five epochs and more
    one_by_one = [
        int(tf.random.experimental.index_shuffle(q % n, tf.stack([tf.constant(seed, tf.int64), q // n]), n - 1))
        for q in p
    ]
    assert data._permuted(p % n, seed, p // n, n).numpy().tolist() == one_by_one
    assert sorted(one_by_one[:n]) == list(range(n)) and one_by_one[:n] != one_by_one[n : 2 * n]

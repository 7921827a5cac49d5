"""tf.data input pipelines: NPZ / TFRecord shards in shared storage, or synthetic data.

File formats (written by `python -m entrypoint.training.prepare_digits`):
- NPZ: arrays `x` (examples, *input_shape) float32 and `y` (examples,) integer labels.
- TFRecord: tf.train.Example with `x` (float list, flattened), `y` (int64), `shape` (int64 list).

Each worker reads its own part (entrypoint.training.sharding) as one endless stream whose order
is a fixed function of the worker's seed and the epoch (entrypoint.training.positions), batches it
per replica and prefetches with AUTOTUNE. A restart at step S starts the stream where S steps left
it, by arithmetic, not by reading and throwing away what was already trained on:
- in memory (synthetic, NPZ): example p is `x[index_shuffle(p % n, [seed, p // n], n - 1)]`, a full
  permutation of the share every epoch (tf.random.experimental.index_shuffle: stateless, computed
  per position); a start at any step costs the same.
- TFRecord (no random access: TFRecordDataset cannot seek to a record): the raw records of an epoch
  are permuted in consecutive blocks of `shuffleBuffer` records, each block by index_shuffle with its
  own seed; a start reads the current epoch's records up to the position, unparsed (at most one
  epoch of the share, whatever S is: the same order as the count every start already does).
  The raw records of the share come from `data.readParallelism` files at a time, one record of each
  in turn (a deterministic interleave: its order depends on that number, never on threads or
  timing), and a batch of them is parsed by one vectorized parse_example.
- TFRecord with `data.cache: true`: the pass that counts the share also parses it into memory; the
  stream then takes the same block-permuted order by arithmetic per position, as in memory.
"""

from __future__ import annotations

import io
import os
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from . import threads
from .config import ConfigError, check_example_size, data_path
from .failures import TrainingError, error_summary
from .positions import block_seed, blocks_per_epoch, epoch_and_index, first_example
from .sharding import ShardPlan, plan_shards
from .synthetic import make_synthetic, shard_arrays

EXTENSIONS = {"npz": ".npz", "tfrecord": ".tfrecord"}
ENDLESS = 2**62  # the streams' end (Dataset.range's stop): beyond any run's length


@dataclass(frozen=True)
class InputSpec:
    input_shape: tuple[int, ...]
    num_classes: int
    examples_per_worker: int
    describe: str
    # dataset_fn(per_replica_batch, start_batch) -> tf.data.Dataset for this worker, from its
    # batch `start_batch` on (positions.batches_consumed: steps x local replicas)
    dataset_fn: Callable[[int, int], tf.data.Dataset]


def list_files(path: str, fmt: str) -> list[str]:
    """A directory (every *.npz / *.tfrecord in it) or a glob pattern; a local path or an
    object-store URI alike (tf.io.gfile)."""
    gfile = tf.io.gfile
    if gfile.isdir(path):
        files = gfile.glob(os.path.join(path, "*" + EXTENSIONS[fmt]))
    else:
        files = gfile.glob(path)
    files = sorted(f for f in files if not gfile.isdir(f))
    if not files:
        raise ConfigError(f"training config: data.path: no {fmt} files at {path}")
    return files


def _finish(ds: tf.data.Dataset) -> tf.data.Dataset:
    # Said endless: under MultiWorkerMirroredStrategy a dataset whose cardinality is not infinite
    # (range's stop, flat_map's unknown) makes the distributed iterator all-reduce "has data" on
    # every step (input_lib._enable_get_next_as_optional): a second collective in each step.
    ds = ds.apply(tf.data.experimental.assert_cardinality(tf.data.INFINITE_CARDINALITY))
    ds = ds.prefetch(tf.data.AUTOTUNE)
    pool = threads.this_process().data
    if pool is None:
        return ds
    options = tf.data.Options()  # the pipeline's own pool, sized like the others (threads.py)
    options.threading.private_threadpool_size = pool
    return ds.with_options(options)


def _positions(start: int) -> tf.data.Dataset:
    return tf.data.Dataset.range(start, ENDLESS)


def _array_stream(x: np.ndarray, y: np.ndarray, order, batch: int, start_batch: int):
    """Batches of the endless stream over in-memory arrays, from batch `start_batch` on;
    `order(epoch, index)` -> the rows at those positions (vectors)."""
    n = len(x)
    # Tensors captured by the map (passed to it as inputs), not numpy arrays that would be
    # embedded in its graph as constants.
    xs, ys = tf.convert_to_tensor(x), tf.convert_to_tensor(y)

    def take(p):  # a batch of positions -> that batch of examples
        rows = order(p // n, p % n)
        return tf.gather(xs, rows), tf.gather(ys, rows)

    ds = _positions(first_example(start_batch, batch)).batch(batch, drop_remainder=True)
    return _finish(ds.map(take, num_parallel_calls=tf.data.AUTOTUNE))


# tf.random.experimental.index_shuffle pads its [2] seed to the op's [3] with this constant in
# front (TF 2.21 stateless_random_ops.py). Its batched form pads a [n, 2] seed along the wrong
# axis, so a batch of positions calls the op itself with the same three numbers per position:
# the permutation index_shuffle(i, [seed, epoch], n - 1) gives, a whole batch at once.
_INDEX_SHUFFLE_PAD = 498247692


def _permuted(index, seed: int, epoch, n: int):
    """Position `index` of each epoch's permutation of [0, n), per element (vectors)."""
    return _shuffled(index, seed, epoch, tf.fill(tf.shape(index), tf.constant(n - 1, tf.int64)))


def _shuffled(index, seed: int, second, last):
    """index_shuffle(index, [seed, second], last) per element (vectors of the same length)."""
    seeds = tf.stack(
        [
            tf.fill(tf.shape(index), tf.constant(_INDEX_SHUFFLE_PAD, tf.int64)),
            tf.fill(tf.shape(index), tf.constant(seed, tf.int64)),
            second,
        ],
        axis=1,
    )
    return tf.raw_ops.RandomIndexShuffle(index=index, seed=seeds, max_index=last, rounds=4)


def _block_order(n: int, block: int, seed: int):
    """`_record_stream`'s order as arithmetic (for records held in memory): the row at each
    (epoch, index), each block of `block` rows permuted by its own index_shuffle (0: file order)."""
    blocks = blocks_per_epoch(n, block) if block else 0

    def order(epoch, index):
        if not block:
            return index
        block_index = index // block
        first = block_index * block
        last = tf.minimum(first + block, n) - first - 1  # the last block may be short
        return first + _shuffled(index - first, seed, block_seed(epoch, block_index, blocks), last)

    return order


def _record_stream(records, n: int, block: int, seed: int, start: int) -> tf.data.Dataset:
    """The endless stream of raw records from position `start` on: epoch after epoch of
    `records()`, each epoch permuted in blocks of `block` records (0: in file order)."""
    first_epoch, first_index = epoch_and_index(start, n)
    blocks = blocks_per_epoch(n, block) if block else 0

    def epoch_order(epoch):
        # Only the first epoch starts part-way: its records before the position are read, unparsed
        # (whole blocks skipped before they are permuted, then the rest of one block).
        def part_way(skip: int):
            return tf.where(epoch == first_epoch, tf.constant(skip, tf.int64), tf.constant(0, tf.int64))

        if not block:
            return records().skip(part_way(first_index))

        def permute(block_index, chunk):
            size = tf.shape(chunk, out_type=tf.int64)[0]
            pair = tf.stack([tf.constant(seed, tf.int64), block_seed(epoch, block_index, blocks)])
            order = tf.random.experimental.index_shuffle(tf.range(size), pair, tf.fill([size], size - 1))
            return tf.data.Dataset.from_tensor_slices(tf.gather(chunk, order))

        whole, rest = divmod(first_index, block)
        # Whole blocks are skipped as records (the reader steps over them), then numbered from there.
        skipped = part_way(whole)
        chunks = records().skip(skipped * block).batch(block).enumerate(start=skipped)
        return chunks.flat_map(permute).skip(part_way(rest))

    return _positions(first_epoch).flat_map(epoch_order)


def _load_npz(files) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = [], []
    for name in files:
        try:
            with tf.io.gfile.GFile(name, "rb") as fh, np.load(io.BytesIO(fh.read())) as npz:
                if "x" not in npz or "y" not in npz:
                    raise ConfigError(f"training config: data.path: {name} lacks arrays 'x' and 'y'")
                xs.append(npz["x"].astype(np.float32))
                ys.append(npz["y"].astype(np.int64))
        except (zipfile.BadZipFile, zlib.error, EOFError, ValueError, OSError, tf.errors.OpError) as err:
            # Corrupt data stays corrupt: a permanent failure (exit 4), not one to retry.
            raise TrainingError(f"data.path: {name} is corrupt or truncated ({error_summary(err, 200)})") from None
        if len(xs[-1]) != len(ys[-1]):
            raise TrainingError(
                f"data.path: {name} holds {len(xs[-1])} examples in 'x' but {len(ys[-1])} labels in 'y'"
            )
    return np.concatenate(xs), np.concatenate(ys)


def _tfrecord_shape(first_file: str) -> tuple[int, ...]:
    for record in tf.data.TFRecordDataset(first_file).take(1):
        parsed = tf.io.parse_single_example(record, {"shape": tf.io.VarLenFeature(tf.int64)})
        return tuple(int(d) for d in tf.sparse.to_dense(parsed["shape"]).numpy())
    raise ConfigError(f"training config: data.path: {first_file} holds no records")


def _tfrecord_parser(shape):
    """A batch of raw records -> (examples, labels): one vectorized parse_example per batch, not
    a parse_single_example (and a tf.data element) per record."""
    spec = {"x": tf.io.FixedLenFeature([int(np.prod(shape))], tf.float32), "y": tf.io.FixedLenFeature([], tf.int64)}

    def parse(records):
        parsed = tf.io.parse_example(records, spec)
        return tf.reshape(parsed["x"], (-1, *shape)), parsed["y"]

    return parse


def _read_records(files: list[str], parallelism: int) -> tf.data.Dataset:
    """The raw records of `files`, `parallelism` files at a time, one record of each in turn.
    Deterministic: the order is a function of the file list and `parallelism` alone (a fixed
    number from the config, never AUTOTUNE, whose cycle is the machine's core count: a restart on
    another node would read another order). Only how many threads fill it is tuned."""
    cycle = min(parallelism, len(files))  # a cycle beyond the files is the same order
    if cycle == 1:
        return tf.data.TFRecordDataset(files)  # one file after another
    return tf.data.Dataset.from_tensor_slices(files).interleave(
        tf.data.TFRecordDataset,
        cycle_length=cycle,
        block_length=1,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )


def _load_records(records, parse) -> tuple[np.ndarray, np.ndarray]:
    """Every record of `records()`, parsed, in its order (data.cache)."""
    xs, ys = [], []
    for x, y in records().batch(4096).map(parse, num_parallel_calls=tf.data.AUTOTUNE):
        xs.append(x.numpy())
        ys.append(y.numpy())
    if not xs:
        return np.zeros((0,), np.float32), np.zeros((0,), np.int64)
    return np.concatenate(xs), np.concatenate(ys)


def _refuse_empty(count: int, describe: str) -> None:
    # An empty shard would make .repeat() spin forever instead of failing.
    if count == 0:
        raise ConfigError(
            f"training config: data: this worker's share of the data is empty ({describe}); "
            "provide more examples or files"
        )


def _from_arrays(x, y, config, seed, describe, num_classes) -> InputSpec:
    shuffle = config["data"]["shuffleBuffer"]
    _refuse_empty(len(x), describe)
    if config["data"]["source"] == "files":  # synthetic shapes were checked with the config
        check_example_size(x.shape[1:], config, "data.path: the examples' shape")

    n = len(x)

    def order(epoch, index):
        return _permuted(index, seed, epoch, n) if shuffle else index

    def dataset_fn(batch: int, start_batch: int) -> tf.data.Dataset:
        return _array_stream(x, y, order, batch, start_batch)

    return InputSpec(tuple(x.shape[1:]), num_classes, len(x), describe, dataset_fn)


def build_input(config: dict, shared_dir: str, num_workers: int, worker_index: int) -> InputSpec:
    data = config["data"]
    seed = config["seed"] + worker_index  # each worker shuffles its own shard differently
    if data["source"] == "synthetic":
        syn = data["synthetic"]
        x, y = make_synthetic(syn["examples"], tuple(syn["inputShape"]), syn["numClasses"], config["seed"])
        x, y = shard_arrays(x, y, num_workers, worker_index)
        return _from_arrays(x, y, config, seed, f"synthetic(examples={syn['examples']})", syn["numClasses"])

    files = list_files(data_path(config, shared_dir), data["format"])
    plan: ShardPlan = plan_shards(files, num_workers, worker_index)
    cache = ",cached" if data["format"] == "tfrecord" and data["cache"] else ""
    describe = f"{data['format']}(files={len(plan.files)}/{len(files)},shard_by={plan.by}{cache})"
    if data["format"] == "npz":
        x, y = _load_npz(plan.files)
        if plan.by == "data":
            x, y = shard_arrays(x, y, plan.num_shards, plan.index)
        return _from_arrays(x, y, config, seed, describe, data["numClasses"])

    def records() -> tf.data.Dataset:
        ds = _read_records(list(plan.files), data["readParallelism"])
        return ds.shard(plan.num_shards, plan.index) if plan.by == "data" else ds

    cached = None
    try:
        shape = _tfrecord_shape(files[0])
        check_example_size(shape, config, "data.path: the examples' shape")
        parse = _tfrecord_parser(shape)
        # Counting reads every record of this worker's share: a corrupt file fails here, once,
        # as a permanent failure, instead of in the middle of training. With data.cache the same
        # pass parses and keeps them.
        if data["cache"]:
            cached = _load_records(records, parse)
            count = len(cached[0])
        else:
            count = int(records().reduce(np.int64(0), lambda n, _: n + 1).numpy())
    except tf.errors.DataLossError as err:
        raise TrainingError(
            f"data.path: a TFRecord file of {data_path(config, shared_dir)} is corrupt or "
            f"truncated ({error_summary(err, 200)})"
        ) from None
    _refuse_empty(count, describe)
    shuffle = data["shuffleBuffer"]
    if cached is not None:
        order = _block_order(count, shuffle, seed)

        def dataset_fn(batch: int, start_batch: int) -> tf.data.Dataset:
            return _array_stream(*cached, order, batch, start_batch)

        return InputSpec(shape, data["numClasses"], count, describe, dataset_fn)

    def dataset_fn(batch: int, start_batch: int) -> tf.data.Dataset:
        ds = _record_stream(records, count, shuffle, seed, first_example(start_batch, batch))
        ds = ds.batch(batch, drop_remainder=True).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
        return _finish(ds)

    return InputSpec(shape, data["numClasses"], count, describe, dataset_fn)


def elastic_input(
    config: dict, shared_dir: str, replicas: int, ranges: list[tuple[int, int, int]], unit: int
) -> InputSpec:
    """Elastic training (entrypoint.membership): this member's input is the micro-batches dealt
    to it (positions.deal, `ranges`) from the streams of the `replicas` configured workers'
    shares (virtual shards: each its own seed, share and order, as that worker would read it),
    `unit` micro-batches of each per step. `config` holds the configured micro-batches k;
    dataset_fn takes the member's replica batch (k' micro-batches) and its start batch."""
    micro = config["gradientAccumulationSteps"]
    size = config["batchSizePerReplica"]
    specs = {shard: build_input(config, shared_dir, replicas, shard) for shard, _, _ in ranges}
    first = specs[ranges[0][0]]
    # The examples this member stands for: a shard's share counted by the fraction of each step it
    # takes, so the members' sum is every shard's share (trainer.total_steps sums it).
    examples = sum(specs[shard].examples_per_worker * (hi - lo) / unit for shard, lo, hi in ranges)
    taken = "+".join(f"{shard}[{lo}:{hi}]" for shard, lo, hi in ranges)
    describe = f"elastic(shards={taken}/{replicas},unit={unit}) {first.describe}"

    def dataset_fn(batch: int, start_batch: int) -> tf.data.Dataset:
        # start_batch = steps x local replicas (positions.batches_consumed); a step is `unit`
        # micro-batches of every shard, so the shards start at step x unit micro-batches.
        local = unit // micro
        step = start_batch // local
        parts = []
        for shard, lo, hi in ranges:
            ds = specs[shard].dataset_fn(size, step * unit).batch(unit, drop_remainder=True)
            parts.append(ds.map(lambda x, y, lo=lo, hi=hi: (x[lo:hi], y[lo:hi])))

        def join(*taken):
            xs = tf.concat([x for x, _ in taken], 0)  # [unit x size / members' share, size, ...]
            ys = tf.concat([y for _, y in taken], 0)
            return (
                tf.reshape(xs, tf.concat([[local, batch], tf.shape(xs)[2:]], 0)),
                tf.reshape(ys, tf.concat([[local, batch], tf.shape(ys)[2:]], 0)),
            )

        ds = tf.data.Dataset.zip(tuple(parts)).map(join).unbatch()
        return _finish(ds)

    return InputSpec(first.input_shape, first.num_classes, examples, describe, dataset_fn)

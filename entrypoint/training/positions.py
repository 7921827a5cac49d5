"""Where a worker's input stream stands after S steps: arithmetic, not replay (pure, no TensorFlow).

Each worker reads one endless stream of its share of the examples (entrypoint.training.data):
example p of the stream (p = 0, 1, 2, ...) is index i = p % n of epoch e = p // n, n = the
examples in the worker's share, and the order within an epoch is a fixed function of the worker's
seed and e. So a restart at step S starts the stream at the example it would have reached, with
nothing read and thrown away, and sees exactly what an uninterrupted run would have seen from there.

How many batches a step consumes: `distribute_datasets_from_function` calls the dataset function
once per worker, and every step dequeues one batch per replica of that worker ("if a worker has
two replicas, two batches will be dequeued from the Dataset every step", TensorFlow's
distribute_lib.py). A replica's batch already holds every micro-batch of the step
(config.replica_input_batch), so a step is `local replicas` batches, never more.
"""

from __future__ import annotations


def local_replicas(num_replicas_in_sync: int, num_input_pipelines: int) -> int:
    """Replicas fed by one worker's dataset (tf.distribute.InputContext's two counts)."""
    if num_input_pipelines < 1 or num_replicas_in_sync % num_input_pipelines:
        raise ValueError(
            f"{num_replicas_in_sync} replicas do not split evenly over {num_input_pipelines} input pipelines"
        )
    return num_replicas_in_sync // num_input_pipelines


def batches_consumed(step: int, replicas_per_worker: int) -> int:
    """Batches one worker's dataset has handed out when `step` steps are done."""
    if step < 0 or replicas_per_worker < 1:
        raise ValueError(f"step {step} with {replicas_per_worker} local replicas: both must be >= 0 / >= 1")
    return step * replicas_per_worker


def first_example(batches: int, batch: int) -> int:
    """The stream position after `batches` batches of `batch` examples (batches never drop examples:
    the stream is endless, so every batch is full)."""
    return batches * batch


def epoch_and_index(position: int, examples: int) -> tuple[int, int]:
    """(epoch, index within the epoch's order) of stream position `position`."""
    if examples < 1:
        raise ValueError(f"a share of {examples} examples has no positions")
    return divmod(position, examples)


def blocks_per_epoch(examples: int, block: int) -> int:
    """Shuffle blocks in one epoch of `examples` records, the last one possibly short."""
    return -(-examples // block)


def block_seed(epoch: int, block_index: int, blocks: int) -> int:
    """The second half of the seed pair [worker seed, this] of one block of one epoch: distinct
    for every (epoch, block), so every block of every epoch has its own order."""
    return epoch * blocks + block_index


def deal(replicas: int, unit: int, size: int, member: int) -> list[tuple[int, int, int]]:
    """Elastic training (entrypoint.membership): which micro-batches of one step member `member`
    of `size` trains, as (virtual shard, first, end) ranges in that shard's step.

    The input stays that of the `replicas` configured workers (virtual shards: each keeps its
    seed, its share and its stream), and each step takes `unit` micro-batches from every one of
    them (local replicas x micro-batches, what the worker's dataset hands a step). Those
    replicas x unit micro-batches, shard after shard, are dealt in equal consecutive runs over
    the members, so every example of every shard is trained exactly once whatever the members
    are, and a step's examples are the same for any group size."""
    total = replicas * unit
    if size < 1 or total % size or not 0 <= member < size:
        raise ValueError(f"member {member} of {size}: {replicas} x {unit} micro-batches do not split evenly")
    share = total // size
    first, end = member * share, (member + 1) * share
    ranges = []
    for shard in range(first // unit, -(-end // unit)):
        lo, hi = max(first, shard * unit) - shard * unit, min(end, (shard + 1) * unit) - shard * unit
        ranges.append((shard, lo, hi))
    return ranges

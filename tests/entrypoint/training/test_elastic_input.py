"""Elastic training's input: across a shrink and a grow, every step trains the examples the N
configured workers would have trained, each example of an epoch exactly once (real tf.data)."""

from __future__ import annotations

import collections

import pytest

from entrypoint.training import data, positions
from entrypoint.training.config import merge_defaults

pytestmark = pytest.mark.slow

N, K, B = 4, 3, 2  # configured workers, micro-batches each, micro-batch size
PER_SHARD = 12  # examples in each worker's share: an epoch is PER_SHARD / (K x B) = 2 steps


def config():
    return merge_defaults(
        {
            "batchSizePerReplica": B,
            "gradientAccumulationSteps": K,
            "data": {"synthetic": {"examples": N * PER_SHARD, "inputShape": [3], "numClasses": 3}},
        }
    )


def keys(x) -> list[bytes]:
    return [row.tobytes() for row in x.numpy()]


def member_steps(size: int, member: int, first: int, count: int) -> list[list[bytes]]:
    """What member `member` of `size` trains at steps first .. first+count-1 (one local replica)."""
    ranges = positions.deal(N, K, size, member)
    spec = data.elastic_input(config(), "/", N, ranges, K)
    each = N * K // size
    batches = spec.dataset_fn(each * B, positions.batches_consumed(first, 1)).take(count)
    return [keys(x) for x, _ in batches]


def group_steps(size: int, first: int, count: int) -> list[list[bytes]]:
    """Each step's examples over the whole group of `size` members, member after member."""
    per_member = [member_steps(size, m, first, count) for m in range(size)]
    return [sum((steps[i] for steps in per_member), []) for i in range(count)]


def configured_steps(first: int, count: int) -> list[list[bytes]]:
    """The N workers' own input (not elastic): each worker's k micro-batches per step."""
    per_worker = []
    for worker in range(N):
        spec = data.build_input(config(), "/", N, worker)
        per_worker.append([keys(x) for x, _ in spec.dataset_fn(K * B, first).take(count)])
    return [sum((steps[i] for steps in per_worker), []) for i in range(count)]


def test_every_example_once_per_epoch_across_a_shrink_and_a_grow():
    # 4 members for steps 0-2, 3 (k'=4) for 3-6, 2 (k'=6) for 7-8, 4 again for 9-11
    trained = group_steps(4, 0, 3) + group_steps(3, 3, 4) + group_steps(2, 7, 2) + group_steps(4, 9, 3)
    assert trained == configured_steps(0, 12), "a step trained other examples than the configured group's"
    steps_per_epoch = PER_SHARD // (K * B)
    for epoch in range(12 // steps_per_epoch):
        seen = collections.Counter(sum(trained[epoch * steps_per_epoch : (epoch + 1) * steps_per_epoch], []))
        assert len(seen) == N * PER_SHARD, f"epoch {epoch}: {N * PER_SHARD - len(seen)} examples not trained"
        assert set(seen.values()) == {1}, f"epoch {epoch}: an example trained twice"


def test_full_membership_is_the_configured_input():
    for member in range(N):
        spec = data.build_input(config(), "/", N, member)
        own = [keys(x) for x, _ in spec.dataset_fn(K * B, 5).take(3)]
        assert member_steps(N, member, 5, 3) == own


def test_examples_counted_once_over_the_members():
    for size in (4, 3, 2, 1, 6, 12):
        total = sum(
            data.elastic_input(config(), "/", N, positions.deal(N, K, size, m), K).examples_per_worker
            for m in range(size)
        )
        assert total == pytest.approx(N * PER_SHARD)

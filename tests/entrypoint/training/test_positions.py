"""The input stream's position arithmetic (pure: no TensorFlow)."""

from __future__ import annotations

import pytest

from entrypoint.training import positions


def test_a_step_is_one_batch_per_local_replica():
    # MWMS dequeues one batch per replica of the worker every step.
    assert positions.local_replicas(8, 2) == 4
    assert positions.batches_consumed(1000, 4) == 4000
    assert positions.batches_consumed(1000, 1) == 1000
    assert positions.batches_consumed(0, 4) == 0


def test_resume_position_is_a_multiple_of_the_batch():
    # The resumed stream's batches line up with the uninterrupted stream's.
    start = positions.first_example(positions.batches_consumed(7, 2), 32)
    assert start == 7 * 2 * 32 and start % 32 == 0


def test_epoch_and_index_cross_epochs():
    assert positions.epoch_and_index(0, 10) == (0, 0)
    assert positions.epoch_and_index(9, 10) == (0, 9)
    assert positions.epoch_and_index(10, 10) == (1, 0)
    assert positions.epoch_and_index(100_000 * 64 + 3, 64) == (100_000, 3)


def test_block_seeds_are_distinct_per_epoch_and_block():
    blocks = positions.blocks_per_epoch(45, 8)
    assert blocks == 6  # five of 8, one of 5
    seeds = {positions.block_seed(e, b, blocks) for e in range(5) for b in range(blocks)}
    assert len(seeds) == 5 * blocks


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: positions.local_replicas(3, 2), "3 replicas do not split evenly over 2"),
        (lambda: positions.local_replicas(2, 0), "over 0 input pipelines"),
        (lambda: positions.batches_consumed(-1, 1), "step -1"),
        (lambda: positions.batches_consumed(5, 0), "0 local replicas"),
        (lambda: positions.epoch_and_index(3, 0), "a share of 0 examples"),
    ],
)
def test_impossible_positions_are_refused(call, match):
    with pytest.raises(ValueError, match=match):
        call()

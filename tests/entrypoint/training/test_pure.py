"""Pure pieces of the trainer: shard plan, synthetic data, error mapping (the run directory's
files and the heartbeat: tests/entrypoint/test_rundir.py)."""

from __future__ import annotations

import numpy as np
import pytest

from entrypoint.errors import EXIT_RETRYABLE, EXIT_TRAINING_FAILED
from entrypoint.training.failures import TrainingError, error_summary, exit_code_for, is_retryable
from entrypoint.training.sharding import plan_shards
from entrypoint.training.synthetic import make_synthetic, shard_arrays

FILES = [f"/d/train-{i:05d}.npz" for i in range(5)]


def test_enough_files_shards_by_file_round_robin_disjoint_and_complete():
    plans = [plan_shards(list(reversed(FILES)), 2, i) for i in range(2)]
    assert [p.by for p in plans] == ["file", "file"]
    assert plans[0].files == (FILES[0], FILES[2], FILES[4])
    assert plans[1].files == (FILES[1], FILES[3])
    assert sorted(plans[0].files + plans[1].files) == FILES


def test_as_many_files_as_workers_gives_one_file_each():
    plans = [plan_shards(FILES, 5, i) for i in range(5)]
    assert [p.files for p in plans] == [(f,) for f in FILES]


def test_fewer_files_than_workers_shards_by_data():
    plan = plan_shards(FILES[:2], 4, 3)
    assert (plan.by, plan.files, plan.num_shards, plan.index) == ("data", tuple(FILES[:2]), 4, 3)


@pytest.mark.parametrize("files,workers,index", [([], 2, 0), (FILES, 2, 2), (FILES, 0, 0), (FILES, 2, -1)])
def test_invalid_shard_requests_are_refused(files, workers, index):
    with pytest.raises(ValueError):
        plan_shards(files, workers, index)


def test_synthetic_data_is_deterministic_and_seed_dependent():
    x1, y1 = make_synthetic(256, (4, 4, 1), 10, seed=7)
    x2, y2 = make_synthetic(256, (4, 4, 1), 10, seed=7)
    x3, _ = make_synthetic(256, (4, 4, 1), 10, seed=8)
    assert x1.shape == (256, 4, 4, 1) and x1.dtype == np.float32 and y1.dtype == np.int64
    assert np.array_equal(x1, x2) and np.array_equal(y1, y2)
    assert not np.array_equal(x1, x3)
    assert set(np.unique(y1)) <= set(range(10)) and len(np.unique(y1)) >= 5  # several classes present


def test_synthetic_labels_are_learnable_by_a_linear_model():
    # The labels come from a linear teacher, so least squares on one-hot targets beats chance by far.
    x, y = make_synthetic(4000, (16,), 4, seed=1)
    onehot = np.eye(4)[y]
    w, *_ = np.linalg.lstsq(x[:3000], onehot[:3000], rcond=None)
    accuracy = np.mean(np.argmax(x[3000:] @ w, axis=1) == y[3000:])
    assert accuracy > 0.8, accuracy


def test_shard_arrays_partitions_examples():
    x, y = make_synthetic(10, (2,), 3, seed=0)
    parts = [shard_arrays(x, y, 3, i) for i in range(3)]
    assert sum(len(p[0]) for p in parts) == 10
    assert np.array_equal(parts[1][0], x[1::3])


class UnavailableError(Exception):  # same class names as tf.errors.*
    pass


class DeadlineExceededError(Exception):
    pass


class CancelledError(Exception):
    pass


class AbortedError(Exception):
    pass


class InternalError(Exception):
    pass


class InvalidArgumentError(Exception):
    pass


class SubUnavailable(UnavailableError):
    pass


@pytest.mark.parametrize(
    "err,code",
    [
        (UnavailableError("socket closed"), EXIT_RETRYABLE),
        (SubUnavailable("peer gone"), EXIT_RETRYABLE),
        (DeadlineExceededError("collective timed out"), EXIT_RETRYABLE),
        (CancelledError("cancelled"), EXIT_RETRYABLE),
        (AbortedError("group changed"), EXIT_RETRYABLE),
        (InternalError("Collective ops is aborted by: task 1 heartbeat timeout"), EXIT_RETRYABLE),
        (InternalError("Coordination service error"), EXIT_RETRYABLE),
        (InternalError("cuDNN launch failure"), EXIT_TRAINING_FAILED),
        # a new worker of a resized group that reached the old group's coordination service
        (
            InvalidArgumentError("Unexpected task registered with task_name=/job:worker/replica:0/task:2"),
            EXIT_RETRYABLE,
        ),
        (InvalidArgumentError("Incompatible shapes: [32,10] vs. [16,10]"), EXIT_TRAINING_FAILED),
        (ValueError("shapes differ"), EXIT_TRAINING_FAILED),
        (MemoryError(), EXIT_TRAINING_FAILED),
        (TrainingError("data.path: a.npz is corrupt or truncated"), EXIT_TRAINING_FAILED),
    ],
)
def test_error_mapping(err, code):
    assert exit_code_for(err) == code
    assert is_retryable(err) == (code == EXIT_RETRYABLE)


def test_permanent_errors_exit_with_the_code_the_launcher_does_not_retry():
    from entrypoint.restarts import PERMANENT, classify_exit

    assert exit_code_for(ValueError("corrupt")) == 4
    assert classify_exit(exit_code_for(ValueError("corrupt"))) == PERMANENT


def test_error_mapping_matches_real_tensorflow_classes():
    from tensorflow.python.framework import errors_impl as errors  # the classes behind tf.errors.*

    assert exit_code_for(errors.UnavailableError(None, None, "peer down")) == EXIT_RETRYABLE
    assert exit_code_for(errors.InvalidArgumentError(None, None, "bad shape")) == EXIT_TRAINING_FAILED
    stale = "Unexpected task registered with task_name=/job:worker/replica:0/task:2"
    assert exit_code_for(errors.InvalidArgumentError(None, None, stale)) == EXIT_RETRYABLE
    assert exit_code_for(errors.DataLossError(None, None, "corrupted record at 12")) == EXIT_TRAINING_FAILED


# What a survivor's collective raised when its peer was killed (TensorFlow 2.21, captured).
PEER_LOST = """Graph execution error:

Detected at node CollectiveReduceV2_1 defined at (most recent call last):
  File "<string>", line 1, in <module>

  File "/work/main/entrypoint/training/__main__.py", line 58, in main

  File "/work/main/entrypoint/training/trainer.py", line 327, in train_step

Collective ops is aborted by: Error reported from /job:worker/task:1: The following tasks are unhealthy \
(stopped sending heartbeats):
/job:worker/replica:0/task:1
The tasks have crashed. Check the task logs for an earlier error, or scheduler events (e.g. preemption, eviction) \
to debug further.
The error could be from a previous operation. Restart your program to reset.
\t [[{{node CollectiveReduceV2_1}}]] [Op:__inference_train_step_797]"""


def test_error_summary_keeps_the_cause_of_a_graph_execution_error():
    line = error_summary(UnavailableError(PEER_LOST))
    assert line.startswith(
        "UnavailableError: Collective ops is aborted by: Error reported from /job:worker/task:1: "
        "The following tasks are unhealthy (stopped sending heartbeats): /job:worker/replica:0/task:1"
    )
    assert "File " not in line and "[[{{node" not in line
    assert error_summary(UnavailableError("Graph execution error:")) == "UnavailableError: Graph execution error:"


def test_error_summary_flattens_multiline_messages():
    assert error_summary(UnavailableError("a\n  b\n\nc")) == "UnavailableError: a b c"
    assert "\n" not in error_summary(ValueError("x" * 1000)) and len(error_summary(ValueError("x" * 1000))) < 400

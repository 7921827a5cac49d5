"""A deterministic synthetic data set that is actually learnable (numpy only).

Inputs are standard normal; the label of x is argmax(x . W) for a fixed random "teacher"
matrix W, so a model can drive the loss down (a linear boundary it can learn), and the same
seed gives the same examples on every worker and every restart.
"""

from __future__ import annotations

import numpy as np


def make_synthetic(
    examples: int, input_shape: tuple[int, ...], num_classes: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    features = int(np.prod(input_shape))
    teacher = rng.standard_normal((features, num_classes)).astype(np.float32)
    x = rng.standard_normal((examples, features)).astype(np.float32)
    y = np.argmax(x @ teacher, axis=1).astype(np.int64)
    return x.reshape((examples, *input_shape)), y


def shard_arrays(x: np.ndarray, y: np.ndarray, num_workers: int, worker_index: int) -> tuple[np.ndarray, np.ndarray]:
    """Every N-th example for worker i (the in-memory twin of Dataset.shard)."""
    return x[worker_index::num_workers], y[worker_index::num_workers]

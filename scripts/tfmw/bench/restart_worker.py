"""Figure 12's measurements, in one process (one TensorFlow import).

    python -m tfmw.bench.restart_worker '<json: steps, batch, examples, shards, rounds, repeats>'

Builds the trainer's input (entrypoint.training.data.build_input) from synthetic examples in
memory and from TFRecord shards written by the trainer's own writer, and times, for each step S,
building the worker's stream at S and taking its first batch: the trainer's pipeline ("after")
beside the pipeline it replaced ("before": shuffle window, repeat, batch, skip(S), kept here
only as the reference). Prints `tfmw bench restart=<json>`.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

from tfmw.bench.fig_restart import result_line

SHAPE = (8, 8, 1)
OLD_SHUFFLE_BUFFER = 1024  # the old default


def _skip_pipeline(tf, ds, seed: int, batch: int, start_step: int):
    """The input as it was before: a restart at step S produced and threw away S batches."""
    ds = ds.shuffle(OLD_SHUFFLE_BUFFER, seed=seed, reshuffle_each_iteration=True)
    ds = ds.repeat().batch(batch, drop_remainder=True)
    if start_step:
        ds = ds.skip(start_step)
    return ds.prefetch(tf.data.AUTOTUNE)


def _first_batch_seconds(make) -> float:
    started = time.perf_counter()
    it = iter(make())
    next(it)
    seconds = time.perf_counter() - started
    del it  # its teardown (stopping the threads that read ahead) is not part of the start
    return seconds


def main(argv=None) -> int:
    opts = json.loads((sys.argv[1:] if argv is None else argv)[0])
    import numpy as np
    import tensorflow as tf

    from entrypoint.training.config import resolve
    from entrypoint.training.data import build_input
    from entrypoint.training.prepare_digits import write_shards
    from entrypoint.training.synthetic import make_synthetic

    batch, steps, examples = opts["batch"], opts["steps"], opts["examples"]
    seed = 42
    common = [f"batchSizePerReplica={batch}", f"data.synthetic.examples={examples}", f"seed={seed}"]
    common += [f"data.synthetic.inputShape=[{','.join(map(str, SHAPE))}]"]
    features = int(np.prod(SHAPE))
    spec = {"x": tf.io.FixedLenFeature([features], tf.float32), "y": tf.io.FixedLenFeature([], tf.int64)}

    def parse(record):
        parsed = tf.io.parse_single_example(record, spec)
        return tf.reshape(parsed["x"], SHAPE), parsed["y"]

    with tempfile.TemporaryDirectory(prefix="tfmw-bench-restart-") as shared:
        x, y = make_synthetic(examples, SHAPE, 10, seed)
        files = write_shards(os.path.join(shared, "tfrecord"), "train", x, y, opts["shards"], "tfrecord")
        sources = {
            "synthetic (in memory)": (
                common,
                lambda: tf.data.Dataset.from_tensor_slices((x, y)),
            ),
            "tfrecord files": (
                common + ["data.source=files", "data.path=tfrecord", "data.format=tfrecord", "data.numClasses=10"],
                lambda: tf.data.TFRecordDataset(files).map(parse, num_parallel_calls=tf.data.AUTOTUNE),
            ),
        }
        built = {name: build_input(resolve(None, overrides), shared, 1, 0) for name, (overrides, _) in sources.items()}
        makers = {}
        for name, (_, raw) in sources.items():
            makers[(name, "after")] = lambda s, spec=built[name]: spec.dataset_fn(batch, s)
            makers[(name, "before")] = lambda s, raw=raw: _skip_pipeline(tf, raw(), seed, batch, s)
        for make in makers.values():  # warm up: the first trace of each pipeline's functions
            _first_batch_seconds(lambda make=make: make(0))
        seconds = {f"{name}|{variant}|{s}": [] for (name, variant) in makers for s in steps}
        for _ in range(opts["rounds"]):
            for (name, variant), make in makers.items():
                # Every step in turn within each try, in alternating order, so drift on a shared
                # machine hits them alike; the old pipeline past step 0 once a round (it takes
                # seconds to minutes). A round's value: its fastest try (the cost, not the load).
                tries = {s: [] for s in steps}
                for attempt in range(opts["repeats"]):
                    for s in steps if attempt % 2 else steps[::-1]:
                        if variant == "after" or s == 0 or attempt == 0:
                            tries[s].append(_first_batch_seconds(lambda make=make, s=s: make(s)))
                for s in steps:
                    seconds[f"{name}|{variant}|{s}"].append(min(tries[s]))
    result = {
        "batch": batch,
        "examples": examples,
        "shape": list(SHAPE),
        "steps": steps,
        "rounds": opts["rounds"],
        "repeats": opts["repeats"],
        "seconds": seconds,
        "describe": {name: spec.describe for name, spec in built.items()},
    }
    print(result_line(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

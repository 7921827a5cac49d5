"""Figure 5's measurements, in one process (one TensorFlow import).

    python -m tfmw.bench.pipeline_worker '<json: batches, examples, shards, batch>'

Writes synthetic examples (the trainer's default 28x28x1 shape) as NPZ and TFRecord shards
with the trainer's own writer (entrypoint.training.prepare_digits.write_shards), builds each
input with the trainer's own entrypoint.training.data.build_input (TFRecord twice: streamed, and
with data.cache), and measures examples/s of (a) the tf.data pipeline alone, (b) the training step
alone on one batch held in memory, right before and after (c) the training step fed by the
pipeline; (c) over the mean of its two (b)s is the round's paired ratio. Prints
`tfmw bench pipeline=<json>`.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

from tfmw.bench.fig_pipeline import result_line
from tfmw.bench.stats import median, spread


def _rate(fn, batches: int, batch: int, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    started = time.perf_counter()
    for _ in range(batches):
        fn()
    return batches * batch / (time.perf_counter() - started)


def main(argv=None) -> int:
    opts = json.loads((sys.argv[1:] if argv is None else argv)[0])
    import tensorflow as tf
    import tf_keras as keras

    from entrypoint.training.config import resolve
    from entrypoint.training.data import build_input
    from entrypoint.training.models import build_model
    from entrypoint.training.prepare_digits import write_shards
    from entrypoint.training.synthetic import make_synthetic

    batch, batches = opts["batch"], opts["batches"]
    shape = (28, 28, 1)
    common = [f"batchSizePerReplica={batch}", f"data.synthetic.examples={opts['examples']}"]
    results = {"batch": batch, "model": opts["model"], "examples": opts["examples"], "sources": {}}
    with tempfile.TemporaryDirectory(prefix="tfmw-bench-data-") as shared:
        x, y = make_synthetic(opts["examples"], shape, 10, seed=1)
        for fmt in ("npz", "tfrecord"):
            write_shards(os.path.join(shared, fmt), "train", x, y, opts["shards"], fmt)
        tfrecord = common + ["data.source=files", "data.path=tfrecord", "data.format=tfrecord", "data.numClasses=10"]
        sources = {
            "synthetic (in memory)": common,
            "npz files": common + ["data.source=files", "data.path=npz", "data.format=npz", "data.numClasses=10"],
            "tfrecord files": tfrecord,
            "tfrecord files, data.cache": tfrecord + ["data.cache=true"],
        }
        model = build_model(opts["model"], shape, 10, {})
        optimizer = keras.optimizers.Adam(1e-3)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

        @tf.function
        def step(xb, yb):  # the trainer's step without the strategy (one device)
            with tf.GradientTape() as tape:
                loss = loss_fn(yb, model(xb, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        held = (tf.constant(x[:batch]), tf.constant(y[:batch]))
        inputs = {name: build_input(resolve(None, overrides), shared, 1, 0) for name, overrides in sources.items()}

        def alone() -> float:
            return _rate(lambda: step(*held).numpy(), batches, batch, warmup=10)

        samples = {name: {"pipeline": [], "fed_step": [], "alone": [], "ratios": []} for name in sources}
        for _ in range(opts["rounds"]):
            for name, spec in inputs.items():
                s = samples[name]
                # Each fed run is bracketed by two runs of the step alone, and its ratio is to
                # their mean: drift on the shared machine during the pair hits both sides alike.
                before = alone()
                it = iter(spec.dataset_fn(batch, 0))
                s["pipeline"].append(_rate(lambda it=it: next(it), batches * 4, batch))
                del it  # its prefetching threads stop before the step is timed
                it = iter(spec.dataset_fn(batch, 0))

                def fed_step(it=it):
                    xb, yb = next(it)
                    return step(xb, yb).numpy()

                s["fed_step"].append(_rate(fed_step, batches, batch))
                del it, fed_step
                after = alone()
                s["alone"] += [before, after]
                s["ratios"].append(s["fed_step"][-1] / ((before + after) / 2))
        results["step_alone"] = median([v for s in samples.values() for v in s["alone"]])
        results["rounds"] = opts["rounds"]
        for name, s in samples.items():
            low, high = spread(s["ratios"])
            results["sources"][name] = {
                "pipeline": median(s["pipeline"]),
                "fed_step": median(s["fed_step"]),
                "fed_ratio": median(s["ratios"]),
                "fed_ratio_min": low,
                "fed_ratio_max": high,
                "describe": inputs[name].describe,
            }
    print(result_line(results), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

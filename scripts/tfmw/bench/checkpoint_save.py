"""Figure 3's checkpoint table: how long a save stalls the step loop, synchronous (the trainer's
`tf.train.Checkpoint.write`) against TensorFlow's async checkpoint
(`CheckpointOptions(enable_async=True)`: the call returns once the values are copied; the
files are written by a background thread, and `sync()` waits for them).

    python -m tfmw.bench.checkpoint_save [--rounds N] [model=shape[:arg=v,...] ...]
        (default: cnn=28,28 resnet=32,32,3; e.g. mlp=28,28:hidden=2304,layers=6 is a 340 MB checkpoint)

Each model is built with the trainer's own builder and optimizer state (one Adam step), saved
ROUNDS times each way into a fresh temporary directory; the first save of each way is a
warm-up. Prints one `tfmw bench checkpoint=<json>` line per model (medians, seconds).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

from tfmw.bench.fig_recovery import checkpoint_line

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

ROUNDS = 6
DEFAULT = ("cnn=28,28", "resnet=32,32,3")


def measure(model_name: str, shape: list[int], args: dict | None = None, rounds: int = ROUNDS) -> dict:
    import tensorflow as tf
    import tf_keras as keras

    from entrypoint.training.models import build_model

    model = build_model(model_name, shape, 10, args or {})
    optimizer = keras.optimizers.Adam()
    x, y = tf.zeros([8, *shape]), tf.zeros([8], tf.int32)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(y, model(x), from_logits=True))
    optimizer.apply_gradients(
        zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables, strict=True)
    )
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=tf.Variable(0, dtype=tf.int64))
    # Removed afterwards: every run left its checkpoints (7 MB for the default model) in /tmp.
    with tempfile.TemporaryDirectory(prefix="tfmw-bench-ckpt-") as folder:
        sync, returned, written = [], [], []
        for i in range(rounds):
            started = time.monotonic()
            checkpoint.write(f"{folder}/sync-{i}")
            sync.append(time.monotonic() - started)
        options = tf.train.CheckpointOptions(enable_async=True)
        for i in range(rounds):
            started = time.monotonic()
            checkpoint.write(f"{folder}/async-{i}", options=options)
            back = time.monotonic()
            checkpoint.sync()
            returned.append(back - started)
            written.append(time.monotonic() - started)
            for name in os.listdir(folder):  # the disk holds two at a time at most (340 MB each)
                if not name.startswith((f"async-{i}.", f"sync-{i}.")) and name.startswith(("sync-", "async-")):
                    if not name.startswith("sync-1."):
                        os.remove(os.path.join(folder, name))
        size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder) if f.startswith("sync-1."))

    def median(xs: list[float]) -> float:
        return statistics.median(xs[1:])  # the first save is a warm-up

    return {
        "model": model_name,
        "bytes": size,
        "sync_s": median(sync),
        "async_return_s": median(returned),
        "async_written_s": median(written),
        # every round after the warm-up, for the spread
        "sync_all": sync[1:],
        "async_return_all": returned[1:],
        "async_written_all": written[1:],
    }


def parse_model(item: str) -> tuple[str, list[int], dict]:
    """ "mlp=28,28:hidden=2304,layers=6" -> ("mlp", [28, 28], {"hidden": 2304, "layers": 6}) (pure)."""
    name, _, rest = item.partition("=")
    shape, _, args = rest.partition(":")
    pairs = (pair.split("=", 1) for pair in args.split(",") if pair)
    return name, [int(d) for d in shape.split(",")], {key: int(value) for key, value in pairs}


def main(argv: list[str]) -> int:
    rounds = ROUNDS
    if argv[:1] == ["--rounds"]:
        rounds, argv = int(argv[1]), argv[2:]
    for item in argv or DEFAULT:
        name, shape, args = parse_model(item)
        result = measure(name, shape, args, rounds)
        print(checkpoint_line(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

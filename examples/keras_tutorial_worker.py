"""A user training script in the style of TensorFlow's multi-worker Keras tutorial.

This is what "bring your own script" looks like: it reads TF_CONFIG (set by
`python -m entrypoint run`), builds MultiWorkerMirroredStrategy, trains with model.fit and
saves the model — the chief to the real path, every other worker to a temporary path that it
deletes (all workers must take part in the save). Differences from the tutorial:
- tf_keras via TF_USE_LEGACY_KERAS=1: Keras 3's model.fit fails under MWMS across processes
  on TF 2.21 (keras-team/keras#20585);
- synthetic data (no download), and paths from the pod environment (TFMW_SHARED_DIR, TFMW_RUN_ID).

Run it with the chart: training.command: ["python", "/opt/user/keras_tutorial_worker.py"].
"""

from __future__ import annotations

import json
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # must precede `import tensorflow`

import numpy as np
import tensorflow as tf

PER_WORKER_BATCH = 64
EPOCHS = int(os.environ.get("EXAMPLE_EPOCHS", "2"))
STEPS_PER_EPOCH = int(os.environ.get("EXAMPLE_STEPS_PER_EPOCH", "20"))


def synthetic_dataset(batch_size: int) -> tf.data.Dataset:
    """mnist-shaped inputs whose labels a CNN can learn (a fixed linear teacher)."""
    rng = np.random.default_rng(0)
    x = rng.random((2048, 28, 28), dtype=np.float32)
    teacher = rng.standard_normal((28 * 28, 10)).astype(np.float32)
    y = np.argmax((x.reshape(len(x), -1) - 0.5) @ teacher, axis=1).astype(np.int64)
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(2048, seed=0).repeat().batch(batch_size)


def build_and_compile_cnn_model() -> tf.keras.Model:
    model = tf.keras.Sequential(
        [
            tf.keras.layers.InputLayer(input_shape=(28, 28)),
            tf.keras.layers.Reshape(target_shape=(28, 28, 1)),
            tf.keras.layers.Conv2D(32, 3, activation="relu"),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(128, activation="relu"),
            tf.keras.layers.Dense(10),
        ]
    )
    model.compile(
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=tf.keras.optimizers.Adam(learning_rate=0.001),
        metrics=["accuracy"],
    )
    return model


def is_chief(task_type: str | None, task_id: int | None) -> bool:
    return task_type is None or task_type == "chief" or (task_type == "worker" and task_id == 0)


def write_path(path: str, task_type: str | None, task_id: int | None) -> str:
    """The chief writes to path; worker i to a sibling temporary directory."""
    if is_chief(task_type, task_id):
        return path
    return os.path.join(os.path.dirname(path), f"workertemp_{task_id}", os.path.basename(path))


def main() -> None:
    tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    num_workers = len(tf_config.get("cluster", {}).get("worker", [])) or 1
    run_dir = os.path.join(os.environ.get("TFMW_SHARED_DIR", "/tmp"), os.environ.get("TFMW_RUN_ID", "example"))

    strategy = tf.distribute.MultiWorkerMirroredStrategy()  # after TF_CONFIG is set, before any op
    dataset = synthetic_dataset(PER_WORKER_BATCH * num_workers)  # global batch; MWMS splits it
    with strategy.scope():
        model = build_and_compile_cnn_model()

    # Fault tolerance: a restarted group resumes from the last epoch boundary.
    backup = tf.keras.callbacks.BackupAndRestore(backup_dir=os.path.join(run_dir, "backup"))
    history = model.fit(dataset, epochs=EPOCHS, steps_per_epoch=STEPS_PER_EPOCH, callbacks=[backup], verbose=2)

    task_type = strategy.cluster_resolver.task_type
    task_id = strategy.cluster_resolver.task_id
    target = write_path(os.path.join(run_dir, "model"), task_type, task_id)
    model.save(target)  # every worker saves: the save may run collectives
    if not is_chief(task_type, task_id):
        tf.io.gfile.rmtree(os.path.dirname(target))
    print(
        f"example done worker={task_id} loss={history.history['loss'][-1]:.4f} "
        f"first_loss={history.history['loss'][0]:.4f} model={target}",
        flush=True,
    )


if __name__ == "__main__":
    main()

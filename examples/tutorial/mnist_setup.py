"""mnist_setup.py of TensorFlow's multi-worker Keras tutorial
(https://www.tensorflow.org/tutorials/distribute/multi_worker_with_keras), as a second file
shipped with `--set-file` beside main.py, unchanged but for:
- the data: mnist-shaped synthetic examples with learnable labels (a fixed linear teacher),
  because keras.datasets.mnist downloads from the internet, which a cluster's pods (and this
  project's tests) may not reach;
- Adam instead of SGD(0.001), so the few steps of a test learn visibly.
"""

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # tf_keras: Keras 3's fit fails under MWMS on TF 2.21

import numpy as np
import tensorflow as tf


def mnist_dataset(batch_size):
    rng = np.random.default_rng(0)
    x_train = rng.random((2048, 28, 28), dtype=np.float32)
    teacher = rng.standard_normal((28 * 28, 10)).astype(np.float32)
    y_train = np.argmax((x_train.reshape(len(x_train), -1) - 0.5) @ teacher, axis=1).astype(np.int64)
    train_dataset = (
        tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(2048, seed=0).repeat().batch(batch_size)
    )
    return train_dataset


def build_and_compile_cnn_model():
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

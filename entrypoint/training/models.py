"""Models by name, built with tf_keras (legacy Keras 2; see docs/training.md for why).

Every builder takes (input_shape, num_classes, **args) and returns an uncompiled model
whose output is logits. A user model is "package.module:function" with the same signature.
"""

from __future__ import annotations

import importlib

import tf_keras as keras

from .config import ConfigError


def _image_input(input_shape):
    """An input layer plus a channel axis for 2-D (grey) images."""
    inputs = keras.Input(shape=tuple(input_shape))
    x = inputs
    if len(input_shape) == 2:
        x = keras.layers.Reshape((*input_shape, 1))(x)
    return inputs, x


def cnn(input_shape, num_classes, filters=32, hidden=128):
    """The small CNN of TensorFlow's multi-worker Keras tutorial (mnist-style)."""
    inputs, x = _image_input(input_shape)
    if len(input_shape) == 1:
        x = keras.layers.Reshape((input_shape[0], 1, 1))(x)
    x = keras.layers.Conv2D(filters, 3, activation="relu", padding="same")(x)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(hidden, activation="relu")(x)
    outputs = keras.layers.Dense(num_classes)(x)
    return keras.Model(inputs, outputs, name="cnn")


def mlp(input_shape, num_classes, hidden=64, layers=1):
    """A small multi-layer perceptron (fits the 8x8 handwritten digits)."""
    inputs = keras.Input(shape=tuple(input_shape))
    x = keras.layers.Flatten()(inputs)
    for _ in range(layers):
        x = keras.layers.Dense(hidden, activation="relu")(x)
    outputs = keras.layers.Dense(num_classes)(x)
    return keras.Model(inputs, outputs, name="mlp")


def _residual_block(x, width, stride):
    shortcut = x
    y = keras.layers.Conv2D(width, 3, strides=stride, padding="same", use_bias=False)(x)
    y = keras.layers.BatchNormalization()(y)
    y = keras.layers.ReLU()(y)
    y = keras.layers.Conv2D(width, 3, padding="same", use_bias=False)(y)
    y = keras.layers.BatchNormalization()(y)
    if stride != 1 or shortcut.shape[-1] != width:
        shortcut = keras.layers.Conv2D(width, 1, strides=stride, use_bias=False)(shortcut)
        shortcut = keras.layers.BatchNormalization()(shortcut)
    return keras.layers.ReLU()(keras.layers.Add()([y, shortcut]))


def resnet(input_shape, num_classes, width=64, blocks=2, stages=3):
    """A ResNet-ish convolutional net for GPU / throughput benchmarks (widths double per stage)."""
    inputs, x = _image_input(input_shape)
    x = keras.layers.Conv2D(width, 3, padding="same", use_bias=False)(x)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.ReLU()(x)
    for stage in range(stages):
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            x = _residual_block(x, width * 2**stage, stride)
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(num_classes)(x)
    return keras.Model(inputs, outputs, name="resnet")


BUILTIN = {"cnn": cnn, "mlp": mlp, "resnet": resnet}


def resolve_builder(name: str):
    """The model-building function for a built-in name or "package.module:function"."""
    if name in BUILTIN:
        return BUILTIN[name]
    module_name, _, function_name = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ConfigError(
            f"training config: model.name: cannot import module {module_name!r} ({err}); "
            "put it on PYTHONPATH (bake it into the image or mount it)"
        ) from None
    builder = getattr(module, function_name, None)
    if not callable(builder):
        raise ConfigError(f"training config: model.name: {module_name!r} has no function {function_name!r}")
    return builder


def build_model(name: str, input_shape, num_classes: int, args: dict):
    builder = resolve_builder(name)
    try:
        return builder(tuple(input_shape), num_classes, **args)
    except TypeError as err:
        if "argument" not in str(err):
            raise
        raise ConfigError(f"training config: model.args: {name}: {err}") from None

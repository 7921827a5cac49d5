"""`precision` and `jitCompile` on the trainer's own step (entrypoint.training.trainer.replica_step),
in this process on one CPU device: every built-in model trains under mixed_float16 and
mixed_bfloat16 like float32, an XLA-compiled step like the op-by-op one, the export serves
float32, and a model XLA cannot compile is refused in one line. Slow: real TensorFlow; nothing
timed, so it runs beside the cluster tests."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from entrypoint.training import precision
from entrypoint.training.failures import xla_refusal
from entrypoint.training.models import build_model
from entrypoint.training.trainer import replica_step

pytestmark = [pytest.mark.slow, pytest.mark.beside]

STEPS = 30
BATCH = 32
# Small versions of the built-in models (the defaults' shapes, fewer units) on a fixed batch.
MODELS = {
    "mlp": ((8, 8), {"hidden": 32}),
    "cnn": ((12, 12, 1), {"filters": 4, "hidden": 16}),
    "resnet": ((12, 12, 1), {"width": 4, "blocks": 1, "stages": 2}),
}
# The largest gap between a policy's loss and float32's over 30 Adam steps (learning rate 0.001)
# on one batch, relative to the first loss, measured on this machine (TF 2.21, CPU, oneDNN):
# mixed_bfloat16 2.3e-3 (mlp), 1.9e-3 (cnn), 6.1e-4 (resnet); mixed_float16 7.8e-5, 3.8e-4,
# 2.0e-4, while the loss falls by 12-58%. 16 bits keep about 3 (bfloat16) or 4 (float16)
# significant digits: each tolerance is about 10x the largest measured gap.
TOLERANCE = {"mixed_bfloat16": 2e-2, "mixed_float16": 4e-3}
# XLA fuses and reorders float32 operations: the same losses to rounding (measured 2.2e-7).
JIT_TOLERANCE = 1e-5


@pytest.fixture(autouse=True)
def float32_policy_after():
    yield
    precision.set_policy("float32")


def data(shape):
    rng = np.random.default_rng(7)
    return tf.constant(rng.normal(size=(BATCH, *shape)), tf.float32), tf.constant(rng.integers(0, 10, BATCH))


def train(name: str, policy: str, jit: bool = False) -> tuple[list[float], object]:
    """STEPS of the trainer's step on one batch; the losses and the model."""
    shape, args = MODELS[name]
    precision.set_policy(policy)
    keras.utils.set_random_seed(42)
    model = build_model(name, shape, 10, args)
    optimizer = precision.wrap_optimizer(keras.optimizers.Adam(learning_rate=0.001), policy)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=keras.losses.Reduction.NONE)
    step = tf.function(replica_step(model, optimizer, loss_fn, BATCH, None, None, jit=jit))
    x, y = data(shape)
    return [float(step(x, y)) for _ in range(STEPS)], model


@pytest.fixture(scope="module")
def float32_losses():
    return {name: train(name, "float32")[0] for name in MODELS}


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
@pytest.mark.parametrize("name", list(MODELS))
def test_a_mixed_policy_trains_like_float32(float32_losses, name, policy):
    losses, model = train(name, policy)
    # The policy really applied: the layers compute in 16 bits, their variables stay float32 ...
    compute = {layer.compute_dtype for layer in model.layers if layer.weights}
    assert compute == {policy.removeprefix("mixed_")}
    assert {v.dtype for v in model.trainable_variables} == {tf.float32}
    # ... and the loss falls as float32's does, ending within the tolerance.
    base = float32_losses[name]
    assert losses[-1] < 0.9 * losses[0]
    deviation = max(abs(a - b) for a, b in zip(losses, base, strict=True)) / base[0]
    assert deviation <= TOLERANCE[policy], f"{name} {policy}: {losses} vs float32 {base}: {deviation:.2e}"


def test_mixed_float16_scales_the_loss_and_the_export_serves_float32(tmp_path):
    _, model = train("cnn", "mixed_float16")
    assert model.outputs[0].dtype == tf.float16  # the last Dense computes in float16 ...
    exported = precision.float32_outputs(model)
    exported.save(str(tmp_path / "model"), save_format="tf", include_optimizer=False)
    serving = tf.saved_model.load(str(tmp_path / "model")).signatures["serving_default"]
    (inputs,) = serving.structured_input_signature[1].values()
    (outputs,) = serving.structured_outputs.values()
    assert (inputs.dtype, outputs.dtype) == (tf.float32, tf.float32)  # ... the export serves float32
    x, _ = data(MODELS["cnn"][0])
    np.testing.assert_allclose(serving(**{inputs.name: x})[outputs.name], model(x), rtol=1e-2, atol=1e-2)
    # float32 models are exported as they are (the same object: no layer added).
    precision.set_policy("float32")
    plain = build_model("mlp", (8, 8), 10, {})
    assert precision.float32_outputs(plain) is plain


def test_loss_scaling_is_on_only_for_mixed_float16():
    sgd = keras.optimizers.SGD()
    assert precision.scales_loss(precision.wrap_optimizer(sgd, "mixed_float16"))
    assert precision.wrap_optimizer(sgd, "mixed_bfloat16") is sgd
    assert precision.wrap_optimizer(sgd, "float32") is sgd


@pytest.mark.parametrize("name", list(MODELS))
def test_an_xla_compiled_step_trains_like_the_op_by_op_one(float32_losses, name):
    losses, _ = train(name, "float32", jit=True)
    np.testing.assert_allclose(losses, float32_losses[name], rtol=JIT_TOLERANCE)


def test_a_model_xla_cannot_compile_is_refused_in_one_line():
    keras.utils.set_random_seed(42)
    inputs = keras.Input(shape=(4,))
    # numpy_function runs Python: no XLA kernel exists for it.
    doubled = keras.layers.Lambda(lambda t: tf.numpy_function(lambda a: a * 2, [t], tf.float32))(inputs)
    model = keras.Model(inputs, keras.layers.Dense(10)(tf.ensure_shape(doubled, [None, 4])))
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=keras.losses.Reduction.NONE)
    step = tf.function(replica_step(model, keras.optimizers.SGD(), loss_fn, 2, None, None, jit=True))
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        step(tf.ones([2, 4]), tf.constant([0, 1]))
    refusal = xla_refusal(str(raised.value))
    assert refusal is not None and "\n" not in refusal
    assert "jitCompile" in refusal and "PyFunc" in refusal and "set jitCompile: false" in refusal

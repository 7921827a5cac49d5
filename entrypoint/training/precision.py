"""`precision`: the layers' compute dtype, as Keras' global mixed-precision policy.

float32 (the default) changes nothing. mixed_float16 and mixed_bfloat16 compute each layer in
16 bits while its variables stay float32 (tf_keras mixed_precision: a layer casts its float32
variables and inputs to the compute dtype), so checkpoints hold float32 weights whatever the
policy, and gradients are float32 (the all-reduce's dtype stays `allReduceDtype`'s choice).
float16's 5-bit exponent underflows small gradients, so mixed_float16 scales the loss
(LossScaleOptimizer, dynamic: a step whose gradients overflow is skipped and the scale lowered);
bfloat16 has float32's exponent and needs no scaling (Keras' mixed precision guide).

The step casts the logits to float32 before the loss (a softmax in 16 bits loses precision),
and the export serves float32 in and out (`float32_outputs`).
"""

from __future__ import annotations

import tensorflow as tf
import tf_keras as keras

FLOAT32 = "float32"


def set_policy(name: str) -> None:
    """Keras' global policy, set before any layer is built (a layer takes the policy current at
    its construction)."""
    keras.mixed_precision.set_global_policy(name)


def wrap_optimizer(optimizer, name: str):
    """mixed_float16: the optimizer behind dynamic loss scaling; otherwise unchanged."""
    if name == "mixed_float16":
        return keras.mixed_precision.LossScaleOptimizer(optimizer)
    return optimizer


def scales_loss(optimizer) -> bool:
    return isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer)


def float32_outputs(model):
    """The model to export: float32 outputs whatever the policy. A functional model whose output
    is 16-bit gets a float32 linear activation on top (same layers, same variables); anything
    else is exported as it is."""
    outputs = getattr(model, "outputs", None)
    if not outputs or len(outputs) != 1 or outputs[0].dtype == tf.float32:
        return model
    cast = keras.layers.Activation("linear", dtype=FLOAT32, name="float32_logits")(outputs[0])
    return keras.Model(model.inputs, cast, name=model.name)

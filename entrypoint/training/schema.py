"""The training config's JSON schema and its defaults (documented key by key in docs/training.md).

Kept as Python data (not a .json file) so it ships with the package without package-data rules.
The schema is strict (additionalProperties: false everywhere) so a typo is refused, not ignored.
"""

from __future__ import annotations

BUILTIN_MODELS = ("cnn", "mlp", "resnet")

# A user model is named "package.module:function".
USER_MODEL_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$"

# Upper bounds (docs/training.md, "Limits"): far above any sensible run, low enough that an
# absurd value (a typo, an extra zero, 1e9) is refused at once instead of exhausting memory
# or overflowing deep inside TensorFlow. Every number must also be finite (config.py).
MAX_BATCH_PER_REPLICA = 1_048_576  # 2**20 examples
MAX_EXAMPLE_ELEMENTS = 16_777_216  # 2**24 values per example (64 MiB as float32)
MAX_BATCH_BYTES = 2 * 1024**3  # one replica's float32 input batch (all its micro-batches): 2 GiB
MAX_ACCUMULATION_STEPS = 1024  # micro-batches per optimizer step
MAX_SYNTHETIC_BYTES = 4 * 1024**3  # the synthetic data set held in memory: 4 GiB
MAX_CLASSES = 1_000_000
MAX_LEARNING_RATE = 10.0  # plain SGD/Adam diverge far below this
MAX_TIMEOUT_SECONDS = 86_400  # one collective: a day
MAX_HEARTBEAT_TIMEOUT_SECONDS = 3_600  # a silent peer unnoticed for an hour at most
MAX_STEPS = 2**31 - 1
MAX_CHECKPOINT_SECONDS = 604_800  # a checkpoint interval: a week
MAX_SEED = 2**32 - 1  # numpy's seed range
MAX_READ_PARALLELISM = 256  # TFRecord files read at once by one worker
# The dtype gradients are all-reduced in (cast back to float32 before the update); docs/training.md.
ALL_REDUCE_DTYPES = ("float32", "bfloat16", "float16")
# Keras' global dtype policy for the model's layers (docs/training.md, "precision").
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
MAX_STEPS_PER_EXECUTION = 1000  # training steps in one tf.function call

_POSITIVE_INT = {"type": "integer", "minimum": 1}
_SHAPE = {
    "type": "array",
    "items": {"type": "integer", "minimum": 1, "maximum": MAX_EXAMPLE_ELEMENTS},
    "minItems": 1,
    "maxItems": 4,
}
_CLASSES = {"type": "integer", "minimum": 2, "maximum": MAX_CLASSES}
_STEPS = {"type": "integer", "minimum": 1, "maximum": MAX_STEPS}
# gpuMemory (docs/training.md, "GPUs"): TensorFlow's whole GPU, memory growth, or a fraction 0<f<=1
# of each visible GPU (entrypoint/training/devices.py).
GPU_MEMORY_MODES = ("all", "growth")

SCHEMA: dict = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "tf-multiworker built-in trainer config",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "model": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "name": {
                    "anyOf": [
                        {"enum": list(BUILTIN_MODELS)},
                        {"type": "string", "pattern": USER_MODEL_PATTERN},
                    ],
                },
                "args": {"type": "object"},
            },
        },
        "data": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "source": {"enum": ["synthetic", "files"]},
                "path": {"type": "string", "minLength": 1},
                "format": {"enum": ["npz", "tfrecord"]},
                "numClasses": _CLASSES,
                "shuffleBuffer": {"type": "integer", "minimum": 0, "maximum": MAX_BATCH_PER_REPLICA},
                "readParallelism": {"type": "integer", "minimum": 1, "maximum": MAX_READ_PARALLELISM},
                "cache": {"type": "boolean"},
                "synthetic": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "examples": _POSITIVE_INT,
                        "inputShape": _SHAPE,
                        "numClasses": _CLASSES,
                    },
                },
            },
            "if": {"properties": {"source": {"const": "files"}}, "required": ["source"]},
            "then": {"required": ["path", "numClasses"]},
        },
        "batchSizePerReplica": {"type": "integer", "minimum": 1, "maximum": MAX_BATCH_PER_REPLICA},
        "gradientAccumulationSteps": {"type": "integer", "minimum": 1, "maximum": MAX_ACCUMULATION_STEPS},
        "steps": _STEPS,
        "epochs": {"type": "integer", "minimum": 1, "maximum": 1_000_000},
        "learningRate": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_LEARNING_RATE},
        "optimizer": {"enum": ["sgd", "adam"]},
        "checkpoint": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "everySteps": {"type": "integer", "minimum": 0, "maximum": MAX_STEPS},
                "everySeconds": {"type": "number", "minimum": 0, "maximum": MAX_CHECKPOINT_SECONDS},
                "interval": {"enum": ["fixed", "auto"]},
                "minSeconds": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_CHECKPOINT_SECONDS},
                "maxSeconds": {
                    "anyOf": [
                        {"type": "null"},
                        {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_CHECKPOINT_SECONDS},
                    ]
                },
                "keep": {"type": "integer", "minimum": 1, "maximum": 1000},
                "async": {"type": "boolean"},
            },
        },
        "logEverySteps": _STEPS,
        "collective": {"enum": ["auto", "ring", "nccl"]},
        "allReduceDtype": {"enum": list(ALL_REDUCE_DTYPES)},
        "precision": {"enum": list(PRECISIONS)},
        "jitCompile": {"type": "boolean"},
        "stepsPerExecution": {"type": "integer", "minimum": 1, "maximum": MAX_STEPS_PER_EXECUTION},
        "timeoutSeconds": {
            "anyOf": [{"type": "null"}, {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_TIMEOUT_SECONDS}]
        },
        "heartbeatTimeoutSeconds": {
            "anyOf": [{"type": "null"}, {"type": "number", "minimum": 1, "maximum": MAX_HEARTBEAT_TIMEOUT_SECONDS}]
        },
        "seed": {"type": "integer", "minimum": 0, "maximum": MAX_SEED},
        "gpuMemory": {
            "anyOf": [{"enum": list(GPU_MEMORY_MODES)}, {"type": "number", "exclusiveMinimum": 0, "maximum": 1}]
        },
        "tensorboard": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"enabled": {"type": "boolean"}},
        },
        "export": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"enabled": {"type": "boolean"}},
        },
        # The evaluator (evaluator.enabled, or a platform's evaluator task): what it reads.
        "evaluation": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "examples": {"type": "integer", "minimum": 1, "maximum": MAX_STEPS},
                "path": {"anyOf": [{"type": "null"}, {"type": "string", "minLength": 1}]},
                "pollSeconds": {"type": "number", "minimum": 0.1, "maximum": 3600},
            },
        },
    },
}

DEFAULTS: dict = {
    "model": {"name": "cnn", "args": {}},
    "data": {
        "source": "synthetic",
        "format": "npz",
        "shuffleBuffer": 1024,
        # TFRecord: files read at once, one record of each in turn (part of the order); the share
        # parsed and held in memory (docs/training.md, "Data")
        "readParallelism": 4,
        "cache": False,
        "synthetic": {"examples": 4096, "inputShape": [28, 28, 1], "numClasses": 10},
    },
    "batchSizePerReplica": 64,
    # micro-batches of batchSizePerReplica per optimizer step (one all-reduce each step)
    "gradientAccumulationSteps": 1,
    "steps": 200,
    "learningRate": 0.001,
    "optimizer": "adam",
    # async: written in the background after a copy to host memory; interval auto: Young/Daly
    # between minSeconds and maxSeconds, instead of everySteps/everySeconds (docs/training.md)
    "checkpoint": {
        "everySteps": 50,
        "everySeconds": 0,
        "interval": "fixed",
        "minSeconds": 10,
        "maxSeconds": 1800,
        "keep": 3,
        "async": True,
    },
    "logEverySteps": 10,
    "collective": "auto",
    "allReduceDtype": "float32",
    # the layers' compute dtype (variables stay float32); mixed_float16 adds loss scaling
    "precision": "float32",
    # XLA on each replica's forward and backward pass (the all-reduce stays outside)
    "jitCompile": False,
    # training steps per tf.function call: log and checkpoint steps round up to multiples of it
    "stepsPerExecution": 1,
    "timeoutSeconds": None,
    "heartbeatTimeoutSeconds": None,
    "seed": 42,
    "gpuMemory": "all",
    "tensorboard": {"enabled": True},
    "export": {"enabled": True},
    # examples: how many (of evaluation.path's files, else of the training data) each
    # evaluation reads; pollSeconds: how often the evaluator looks for a new checkpoint.
    "evaluation": {"examples": 1024, "path": None, "pollSeconds": 2},
}

# Arguments each built-in model accepts in model.args, each a positive integer up to this
# bound (checked before TensorFlow is imported; resnet doubles `width` per stage).
MODEL_ARGS: dict = {
    "cnn": {"filters": 4096, "hidden": 65536},
    "mlp": {"hidden": 65536, "layers": 100},
    "resnet": {"width": 1024, "blocks": 64, "stages": 8},
}

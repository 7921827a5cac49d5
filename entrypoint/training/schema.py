"""The training config's JSON schema and its defaults (documented key by key in docs/training.md).

Kept as Python data (not a .json file) so it ships with the package without package-data rules.
The schema is strict (additionalProperties: false everywhere) so a typo is refused, not ignored.
"""
from __future__ import annotations

BUILTIN_MODELS = ("cnn", "mlp", "resnet")

# A user model is named "package.module:function".
USER_MODEL_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$"

_POSITIVE_INT = {"type": "integer", "minimum": 1}
_SHAPE = {"type": "array", "items": _POSITIVE_INT, "minItems": 1, "maxItems": 4}

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
                "numClasses": {"type": "integer", "minimum": 2},
                "shuffleBuffer": {"type": "integer", "minimum": 0},
                "synthetic": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "examples": _POSITIVE_INT,
                        "inputShape": _SHAPE,
                        "numClasses": {"type": "integer", "minimum": 2},
                    },
                },
            },
            "if": {"properties": {"source": {"const": "files"}}, "required": ["source"]},
            "then": {"required": ["path", "numClasses"]},
        },
        "batchSizePerReplica": _POSITIVE_INT,
        "steps": _POSITIVE_INT,
        "epochs": _POSITIVE_INT,
        "learningRate": {"type": "number", "exclusiveMinimum": 0},
        "optimizer": {"enum": ["sgd", "adam"]},
        "checkpoint": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "everySteps": _POSITIVE_INT,
                "keep": _POSITIVE_INT,
            },
        },
        "logEverySteps": _POSITIVE_INT,
        "collective": {"enum": ["auto", "ring", "nccl"]},
        "timeoutSeconds": {"anyOf": [{"type": "null"}, {"type": "number", "exclusiveMinimum": 0}]},
        "heartbeatTimeoutSeconds": {"anyOf": [{"type": "null"}, {"type": "number", "minimum": 1}]},
        "seed": {"type": "integer", "minimum": 0},
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
    },
}

DEFAULTS: dict = {
    "model": {"name": "cnn", "args": {}},
    "data": {
        "source": "synthetic",
        "format": "npz",
        "shuffleBuffer": 1024,
        "synthetic": {"examples": 4096, "inputShape": [28, 28, 1], "numClasses": 10},
    },
    "batchSizePerReplica": 64,
    "steps": 200,
    "learningRate": 0.001,
    "optimizer": "adam",
    "checkpoint": {"everySteps": 50, "keep": 3},
    "logEverySteps": 10,
    "collective": "auto",
    "timeoutSeconds": None,
    "heartbeatTimeoutSeconds": None,
    "seed": 42,
    "tensorboard": {"enabled": True},
    "export": {"enabled": True},
}

# Arguments each built-in model accepts in model.args (checked before TensorFlow is imported).
MODEL_ARGS: dict = {
    "cnn": {"filters": int, "hidden": int},
    "mlp": {"hidden": int, "layers": int},
    "resnet": {"width": int, "blocks": int, "stages": int},
}

"""Load, override, validate and default the training config — without importing TensorFlow.

Every refusal is a ConfigError whose message is one line naming the key, e.g.
`training config: steps: -1 is less than the minimum of 1`.
"""

from __future__ import annotations

import copy
import math
import os
from dataclasses import dataclass

import jsonschema
import yaml

# The launcher's ConfigError: a bad training config or environment is one line, exit code 2,
# never retried, the same class on both sides of the launcher/trainer boundary.
from ..errors import ConfigError
from . import devices
from . import schema as limits
from .schema import BUILTIN_MODELS, DEFAULTS, MODEL_ARGS, SCHEMA


class DuplicateKey(Exception):
    """A key given twice in one YAML mapping, with the lines of both."""

    def __init__(self, key, line: int, first_line: int):
        super().__init__(key)
        self.key, self.line, self.first_line = key, line, first_line


class _StrictLoader(yaml.SafeLoader):
    """yaml.safe_load that refuses a key given twice in one mapping (PyYAML keeps the last
    one silently, so `steps: 100` further down would quietly win over `steps: 10`)."""


def _construct_mapping(loader, node, deep=False):
    if isinstance(node, yaml.MappingNode):
        seen: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = loader.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                if key in seen:
                    raise DuplicateKey(key, line, seen[key])
                seen[key] = line
            except TypeError:  # an unhashable key: construct_mapping refuses it below
                continue
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_yaml(text: str):
    """yaml.safe_load, refusing duplicate keys (raises DuplicateKey)."""
    return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass


def load_file(path: str) -> dict:
    """Read a YAML (or JSON, which is YAML) config file; an empty file is an empty config."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as err:
        raise ConfigError(f"training config: cannot read {path}: {err.strerror}") from None
    try:
        data = parse_yaml(text)
    except DuplicateKey as dup:
        raise ConfigError(
            f"training config: {path} line {dup.line}: duplicate key {dup.key!r} (first on line "
            f"{dup.first_line}); keep only one"
        ) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"training config: {path}{where} is not valid YAML/JSON") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"training config: {path} must hold a mapping, got {type(data).__name__}")
    return data


def apply_override(config: dict, assignment: str) -> dict:
    """Apply one `dotted.key=value` override (value parsed as YAML) to a copy of config."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key:
        raise ConfigError(f"training config: --set {assignment!r}: expected key=value, e.g. steps=100")
    try:
        value = parse_yaml(raw) if raw else ""
    except DuplicateKey as dup:
        raise ConfigError(
            f"training config: --set {key}: duplicate key {dup.key!r} in the value; keep only one"
        ) from None
    except yaml.YAMLError:
        value = raw
    out = copy.deepcopy(config)
    node = out
    parts = key.split(".")
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = value
    return out


def _is_integer(checker, instance) -> bool:
    """An integer is an int: not 6.0 (JSON Schema's own rule accepts it) and not a boolean."""
    return isinstance(instance, int) and not isinstance(instance, bool)


_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer),
)


def _path_of(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path)


def _default_of(path: list) -> str:
    node = DEFAULTS
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return ""
        node = node[part]
    return f" (default: {'null' if node is None else node})"


def _non_finite(node, path: list):
    """The path and value of the first NaN or infinite number anywhere in the config."""
    if isinstance(node, float) and not math.isfinite(node):
        return path, node
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in children:
        found = _non_finite(child, [*path, key])
        if found:
            return found
    return None


def _describe(error: jsonschema.ValidationError) -> str:
    path = _path_of(error)
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed))
        key = ".".join(filter(None, [path, extra[0] if extra else "?"]))
        return f"{key}: unknown key (allowed here: {', '.join(allowed)})"
    if error.validator == "required":
        missing = [k for k in error.validator_value if k not in error.instance]
        key = ".".join(filter(None, [path, missing[0] if missing else "?"]))
        why = " when data.source is files" if path == "data" else ""
        return f"{key}: is required{why}"
    if error.validator == "anyOf" and path in ("timeoutSeconds", "heartbeatTimeoutSeconds"):
        meaning, low, high = (
            ("no timeout", "> 0", limits.MAX_TIMEOUT_SECONDS)
            if path == "timeoutSeconds"
            else ("TensorFlow's default", ">= 1", limits.MAX_HEARTBEAT_TIMEOUT_SECONDS)
        )
        return f"{path}: {error.instance!r} must be null ({meaning}) or a number of seconds {low} and <= {high}"
    if error.validator == "anyOf" and path == "gpuMemory":
        return f"gpuMemory: {error.instance!r} must be all, growth, or a fraction of each GPU's memory > 0 and <= 1"
    if error.validator == "type" and error.validator_value == "integer" and isinstance(error.instance, (float, bool)):
        return f"{path}: {error.instance!r} is not an integer; write a whole number without a decimal point"
    if error.validator == "maximum":
        return (
            f"{path}: {error.instance!r} is greater than the maximum of {error.validator_value} "
            "(the documented limit, docs/training.md); use a smaller value"
        )
    if error.validator == "anyOf" and path == "model.name":
        return (
            f"model.name: {error.instance!r} is neither a built-in model "
            f"({', '.join(BUILTIN_MODELS)}) nor 'package.module:function'"
        )
    return f"{path or '(top level)'}: {error.message}"


def validate(config: dict) -> None:
    """Refuse a config that breaks the schema; the message names the first bad key."""
    found = _non_finite(config, [])
    if found:
        where, value = found
        key = ".".join(str(p) for p in where)
        raise ConfigError(
            f"training config: {key}: {value} is not a finite number; set a finite value{_default_of(where)}"
        )
    validator = _Validator(SCHEMA)
    errors = sorted(validator.iter_errors(config), key=lambda e: (len(e.absolute_path), _path_of(e)))
    if errors:
        raise ConfigError(f"training config: {_describe(errors[0])}")
    _validate_model_args(config.get("model", {}))
    if "steps" in config and "epochs" in config:
        raise ConfigError("training config: epochs: set either steps or epochs, not both")


def _validate_model_args(model: dict) -> None:
    name = model.get("name", DEFAULTS["model"]["name"])
    allowed = MODEL_ARGS.get(name)
    if allowed is None:  # a user model: its own function checks its args
        return
    for key, value in model.get("args", {}).items():
        if key not in allowed:
            raise ConfigError(
                f"training config: model.args.{key}: unknown argument of model {name!r} "
                f"(allowed: {', '.join(sorted(allowed))})"
            )
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= allowed[key]:
            raise ConfigError(
                f"training config: model.args.{key}: {value!r} must be a positive integer <= {allowed[key]}"
            )


def merge_defaults(config: dict, defaults: dict = DEFAULTS) -> dict:
    """Deep-merge config over defaults (maps merge, everything else replaces)."""
    out = copy.deepcopy(defaults)
    for key, value in config.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_defaults(value, out[key])
        else:
            out[key] = copy.deepcopy(value)
    return out


def resolve(path: str | None, overrides: list[str]) -> dict:
    """The effective config: file (or empty) + overrides, validated, then defaults filled in."""
    config = load_file(path) if path else {}
    for assignment in overrides:
        config = apply_override(config, assignment)
    return check(config)


def check(config: dict) -> dict:
    """Every check the trainer makes of its config before it imports TensorFlow: the schema,
    the model's arguments, the limits that span several keys. Returns the config with its
    defaults; ConfigError names the first bad key. The host tools run it on training.config
    before anything is applied (tfmw.chart.render)."""
    validate(config)
    effective = merge_defaults(config)
    check_sizes(effective)
    check_checkpoint_interval(effective["checkpoint"])
    devices.check_config(effective)
    return effective


def check_checkpoint_interval(checkpoint: dict) -> None:
    """Refuse a checkpoint schedule that never saves, or an auto interval without bounds."""
    if checkpoint["interval"] == "auto":
        low, high = checkpoint["minSeconds"], checkpoint["maxSeconds"]
        if high is None:
            raise ConfigError(
                "training config: checkpoint.maxSeconds: null with interval auto: the interval would have no "
                "upper bound (an estimate of rare failures could skip checkpoints for days); set a number, "
                f"e.g. {DEFAULTS['checkpoint']['maxSeconds']}"
            )
        if low > high:
            raise ConfigError(
                f"training config: checkpoint.minSeconds: {low} is above checkpoint.maxSeconds ({high}); "
                "set minSeconds <= maxSeconds"
            )
    elif checkpoint["everySteps"] == 0 and checkpoint["everySeconds"] == 0:
        raise ConfigError(
            "training config: checkpoint.everySteps and checkpoint.everySeconds are both 0: no checkpoint "
            "would be written before the end; set one of them above 0, or checkpoint.interval: auto"
        )


def replica_input_batch(config: dict) -> int:
    """The examples one replica's input pipeline hands the step at once: every micro-batch of
    an optimizer step (batchSizePerReplica x gradientAccumulationSteps)."""
    return config["batchSizePerReplica"] * config["gradientAccumulationSteps"]


def check_example_size(shape, config: dict, key: str) -> int:
    """Refuse an example shape or a replica batch over the limits; returns values per example.
    `key` names where the shape came from (the config, or a data file once it is read)."""
    shape = list(shape)
    batch = replica_input_batch(config)
    micro = config["gradientAccumulationSteps"]
    what = (
        f"batchSizePerReplica x gradientAccumulationSteps ({micro} micro-batches)"
        if micro > 1
        else "batchSizePerReplica"
    )
    elements = math.prod(shape)
    if elements > limits.MAX_EXAMPLE_ELEMENTS:
        raise ConfigError(
            f"training config: {key}: {shape} is {elements} values per example, "
            f"more than the limit of {limits.MAX_EXAMPLE_ELEMENTS}; use a smaller shape"
        )
    if batch * elements * 4 > limits.MAX_BATCH_BYTES:
        raise ConfigError(
            f"training config: {what}: {batch} examples of shape {shape} are "
            f"{batch * elements * 4} bytes per replica batch, more than the limit of "
            f"{limits.MAX_BATCH_BYTES} (2 GiB); use a smaller batch or shape"
            + (" or fewer gradientAccumulationSteps" if micro > 1 else "")
        )
    return elements


def check_sizes(config: dict) -> None:
    """Limits that depend on several keys at once (docs/training.md, "Limits"): memory the
    synthetic data and one replica's input batch would take, as float32."""
    data = config["data"]
    if data["source"] != "synthetic":
        return  # the shape of file data is known only once it is read (data.py checks it there)
    synthetic = data["synthetic"]
    shape = synthetic["inputShape"]
    elements = check_example_size(shape, config, "data.synthetic.inputShape")
    examples = synthetic["examples"]
    if examples * elements * 4 > limits.MAX_SYNTHETIC_BYTES:
        raise ConfigError(
            f"training config: data.synthetic.examples: {examples} examples of shape {shape} are "
            f"{examples * elements * 4} bytes, more than the limit of {limits.MAX_SYNTHETIC_BYTES} "
            "(4 GiB); use fewer examples or a smaller shape"
        )


@dataclass(frozen=True)
class RunEnv:
    """The trainer's environment (docs/contracts.md)."""

    shared_dir: str
    run_id: str
    heartbeat_file: str | None


def run_env(environ: dict, shared_dir: str | None = None, run_id: str | None = None) -> RunEnv:
    shared = shared_dir or environ.get("TFMW_SHARED_DIR")
    if not shared:
        raise ConfigError("TFMW_SHARED_DIR is not set: set it (or pass --shared-dir) to the shared storage path")
    rid = run_id or environ.get("TFMW_RUN_ID") or "default"
    if "/" in rid or rid in (".", ".."):
        raise ConfigError(f"TFMW_RUN_ID: {rid!r} must be a plain name (no '/')")
    return RunEnv(shared_dir=shared, run_id=rid, heartbeat_file=environ.get("TFMW_HEARTBEAT_FILE") or None)


def data_path(config: dict, shared_dir: str) -> str:
    """data.path, relative paths resolved against the shared storage directory."""
    path = config["data"]["path"]
    return path if os.path.isabs(path) or "://" in path else os.path.join(shared_dir, path)

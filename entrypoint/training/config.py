"""Load, override, validate and default the training config — without importing TensorFlow.

Every refusal is a ConfigError whose message is one line naming the key, e.g.
`training config: steps: -1 is less than the minimum of 1`.
"""
from __future__ import annotations

import copy
import os
from dataclasses import dataclass

import jsonschema
import yaml

# The launcher's ConfigError: a bad training config or environment is one line, exit code 2,
# never retried, the same class on both sides of the launcher/trainer boundary.
from ..errors import ConfigError  # noqa: F401 - imported from here by the trainer modules
from .schema import BUILTIN_MODELS, DEFAULTS, MODEL_ARGS, SCHEMA


def load_file(path: str) -> dict:
    """Read a YAML (or JSON, which is YAML) config file; an empty file is an empty config."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as err:
        raise ConfigError(f"training config: cannot read {path}: {err.strerror}") from None
    try:
        data = yaml.safe_load(text)
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
        value = yaml.safe_load(raw) if raw else ""
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


def _path_of(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path)


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
    if error.validator == "anyOf" and path == "timeoutSeconds":
        return f"timeoutSeconds: {error.instance!r} must be null (no timeout) or a number of seconds > 0"
    if error.validator == "anyOf" and path == "model.name":
        return (f"model.name: {error.instance!r} is neither a built-in model "
                f"({', '.join(BUILTIN_MODELS)}) nor 'package.module:function'")
    return f"{path or '(top level)'}: {error.message}"


def validate(config: dict) -> None:
    """Refuse a config that breaks the schema; the message names the first bad key."""
    validator = jsonschema.Draft202012Validator(SCHEMA)
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
            raise ConfigError(f"training config: model.args.{key}: unknown argument of model {name!r} "
                              f"(allowed: {', '.join(sorted(allowed))})")
        if not isinstance(value, allowed[key]) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"training config: model.args.{key}: {value!r} must be a positive integer")


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
    validate(config)
    return merge_defaults(config)


@dataclass(frozen=True)
class Cluster:
    """What the trainer needs to know about TF_CONFIG before TensorFlow is imported."""

    num_workers: int
    worker_index: int

    @property
    def is_chief(self) -> bool:
        return self.worker_index == 0


def parse_tf_config(raw: str | None) -> Cluster:
    """This worker's place in the group, from TF_CONFIG (a bad one would otherwise fail deep
    inside TensorFlow). Validation is the launcher's own (entrypoint.cluster), so the trainer
    and the launcher accept exactly the same TF_CONFIGs; the trainer adds that MWMS trains
    with 'worker' (and optionally 'chief') tasks only."""
    from ..cluster import parse_tf_config as validate_tf_config

    if not raw:
        return Cluster(num_workers=1, worker_index=0)
    spec = validate_tf_config(raw)
    cluster, task = spec["cluster"], spec["task"]
    if set(cluster) - {"worker", "chief"} or task["type"] not in ("worker", "chief"):
        raise ConfigError(f"TF_CONFIG: cluster has job types {sorted(cluster)} and task type "
                          f"{task['type']!r}; MultiWorkerMirroredStrategy trains 'worker' (and optionally "
                          "'chief') tasks only")
    chiefs = cluster.get("chief") or []
    workers = cluster.get("worker") or []
    index = 0 if task["type"] == "chief" else task["index"] + len(chiefs)
    return Cluster(num_workers=len(workers) + len(chiefs), worker_index=index)


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

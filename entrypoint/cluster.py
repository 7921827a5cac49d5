"""Cluster spec and TF_CONFIG: pure functions of the pod's identity and settings.

Modelled on TensorFlow's tfconfig_cluster_resolver: TF_CONFIG is
`{"cluster": {"worker": [...]}, "task": {"type": "worker", "index": i}}`. MWMS treats
worker 0 as the chief when no explicit "chief" task exists.

A platform's TF_CONFIG (docs/scheduling.md, "Platforms") may also name:
- a "chief" (TFJob, Volcano): it trains as task 0 of the collective, the workers follow;
- a "master" (TFJob's Master replica, the TF 1.x name): TensorFlow's MWMS knows no "master",
  so it is renamed "chief" in the TF_CONFIG the training command gets;
- an "evaluator": outside the collective (MWMS counts only chief and workers); its pod
  evaluates checkpoints instead of training (entrypoint.training.sidecar);
- "ps": refused, parameter-server training is another strategy.

The one TF_CONFIG parser (parse_tf_config) and the one chief rule (is_chief), for the
launcher and the trainer alike (the trainer's view of it: worker_group), so both accept
exactly the same TF_CONFIGs and agree on who exports and writes the COMPLETED marker.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import jsonschema

from .errors import ConfigError
from .identity import PodIdentity
from .loglines import one_line
from .settings import LauncherSettings

# Task types a platform may inject for MultiWorkerMirroredStrategy. "ps" is refused:
# parameter-server training is a different strategy.
_MWMS_TASK_TYPES = ("chief", "worker", "evaluator")
# The tasks of the collective: MWMS's all-reduce group (TF's multi_worker_util.worker_count).
TRAINING_TASK_TYPES = ("chief", "worker")
MASTER, CHIEF, EVALUATOR, PS = "master", "chief", "evaluator", "ps"

TF_CONFIG_SCHEMA = {
    "type": "object",
    "required": ["cluster", "task"],
    "properties": {
        "cluster": {
            "type": "object",
            "minProperties": 1,
            "propertyNames": {"enum": list(_MWMS_TASK_TYPES)},
            "additionalProperties": {
                "type": "array",
                "minItems": 1,
                # \Z, not $ (which also matches before a trailing newline); the port's range
                # is checked in parse_tf_config
                "items": {"type": "string", "pattern": r"^[^\s:\x00-\x1f\x7f]+:[0-9]{1,5}\Z"},
            },
        },
        "task": {
            "type": "object",
            "required": ["type", "index"],
            "properties": {
                "type": {"enum": list(_MWMS_TASK_TYPES)},
                "index": {"type": "integer", "minimum": 0},
            },
        },
        "rpc_layer": {"type": "string"},
        "environment": {"type": "string"},
    },
}


def worker_host(settings: LauncherSettings, host_prefix: str, ordinal: int) -> str:
    """Stable DNS name of worker `ordinal`, as the headless Service publishes it
    (`host_prefix`: the StatefulSet's name, or an Indexed Job's)."""
    return f"{host_prefix}-{ordinal}.{settings.service}.{settings.namespace}.svc.{settings.cluster_domain}"


def worker_addresses(settings: LauncherSettings, host_prefix: str) -> list[str]:
    """Every worker's `host:port`, in ordinal order (the order is the task index)."""
    if settings.loopback_ports:
        # Local-only mapping (make local without network namespaces): TF's gRPC server
        # binds the wildcard address, so workers on one loopback need distinct ports.
        return [f"127.0.0.1:{settings.port + j}" for j in range(settings.replicas)]
    return [f"{worker_host(settings, host_prefix, j)}:{settings.port}" for j in range(settings.replicas)]


def build_tf_config(settings: LauncherSettings, identity: PodIdentity) -> dict:
    return {
        "cluster": {"worker": worker_addresses(settings, identity.host_prefix)},
        "task": {"type": "worker", "index": identity.ordinal},
    }


# Linux refuses to exec a program with one environment string over 32 pages (128 KiB,
# MAX_ARG_STRLEN), and TensorFlow reads TF_CONFIG only from the environment.
MAX_TF_CONFIG_BYTES = 128 * 1024 - len("TF_CONFIG=") - 1


def check_tf_config_size(encoded: str) -> None:
    size = len(encoded.encode())
    if size > MAX_TF_CONFIG_BYTES:
        raise ConfigError(
            f"TF_CONFIG would be {size} bytes, over Linux's {MAX_TF_CONFIG_BYTES}-byte limit for one "
            "environment variable: use shorter release/namespace names (fullnameOverride) or fewer "
            "workers.replicas"
        )


def _unique_keys(pairs: list) -> dict:
    """json object hook: a key given twice is ambiguous (json keeps the last one silently)."""
    keys = [key for key, _ in pairs]
    for key in keys:
        if keys.count(key) > 1:
            raise ConfigError(f"TF_CONFIG has the key {key!r} twice; give each key once")
    return dict(pairs)


def _check_members(config: dict) -> None:
    """What the schema cannot say: ports in 1-65535, every task its own address, the task
    index a JSON integer (TensorFlow's TFConfigClusterResolver takes int(index), so `1.0`,
    `true` or `"1"` would silently become task 1; the schema's "integer" admits 1.0)."""
    seen: dict[str, str] = {}
    for task_type, members in config["cluster"].items():
        for i, address in enumerate(members):
            where = f"TF_CONFIG['cluster'][{task_type!r}][{i}]"
            port = int(address.rsplit(":", 1)[1])
            if not 1 <= port <= 65535:
                raise ConfigError(f"{where}={address!r}: port {port} is not a TCP port 1-65535")
            if address in seen:
                raise ConfigError(f"{where}={address!r} is also {seen[address]}: every task needs its own host:port")
            seen[address] = where
    index = config["task"]["index"]
    if type(index) is not int:  # bool is an int subclass, and refused too
        raise ConfigError(
            f"TF_CONFIG['task']['index']={json.dumps(index)} must be a JSON integer "
            f"(0, 1, ...), not {type(index).__name__}"
        )


def _platform_roles(config):
    """The role rules of the module docstring, before the schema: `ps` refused, `master`
    renamed `chief`, at most one chief and one evaluator (TensorFlow's own limits,
    multi_worker_util._validate_cluster_spec)."""
    if not isinstance(config, dict) or not isinstance(config.get("cluster"), dict):
        return config  # the schema says what is wrong
    cluster, task = config["cluster"], config.get("task")
    if any(isinstance(members, dict) for members in cluster.values()):
        raise ConfigError(
            "TF_CONFIG has a sparse cluster spec (a task map, not a list): TFJob's "
            "enableDynamicWorker is for parameter-server training; set enableDynamicWorker: "
            "false to run MultiWorkerMirroredStrategy"
        )
    if cluster.get(PS) or (isinstance(task, dict) and task.get("type") == PS):
        raise ConfigError(
            "TF_CONFIG has 'ps' tasks: parameter-server training is not "
            "MultiWorkerMirroredStrategy; drop the PS replicas (TFJob tfReplicaSpecs.PS, "
            "Volcano's --ps task) and run chief/worker replicas only"
        )
    if MASTER in cluster:
        if CHIEF in cluster:
            raise ConfigError(
                "TF_CONFIG has both 'master' and 'chief' tasks: give the job one chief "
                "(TFJob: one Chief or one Master replica spec)"
            )
        cluster = {(CHIEF if k == MASTER else k): v for k, v in cluster.items()}
        config = dict(config, cluster=cluster)
        if isinstance(task, dict) and task.get("type") == MASTER:
            config["task"] = dict(task, type=CHIEF)
    for role in (CHIEF, EVALUATOR):
        members = cluster.get(role)
        if isinstance(members, list) and len(members) > 1:
            setting = "tfReplicaSpecs.Chief/Master" if role == CHIEF else "tfReplicaSpecs.Evaluator"
            raise ConfigError(
                f"TF_CONFIG['cluster'][{role!r}] has {len(members)} tasks; TensorFlow allows "
                f"one {role}: set replicas: 1 (TFJob {setting}, Volcano task {role!r})"
            )
    return config


def parse_tf_config(raw: str) -> dict:
    """Validate a TF_CONFIG injected by a platform (TFJob, Volcano, Run:ai) and return it,
    with the role rules of the module docstring applied (`master` becomes `chief`)."""
    try:
        config = json.loads(raw, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as err:
        raise ConfigError(
            f"TF_CONFIG is not valid JSON ({err.msg} at char {err.pos}); unset it to let the launcher derive it"
        ) from None
    except RecursionError:
        raise ConfigError(
            "TF_CONFIG is nested too deeply to be a cluster spec; unset it to let the launcher derive it"
        ) from None
    config = _platform_roles(config)
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(TF_CONFIG_SCHEMA).iter_errors(config))
    if error is not None:
        where = "TF_CONFIG" + "".join(f"[{p!r}]" if isinstance(p, str) else f"[{p}]" for p in error.absolute_path)
        if error.validator == "pattern" and list(error.absolute_path)[:1] == ["cluster"]:
            raise ConfigError(
                f"{where}={error.instance!r} must be 'host:port' (a host without spaces, "
                "colons or control characters; a port 1-65535)"
            )
        raise ConfigError(f"{where}: {one_line(error.message, 300)}")
    _check_members(config)
    task_type, index = config["task"]["type"], config["task"]["index"]
    members = config["cluster"].get(task_type)
    if members is None:
        raise ConfigError(f"TF_CONFIG['task']['type']={task_type!r} has no list in TF_CONFIG['cluster']")
    if index >= len(members):
        raise ConfigError(
            f"TF_CONFIG['task']['index']={index} is out of range: cluster has {len(members)} {task_type!r} task(s)"
        )
    return config


def task_hosts(tf_config: Mapping) -> list[str]:
    """The host name (without port) of each task of the collective (chief and workers; an
    evaluator is not one), in rank order: the chief, then the workers by index."""
    return [
        address.rsplit(":", 1)[0]
        for task_type in TRAINING_TASK_TYPES
        for address in tf_config["cluster"].get(task_type, [])
    ]


def cluster_hosts(tf_config: Mapping) -> list[str]:
    """The collective's host names, each once (tasks may share a host: make local's loopback)."""
    return list(dict.fromkeys(task_hosts(tf_config)))


def is_chief(tf_config: Mapping) -> bool:
    """Is this the task that exports the model and writes the completion marker?"""
    task = tf_config["task"]
    if "chief" in tf_config["cluster"]:
        return task["type"] == "chief"
    return task["type"] == "worker" and task["index"] == 0


@dataclass(frozen=True)
class Cluster:
    """What the trainer needs to know about TF_CONFIG before TensorFlow is imported."""

    num_workers: int
    worker_index: int  # the rank in the MWMS group: the chief is 0 (worker_group), the workers follow
    evaluator: bool = False  # an evaluator task: evaluates checkpoints, outside the collective

    @property
    def is_chief(self) -> bool:
        return self.worker_index == 0 and not self.evaluator


def is_evaluator(tf_config: Mapping) -> bool:
    return tf_config["task"]["type"] == EVALUATOR


def worker_group(raw: str | None) -> Cluster:
    """This worker's place in the MWMS group, from TF_CONFIG (unset or empty: one worker).
    parse_tf_config validates it (a bad one would otherwise fail deep inside TensorFlow). An
    evaluator task is outside the group; the group is the chief (if any) and the workers."""
    if not raw:
        return Cluster(num_workers=1, worker_index=0)
    spec = parse_tf_config(raw)
    cluster, task = spec["cluster"], spec["task"]
    chiefs = len(cluster.get(CHIEF) or [])
    workers = len(cluster.get("worker") or [])
    if chiefs + workers == 0:
        raise ConfigError(
            f"TF_CONFIG: cluster has job types {sorted(cluster)} and no 'chief' or 'worker' "
            "task: MultiWorkerMirroredStrategy has nobody to train"
        )
    if task["type"] == EVALUATOR:
        return Cluster(num_workers=workers + chiefs, worker_index=task["index"], evaluator=True)
    return Cluster(num_workers=workers + chiefs, worker_index=0 if is_chief(spec) else task["index"] + chiefs)

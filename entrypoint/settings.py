"""The launcher's settings, read from the pod environment and validated with jsonschema.

The chart sets these variables (docs/contracts.md); anything a value can break is refused
here, before any DNS lookup or TensorFlow import, with one line naming the variable.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import jsonschema

from .errors import ConfigError
from .hangwatch import ADAPTIVE
from .hangwatch import MODES as HANG_DETECTION_MODES
from .standby import POLICIES as STANDBY_POLICIES

# Anchored with \Z, not $: jsonschema matches patterns with re.search, where "$" also matches
# before a trailing newline, so "default\n" was a valid namespace and the peer host became
# "...default\n.svc...". Every pattern here matches the whole value or nothing.
_DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z"
_DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z"
_UINT = r"^(0|[1-9][0-9]*)\Z"
_BOOL = r"^(0|1|true|false|yes|no)\Z"
_LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z"
# A path or URI: anything printable (a newline or other control character would silently
# name another directory, so the run's checkpoints and COMPLETED marker would go astray).
_NO_CONTROL = r"^[^\x00-\x1f\x7f]*\Z"
POLICIES = ("scaleToZero", "idle")

# Only the variables the launcher derives TF_CONFIG from are "required"; they are not
# needed when the platform (TFJob, Volcano, Run:ai) already injected TF_CONFIG. TFMW_REPLICAS
# is not needed either where the launcher reads the group's size from its StatefulSet through
# the API (TFMW_API_DIR and TFMW_STATEFULSET set: the chart with API access), so that a change
# of workers.replicas is a resize, not a new pod template.
DERIVE_REQUIRED = ("TFMW_POD_NAME", "TFMW_NAMESPACE", "TFMW_SERVICE", "TFMW_REPLICAS")
# An Indexed Job pod: the index and hostname come from the Job controller, the rest from the
# manifest (examples/indexed-job.yaml).
INDEXED_JOB_REQUIRED = ("TFMW_NAMESPACE", "TFMW_SERVICE", "TFMW_REPLICAS")

ENV_SCHEMA = {
    "type": "object",
    "properties": {
        "TFMW_POD_NAME": {"type": "string", "maxLength": 253, "pattern": _DNS1123_SUBDOMAIN},
        "TFMW_POD_UID": {"type": "string", "maxLength": 64, "pattern": "^[0-9a-fA-F-]*$"},
        "TFMW_NAMESPACE": {"type": "string", "maxLength": 63, "pattern": _DNS1123_LABEL},
        "TFMW_STATEFULSET": {"type": "string", "maxLength": 63, "pattern": _DNS1123_LABEL},
        "TFMW_SERVICE": {"type": "string", "maxLength": 63, "pattern": _DNS1123_LABEL},
        "TFMW_REPLICAS": {"type": "string", "pattern": _UINT, "maxLength": 5},
        "TFMW_PORT": {"type": "string", "pattern": _UINT, "maxLength": 5},
        "TFMW_METRICS_PORT": {"type": "string", "pattern": _UINT, "maxLength": 5},
        "TFMW_KEEP_LOG_MIB": {"type": "string", "pattern": _UINT, "maxLength": 4},
        "TFMW_CLUSTER_DOMAIN": {"type": "string", "maxLength": 253, "pattern": _DNS1123_SUBDOMAIN},
        "TFMW_PEER_TIMEOUT_SECONDS": {"type": "string", "pattern": _UINT, "maxLength": 6},
        "TFMW_RUN_ID": {"type": "string", "maxLength": 63, "pattern": _DNS1123_LABEL},
        "TFMW_LOOPBACK_PORTS": {"type": "string", "pattern": _BOOL},
        "TFMW_MAX_RESTARTS": {"type": "string", "pattern": _UINT, "maxLength": 4},
        "TFMW_HANG_TIMEOUT_SECONDS": {"type": "string", "pattern": _UINT, "maxLength": 6},
        "TFMW_HANG_DETECTION": {"enum": [*HANG_DETECTION_MODES, ""]},  # "": unset (adaptive)
        "TFMW_ON_SUCCESS": {"enum": [*POLICIES, ""]},  # "": unset
        "TFMW_WARM_STANDBY": {"enum": [*STANDBY_POLICIES, ""]},  # "": unset (auto)
        "TFMW_ON_FAILURE": {"enum": [*POLICIES, ""]},
        "TFMW_ACTIVE_DEADLINE_SECONDS": {"type": "string", "pattern": _UINT, "maxLength": 9},
        "TFMW_GRACE_SECONDS": {"type": "string", "pattern": _UINT, "maxLength": 9},
        "TFMW_POD_REVISION": {"type": "string", "pattern": _LABEL_VALUE, "maxLength": 63},
        "TFMW_STATUS_CONFIGMAP": {"type": "string", "maxLength": 253, "pattern": _DNS1123_SUBDOMAIN},
        "TFMW_API_DIR": {"type": "string", "pattern": r"^(/[^\x00-\x1f\x7f]*)?\Z", "maxLength": 4096},
        "TFMW_SHARED_DIR": {"type": "string", "pattern": _NO_CONTROL, "maxLength": 4096},
        "JOB_COMPLETION_INDEX": {"type": "string", "pattern": _UINT, "maxLength": 6},
    },
}

_WHAT = {
    "TFMW_POD_NAME": "a DNS-1123 name '<statefulset>-<n>'",
    "TFMW_POD_UID": "the pod's metadata.uid (hex digits and dashes)",
    "TFMW_NAMESPACE": "a DNS-1123 label",
    "TFMW_STATEFULSET": "a DNS-1123 label",
    "TFMW_SERVICE": "a DNS-1123 label",
    "TFMW_REPLICAS": "a whole number >= 1 (workers.replicas)",
    "TFMW_PORT": "a TCP port 1-65535 (workers.port)",
    "TFMW_METRICS_PORT": "a TCP port 1-65535, or 0 for no metrics endpoint (metrics.port)",
    "TFMW_KEEP_LOG_MIB": "a whole number of MiB, 0 to keep no log on shared storage (logs.keepMiB)",
    "TFMW_CLUSTER_DOMAIN": "a DNS name such as cluster.local (clusterDomain)",
    "TFMW_PEER_TIMEOUT_SECONDS": "a whole number of seconds (peers.timeoutSeconds)",
    "TFMW_RUN_ID": "a DNS-1123 label (training.runId)",
    "TFMW_LOOPBACK_PORTS": "0 or 1",
    "TFMW_MAX_RESTARTS": "a whole number",
    "TFMW_HANG_TIMEOUT_SECONDS": "a whole number of seconds (0 disables the watchdog)",
    "TFMW_HANG_DETECTION": "adaptive or static (training.hangDetection)",
    "TFMW_ON_SUCCESS": "scaleToZero or idle (completion.onSuccess)",
    "TFMW_WARM_STANDBY": "auto, true or false (training.warmStandby)",
    "TFMW_ON_FAILURE": "scaleToZero or idle (completion.onFailure)",
    "TFMW_ACTIVE_DEADLINE_SECONDS": "a whole number of seconds (training.activeDeadlineSeconds; 0: none)",
    "TFMW_GRACE_SECONDS": "a whole number of seconds (workers.terminationGracePeriodSeconds)",
    "TFMW_POD_REVISION": "a label value (the pod's controller-revision-hash)",
    "TFMW_STATUS_CONFIGMAP": "a DNS-1123 name (the chart's status ConfigMap)",
    "TFMW_API_DIR": "an absolute path (the projected service-account token's directory)",
    "TFMW_SHARED_DIR": "a path or object-store URI without control characters (storage.*)",
    "JOB_COMPLETION_INDEX": "a whole number (the Job controller sets it)",
}


@dataclass(frozen=True)
class LauncherSettings:
    pod_name: str | None
    namespace: str | None
    statefulset: str | None
    service: str | None
    replicas: int | None
    port: int
    metrics_port: int  # the launcher's /metrics (entrypoint.metrics); 0: none
    keep_log_mib: int  # this pod's log kept in <run>/logs (entrypoint.podlog); 0: none
    cluster_domain: str
    peer_timeout_seconds: int
    run_id: str | None
    shared_dir: str | None
    loopback_ports: bool
    max_restarts: int
    hang_timeout_seconds: int
    hang_detection: str  # adaptive | static (unset: adaptive)
    warm_standby: str  # auto | true | false (unset: auto; entrypoint.standby)
    on_success: str  # scaleToZero | idle (unset: idle, what older manifests get)
    on_failure: str
    active_deadline_seconds: int  # 0: none
    pod_revision: str  # controller-revision-hash of the pod ("" unknown)
    api_dir: str | None  # token, ca.crt, namespace; None: no API access
    status_configmap: str | None
    # The group's size is the StatefulSet's spec.replicas, read through the API (no
    # TFMW_REPLICAS): a change re-forms the group at the new size (a resize, entrypoint.launcher).
    resizable: bool = False
    pod_uid: str | None = None  # metadata.uid: the status writes are fenced by it (entrypoint.status)
    grace_seconds: int = 0  # the pod's terminationGracePeriodSeconds; 0: not known


def _truthy(value: str) -> bool:
    return value in ("1", "true", "yes")


def _check_schema(env: Mapping[str, str]) -> None:
    relevant = {k: v for k, v in env.items() if k in ENV_SCHEMA["properties"]}
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(ENV_SCHEMA).iter_errors(relevant))
    if error is None:
        return
    key = error.path[0] if error.path else "environment"
    value = relevant.get(key, "")
    if error.validator in ("pattern", "maxLength", "enum"):
        raise ConfigError(f"{key}={value!r} must be {_WHAT.get(key, 'valid')}")
    raise ConfigError(f"{key}={value!r}: {error.message}")


def _metrics_port(env: Mapping[str, str], port: int, replicas: int | None, loopback: bool) -> int:
    """TFMW_METRICS_PORT, refused when it is no port or is a port the group's gRPC uses (worker j
    of a loopback group serves metrics on metrics_port + j, as gRPC on port + j)."""
    raw = env.get("TFMW_METRICS_PORT") or "0"
    metrics = int(raw)
    if metrics == 0:
        return 0
    if metrics > 65535:
        raise ConfigError(f"TFMW_METRICS_PORT={raw!r} must be {_WHAT['TFMW_METRICS_PORT']}")
    span = (replicas or 1) if loopback else 1
    if metrics + span - 1 > 65535:
        raise ConfigError(
            f"TFMW_METRICS_PORT={metrics} with TFMW_LOOPBACK_PORTS=1 and {span} workers needs "
            f"ports up to {metrics + span - 1}, over 65535: set metrics.port to at most {65536 - span}"
        )
    if metrics < port + span and port < metrics + span:
        raise ConfigError(
            f"TFMW_METRICS_PORT={metrics} is a port the workers' gRPC uses (TFMW_PORT={port}"
            f"{f' to {port + span - 1}' if span > 1 else ''}): set metrics.port to another port"
        )
    return metrics


def load_settings(
    env: Mapping[str, str], need_derivation: bool = True, required: Sequence[str] | None = None
) -> LauncherSettings:
    """Validate the pod environment. `need_derivation`: TF_CONFIG is not preset, so the
    variables it is derived from (`required`, default: a StatefulSet pod's) must all be there."""
    _check_schema(env)
    resizable = not env.get("TFMW_REPLICAS") and bool(env.get("TFMW_API_DIR") and env.get("TFMW_STATEFULSET"))
    if need_derivation:
        missing = [k for k in (DERIVE_REQUIRED if required is None else required) if not env.get(k)]
        if resizable and "TFMW_REPLICAS" in missing:
            missing.remove("TFMW_REPLICAS")  # read from the StatefulSet through the API
        if missing:
            raise ConfigError(f"{', '.join(missing)} not set; the chart sets them (or preset TF_CONFIG)")
    replicas = int(env["TFMW_REPLICAS"]) if env.get("TFMW_REPLICAS") else None
    if replicas is not None and replicas < 1:
        raise ConfigError(f"TFMW_REPLICAS={env['TFMW_REPLICAS']!r} must be {_WHAT['TFMW_REPLICAS']}")
    port = int(env.get("TFMW_PORT") or 2222)
    if not 1 <= port <= 65535:
        raise ConfigError(f"TFMW_PORT={env['TFMW_PORT']!r} must be {_WHAT['TFMW_PORT']}")
    loopback_ports = _truthy(env.get("TFMW_LOOPBACK_PORTS", "0"))
    if loopback_ports and replicas is not None and port + replicas - 1 > 65535:
        # worker j listens on TFMW_PORT + j: the last one must still be a TCP port
        raise ConfigError(
            f"TFMW_PORT={port} with TFMW_LOOPBACK_PORTS=1 and TFMW_REPLICAS={replicas} needs ports up to "
            f"{port + replicas - 1}, over 65535: set workers.port to at most {65536 - replicas}"
        )
    metrics_port = _metrics_port(env, port, replicas, loopback_ports)
    return LauncherSettings(
        pod_name=env.get("TFMW_POD_NAME") or None,
        namespace=env.get("TFMW_NAMESPACE") or None,
        statefulset=env.get("TFMW_STATEFULSET") or None,
        service=env.get("TFMW_SERVICE") or None,
        replicas=replicas,
        port=port,
        metrics_port=metrics_port,
        keep_log_mib=int(env.get("TFMW_KEEP_LOG_MIB") or 0),
        cluster_domain=env.get("TFMW_CLUSTER_DOMAIN") or "cluster.local",
        peer_timeout_seconds=int(env.get("TFMW_PEER_TIMEOUT_SECONDS") or 600),
        run_id=env.get("TFMW_RUN_ID") or None,
        shared_dir=env.get("TFMW_SHARED_DIR") or None,
        loopback_ports=loopback_ports,
        max_restarts=int(env.get("TFMW_MAX_RESTARTS") or 20),
        hang_timeout_seconds=int(env.get("TFMW_HANG_TIMEOUT_SECONDS") or 0),
        hang_detection=env.get("TFMW_HANG_DETECTION") or ADAPTIVE,
        warm_standby=env.get("TFMW_WARM_STANDBY") or "auto",
        on_success=env.get("TFMW_ON_SUCCESS") or "idle",
        on_failure=env.get("TFMW_ON_FAILURE") or "idle",
        active_deadline_seconds=int(env.get("TFMW_ACTIVE_DEADLINE_SECONDS") or 0),
        pod_revision=env.get("TFMW_POD_REVISION") or "",
        api_dir=env.get("TFMW_API_DIR") or None,
        status_configmap=env.get("TFMW_STATUS_CONFIGMAP") or None,
        resizable=resizable and need_derivation,
        pod_uid=env.get("TFMW_POD_UID") or None,
        grace_seconds=int(env.get("TFMW_GRACE_SECONDS") or 0),
    )

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
from .membership import bounds_problem
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
# A label selector of equality terms, as the chart renders its worker selector labels.
_SELECTOR = r"^[A-Za-z0-9./_-]+=[A-Za-z0-9._-]*(,[A-Za-z0-9./_-]+=[A-Za-z0-9._-]*)*\Z"
POLICIES = ("scaleToZero", "idle")
# The rights of the workers' Role the chart can leave out (rbac.events, rbac.pods.get,
# rbac.pods.delete) that the launcher would otherwise use: TFMW_RBAC_OFF names them.
RBAC_RIGHTS = ("events", "pods.get", "pods.delete")
_RBAC_RIGHT = "(" + "|".join(r.replace(".", r"\.") for r in RBAC_RIGHTS) + ")"

# Only the variables the launcher derives TF_CONFIG from are "required"; they are not
# needed when the platform (TFJob, Volcano, Run:ai) already injected TF_CONFIG. TFMW_REPLICAS
# is not needed either where the launcher reads the group's size from its StatefulSet through
# the API (TFMW_API_DIR and TFMW_STATEFULSET set: the chart with API access), so that a change
# of workers.replicas is a resize, not a new pod template.
DERIVE_REQUIRED = ("TFMW_POD_NAME", "TFMW_NAMESPACE", "TFMW_SERVICE", "TFMW_REPLICAS")
# An Indexed Job pod: the index and hostname come from the Job controller, the rest from the
# manifest (examples/indexed-job.yaml).
INDEXED_JOB_REQUIRED = ("TFMW_NAMESPACE", "TFMW_SERVICE", "TFMW_REPLICAS")


@dataclass(frozen=True)
class EnvVar:
    """One variable of the pod environment contract (docs/contracts.md): what it must look like
    (a jsonschema property), the words a refusal uses, and whether the chart sets it (so
    `workers.extraEnv` may not)."""

    name: str
    schema: dict
    what: str
    chart_sets: bool = True
    default: str = ""  # what unset (or empty) means


def _text(pattern: str, max_length: int) -> dict:
    return {"type": "string", "pattern": pattern, "maxLength": max_length}


def _choice(values) -> dict:
    return {"enum": [*values, ""]}  # "": unset (the default)


# The contract, declared once: the schema, the refusal's words and the chart's reserved names
# are derived from it (ENV_SCHEMA, WHAT, CHART_ENV).
ENV = (
    EnvVar("TFMW_POD_NAME", _text(_DNS1123_SUBDOMAIN, 253), "a DNS-1123 name '<statefulset>-<n>'"),
    EnvVar("TFMW_POD_UID", _text("^[0-9a-fA-F-]*$", 64), "the pod's metadata.uid (hex digits and dashes)"),
    EnvVar("TFMW_NAMESPACE", _text(_DNS1123_LABEL, 63), "a DNS-1123 label"),
    EnvVar("TFMW_STATEFULSET", _text(_DNS1123_LABEL, 63), "a DNS-1123 label"),
    EnvVar("TFMW_SERVICE", _text(_DNS1123_LABEL, 63), "a DNS-1123 label"),
    EnvVar(
        "TFMW_POD_SELECTOR",
        _text(_SELECTOR, 1024),
        "a label selector 'key=value,...' (the chart's worker selector labels)",
    ),
    EnvVar("TFMW_REPLICAS", _text(_UINT, 5), "a whole number >= 1 (workers.replicas)"),
    EnvVar("TFMW_PORT", _text(_UINT, 5), "a TCP port 1-65535 (workers.port)", default="2222"),
    EnvVar(
        "TFMW_METRICS_PORT",
        _text(_UINT, 5),
        "a TCP port 1-65535, or 0 for no metrics endpoint (metrics.port)",
        default="0",
    ),
    EnvVar(
        "TFMW_KEEP_LOG_MIB",
        _text(_UINT, 4),
        "a whole number of MiB, 0 to keep no log on shared storage (logs.keepMiB)",
        default="0",
    ),
    EnvVar(
        "TFMW_CLUSTER_DOMAIN",
        _text(_DNS1123_SUBDOMAIN, 253),
        "a DNS name such as cluster.local (clusterDomain)",
        default="cluster.local",
    ),
    EnvVar(
        "TFMW_PEER_TIMEOUT_SECONDS", _text(_UINT, 6), "a whole number of seconds (peers.timeoutSeconds)", default="600"
    ),
    EnvVar("TFMW_RUN_ID", _text(_DNS1123_LABEL, 63), "a DNS-1123 label (training.runId)"),
    EnvVar(
        "TFMW_ADOPT_RUN_DIR",
        {"type": "string", "pattern": _BOOL},
        "true or false (training.adoptRunDir)",
        default="false",
    ),
    EnvVar("TFMW_LOOPBACK_PORTS", {"type": "string", "pattern": _BOOL}, "0 or 1", chart_sets=False, default="0"),
    EnvVar("TFMW_MAX_RESTARTS", _text(_UINT, 4), "a whole number", default="20"),
    EnvVar("TFMW_SAME_ERROR_LIMIT", _text(_UINT, 4), "a whole number (training.sameErrorLimit; 0: off)", default="2"),
    EnvVar(
        "TFMW_HANG_TIMEOUT_SECONDS", _text(_UINT, 6), "a whole number of seconds (0 disables the watchdog)", default="0"
    ),
    EnvVar(
        "TFMW_HANG_DETECTION",
        _choice(HANG_DETECTION_MODES),
        "adaptive or static (training.hangDetection)",
        default=ADAPTIVE,
    ),
    EnvVar(
        "TFMW_ELASTIC_MIN_REPLICAS",
        _text(_UINT, 5),
        "a whole number of workers (training.elastic.minReplicas; 0: not elastic)",
        default="0",
    ),
    EnvVar(
        "TFMW_ELASTIC_GRACE_SECONDS",
        _text(_UINT, 6),
        "a whole number of seconds (training.elastic.graceSeconds)",
        default="120",
    ),
    EnvVar(
        "TFMW_ELASTIC_MICRO_BATCHES",
        _text(_UINT, 5),
        "a whole number >= 1 (training.config.gradientAccumulationSteps)",
        default="1",
    ),
    EnvVar("TFMW_ON_SUCCESS", _choice(POLICIES), "scaleToZero or idle (completion.onSuccess)", default="idle"),
    EnvVar(
        "TFMW_WARM_STANDBY", _choice(STANDBY_POLICIES), "auto, true or false (training.warmStandby)", default="auto"
    ),
    EnvVar("TFMW_ON_FAILURE", _choice(POLICIES), "scaleToZero or idle (completion.onFailure)", default="idle"),
    EnvVar(
        "TFMW_ACTIVE_DEADLINE_SECONDS",
        _text(_UINT, 9),
        "a whole number of seconds (training.activeDeadlineSeconds; 0: none)",
        default="0",
    ),
    EnvVar(
        "TFMW_GRACE_SECONDS",
        _text(_UINT, 9),
        "a whole number of seconds (workers.terminationGracePeriodSeconds)",
        default="0",
    ),
    EnvVar("TFMW_POD_REVISION", _text(_LABEL_VALUE, 63), "a label value (the pod's controller-revision-hash)"),
    EnvVar("TFMW_STATUS_CONFIGMAP", _text(_DNS1123_SUBDOMAIN, 253), "a DNS-1123 name (the chart's status ConfigMap)"),
    EnvVar(
        "TFMW_API_DIR",
        _text(r"^(/[^\x00-\x1f\x7f]*)?\Z", 4096),
        "an absolute path (the projected service-account token's directory)",
    ),
    EnvVar(
        "TFMW_RBAC_OFF",
        _text(rf"^({_RBAC_RIGHT}(,{_RBAC_RIGHT})*)?\Z", 64),
        "a comma-separated list of events, pods.get, pods.delete (what rbac.* leaves out of the workers' Role)",
    ),
    EnvVar(
        "TFMW_NO_API_SERVER",
        {"type": "string", "pattern": _BOOL},
        "0 or 1 (1: no API server by design, as in `make local`)",
        chart_sets=False,
        default="0",
    ),
    EnvVar(
        "TFMW_SHARED_DIR",
        _text(_NO_CONTROL, 4096),
        "a path or object-store URI without control characters (storage.*)",
    ),
    # Read by the built-in trainer, not the launcher (entrypoint.training.config): named here
    # because the chart sets it and `workers.extraEnv` may not.
    EnvVar("TFMW_TRAINING_CONFIG", _text(_NO_CONTROL, 4096), "a path (the training ConfigMap's mount)"),
    # Rendered with an envFrom only, first in the env: which reserved names a Secret or ConfigMap
    # holds (entrypoint.envfrom). Any string: the kubelet may have put a Secret's value in it.
    EnvVar(
        "TFMW_ENVFROM_PROBE",
        {"type": "string"},
        "the chart's probe of the envFrom keys (entrypoint/envfrom.py)",
    ),
    EnvVar("JOB_COMPLETION_INDEX", _text(_UINT, 6), "a whole number (the Job controller sets it)", chart_sets=False),
)
ENV_SCHEMA = {"type": "object", "properties": {var.name: var.schema for var in ENV}}
WHAT = {var.name: var.what for var in ENV}
DEFAULTS = {var.name: var.default for var in ENV}
# What `workers.extraEnv` may not set (charts/tf-multiworker/templates/_validate_env.tpl keeps
# the same list: tests/entrypoint/test_settings_contract.py holds the two together).
CHART_ENV = tuple(var.name for var in ENV if var.chart_sets) + ("TF_CONFIG",)


@dataclass(frozen=True)
class LauncherSettings:
    pod_name: str | None
    namespace: str | None
    statefulset: str | None
    service: str | None
    pod_selector: str | None  # the release's worker pods (one LIST: entrypoint.peerwatch)
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
    adopt_run_dir: bool = False  # take over a run directory another release owns (entrypoint.runowner)
    same_error_limit: int = 2  # attempts in a row ended by one error before Failed (RepeatedError); 0: off
    rbac_off: frozenset[str] = frozenset()  # RBAC_RIGHTS the workers' Role leaves out: not asked for
    no_api_server: bool = False  # no API server by design (make local): nothing to record, scale or fence
    # training.elastic (entrypoint.membership): the smallest group that trains on (0: not
    # elastic), how long a worker may be gone before the group shrinks, the configured k
    elastic_min_replicas: int = 0
    elastic_grace_seconds: int = 120
    elastic_micro_batches: int = 1

    @property
    def elastic(self) -> bool:
        return self.elastic_min_replicas > 0


def _value(env: Mapping[str, str], name: str) -> str:
    """The variable's value, or its declared default when unset or empty."""
    return env.get(name) or DEFAULTS[name]


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
        raise ConfigError(f"{key}={value!r} must be {WHAT.get(key, 'valid')}")
    raise ConfigError(f"{key}={value!r}: {error.message}")


def _metrics_port(env: Mapping[str, str], port: int, replicas: int | None, loopback: bool) -> int:
    """TFMW_METRICS_PORT, refused when it is no port or is a port the group's gRPC uses (worker j
    of a loopback group serves metrics on metrics_port + j, as gRPC on port + j)."""
    raw = _value(env, "TFMW_METRICS_PORT")
    metrics = int(raw)
    if metrics == 0:
        return 0
    if metrics > 65535:
        raise ConfigError(f"TFMW_METRICS_PORT={raw!r} must be {WHAT['TFMW_METRICS_PORT']}")
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
        raise ConfigError(f"TFMW_REPLICAS={env['TFMW_REPLICAS']!r} must be {WHAT['TFMW_REPLICAS']}")
    port = int(_value(env, "TFMW_PORT"))
    if not 1 <= port <= 65535:
        raise ConfigError(f"TFMW_PORT={env['TFMW_PORT']!r} must be {WHAT['TFMW_PORT']}")
    loopback_ports = _truthy(_value(env, "TFMW_LOOPBACK_PORTS"))
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
        pod_selector=env.get("TFMW_POD_SELECTOR") or None,
        replicas=replicas,
        port=port,
        metrics_port=metrics_port,
        keep_log_mib=int(_value(env, "TFMW_KEEP_LOG_MIB")),
        cluster_domain=_value(env, "TFMW_CLUSTER_DOMAIN"),
        peer_timeout_seconds=int(_value(env, "TFMW_PEER_TIMEOUT_SECONDS")),
        run_id=env.get("TFMW_RUN_ID") or None,
        shared_dir=env.get("TFMW_SHARED_DIR") or None,
        loopback_ports=loopback_ports,
        max_restarts=int(_value(env, "TFMW_MAX_RESTARTS")),
        hang_timeout_seconds=int(_value(env, "TFMW_HANG_TIMEOUT_SECONDS")),
        hang_detection=_value(env, "TFMW_HANG_DETECTION"),
        warm_standby=_value(env, "TFMW_WARM_STANDBY"),
        on_success=_value(env, "TFMW_ON_SUCCESS"),
        on_failure=_value(env, "TFMW_ON_FAILURE"),
        active_deadline_seconds=int(_value(env, "TFMW_ACTIVE_DEADLINE_SECONDS")),
        pod_revision=env.get("TFMW_POD_REVISION") or "",
        api_dir=env.get("TFMW_API_DIR") or None,
        status_configmap=env.get("TFMW_STATUS_CONFIGMAP") or None,
        resizable=resizable and need_derivation,
        pod_uid=env.get("TFMW_POD_UID") or None,
        grace_seconds=int(_value(env, "TFMW_GRACE_SECONDS")),
        adopt_run_dir=_truthy(_value(env, "TFMW_ADOPT_RUN_DIR")),
        same_error_limit=int(_value(env, "TFMW_SAME_ERROR_LIMIT")),
        rbac_off=rbac_off(env),
        no_api_server=_truthy(_value(env, "TFMW_NO_API_SERVER")),
        **_elastic(env, replicas),
    )


def _elastic(env: Mapping[str, str], replicas: int | None) -> dict:
    """training.elastic's settings, refused in one line when the group could never shrink
    (the chart refuses the same at install: entrypoint.membership.bounds_problem)."""
    minimum = int(_value(env, "TFMW_ELASTIC_MIN_REPLICAS"))
    micro = int(_value(env, "TFMW_ELASTIC_MICRO_BATCHES"))
    if micro < 1:
        raise ConfigError(f"TFMW_ELASTIC_MICRO_BATCHES={micro} must be {WHAT['TFMW_ELASTIC_MICRO_BATCHES']}")
    if minimum and replicas is not None:
        problem = bounds_problem(replicas, micro, minimum)
        if problem:
            raise ConfigError(problem)
    return {
        "elastic_min_replicas": minimum,
        "elastic_grace_seconds": int(_value(env, "TFMW_ELASTIC_GRACE_SECONDS")),
        "elastic_micro_batches": micro,
    }


# What each right left out turns off (the one line a launcher says at start).
RBAC_OFF_MEANS = {
    "events": "events (no Events on the StatefulSet: the status ConfigMap records every transition)",
    "pods.get": (
        "pods.get (status writes not fenced; no word on why peers are not running; peers lost with "
        "their node not replaced; a queue's eviction not told from a suspend)"
    ),
    "pods.delete": "pods.delete (a peer lost with its node waits for an admin's force delete)",
}


def rbac_off_line(settings: LauncherSettings) -> str:
    """`the workers' Role leaves out ...: <what each turns off>` (rbac.*=false), one line."""
    parts = [RBAC_OFF_MEANS[right] for right in RBAC_RIGHTS if right in settings.rbac_off]
    return f"the workers' Role leaves out {'; '.join(parts)} (rbac.*=false)"


def rbac_off(env: Mapping[str, str]) -> frozenset[str]:
    """TFMW_RBAC_OFF as a set of RBAC_RIGHTS (anything else dropped: the schema refused it before)."""
    return frozenset(env.get("TFMW_RBAC_OFF", "").split(",")) & set(RBAC_RIGHTS)

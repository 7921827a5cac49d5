"""Which worker am I, and who owns the run's lifecycle? Pure: no I/O, no TensorFlow.

Two ways a pod is named, both giving `<prefix>-<index>` with a stable DNS name under a
headless Service:
- a StatefulSet pod is named (and has the hostname) `<statefulset>-<ordinal>`, ordinals
  0..replicas-1; the chart's StatefulSet: the launcher owns the run's lifecycle;
- an Indexed Job pod gets the hostname `<job>-<index>` and `JOB_COMPLETION_INDEX=<index>`
  (a JobSet's pods `<jobset>-<replicatedJob>-<jobIndex>-<index>`, the same pattern): the
  Job controller owns the lifecycle, the launcher exits with a code instead of idling.
A TF_CONFIG preset by a platform (TFJob, Volcano, Run:ai) also means the platform owns it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from .errors import ConfigError

# \Z, not $ ("$" also matches before a trailing newline: "train-0\n" would be worker 0).
_INDEX_SUFFIX = re.compile(r"^(?P<prefix>.+)-(?P<index>0|[1-9][0-9]*)\Z")
# An Indexed Job pod's hostname is a DNS-1123 label: it becomes every peer's host name.
_HOST_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")

STATEFULSET, PRESET_TF_CONFIG, INDEXED_JOB = "statefulset", "preset-tf-config", "indexed-job"


@dataclass(frozen=True)
class PodIdentity:
    host_prefix: str  # the hostname without "-<index>": the StatefulSet's or the Job's name
    ordinal: int  # the TF task index

    @property
    def pod_name(self) -> str:
        return f"{self.host_prefix}-{self.ordinal}"


def pod_kind(env: Mapping[str, str]) -> str:
    """Where this pod's identity comes from, and so who owns the run's lifecycle."""
    if env.get("TF_CONFIG", "").strip():
        return PRESET_TF_CONFIG
    if env.get("JOB_COMPLETION_INDEX", "") != "":
        return INDEXED_JOB
    return STATEFULSET


def platform_owns_lifecycle(kind: str) -> bool:
    """TFJob, Volcano, Run:ai, an Indexed Job, a JobSet: exit 0 / non-zero, never idle or scale."""
    return kind != STATEFULSET


def parse_pod_name(pod_name: str, replicas: int, statefulset: str | None = None) -> PodIdentity:
    """Ordinal from `<sts>-<i>`; refuse a name without one or an ordinal >= replicas."""
    match = _INDEX_SUFFIX.match(pod_name)
    if not match:
        raise ConfigError(
            f"TFMW_POD_NAME={pod_name!r} has no StatefulSet ordinal (expected '<statefulset>-<n>'); "
            "run the launcher in a StatefulSet pod or set TFMW_POD_NAME"
        )
    prefix, ordinal = match.group("prefix"), int(match.group("index"))
    if statefulset and prefix != statefulset:
        raise ConfigError(
            f"TFMW_POD_NAME={pod_name!r} does not belong to TFMW_STATEFULSET={statefulset!r}; "
            "the pod name must be '<statefulset>-<n>'"
        )
    if ordinal >= replicas:
        raise ConfigError(
            f"TFMW_POD_NAME={pod_name!r}: ordinal {ordinal} is not below TFMW_REPLICAS={replicas}; "
            "workers.replicas must count every pod of the StatefulSet"
        )
    return PodIdentity(host_prefix=prefix, ordinal=ordinal)


def parse_indexed_hostname(hostname: str, completion_index: str, replicas: int) -> PodIdentity:
    """An Indexed Job (or JobSet) pod: its hostname is `<prefix>-<JOB_COMPLETION_INDEX>`, and
    every peer j is `<prefix>-<j>` under the same subdomain (the headless Service)."""
    if not re.fullmatch(r"0|[1-9][0-9]{0,5}", completion_index):
        raise ConfigError(
            f"JOB_COMPLETION_INDEX={completion_index!r} must be a whole number "
            "(the Job controller sets it in completionMode: Indexed)"
        )
    index = int(completion_index)
    host = hostname.split(".", 1)[0]
    if not _HOST_LABEL.fullmatch(host):
        raise ConfigError(
            f"hostname {host!r} is not a DNS-1123 label; an Indexed Job pod's hostname is '<job>-<index>': "
            "do not set spec.hostname (or HOSTNAME) in the pod template"
        )
    match = _INDEX_SUFFIX.match(host)
    if not match or int(match.group("index")) != index:
        raise ConfigError(
            f"hostname {host!r} does not end in '-{index}' (JOB_COMPLETION_INDEX={index}); an Indexed "
            "Job pod's hostname is '<job>-<index>': do not set spec.hostname in the pod template"
        )
    if index >= replicas:
        raise ConfigError(
            f"JOB_COMPLETION_INDEX={index} is not below TFMW_REPLICAS={replicas}; set TFMW_REPLICAS "
            "to the Job's completions (= parallelism)"
        )
    return PodIdentity(host_prefix=match.group("prefix"), ordinal=index)

"""Which worker am I? The StatefulSet pod name `<statefulset>-<ordinal>` answers it.

Pure: no I/O, no TensorFlow. Kubernetes names StatefulSet pods `<sts name>-<ordinal>`,
ordinals 0..replicas-1, so the ordinal is the TF task index and the name is stable across
restarts and rescheduling.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import ConfigError

_ORDINAL_SUFFIX = re.compile(r"^(?P<prefix>.+)-(?P<ordinal>0|[1-9][0-9]*)$")


@dataclass(frozen=True)
class PodIdentity:
    statefulset: str
    ordinal: int

    @property
    def pod_name(self) -> str:
        return f"{self.statefulset}-{self.ordinal}"

    @property
    def is_chief(self) -> bool:
        # MWMS makes worker 0 the chief: it exports the model and writes the marker.
        return self.ordinal == 0


def parse_pod_name(pod_name: str, replicas: int, statefulset: str | None = None) -> PodIdentity:
    """Ordinal from `<sts>-<i>`; refuse a name without one or an ordinal >= replicas."""
    match = _ORDINAL_SUFFIX.match(pod_name)
    if not match:
        raise ConfigError(
            f"TFMW_POD_NAME={pod_name!r} has no StatefulSet ordinal (expected '<statefulset>-<n>'); "
            "run the launcher in a StatefulSet pod or set TFMW_POD_NAME")
    prefix, ordinal = match.group("prefix"), int(match.group("ordinal"))
    if statefulset and prefix != statefulset:
        raise ConfigError(
            f"TFMW_POD_NAME={pod_name!r} does not belong to TFMW_STATEFULSET={statefulset!r}; "
            "the pod name must be '<statefulset>-<n>'")
    if ordinal >= replicas:
        raise ConfigError(
            f"TFMW_POD_NAME={pod_name!r}: ordinal {ordinal} is not below TFMW_REPLICAS={replicas}; "
            "workers.replicas must count every pod of the StatefulSet")
    return PodIdentity(statefulset=prefix, ordinal=ordinal)

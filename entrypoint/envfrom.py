"""A Secret or ConfigMap given whole as the worker's environment (`envFrom`) that holds a name the
chart reserves: told from the one probe variable the chart renders first in the container's env.

Kubernetes gives a container's `env` precedence over its `envFrom`: a key of the Secret named like
a variable the chart sets is dropped without a word, and one named like a variable the launcher
reads but the chart does not set (TF_CONFIG, TFMW_NO_API_SERVER) would steer the launcher. The
launcher cannot read the Secret (no RBAC on Secrets), but the kubelet tells it: it expands
`$(NAME)` in an env value from the variables defined before it, envFrom's included, and leaves
`$(NAME)` as it is when NAME is not defined (k8s.io/kubernetes pkg/kubelet/kubelet_pods.go
makeEnvironmentVariables: envFrom into tmpEnv first, then each env value through
expansion.Expand with MappingFuncFor(tmpEnv, serviceEnv); third_party/forked/golang/expansion
syntaxWrap for an undefined name). The chart's probe, the first entry of `env` (so no variable of
the chart's own is defined yet), is

    <NAME>,<NAME>,...|<NAME>=$(<NAME>)|<NAME>=$(<NAME>)|...|

The names before the first `|` contain no `$`, so the kubelet leaves them as they are: they say
what was probed. A name whose part `|NAME=$(NAME)|` is still in the value was not defined by any
envFrom; one whose part is gone was. Only the parts are compared, never the values (which are
never printed): a value holding `|`, `=` or `$(...)` cannot make another name look defined. What
this cannot tell: a key whose value is its own `$(NAME)`, and a key hidden by another key's value
that holds its part `|NAME=$(NAME)|` verbatim (values written to defeat the probe, not mistakes).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from .settings import ENV

PROBE = "TFMW_ENVFROM_PROBE"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
# The launcher's inputs the chart never sets: a Secret's value is what the launcher would read,
# so the refusal's own status write does not trust them.
UNSET_BY_CHART = ("TF_CONFIG", *(var.name for var in ENV if not var.chart_sets))


def probe_value(names: list[str]) -> str:
    """The probe as the chart renders it (templates/_pod.tpl envFromProbe), before expansion."""
    return ",".join(names) + "|" + "".join(f"{name}=$({name})|" for name in names)


def collisions(probe: str | None) -> list[str]:
    """The probed names an envFrom defined, in the probe's order: [] for no probe (no envFrom,
    or not the chart's StatefulSet) and for a probe left as rendered."""
    if not probe or "|" not in probe:
        return []
    header, _, parts = probe.partition("|")
    names = [name for name in header.split(",") if _NAME.match(name)]
    return [name for name in names if f"|{name}=$({name})|" not in "|" + parts]


def refusal(names: list[str]) -> str:
    """The one line that refuses them (no values: they may be secrets)."""
    return (
        f"an envFrom Secret or ConfigMap (workers.extraEnvFrom, storage.objectStore.existingSecret) has the "
        f"key{'s' if len(names) > 1 else ''} {', '.join(names)}, reserved by the chart (docs/contracts.md): "
        "Kubernetes lets the container's env win over envFrom, so such a key is hidden or steers the launcher; "
        "rename it in the Secret/ConfigMap or give the workers.extraEnvFrom entry a prefix"
    )


def trusted(env: Mapping[str, str], names: list[str]) -> dict[str, str]:
    """`env` without the colliding names the chart does not set (their values are the Secret's);
    the ones it does set are the chart's (env wins) and stay for the refusal's status write."""
    return {key: value for key, value in env.items() if not (key in names and key in UNSET_BY_CHART)}

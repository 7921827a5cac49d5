"""Is this the cluster the environment is meant for? Checked before `deploy` and `undeploy`
touch anything, from the kubeconfig alone (offline).

- An overlay whose `target.kubeContext` names a context refuses any other, in one line naming
  both (`--any-context`, ANY_CONTEXT=1, deploys there anyway).
- With no environment named (`make deploy` without ENV), the local overlay goes only to a local
  cluster: `make cluster`'s, kind, k3d, minikube, Docker/Rancher Desktop, or any server on
  loopback. On any other the command asks for ENV.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from tfmw.chart.helmkit import ToolError
from tfmw.chart.target import Target
from tfmw.deploy.helm import LOCAL_CONTEXT
from tfmw.k8s import kubeconfig

LOCAL_NAMES = frozenset({LOCAL_CONTEXT, "minikube", "docker-desktop", "rancher-desktop", "orbstack", "colima"})
LOCAL_PREFIXES = ("kind-", "k3d-")


@dataclass(frozen=True)
class InUse:
    """The kube context a command would talk to, and its server."""

    context: str
    server: str


def in_use(context: str | None, kubeconfig_env: str | None = None) -> InUse | None:
    """The context asked for (default: the current one) and its server, in the kubeconfig in use
    (or `kubeconfig_env`'s files); None when it cannot be read or has no such context (helm then
    says why, in its own words)."""
    try:
        config = kubeconfig.load(kubeconfig_env)
        single = kubeconfig.select(config, context)
    except kubeconfig.KubeconfigError:
        return None
    return InUse(single.context_name, str(single.cluster.server or ""))


def is_local(where: InUse) -> bool:
    """A cluster on this machine: a known local context name, or a server on loopback (pure)."""
    if where.context in LOCAL_NAMES or where.context.startswith(LOCAL_PREFIXES):
        return True
    host = urlsplit(where.server).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check(target: Target, where: InUse | None, *, env_named: bool, any_context: bool, verb: str) -> None:
    """Refuse (exit 2) a command sent to a cluster its environment is not meant for (pure)."""
    if where is None or any_context:
        return
    server = f" (server {where.server})" if where.server else ""
    if target.kube_context and where.context != target.kube_context:
        raise ToolError(
            f"{target.overlay} is meant for kube context '{target.kube_context}' "
            f"(target.kubeContext), and the context in use is '{where.context}'{server}: switch with "
            f"`kubectl config use-context {target.kube_context}`, pass KUBE_CONTEXT={target.kube_context}, "
            f"or ANY_CONTEXT=1 to {verb} there anyway"
        )
    if not env_named and not is_local(where):
        raise ToolError(
            f"no ENV given, and the kube context in use, '{where.context}'{server}, is not a local cluster: "
            f"`make {verb}` alone means the local overlay (values/local.yaml); name the environment, "
            f"e.g. `make {verb} ENV=dev` (or ANY_CONTEXT=1 to send the local overlay there on purpose)"
        )

"""Is this the cluster the environment is meant for? Checked before `deploy` (its dry run too),
`undeploy`, `suspend`, `resume` and `retry` touch anything, from the kubeconfig alone (offline).

The overlay's `target.kubeContext` (tfmw.chart.target) says which:
- a context's name: any other is refused, in one line naming both;
- "*": any context, said on purpose;
- "@local": only a local cluster: `make cluster`'s, kind, k3d, minikube, Docker/Rancher Desktop,
  or any server on loopback (values/local.yaml, which `make deploy` without ENV means);
- empty (the overlay names nothing): refused, saying how to name it.
A SET= or a VALUES= file (-f after the overlay) that changes or clears it is refused too: the
overlay file is what was reviewed.
ANY_CONTEXT=1 (`--any-context`) overrides each rule. The context checked is the one every helm
and API call then uses (check returns it), so a kubeconfig switched meanwhile changes nothing.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from tfmw.chart.helmkit import ToolError
from tfmw.chart.target import ANY_CONTEXT_VALUE, LOCAL_CONTEXTS, Target
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


def _named_rule(value: str) -> str:
    """How a message shows an overlay's kubeContext."""
    if value == ANY_CONTEXT_VALUE:
        return '"*" (any context)'
    if value == LOCAL_CONTEXTS:
        return '"@local" (a local cluster only)'
    return f"'{value}'" if value else "nothing"


def check_set(target: Target, overlay_context: str | None, *, any_context: bool) -> None:
    """Refuse (exit 2) a SET= that changes or clears the overlay file's target.kubeContext (pure):
    `overlay_context` is the files' value (None: they name none), target's the layered one."""
    named = overlay_context or ""
    if any_context or target.kube_context == named:
        return
    raise ToolError(
        f"SET changes target.kubeContext from {_named_rule(named)} in {target.overlay} to "
        f"{_named_rule(target.kube_context)}: the context guard is the overlay's to say; pass "
        f"ANY_CONTEXT=1 to deploy with it changed, or change {target.overlay}"
    )


def check_files(
    target: Target, overlay_context: str | None, files: Sequence[tuple[str, str | None]], *, any_context: bool
) -> None:
    """Refuse (exit 2) a VALUES= file that changes or clears the overlay file's target.kubeContext
    (pure), as check_set refuses a SET=: `files` are each file's name and the kubeContext it gives
    (None: none; "": cleared, tfmw.chart.target.given_kube_context)."""
    named = overlay_context or ""
    if any_context:
        return
    for name, given in files:
        if given is not None and given != named:
            raise ToolError(
                f"values file {name} changes target.kubeContext from {_named_rule(named)} in {target.overlay} "
                f"to {_named_rule(given)}: the context guard is the overlay's to say; pass ANY_CONTEXT=1 to "
                f"deploy with it changed, or change {target.overlay}"
            )


def check(target: Target, where: InUse | None, *, env_named: bool, any_context: bool, verb: str) -> str | None:
    """Refuse (exit 2) a command sent to a cluster its environment is not meant for (pure).
    Returns the context to use from here on: the one checked, or the one the overlay names when
    the kubeconfig cannot be read (helm then says why), or None (nothing to pin)."""
    wanted = target.kube_context
    exact = wanted if wanted not in ("", ANY_CONTEXT_VALUE, LOCAL_CONTEXTS) else None
    if any_context:
        return where.context if where else None
    if not wanted:
        raise ToolError(
            f"{target.overlay} names no kube context (target.kubeContext), so `make {verb}` cannot tell "
            f"where it belongs: add `kubeContext: <your cluster's context>` (`kubectl config get-contexts` "
            f'lists them) under `target:`, or `kubeContext: "*"` for any context, `"@local"` for local '
            f"clusters only (or ANY_CONTEXT=1 for this once)"
        )
    if where is None:
        return exact
    server = f" (server {where.server})" if where.server else ""
    if exact and where.context != exact:
        raise ToolError(
            f"{target.overlay} is meant for kube context '{exact}' "
            f"(target.kubeContext), and the context in use is '{where.context}'{server}: switch with "
            f"`kubectl config use-context {exact}`, pass KUBE_CONTEXT={exact}, "
            f"or ANY_CONTEXT=1 to {verb} there anyway"
        )
    if wanted == LOCAL_CONTEXTS and not is_local(where):
        if not env_named:
            raise ToolError(
                f"no ENV given, and the kube context in use, '{where.context}'{server}, is not a local cluster: "
                f"`make {verb}` alone means the local overlay (values/local.yaml); name the environment, "
                f"e.g. `make {verb} ENV=dev` (or ANY_CONTEXT=1 to send the local overlay there on purpose)"
            )
        raise ToolError(
            f'{target.overlay} is meant for a local cluster (target.kubeContext "@local"), and the context '
            f"in use, '{where.context}'{server}, is not one: switch to a local cluster's context "
            f"(KUBE_CONTEXT=), name another ENV, or ANY_CONTEXT=1 to {verb} there anyway"
        )
    return where.context

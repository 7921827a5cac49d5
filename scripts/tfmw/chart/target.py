"""Where an environment's release goes: the overlay's `target` block (pure).

    target:
      release: tf-multiworker-dev     # helm release name
      namespace: tfmw-dev             # namespace of the release
      kubeContext: ""                 # the kube context it is meant for; "" means any

The chart itself reads none of it (plain `helm install` users name the release and `-n`
themselves); `make deploy/diff/status/logs/undeploy ENV=<env>` and `tfmw` use it, so every
environment is its own release in its own namespace, and its run id (the release name by
default) is its own. RELEASE= / NAMESPACE= (`--release`, `--namespace`) override it.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_RELEASE = "tf-multiworker"
DEFAULT_NAMESPACE = "default"


@dataclass(frozen=True)
class Target:
    release: str
    namespace: str
    kube_context: str  # "" means any context
    overlay: str  # the overlay file, e.g. values/dev.yaml
    origin: str  # where release and namespace came from, for messages


def target_of(values: dict, overlay: str, release: str | None = None, namespace: str | None = None) -> Target:
    """The release, namespace and kube context for these (layered) values: the explicit
    arguments win, then the overlay's `target` block, then the chart's defaults."""
    block = values.get("target") if isinstance(values.get("target"), dict) else {}
    named_release = str(block.get("release") or "")
    named_namespace = str(block.get("namespace") or "")

    def source(given: str | None, named: str, flag: str) -> str:
        return flag if given else f"{overlay} target" if named else "the chart's default"

    sources = [source(release, named_release, "--release"), source(namespace, named_namespace, "--namespace")]
    origin = sources[0] if sources[0] == sources[1] else f"release: {sources[0]}, namespace: {sources[1]}"
    return Target(
        release=release or named_release or DEFAULT_RELEASE,
        namespace=namespace or named_namespace or DEFAULT_NAMESPACE,
        kube_context=str(block.get("kubeContext") or ""),
        overlay=overlay,
        origin=origin,
    )

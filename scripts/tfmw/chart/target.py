"""Where an environment's release goes: the overlay's `target` block (pure).

    target:
      release: tf-multiworker-dev     # helm release name
      namespace: tfmw-dev             # namespace of the release
      kubeContext: gke_prj_zone_dev   # the kube context it is meant for (below)

The chart itself reads none of it (plain `helm install` users name the release and `-n`
themselves); `make deploy/diff/status/logs/undeploy ENV=<env>` and `tfmw` use it, so every
environment is its own release in its own namespace, and its run id (the release name by
default) is its own. RELEASE= / NAMESPACE= (`--release`, `--namespace`) override it.

`kubeContext` is what `make deploy/undeploy/suspend/resume/retry` accept (tfmw.deploy.context):
a context's name (only that one), ANY_CONTEXT_VALUE ("*": any context, said on purpose) or
LOCAL_CONTEXTS ("@local": only a cluster on this machine). Empty (unset) is refused by those
verbs: an overlay that names nothing must not mean "anywhere" silently.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

DEFAULT_RELEASE = "tf-multiworker"
DEFAULT_NAMESPACE = "default"
ANY_CONTEXT_VALUE = "*"  # target.kubeContext: any context
LOCAL_CONTEXTS = "@local"  # target.kubeContext: a local cluster only (no context name starts with @)


@dataclass(frozen=True)
class Target:
    release: str
    namespace: str
    kube_context: str  # a context's name, "*" (any), "@local" (a local cluster), or "" (not named)
    overlay: str  # the overlay file, e.g. values/dev.yaml
    origin: str  # where release and namespace came from, for messages


def target_of(
    values: dict,
    overlay: str,
    release: str | None = None,
    namespace: str | None = None,
    named_in: Mapping[str, str] | None = None,
) -> Target:
    """The release, namespace and kube context for these (layered) values: the explicit
    arguments win, then the values' `target` block, then the chart's defaults. `named_in` says
    which source named target.release / target.namespace last (naming_sources); without it the
    overlay is named."""
    block = values.get("target") if isinstance(values.get("target"), dict) else {}
    named_release = str(block.get("release") or "")
    named_namespace = str(block.get("namespace") or "")

    def source(given: str | None, named: str, flag: str, key: str) -> str:
        return flag if given else (named_in or {}).get(key, f"{overlay} target") if named else "the chart's default"

    sources = [
        source(release, named_release, "--release", "release"),
        source(namespace, named_namespace, "--namespace", "namespace"),
    ]
    origin = sources[0] if sources[0] == sources[1] else f"release: {sources[0]}, namespace: {sources[1]}"
    return Target(
        release=release or named_release or DEFAULT_RELEASE,
        namespace=namespace or named_namespace or DEFAULT_NAMESPACE,
        kube_context=str(block.get("kubeContext") or ""),
        overlay=overlay,
        origin=origin,
    )


def naming_sources(files: Sequence[tuple[str, object]], sets: Sequence[tuple[str, str]] = ()) -> dict[str, str]:
    """Which source named target.release and target.namespace last, in helm's order: the
    values files (label, parsed content) as layered, then the --set-like items (flag, key).
    Pure; what the "release X in namespace Y (from ...)" line names, so a VALUES= file that
    sets the release is named rather than the overlay under it."""
    named: dict[str, str] = {}
    for label, content in files:
        block = content.get("target") if isinstance(content, dict) else None
        if isinstance(content, dict) and "target" in content and block is None:
            named.clear()  # `target: null` deletes the whole block
        for key in ("release", "namespace"):
            if isinstance(block, dict) and key in block:
                if block[key]:
                    named[key] = f"{label} target"
                else:
                    named.pop(key, None)  # cleared (helm: a null deletes the key): the chart's default
    for flag, key in sets:
        for name in ("release", "namespace"):
            if key == f"target.{name}":
                named[name] = f"{flag} {key}"
    return named


def overlay_kube_context(overlay: Path) -> str | None:
    """The kubeContext the overlay file itself names (None: none), before any SET= is layered:
    what `make deploy` compares the layered value with (a SET= may not change the guard)."""
    import yaml

    try:
        values = yaml.safe_load(Path(overlay).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None  # helm reports what is wrong with the file itself
    block = values.get("target") if isinstance(values, dict) else None
    named = block.get("kubeContext") if isinstance(block, dict) else None
    return None if named is None else str(named)


def given_kube_context(path: Path) -> str | None:
    """The target.kubeContext a values file (VALUES=, -f after the overlay) gives: None when it
    gives none, "" when it clears it (a null, or `target: null`), else its value. What
    `make deploy` refuses a VALUES= file to change, as it refuses a SET= (tfmw.deploy.context)."""
    import yaml

    try:
        values = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None  # refused before this is read (tfmw.chart.render.check_values_file)
    if not isinstance(values, dict) or "target" not in values:
        return None
    block = values["target"]
    if block is None:
        return ""
    if not isinstance(block, dict) or "kubeContext" not in block:
        return None
    return "" if block["kubeContext"] is None else str(block["kubeContext"])

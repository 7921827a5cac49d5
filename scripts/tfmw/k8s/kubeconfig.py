"""The kubeconfig in use, read as kubectl reads it: $KUBECONFIG's files (merged, the first file
to set a name or the current context wins) or ~/.kube/config.

lightkube reads one file; this merges the list into its KubeConfig (relative certificate and
token paths resolved against the file that names them) so that `tfmw` and helm, which follows
kubectl's rules, always talk to the same cluster. Offline: nothing here dials the server.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from lightkube.config.kubeconfig import KubeConfig, SingleConfig
from lightkube.core.exceptions import ConfigError

DEFAULT_PATH = "~/.kube/config"
# The fields whose relative paths name files beside the kubeconfig that holds them.
_PATH_FIELDS = {
    "clusters": ("cluster", ("certificate-authority",)),
    "users": ("user", ("client-certificate", "client-key", "tokenFile")),
}


class KubeconfigError(Exception):
    """One operator-facing line: which file, and what is wrong with it."""


def paths(kubeconfig_env: str | None = None) -> list[Path]:
    """The files kubectl would read: $KUBECONFIG's list, or ~/.kube/config (pure but for ~)."""
    env = os.environ.get("KUBECONFIG") if kubeconfig_env is None else kubeconfig_env
    named = [p for p in (env or "").split(os.pathsep) if p]
    return [Path(p).expanduser() for p in (named or [DEFAULT_PATH])]


def in_use(kubeconfig_env: str | None = None) -> str:
    """How to name the kubeconfig in use in a message: KUBECONFIG=<value> or ~/.kube/config."""
    env = os.environ.get("KUBECONFIG") if kubeconfig_env is None else kubeconfig_env
    return f"KUBECONFIG={env}" if env else DEFAULT_PATH


def merge(documents: list[tuple[Path, dict]]) -> dict:
    """kubectl's merge of several kubeconfig documents: a cluster, user or context keeps its
    first definition, the first current-context set wins; relative paths become absolute
    against their own file (pure)."""
    merged: dict = {"clusters": [], "users": [], "contexts": []}
    seen: dict[str, set] = {key: set() for key in merged}
    for path, doc in documents:
        if not merged.get("current-context") and doc.get("current-context"):
            merged["current-context"] = doc["current-context"]
        for key in seen:
            for entry in doc.get(key) or []:
                name = (entry or {}).get("name")
                if not name or name in seen[key]:
                    continue
                seen[key].add(name)
                merged[key].append(_absolute(key, entry, path.parent))
    return merged


def _absolute(key: str, entry: dict, base: Path) -> dict:
    inner, fields = _PATH_FIELDS.get(key, ("", ()))
    body = dict(entry.get(inner) or {}) if inner else {}
    for name in fields:
        if body.get(name) and not Path(body[name]).expanduser().is_absolute():
            body[name] = str(base / body[name])
    return {**entry, inner: body} if inner else dict(entry)


def load(kubeconfig_env: str | None = None) -> KubeConfig:
    """The merged kubeconfig in use; KubeconfigError when no file of it exists or one is not a
    kubeconfig."""
    documents = []
    for path in paths(kubeconfig_env):
        if not path.is_file():
            continue
        try:
            doc = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as err:
            raise KubeconfigError(f"{path}: not readable as a kubeconfig ({' '.join(str(err).split())})") from None
        if not isinstance(doc, dict):
            raise KubeconfigError(f"{path}: not a kubeconfig (a YAML mapping with clusters, users, contexts)")
        documents.append((path, doc))
    if not documents:
        raise KubeconfigError(f"{in_use(kubeconfig_env)} does not exist, so there is no cluster to talk to")
    try:
        return KubeConfig.from_dict(merge(documents), fname=documents[0][0])
    except (ConfigError, KeyError, TypeError, ValueError) as err:
        raise KubeconfigError(f"{in_use(kubeconfig_env)}: not a valid kubeconfig ({err})") from None


def contexts(config: KubeConfig) -> list[str]:
    return sorted(config.contexts)


def select(config: KubeConfig, context: str | None = None) -> SingleConfig:
    """The context asked for (default: the current one); KubeconfigError naming the known ones."""
    try:
        single = config.get(context)
    except (ConfigError, KeyError) as err:
        known = f"its contexts are {', '.join(contexts(config))}" if config.contexts else "it has no contexts"
        what = f"kube context '{context}' does not exist" if context else "no current kube context is set"
        if context and context in config.contexts:
            what = f"kube context '{context}' names a cluster or user that is not there ({err})"
        raise KubeconfigError(
            f"{what} in {in_use()} ({known}); pass --kube-context / KUBE_CONTEXT= one of them, "
            "or point KUBECONFIG at the right file"
        ) from None
    assert single is not None
    return single


def describe(single: SingleConfig) -> str:
    """ "kube context 'X', server Y": which cluster a message is about."""
    return f"kube context '{single.context_name}', server {single.cluster.server}"

"""One release's reach, for every verb of `tfmw` (tfmw.cli parses, the verbs are in apply,
inspect and change): which release (Release, the target resolved from the environment's
overlay), the context check, helm through pyhelm3, the release as helm records it (status,
objects, values), the Kubernetes API client, the run as its status ConfigMap records it, and
each failure on the way as one operator-facing line (a ToolError; helmkit.ToolError has the
exit codes).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tfmw.chart import helmkit, render
from tfmw.chart.helmkit import ToolError, stderr_text
from tfmw.chart.target import Target, given_kube_context, overlay_kube_context, target_of
from tfmw.deploy import context as deploy_context
from tfmw.deploy import helm as deploy_helm
from tfmw.deploy import observe
from tfmw.k8s import kubeconfig
from tfmw.k8s.api import Api, ApiError


def say(line: str) -> None:
    print(line, flush=True)


@dataclass(frozen=True)
class Release:
    """The release a verb acts on, as the command line names it. `name` and `namespace` are
    None until resolved from the environment's overlay (its `target` block; resolve(),
    apply.prepare); RELEASE= / NAMESPACE= win."""

    env: str = "local"
    env_named: bool = False  # ENV given: without it, the local overlay goes only to a local cluster
    name: str | None = None
    namespace: str | None = None
    kube_context: str | None = None  # None: the kubeconfig's current context
    helm: str | None = None  # --helm (None: $HELM, .tools/bin/helm, PATH)
    chart_dir: Path = render.CHART_DIR
    values_dir: Path = render.VALUES_DIR
    any_context: bool = False  # act on the context in use even where the overlay names another
    kubeconfig: Path | None = None  # None: the kubeconfig in use ($KUBECONFIG or ~/.kube/config)

    @property
    def kubeconfig_env(self) -> str | None:
        """Its kubeconfig as tfmw.k8s names one (a KUBECONFIG value; None: the environment's)."""
        return None if self.kubeconfig is None else str(self.kubeconfig)

    def at(self, target: Target) -> Release:
        """This release with the name and namespace of `target` (the overlay's, or the given ones)."""
        return dataclasses.replace(self, name=target.release, namespace=target.namespace)


def resolve(rel: Release, helm: str) -> tuple[Release, Target]:
    """The environment's release and namespace (its overlay's `target` block) for the verbs
    that render nothing; RELEASE= / NAMESPACE= win."""
    overlay = render.overlay_path(rel.env, Path(rel.values_dir))
    values = render.layer_values(Path(rel.chart_dir), [overlay], [], helm)
    target = target_of(values, render.repo_relative(overlay), rel.name, rel.namespace)
    return rel.at(target), target


def check_context(
    rel: Release, target: Target, verb: str, overlay: Path | None = None, values_files: Sequence[Path] = ()
) -> Release:
    """Refuse a deploy-like verb sent to a cluster its environment is not meant for (deploy.context);
    the release returned is pinned to the context checked, so every helm and API call after it
    goes there. `overlay`: the overlay file `target` was layered from with VALUES= files and SET=
    (deploy): neither may change the kubeContext it names."""
    if overlay is not None:
        named = overlay_kube_context(overlay)
        given = [(render.repo_relative(path), given_kube_context(path)) for path in values_files]
        deploy_context.check_files(target, named, given, any_context=rel.any_context)
        deploy_context.check_set(target, named, any_context=rel.any_context)
    pinned = deploy_context.check(
        target,
        deploy_context.in_use(rel.kube_context, rel.kubeconfig_env),
        env_named=rel.env_named,
        any_context=rel.any_context,
        verb=verb,
    )
    return dataclasses.replace(rel, kube_context=pinned or rel.kube_context)


# ---------------------------------------------------------------- helm via pyhelm3


def _kubeconfig_named(kubeconfig_env: str | None) -> str | None:
    """The KUBECONFIG value a message names: `kubeconfig_env`, or the environment's."""
    return os.environ.get("KUBECONFIG") if kubeconfig_env is None else kubeconfig_env


def cluster_failure(stderr: str, context: str | None, kubeconfig_env: str | None = None) -> ToolError | None:
    """The kube context is missing or the cluster does not answer: one line naming which, or None.
    `kubeconfig_env`: the kubeconfig helm was given (None: the one in use)."""
    no_file = deploy_helm.missing_kubeconfig_message(_kubeconfig_named(kubeconfig_env))
    if no_file and deploy_helm.is_unreachable(stderr):
        return ToolError(no_file, exit_code=3)
    missing = deploy_helm.missing_context_message(
        stderr, deploy_helm.kube_contexts(kubeconfig_env), kubeconfig.in_use(kubeconfig_env)
    )
    if missing:
        return ToolError(missing, exit_code=3)
    if deploy_helm.is_unreachable(stderr):
        target = deploy_helm.kube_target(context, kubeconfig_env)
        return ToolError(deploy_helm.unreachable_message(stderr, target), exit_code=3)
    return None


def helm_failure(exc, what: str, context: str | None, kubeconfig_env: str | None = None) -> ToolError:
    """Turn a pyhelm3 error into one operator-facing line."""
    stderr = stderr_text(exc.stderr)
    return cluster_failure(stderr, context, kubeconfig_env) or ToolError(
        f"{what} failed: {deploy_helm.helm_error_text(stderr)}", exit_code=4
    )


def helm_command(rel: Release, helm: str):
    """pyhelm3's helm runner at the release's kube context, with its kubeconfig (helmkit.pyhelm3_command)."""
    return helmkit.pyhelm3_command(helm, rel.kube_context, rel.kubeconfig)


async def recorded_status(cmd, rel: Release) -> dict | None:
    """`helm status -o json`, or None when the release is not installed."""
    import pyhelm3

    try:
        return await cmd.status(rel.name, namespace=rel.namespace)
    except pyhelm3.errors.ReleaseNotFoundError:
        return None
    except pyhelm3.errors.Error as exc:
        raise helm_failure(exc, "helm status", rel.kube_context, rel.kubeconfig_env) from None


async def recorded_objects(cmd, rel: Release) -> list[dict]:
    """The manifest helm recorded for the release's current revision."""
    import pyhelm3

    try:
        return [o for o in await cmd.get_resources(rel.name, namespace=rel.namespace) if o]
    except pyhelm3.errors.Error as exc:
        raise helm_failure(exc, "helm get manifest", rel.kube_context, rel.kubeconfig_env) from None


async def recorded_values(cmd, rel: Release) -> dict:
    """The values the release was deployed with (`helm get values`: the overlay and --set)."""
    import pyhelm3

    try:
        out = await cmd.run(["get", "values", rel.name, "--namespace", rel.namespace, "--output", "json"])
    except pyhelm3.errors.Error as exc:
        raise helm_failure(exc, "helm get values", rel.kube_context, rel.kubeconfig_env) from None
    values = json.loads(out.decode() or "{}")
    return values if isinstance(values, dict) else {}


def values_now(rel: Release, helm: str) -> dict:
    """recorded_values, from outside an event loop."""
    return asyncio.run(recorded_values(helm_command(rel, helm), rel))


# ---------------------------------------------------------------- the Kubernetes API (tfmw.k8s)


def api(context: str | None, kubeconfig_env: str | None = None) -> Api:
    """The client for the kubeconfig in use (or `kubeconfig_env`'s files) at `context`; one line
    when there is none."""
    try:
        return Api.from_kubeconfig(context, kubeconfig_env=kubeconfig_env)
    except kubeconfig.KubeconfigError as err:
        no_file = deploy_helm.missing_kubeconfig_message(_kubeconfig_named(kubeconfig_env))
        raise ToolError(no_file or str(err), exit_code=3) from None


def api_or_none(context: str | None, kubeconfig_env: str | None = None) -> Api | None:
    """The client when the kubeconfig allows one: for what only adds detail to a message."""
    try:
        return Api.from_kubeconfig(context, kubeconfig_env=kubeconfig_env)
    except kubeconfig.KubeconfigError:
        return None


def api_failure(err: ApiError, what: str, client: Api) -> ToolError:
    """One line for a failed API call: the cluster did not answer (exit 3), or it refused (4)."""
    if err.status == 0:
        return ToolError(deploy_helm.unreachable_message(str(err), client.target), exit_code=3)
    return ToolError(f"{what} failed: {err}", exit_code=4)


# ---------------------------------------------------------------- a release that is not there


def not_installed(rel: Release) -> ToolError:
    return ToolError(
        f"release {rel.name} is not installed in namespace {rel.namespace} "
        f"(deploy it with `make deploy ENV=<env> RELEASE={rel.name} NAMESPACE={rel.namespace}`)",
        exit_code=3,
    )


def namespace_missing(namespace: str, context: str | None, kubeconfig_env: str | None = None) -> str | None:
    """'namespace x does not exist on <cluster>' when the API says so (None: it exists, or unknown)."""
    client = api_or_none(context, kubeconfig_env)
    if client and observe.namespace_exists(client, namespace) is False:
        return f"namespace {namespace} does not exist on {client.target}"
    return None


def missing_release(rel: Release) -> ToolError:
    """No such release: say whether the namespace itself is missing (a typo in NAMESPACE=)."""
    missing = namespace_missing(rel.namespace, rel.kube_context, rel.kubeconfig_env)
    if missing:
        return ToolError(
            f"{missing}, so release {rel.name} is not there: check NAMESPACE= (`kubectl get namespaces` lists them)",
            exit_code=3,
        )
    return not_installed(rel)


# ---------------------------------------------------------------- the release's workers and run


async def workers_of_release(rel: Release, helm: str) -> tuple[dict, observe.Workers]:
    """(`helm status`, the workers of the recorded manifest); a ToolError when not installed."""
    cmd = helm_command(rel, helm)
    status = await recorded_status(cmd, rel)
    if status is None:
        raise missing_release(rel)
    objects = await recorded_objects(cmd, rel)
    return status, observe.workers_of(objects, rel.namespace)


def run_objects(client: Api, workers: observe.Workers) -> tuple[dict | None, dict | None]:
    """(the worker StatefulSet, the status ConfigMap) as they are now; None for what does not exist
    (the ConfigMap also when the release records no status)."""
    refs = [f"statefulset/{workers.name}"] + (
        [f"configmap/{workers.status_configmap}"] if workers.status_configmap else []
    )
    try:
        found = observe.get_objects(client, workers.namespace, refs)
    except ApiError as err:
        raise api_failure(err, "reading the worker StatefulSet and status", client) from None
    return found.get(refs[0]), (found.get(refs[1]) if len(refs) > 1 else None)


def current_run(client: Api, workers: observe.Workers) -> observe.RunRecord | None:
    """The run this release trains, as its status ConfigMap records it now (None: not recorded)."""
    _, status_object = run_objects(client, workers)
    return observe.current_record(observe.run_record(status_object), workers)


def recorded_run(rel: Release, helm: str) -> tuple[observe.Workers, observe.RunRecord | None, dict]:
    """(the workers, the run this release trains as recorded, the release's values)."""

    async def read():
        _, workers = await workers_of_release(rel, helm)
        return workers, await recorded_values(helm_command(rel, helm), rel)

    workers, values = asyncio.run(read())
    return workers, current_run(api(rel.kube_context, rel.kubeconfig_env), workers), values

"""The verbs that render an environment: `tfmw template`, `deploy` (and its --dry-run), `diff`,
and `check` (every check template runs, nothing written, no cluster: for a GitOps pipeline).

Everything a value can break is refused before any cluster call: the overlay is layered by
helm's rules (tfmw.chart.render), validated against values.schema.json, rendered through
pyhelm3 over the real helm, and the manifests validated against the Kubernetes schema of
--kube-version. A deploy under Kueue that changes what Kueue cannot change in place goes
through zero workers first (tfmw.deploy.kueue_update decides; the steps are here).
"""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tfmw.chart import helmkit, render
from tfmw.chart.helmkit import ToolError
from tfmw.deploy import helm as deploy_helm
from tfmw.deploy import kueue_update, observe, queue, suspension, upgrade
from tfmw.deploy.release import (
    Release,
    api,
    api_failure,
    api_or_none,
    check_context,
    helm_command,
    namespace_missing,
    recorded_objects,
    recorded_status,
    say,
)
from tfmw.k8s.api import ApiError, ns_path


@dataclass(frozen=True)
class Rendering:
    """What is layered over the environment's overlay, and the Kubernetes version to check against."""

    sets: tuple[str, ...] = ()  # --set items, each space separated
    set_files: tuple[str, ...] = ()  # --set-file key=path items
    kube_version: str = render.DEFAULT_KUBE_VERSION
    set_strings: tuple[str, ...] = ()  # --set-string items (every value text), each space separated
    values_files: tuple[str, ...] = ()  # -f files after the overlay, in order (VALUES=), each comma separated
    set_jsons: tuple[str, ...] = ()  # --set-json items, each one helm argument (key=JSON[,key=JSON])


def rendered_for(rel: Release, rendering: Rendering, env: str | None) -> render.Rendered:
    """The values layered (`env`'s overlay, None: none), checked and rendered (tfmw.chart.render.prepare)."""
    return render.prepare(
        env,
        list(rendering.sets),
        release=rel.name,
        namespace=rel.namespace,
        helm=rel.helm,
        chart_dir=rel.chart_dir,
        values_dir=rel.values_dir,
        kube_version=rendering.kube_version,
        set_files=list(rendering.set_files),
        values_files=list(rendering.values_files),
        set_strings=list(rendering.set_strings),
        set_jsons=list(rendering.set_jsons),
    )


def prepare(rel: Release, rendering: Rendering) -> tuple[Release, render.Rendered]:
    """Render the environment's overlay; the release returned is at the environment's name and
    namespace (its `target` block) unless given."""
    rendered = rendered_for(rel, rendering, rel.env)
    target = rendered.target
    say(
        f"values: {rendered.layered} validated against "
        f"{render.repo_relative(Path(rel.chart_dir) / 'values.schema.json')}; release {target.release} "
        f"in namespace {target.namespace} (from {target.origin})"
    )
    unchecked = (
        f" (not in the Kubernetes schema, checked by the cluster: {', '.join(rendered.unchecked_kinds)})"
        if rendered.unchecked_kinds
        else ""
    )
    say(f"rendered {len(rendered.objects)} objects, valid for Kubernetes {rendering.kube_version}{unchecked}")
    for warning in rendered.warnings:
        print(warning, file=sys.stderr, flush=True)
    return rel.at(target), rendered


def check(rel: Release, rendering: Rendering) -> int:
    """`tfmw check`: every check `tfmw template` runs (the values read, the built-in trainer's
    config, values.schema.json, the chart's own validation, every object strict against
    --kube-version's schema, Pod Security restricted), nothing written, no cluster. No --env: the
    values files alone, as a GitOps repository holds them. One summary line, or each problem
    found on its own line (exit 2)."""
    try:
        rendered = rendered_for(rel, rendering, rel.env if rel.env_named else None)
    except render.Refused as refused:
        for line in refused.lines:
            print(f"tfmw check: error: {line}", file=sys.stderr, flush=True)
        return refused.exit_code
    for warning in rendered.warnings:
        print(warning, file=sys.stderr, flush=True)
    target = rendered.target
    unchecked = f"; {', '.join(rendered.unchecked_kinds)} left to the cluster" if rendered.unchecked_kinds else ""
    say(
        f"check passed: {rendered.layered}: values valid for {render.repo_relative(rel.chart_dir)} (schema, "
        f"training config), {len(rendered.objects)} objects valid for Kubernetes {rendering.kube_version} "
        f"and Pod Security restricted{unchecked}; release {target.release} in namespace {target.namespace}"
    )
    return 0


def template(rel: Release, rendering: Rendering, output: str | None = None) -> int:
    """`tfmw template`: the environment's manifests into build/<env>/manifests.yaml (or `output`)."""
    _, rendered = prepare(rel, rendering)
    path = render.write_manifests(rendered.objects, output or render.manifests_path(rel.env))
    say(render.repo_relative(path))
    return 0


def deploy(rel: Release, rendering: Rendering, options: upgrade.Upgrade, dry_run: bool = False) -> int:
    """`tfmw deploy`: install or upgrade the release and wait for its workers."""
    rel, rendered = prepare(rel, rendering)
    helm = helmkit.find_helm(rel.helm)
    # the dry run too: it prints the helm command for the context checked, from the kubeconfig alone
    rel = check_context(rel, rendered.target, "deploy", rendered.overlay, rendered.values_files)
    if dry_run:
        return show_dry_run(rel, rendered, helm, options)
    reason = kueue_through_zero(rel, rendered, helm)
    if reason:
        remove_statefulset_at_zero(rel, rendered, helm, reason, options)
    return asyncio.run(upgrade.run(rel, rendered, helm, options))


def show_dry_run(rel: Release, rendered: render.Rendered, helm: str, options: upgrade.Upgrade) -> int:
    """Offline: show the helm command deploy would run (helm's own --dry-run needs a cluster)."""
    major = helmkit.helm_major(helm)
    helm_args = upgrade.upgrade_args(rel, options, major)
    where = ["--kubeconfig", str(rel.kubeconfig)] if rel.kubeconfig else []
    where += ["--kube-context", rel.kube_context] if rel.kube_context else []
    say(f"dry run (no cluster contacted): helm {major} would run, with the values below on stdin:")
    say("  " + shlex.join([helm, *helm_args, *where]))
    say(json.dumps(rendered.user_values, indent=2, sort_keys=True))
    return 0


def diff(rel: Release, rendering: Rendering) -> int:
    """`tfmw diff`: the rendered manifests against the release's recorded manifest."""
    rel, rendered = prepare(rel, rendering)
    helm = helmkit.find_helm(rel.helm)

    async def recorded():
        cmd = helm_command(rel, helm)
        if await recorded_status(cmd, rel) is None:
            return None
        return await recorded_objects(cmd, rel)

    old = asyncio.run(recorded())
    if old is None:
        missing = namespace_missing(rel.namespace, rel.kube_context, rel.kubeconfig_env)
        say(
            f"{missing}; deploy would create it and:"
            if missing
            else f"release {rel.name} is not installed in namespace {rel.namespace}; deploy would create:"
        )
        for obj in deploy_helm.manifest_objects(rendered.objects):
            say(f"  + {deploy_helm.object_key(obj)}")
        return 0
    text = deploy_helm.diff_manifests(old, rendered.objects)
    say(text if text else f"no changes: release {rel.name} already matches ENV={rel.env}")
    return 0


# ---------------------------------------------------------------- a change Kueue refuses in place


def kueue_through_zero(rel: Release, rendered: render.Rendered, helm: str) -> str | None:
    """Why this upgrade must go through zero under Kueue (tfmw.deploy.kueue_update), or None."""
    client = api_or_none(rel.kube_context, rel.kubeconfig_env)
    if client is None:
        return None
    workers = observe.workers_of(rendered.objects, rel.namespace)
    try:
        live = client.get_or_none(ns_path(workers.namespace, "statefulsets", workers.name, group="apps/v1"))
    except ApiError as err:
        raise api_failure(err, "reading the worker StatefulSet", client) from None
    new = observe.worker_statefulset(rendered.objects)
    if live is None or not (queue.queue_of(live) or queue.queue_of(new)):
        return None

    async def recorded() -> dict | None:
        cmd = helm_command(rel, helm)
        if not await recorded_status(cmd, rel):
            return None
        return observe.worker_statefulset(await recorded_objects(cmd, rel))

    try:
        workload = queue.workload_of(client, live) if queue.queue_of(live) else None
    except ApiError as err:
        raise api_failure(err, "reading the release's Kueue Workload", client) from None
    return kueue_update.through_zero(live, workload, asyncio.run(recorded()), new)


def remove_statefulset_at_zero(
    rel: Release, rendered: render.Rendered, helm: str, reason: str, options: upgrade.Upgrade
) -> None:
    """Stop the group at its checkpoint (the chart's suspend) and delete the worker StatefulSet,
    so that the upgrade creates it anew and Kueue admits a new Workload of the new size and shape.
    Only the StatefulSet goes: the run's status, its storage and the release stay."""
    workers = observe.workers_of(rendered.objects, rel.namespace)
    client = api(rel.kube_context, rel.kubeconfig_env)
    path = ns_path(workers.namespace, "statefulsets", workers.name, group="apps/v1")
    say(
        f"under Kueue {reason} cannot change on a running StatefulSet: going through 0 workers "
        "(the group stops at its checkpoint, the StatefulSet is made anew, Kueue admits it as it is now)"
    )
    live = client.get_or_none(path) or {}
    if int((live.get("spec") or {}).get("replicas") or 0) > 0:
        stopped = suspension.suspend_and_wait(rel, helm, options)
        if observe.list_pods(client, stopped.workers):
            raise ToolError(
                f"release {rel.name} is at 0 workers, but its pods are still there after {stopped.waited}s "
                "(nothing was deleted; `make status` tells why, `make resume` brings them back)",
                exit_code=4,
            )
        say(f"stopped: {observe.run_summary(stopped.record, stopped.workers)}")
    try:
        client.delete(path, {"propagationPolicy": "Background"})
        deadline = time.monotonic() + 60
        while client.get_or_none(path) is not None and time.monotonic() < deadline:
            time.sleep(1)
    except ApiError as err:
        raise api_failure(err, f"deleting StatefulSet {workers.name} at 0 workers", client) from None
    say(f"StatefulSet {workers.name} deleted at 0 workers (Kueue's Workload with it); the upgrade makes it anew")

"""One checked, watched `helm upgrade --install` of a release: every verb that changes a release
(deploy, suspend, resume, retry, the Kueue path through zero, the fault harness's suspend) goes
through run(). Before helm: a release stuck in a pending state is refused; while helm waits: a
progress line whenever the workers' counts change, and a stop as soon as a worker cannot start;
after a failure: one line saying what helm or the API server refused, why the workers were not
ready, and what is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tfmw.chart import helmkit, render
from tfmw.chart.helmkit import ToolError, stderr_text
from tfmw.chart.target import target_of
from tfmw.deploy import helm as deploy_helm
from tfmw.deploy import observe, volumes
from tfmw.deploy.release import Release, api_or_none, cluster_failure, helm_command, recorded_status, say
from tfmw.k8s.api import Api, ApiError, ns_path


@dataclass(frozen=True)
class Upgrade:
    """How helm upgrades and how long the watch waits (the verbs' --timeout, --no-wait, ...)."""

    timeout: str = "15m"  # helm --timeout
    wait: bool = True  # False: return once submitted (no watch, no rollback)
    rollback: bool = True  # roll a failed upgrade back (False: --no-rollback, kept for debugging)
    poll_seconds: float = 5.0
    # seconds a worker may stay Unschedulable, or wait on its volume; 0: until --timeout
    unschedulable_grace: float = 120.0


def upgrade_args(rel: Release, options: Upgrade, major: int) -> list[str]:
    return deploy_helm.upgrade_args(
        major,
        rel.name,
        Path(rel.chart_dir).resolve(),
        rel.namespace,
        timeout=options.timeout,
        wait=options.wait,
        rollback_on_failure=options.rollback,
    )


def with_values(rel: Release, values: dict, change: dict) -> render.Rendered:
    """The release as it is deployed, with `change` (nested keys) applied: what helm gets."""
    merged = json.loads(json.dumps(values))
    for dotted, value in change.items():
        node = merged
        *parents, leaf = dotted.split(".")
        for key in parents:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        node[leaf] = value
    objects = render.render_values(merged, Path(rel.chart_dir), rel.name, rel.namespace, rel.helm)
    target = target_of(merged, f"release {rel.name}", rel.name, rel.namespace)
    overlay = render.overlay_path(rel.env, Path(rel.values_dir))
    return render.Rendered(rel.env, overlay, [], merged, merged, objects, target=target)


# ---------------------------------------------------------------- the watch


async def watch_pods(
    api: Api | None,
    workers: observe.Workers,
    started: float,
    interval: float,
    seen: list | None = None,
    unschedulable_grace: float = 0.0,
    out: Callable[[str], None] = say,
) -> str | None:
    """Print a progress line whenever the scheduled/running/ready counts (or the reasons why
    not) change. Return, to stop the deploy, why a worker cannot start (observe.start_failure:
    an image the nodes cannot get, at once; a pod the scheduler refuses, after
    `unschedulable_grace` seconds, 0: never; volumes.failure: a pod that waits on its volume,
    after the same grace). `seen` keeps the latest pod list that says why a
    worker is not ready, for the failure report: by the time helm gives up and rolls back, the
    pods may be gone or replaced."""
    last = None
    unschedulable_since: dict[str, float] = {}
    creating_since: dict[str, float] = {}  # pods placed on a node whose containers have not started
    while api:
        failure = None
        try:
            items = await asyncio.to_thread(observe.list_pods, api, workers)
            states = [observe.pod_state(p) for p in items]
            now = time.monotonic()
            for p in states:
                if volumes.creating(p):
                    creating_since.setdefault(p.name, now)
                else:
                    creating_since.pop(p.name, None)
            slow = {name for name, t in creating_since.items() if now - t >= volumes.LOOK_AFTER_SECONDS}
            if slow:  # only pods that have not started for a while: why, from their Events
                states = await asyncio.to_thread(volumes.looked_up, api, workers.namespace, items, states, slow)
            line = observe.progress_line(states, workers.replicas)
            if seen is not None and (observe.pod_problems(states) or not seen):
                seen[:] = states
            for p in states:
                if p.reason == "Unschedulable":
                    unschedulable_since.setdefault(p.name, now)
                else:
                    unschedulable_since.pop(p.name, None)
            coming: set[str] = set()
            if unschedulable_grace and any(now - t >= unschedulable_grace for t in unschedulable_since.values()):
                events = await asyncio.to_thread(observe.list_events, api, workers.namespace)
                coming = observe.capacity_coming_for(events, workers)
            failure = observe.start_failure(
                states, unschedulable_since, now, unschedulable_grace or float("inf"), coming
            ) or volumes.failure(states, creating_since, now, unschedulable_grace or float("inf"))
        except (ApiError, ValueError):
            line = None  # transient API hiccups: helm reports real failures
        if line and line != last:
            out(f"[{int(time.monotonic() - started):>5}s] {line}")
            last = line
        if failure:
            return failure
        await asyncio.sleep(interval)
    return None


# ---------------------------------------------------------------- a failed upgrade, in one line


@dataclass
class _Attempt:
    """One `helm upgrade --install` under way: what its failure report needs."""

    rel: Release
    options: Upgrade
    cmd: object  # pyhelm3's helm runner
    api: Api | None
    rendered: render.Rendered
    workers: observe.Workers
    previous: dict | None  # `helm status` before it (None: an install)
    namespace_created: bool
    started_wall: float = field(default_factory=time.time)
    seen: list = field(default_factory=list)  # the pods as last seen while helm waited (watch_pods)


async def _what_is_left(attempt: _Attempt, pods_now: list) -> str:
    """What the failed install or upgrade left behind, as one clause (deploy_helm.after_failure)."""
    import pyhelm3  # helm's client library loads only on this path

    rel = attempt.rel
    try:
        now = await attempt.cmd.status(rel.name, namespace=rel.namespace)
    except pyhelm3.errors.Error:
        now = None
    return deploy_helm.after_failure(
        rel.name,
        rel.namespace,
        previous=attempt.previous,
        now=now,
        rollback=attempt.options.rollback,
        namespace_created=attempt.namespace_created,
        pods_left=len(pods_now) if now is None else 0,
        kept=await _claims_left(attempt) if now is None else [],
    )


async def _helm_failed(exc, attempt: _Attempt) -> ToolError:
    """One line for a failed `helm upgrade --install`: what helm or the API server refused, why
    the workers were not ready (pods, scheduler and controller Events), and what is left."""
    stderr = stderr_text(exc.stderr)
    cluster = cluster_failure(stderr, attempt.rel.kube_context, attempt.rel.kubeconfig_env)
    if cluster:
        return cluster
    cause = deploy_helm.helm_failure_cause(deploy_helm.helm_error_text(stderr))
    refusal = deploy_helm.api_refusal(cause)
    parts, code = [_helm_failure_part(cause, refusal, attempt.options.timeout)], (2 if refusal and refusal[1] else 4)
    pods_now, events = await _pods_and_events(attempt)
    if attempt.api and not refusal:
        # The pods as last seen while helm waited: since then a rollback may have deleted them
        # or put the previous revision's back.
        live = [p for p in pods_now if p.phase != "Terminating"]
        reasons = observe.not_ready_reasons(
            attempt.seen or live, events, attempt.workers, since=attempt.started_wall - 5
        )
        if reasons:
            parts.append("workers not ready: " + "; ".join(reasons))
    parts.append(await _what_is_left(attempt, pods_now))
    return ToolError("; ".join(parts), exit_code=code)


async def _stopped(why: str, attempt: _Attempt) -> ToolError:
    """One line for a deploy stopped early because a worker cannot start: why, and what is left
    after helm cancelled (and rolled back) the install or upgrade."""
    pods_now, _ = await _pods_and_events(attempt)
    return ToolError(f"deploy stopped: {why}; {await _what_is_left(attempt, pods_now)}", exit_code=4)


def _helm_failure_part(cause: str, refusal: tuple | None, timeout) -> str:
    """What helm said, as the line's first part: the API server's refusal, a timeout, or helm's cause."""
    if refusal:
        return refusal[0]
    if re.search(r"context deadline exceeded|timed out waiting|not ready\. status: ", cause):
        return f"helm upgrade --install did not finish within --timeout {timeout} ({cause})"
    return f"helm upgrade --install failed: {cause}"


async def _pods_and_events(attempt: _Attempt) -> tuple[list, list]:
    """The worker pods and the namespace's Events now; empty when they cannot be read."""
    if not attempt.api:
        return [], []
    pods: list = []
    try:
        listed = await asyncio.to_thread(observe.list_pods, attempt.api, attempt.workers)
        pods = [observe.pod_state(p) for p in listed]
        return pods, await asyncio.to_thread(observe.list_events, attempt.api, attempt.rel.namespace)
    except (ApiError, ValueError):
        return pods, []


async def _claims_left(attempt: _Attempt) -> list[str]:
    """The release's claims that outlive it (helm.sh/resource-policy: keep) and still exist."""
    claims = deploy_helm.kept_claims(attempt.rendered.objects)
    if not attempt.api or not claims:
        return []
    try:
        found = await asyncio.to_thread(
            observe.get_objects, attempt.api, attempt.rel.namespace, [f"persistentvolumeclaim/{c}" for c in claims]
        )
        return [ref.split("/", 1)[1] for ref in found]
    except (ApiError, ValueError):
        return claims  # cannot look: say what helm keeps by policy


# ---------------------------------------------------------------- the upgrade


def _run_after_deploy(
    api: Api | None, workers: observe.Workers, release: str, revision, out: Callable[[str], None]
) -> None:
    """Say where the run stands once helm is done (it may have finished during the wait, and
    its workers scaled to 0); refuse, exit 3, when this revision's run is recorded Failed."""
    if not api or not workers.status_configmap:
        return
    refs = [f"statefulset/{workers.name}", f"configmap/{workers.status_configmap}"]
    try:
        found = observe.get_objects(api, workers.namespace, refs)
    except (ApiError, ValueError):
        return  # the deploy itself succeeded; `make status` will tell
    sts, record = found.get(refs[0]), observe.run_record(found.get(refs[1]))
    run = observe.run_summary(record, workers)
    if observe.run_failed_here(record, workers, sts):
        # No worker count here: a redeploy has just brought the workers back, only for them to
        # find the run Failed and return to 0.
        raise ToolError(
            f"release {release} revision {revision} is deployed, but {run}. It does not "
            "train again with this pod template: fix the cause and `make retry` (it resumes the run "
            "from its last checkpoint), deploy changed values (which retry it too), or set a new "
            "training.runId",
            exit_code=3,
        )
    out(f"{run}; {observe.workers_summary(workers, sts, record)}")


def record_image(api: Api, workers: observe.Workers, out: Callable[[str], None]) -> None:
    """Say which image digest the workers run, from their containers' imageID (one list of the
    workers' pods), warning when they differ, and record it on the StatefulSet (annotation
    observe.IMAGE_ANNOTATION) for `make status`; two requests whatever the group's size."""
    try:
        states = [observe.pod_state(p) for p in observe.list_pods(api, workers)]
        record = observe.image_record(states)
        if not record:
            return  # no worker started (a run that ended and scaled to 0 during the wait)
        out(observe.image_line(states, workers.replicas))
        path = ns_path(workers.namespace, "statefulsets", workers.name, group="apps/v1")
        api.patch(path, {"metadata": {"annotations": {observe.IMAGE_ANNOTATION: record}}})
    except (ApiError, ValueError) as err:
        out(f"image digest not recorded: {err}")  # the deploy itself succeeded


def _plan_line(attempt: _Attempt, major: int, target: str) -> str:
    """'helm 4: upgrading r from revision 3 in namespace ml on <cluster>; waiting up to ...'."""
    rel, options, current = attempt.rel, attempt.options, attempt.previous
    action = f"upgrading {rel.name} from revision {current.get('version')}" if current else f"installing {rel.name}"
    wait = (
        (
            f"waiting up to {options.timeout} for {attempt.workers.replicas} workers to be ready"
            + (", rolling back on failure" if options.rollback else "")
        )
        if options.wait
        else "not waiting"
    )
    where = f"namespace {rel.namespace}" + (" (created now)" if attempt.namespace_created else "")
    return f"helm {major}: {action} in {where} on {target}; {wait}"


async def _start(rel: Release, rendered: render.Rendered, helm: str, options: Upgrade) -> _Attempt:
    """Read the release as it is (refusing one stuck in a pending state) before helm runs."""
    cmd = helm_command(rel, helm)
    current = await recorded_status(cmd, rel)
    if current:
        deploy_helm.refuse_pending(rel.name, rel.namespace, current)
    workers = observe.workers_of(rendered.objects, rel.namespace)
    api = api_or_none(rel.kube_context, rel.kubeconfig_env)
    namespace_created = bool(not current and api and observe.namespace_exists(api, rel.namespace) is False)
    return _Attempt(rel, options, cmd, api, rendered, workers, current, namespace_created)


async def run(
    rel: Release,
    rendered: render.Rendered,
    helm: str,
    options: Upgrade,
    report: bool = True,
    out: Callable[[str], None] = say,
) -> int:
    """`helm upgrade --install` of `rendered` (its values on stdin), watched; with `report`, where
    the run stands once helm is done. A ToolError, one line, when it fails."""
    import pyhelm3

    major = helmkit.helm_major(helm)
    attempt = await _start(rel, rendered, helm, options)
    target = attempt.api.target if attempt.api else deploy_helm.kube_target(rel.kube_context, rel.kubeconfig_env)
    out(_plan_line(attempt, major, target))

    started = time.monotonic()
    attempt.started_wall = time.time()
    watched = attempt.api if options.wait else None
    watcher = asyncio.create_task(
        watch_pods(
            watched, attempt.workers, started, options.poll_seconds, attempt.seen, options.unschedulable_grace, out
        )
    )
    helm_run = asyncio.create_task(
        attempt.cmd.run(upgrade_args(rel, options, major), json.dumps(rendered.user_values).encode())
    )
    try:
        await asyncio.wait({helm_run, watcher}, return_when=asyncio.FIRST_COMPLETED)
        stopped = None if helm_run.done() or watcher.cancelled() else watcher.result()
        if stopped:
            out(f"[{int(time.monotonic() - started):>5}s] stopping: {stopped}")
            helm_run.cancel()  # helm cancels its operation (and rolls back, unless --no-rollback)
            with contextlib.suppress(asyncio.CancelledError, pyhelm3.errors.Error):
                await helm_run
            raise await _stopped(stopped, attempt)
        done = await helm_run
    except pyhelm3.errors.Error as exc:
        raise await _helm_failed(exc, attempt) from None
    finally:
        watcher.cancel()
    text = done.decode(errors="replace")
    try:  # helm may print registry notes before the JSON release
        deployed = json.loads(text[text.index("{") :])
    except ValueError:
        deployed = {}
    revision = deployed.get("version", "?")
    out(
        f"deployed: release {rel.name} revision {revision}, "
        f"{(deployed.get('info') or {}).get('status', 'deployed')}, "
        f"{int(time.monotonic() - started)}s; follow with `make status` and `make logs`"
    )
    if watched:
        record_image(watched, attempt.workers, out)
    if report:
        _run_after_deploy(watched, attempt.workers, rel.name, revision, out)
    return 0

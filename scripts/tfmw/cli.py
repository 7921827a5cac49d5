"""Host-side CLI behind `make template / deploy / diff / status / logs / undeploy`.

    python -m tfmw.cli template --env prod                 # -> build/prod/manifests.yaml
    python -m tfmw.cli deploy   --env dev --set "workers.replicas=4 training.runId=run-7"
    python -m tfmw.cli diff     --env dev
    python -m tfmw.cli status   [--release R] [--namespace N]
    python -m tfmw.cli logs     [--no-follow]
    python -m tfmw.cli undeploy

Everything a value can break is refused before any cluster call: the overlay is layered by helm's
rules (scripts/tfmw/chart/render.py), validated against values.schema.json, rendered through pyhelm3 over the
real helm, and the manifests validated against the Kubernetes schema of --kube-version.
Errors are one line on stderr with a non-zero exit (see helmkit.ToolError for the codes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import secrets
import sys
import time
from pathlib import Path

from tfmw.chart import helmkit, render
from tfmw.chart.helmkit import ToolError, stderr_text
from tfmw.chart.target import target_of
from tfmw.deploy import context as deploy_context
from tfmw.deploy import helm as deploy_helm
from tfmw.deploy import kueue_update, observe, queue
from tfmw.k8s import kubeconfig
from tfmw.k8s.api import Api, ApiError, ns_path


def say(line: str) -> None:
    print(line, flush=True)


# ---------------------------------------------------------------- helm via pyhelm3


def _cluster_failure(stderr: str, context: str | None) -> ToolError | None:
    """The kube context is missing or the cluster does not answer: one line naming which, or None."""
    no_file = deploy_helm.missing_kubeconfig_message(os.environ.get("KUBECONFIG"))
    if no_file and deploy_helm.is_unreachable(stderr):
        return ToolError(no_file, exit_code=3)
    missing = deploy_helm.missing_context_message(stderr, deploy_helm.kube_contexts(), kubeconfig.in_use())
    if missing:
        return ToolError(missing, exit_code=3)
    if deploy_helm.is_unreachable(stderr):
        return ToolError(deploy_helm.unreachable_message(stderr, deploy_helm.kube_target(context)), exit_code=3)
    return None


def _helm_failure(exc, what: str, context: str | None) -> ToolError:
    """Turn a pyhelm3 error into one operator-facing line."""
    stderr = stderr_text(exc.stderr)
    return _cluster_failure(stderr, context) or ToolError(
        f"{what} failed: {deploy_helm.helm_error_text(stderr)}", exit_code=4
    )


# ---------------------------------------------------------------- the Kubernetes API (tfmw.k8s)


def _api(context: str | None) -> Api:
    """The client for the kubeconfig in use at `context`; one line when there is none."""
    try:
        return Api.from_kubeconfig(context)
    except kubeconfig.KubeconfigError as err:
        no_file = deploy_helm.missing_kubeconfig_message(os.environ.get("KUBECONFIG"))
        raise ToolError(no_file or str(err), exit_code=3) from None


def _api_or_none(context: str | None) -> Api | None:
    """The client when the kubeconfig allows one: for what only adds detail to a message."""
    try:
        return Api.from_kubeconfig(context)
    except kubeconfig.KubeconfigError:
        return None


def _api_failure(err: ApiError, what: str, api: Api) -> ToolError:
    """One line for a failed API call: the cluster did not answer (exit 3), or it refused (4)."""
    if err.status == 0:
        return ToolError(deploy_helm.unreachable_message(str(err), api.target), exit_code=3)
    return ToolError(f"{what} failed: {err}", exit_code=4)


async def _release_status(cmd, release: str, namespace: str, context: str | None) -> dict | None:
    """`helm status -o json`, or None when the release is not installed."""
    import pyhelm3

    try:
        return await cmd.status(release, namespace=namespace)
    except pyhelm3.errors.ReleaseNotFoundError:
        return None
    except pyhelm3.errors.Error as exc:
        raise _helm_failure(exc, "helm status", context) from None


async def _release_objects(cmd, release: str, namespace: str, context: str | None) -> list[dict]:
    """The manifest helm recorded for the release's current revision."""
    import pyhelm3

    try:
        return [o for o in await cmd.get_resources(release, namespace=namespace) if o]
    except pyhelm3.errors.Error as exc:
        raise _helm_failure(exc, "helm get manifest", context) from None


def _not_installed(release: str, namespace: str) -> ToolError:
    return ToolError(
        f"release {release} is not installed in namespace {namespace} "
        f"(deploy it with `make deploy ENV=<env> RELEASE={release} NAMESPACE={namespace}`)",
        exit_code=3,
    )


def _namespace_missing(namespace: str, context: str | None) -> str | None:
    """'namespace x does not exist on <cluster>' when the API says so (None: it exists, or unknown)."""
    api = _api_or_none(context)
    if api and observe.namespace_exists(api, namespace) is False:
        return f"namespace {namespace} does not exist on {api.target}"
    return None


def _missing_release(release: str, namespace: str, context: str | None) -> ToolError:
    """No such release: say whether the namespace itself is missing (a typo in NAMESPACE=)."""
    missing = _namespace_missing(namespace, context)
    if missing:
        return ToolError(
            f"{missing}, so release {release} is not there: check NAMESPACE= (`kubectl get namespaces` lists them)",
            exit_code=3,
        )
    return _not_installed(release, namespace)


# ---------------------------------------------------------------- template


def _prepare(args) -> render.Rendered:
    """Render the environment's overlay; from here on args.release and args.namespace are the
    environment's (its `target` block) unless given."""
    rendered = render.prepare(
        args.env,
        args.set,
        release=args.release,
        namespace=args.namespace,
        helm=args.helm,
        chart_dir=args.chart,
        values_dir=args.values_dir,
        kube_version=args.kube_version,
        set_files=args.set_file,
    )
    target = rendered.target
    args.release, args.namespace = target.release, target.namespace
    sets = f" + --set {' '.join(rendered.sets)}" if rendered.sets else ""
    say(
        f"values: {render.repo_relative(rendered.overlay)}{sets} validated against "
        f"{render.repo_relative(Path(args.chart) / 'values.schema.json')}; release {target.release} "
        f"in namespace {target.namespace} (from {target.origin})"
    )
    unchecked = (
        f" (not in the Kubernetes schema, checked by the cluster: {', '.join(rendered.unchecked_kinds)})"
        if rendered.unchecked_kinds
        else ""
    )
    say(f"rendered {len(rendered.objects)} objects, valid for Kubernetes {args.kube_version}{unchecked}")
    for warning in rendered.warnings:
        print(warning, file=sys.stderr, flush=True)
    return rendered


def cmd_template(args) -> int:
    rendered = _prepare(args)
    path = render.write_manifests(rendered.objects, args.output or render.manifests_path(args.env))
    say(render.repo_relative(path))
    return 0


# ---------------------------------------------------------------- deploy


async def _watch_pods(
    api: Api | None,
    workers: observe.Workers,
    started: float,
    interval: float,
    seen: list | None = None,
    unschedulable_grace: float = 0.0,
) -> str | None:
    """Print a progress line whenever the scheduled/running/ready counts (or the reasons why
    not) change. Return, to stop the deploy, why a worker cannot start (observe.start_failure:
    an image the nodes cannot get, at once; a pod the scheduler refuses, after
    `unschedulable_grace` seconds, 0: never). `seen` keeps the latest pod list that says why a
    worker is not ready, for the failure report: by the time helm gives up and rolls back, the
    pods may be gone or replaced."""
    last = None
    unschedulable_since: dict[str, float] = {}
    while api:
        failure = None
        try:
            items = await asyncio.to_thread(observe.list_pods, api, workers)
            states = [observe.pod_state(p) for p in items]
            line = observe.progress_line(states, workers.replicas)
            if seen is not None and (observe.pod_problems(states) or not seen):
                seen[:] = states
            now = time.monotonic()
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
            )
        except (ApiError, ValueError):
            line = None  # transient API hiccups: helm reports real failures
        if line and line != last:
            say(f"[{int(time.monotonic() - started):>5}s] {line}")
            last = line
        if failure:
            return failure
        await asyncio.sleep(interval)
    return None


def _upgrade_args(args, major: int) -> list[str]:
    return deploy_helm.upgrade_args(
        major,
        args.release,
        Path(args.chart).resolve(),
        args.namespace,
        timeout=args.timeout,
        wait=not args.no_wait,
        rollback_on_failure=not args.no_rollback,
    )


async def _deploy_failure(
    exc,
    args,
    cmd,
    api: Api | None,
    rendered: render.Rendered,
    previous: dict | None,
    namespace_created: bool,
    seen: list,
    started_wall: float,
) -> ToolError:
    """One line for a failed `helm upgrade --install`: what helm or the API server refused, why
    the workers were not ready (pods, scheduler and controller Events), and what is left."""
    stderr = stderr_text(exc.stderr)
    cluster = _cluster_failure(stderr, args.kube_context)
    if cluster:
        return cluster
    workers = observe.workers_of(rendered.objects, args.namespace)
    cause = deploy_helm.helm_failure_cause(deploy_helm.helm_error_text(stderr))
    refusal = deploy_helm.api_refusal(cause)
    parts, code = [_helm_failure_part(cause, refusal, args.timeout)], (2 if refusal and refusal[1] else 4)
    pods_now, events = await _pods_and_events(api, args, workers)
    if api and not refusal:
        # The pods as last seen while helm waited: since then a rollback may have deleted them
        # or put the previous revision's back.
        live = [p for p in pods_now if p.phase != "Terminating"]
        reasons = observe.not_ready_reasons(seen or live, events, workers, since=started_wall - 5)
        if reasons:
            parts.append("workers not ready: " + "; ".join(reasons))
    import pyhelm3  # helm's client library loads only on this path

    try:
        now = await cmd.status(args.release, namespace=args.namespace)
    except pyhelm3.errors.Error:
        now = None
    parts.append(
        deploy_helm.after_failure(
            args.release,
            args.namespace,
            previous=previous,
            now=now,
            rollback=not args.no_rollback,
            namespace_created=namespace_created,
            pods_left=len(pods_now) if now is None else 0,
            kept=await _claims_left(api, args, rendered) if now is None else [],
        )
    )
    return ToolError("; ".join(parts), exit_code=code)


async def _stopped_failure(
    why: str, args, cmd, api: Api | None, rendered: render.Rendered, previous: dict | None, namespace_created: bool
) -> ToolError:
    """One line for a deploy stopped early because a worker cannot start: why, and what is left
    after helm cancelled (and rolled back) the install or upgrade."""
    import pyhelm3  # helm's client library loads only on this path

    try:
        now = await cmd.status(args.release, namespace=args.namespace)
    except pyhelm3.errors.Error:
        now = None
    pods_now, _ = await _pods_and_events(api, args, observe.workers_of(rendered.objects, args.namespace))
    left = deploy_helm.after_failure(
        args.release,
        args.namespace,
        previous=previous,
        now=now,
        rollback=not args.no_rollback,
        namespace_created=namespace_created,
        pods_left=len(pods_now) if now is None else 0,
        kept=await _claims_left(api, args, rendered) if now is None else [],
    )
    return ToolError(f"deploy stopped: {why}; {left}", exit_code=4)


def _helm_failure_part(cause: str, refusal: tuple | None, timeout) -> str:
    """What helm said, as the line's first part: the API server's refusal, a timeout, or helm's cause."""
    if refusal:
        return refusal[0]
    if re.search(r"context deadline exceeded|timed out waiting|not ready\. status: ", cause):
        return f"helm upgrade --install did not finish within --timeout {timeout} ({cause})"
    return f"helm upgrade --install failed: {cause}"


async def _pods_and_events(api: Api | None, args, workers: observe.Workers) -> tuple[list, list]:
    """The worker pods and the namespace's Events now; empty when they cannot be read."""
    if not api:
        return [], []
    pods: list = []
    try:
        pods = [observe.pod_state(p) for p in await asyncio.to_thread(observe.list_pods, api, workers)]
        return pods, await asyncio.to_thread(observe.list_events, api, args.namespace)
    except (ApiError, ValueError):
        return pods, []


async def _claims_left(api: Api | None, args, rendered: render.Rendered) -> list[str]:
    """The release's claims that outlive it (helm.sh/resource-policy: keep) and still exist."""
    claims = deploy_helm.kept_claims(rendered.objects)
    if not api or not claims:
        return []
    try:
        found = await asyncio.to_thread(
            observe.get_objects, api, args.namespace, [f"persistentvolumeclaim/{c}" for c in claims]
        )
        return [ref.split("/", 1)[1] for ref in found]
    except (ApiError, ValueError):
        return claims  # cannot look: say what helm keeps by policy


def _run_after_deploy(api: Api | None, workers: observe.Workers, release: str, revision) -> None:
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
    say(f"{run}; {observe.workers_summary(workers, sts, record)}")


async def _deploy(args, rendered: render.Rendered, helm: str, report: bool = True) -> int:
    import pyhelm3

    cmd = helmkit.pyhelm3_command(helm, args.kube_context)
    major = helmkit.helm_major(helm)
    current = await _release_status(cmd, args.release, args.namespace, args.kube_context)
    if current:
        deploy_helm.refuse_pending(args.release, args.namespace, current)
    workers = observe.workers_of(rendered.objects, args.namespace)
    api = _api_or_none(args.kube_context)
    target = api.target if api else deploy_helm.kube_target(args.kube_context)
    namespace_created = bool(not current and api and observe.namespace_exists(api, args.namespace) is False)
    action = (
        f"upgrading {args.release} from revision {current.get('version')}" if current else f"installing {args.release}"
    )
    wait = (
        (
            f"waiting up to {args.timeout} for {workers.replicas} workers to be ready"
            + (", rolling back on failure" if not args.no_rollback else "")
        )
        if not args.no_wait
        else "not waiting"
    )
    where = f"namespace {args.namespace}" + (" (created now)" if namespace_created else "")
    say(f"helm {major}: {action} in {where} on {target}; {wait}")

    helm_args = _upgrade_args(args, major)
    started, started_wall = time.monotonic(), time.time()
    seen: list = []
    watcher = asyncio.create_task(
        _watch_pods(None if args.no_wait else api, workers, started, args.poll_seconds, seen, args.unschedulable_grace)
    )
    helm_run = asyncio.create_task(cmd.run(helm_args, json.dumps(rendered.user_values).encode()))
    try:
        await asyncio.wait({helm_run, watcher}, return_when=asyncio.FIRST_COMPLETED)
        stopped = None if helm_run.done() or watcher.cancelled() else watcher.result()
        if stopped:
            say(f"[{int(time.monotonic() - started):>5}s] stopping: {stopped}")
            helm_run.cancel()  # helm cancels its operation (and rolls back, unless --no-rollback)
            with contextlib.suppress(asyncio.CancelledError, pyhelm3.errors.Error):
                await helm_run
            raise await _stopped_failure(stopped, args, cmd, api, rendered, current, namespace_created)
        out = await helm_run
    except pyhelm3.errors.Error as exc:
        raise await _deploy_failure(
            exc, args, cmd, api, rendered, current, namespace_created, seen, started_wall
        ) from None
    finally:
        watcher.cancel()
    text = out.decode(errors="replace")
    try:  # helm may print registry notes before the JSON release
        release = json.loads(text[text.index("{") :])
    except ValueError:
        release = {}
    revision = release.get("version", "?")
    say(
        f"deployed: release {args.release} revision {revision}, "
        f"{(release.get('info') or {}).get('status', 'deployed')}, "
        f"{int(time.monotonic() - started)}s; follow with `make status` and `make logs`"
    )
    if report:
        _run_after_deploy(None if args.no_wait else api, workers, args.release, revision)
    return 0


def _check_context(args, target) -> None:
    """Refuse a deploy or undeploy sent to a cluster its environment is not meant for."""
    deploy_context.check(
        target,
        deploy_context.in_use(args.kube_context),
        env_named=args.env_named,
        any_context=args.any_context,
        verb=args.command,
    )


def cmd_deploy(args) -> int:
    rendered = _prepare(args)
    helm = helmkit.find_helm(args.helm)
    if args.dry_run:
        return _dry_run(args, rendered, helm)
    _check_context(args, rendered.target)
    reason = _kueue_through_zero(args, rendered, helm)
    if reason:
        _remove_statefulset_at_zero(args, rendered, helm, reason)
    return asyncio.run(_deploy(args, rendered, helm))


# ---------------------------------------------------------------- a change Kueue refuses in place


def _kueue_through_zero(args, rendered: render.Rendered, helm: str) -> str | None:
    """Why this upgrade must go through zero under Kueue (tfmw.deploy.kueue_update), or None."""
    api = _api_or_none(args.kube_context)
    if api is None:
        return None
    workers = observe.workers_of(rendered.objects, args.namespace)
    try:
        live = api.get_or_none(ns_path(workers.namespace, "statefulsets", workers.name, group="apps/v1"))
    except ApiError as err:
        raise _api_failure(err, "reading the worker StatefulSet", api) from None
    new = observe.worker_statefulset(rendered.objects)
    if live is None or not (queue.queue_of(live) or queue.queue_of(new)):
        return None

    async def recorded() -> dict | None:
        cmd = helmkit.pyhelm3_command(helm, args.kube_context)
        if not await _release_status(cmd, args.release, args.namespace, args.kube_context):
            return None
        return observe.worker_statefulset(await _release_objects(cmd, args.release, args.namespace, args.kube_context))

    try:
        workload = queue.workload_of(api, live) if queue.queue_of(live) else None
    except ApiError as err:
        raise _api_failure(err, "reading the release's Kueue Workload", api) from None
    return kueue_update.through_zero(live, workload, asyncio.run(recorded()), new)


def _remove_statefulset_at_zero(args, rendered: render.Rendered, helm: str, reason: str) -> None:
    """Stop the group at its checkpoint (the chart's suspend) and delete the worker StatefulSet,
    so that the upgrade creates it anew and Kueue admits a new Workload of the new size and shape.
    Only the StatefulSet goes: the run's status, its storage and the release stay."""
    workers = observe.workers_of(rendered.objects, args.namespace)
    api = _api(args.kube_context)
    path = ns_path(workers.namespace, "statefulsets", workers.name, group="apps/v1")
    say(
        f"under Kueue {reason} cannot change on a running StatefulSet: going through 0 workers "
        "(the group stops at its checkpoint, the StatefulSet is made anew, Kueue admits it as it is now)"
    )
    live = api.get_or_none(path) or {}
    if int((live.get("spec") or {}).get("replicas") or 0) > 0:
        values = asyncio.run(
            _release_values(
                helmkit.pyhelm3_command(helm, args.kube_context), args.release, args.namespace, args.kube_context
            )
        )
        suspended = _with_values(args, values, {"suspend": True})
        running = observe.workers_of(suspended.objects, args.namespace)  # the run as deployed now
        asyncio.run(_deploy(args, suspended, helm, report=False))
        grace = int(((values.get("workers") or {}).get("terminationGracePeriodSeconds")) or 120)
        record = _wait_until_suspended(args, running, grace + 60)
        if observe.list_pods(api, running):
            raise ToolError(
                f"release {args.release} is at 0 workers, but its pods are still there after {grace + 60}s "
                "(nothing was deleted; `make status` tells why, `make resume` brings them back)",
                exit_code=4,
            )
        say(f"stopped: {observe.run_summary(record, running)}")
    try:
        api.delete(path, {"propagationPolicy": "Background"})
        deadline = time.monotonic() + 60
        while api.get_or_none(path) is not None and time.monotonic() < deadline:
            time.sleep(1)
    except ApiError as err:
        raise _api_failure(err, f"deleting StatefulSet {workers.name} at 0 workers", api) from None
    say(f"StatefulSet {workers.name} deleted at 0 workers (Kueue's Workload with it); the upgrade makes it anew")


def _dry_run(args, rendered: render.Rendered, helm: str) -> int:
    """Offline: show the helm command deploy would run (helm's own --dry-run needs a cluster)."""
    import shlex

    major = helmkit.helm_major(helm)
    helm_args = _upgrade_args(args, major)
    context = ["--kube-context", args.kube_context] if args.kube_context else []
    say(f"dry run (no cluster contacted): helm {major} would run, with the values below on stdin:")
    say("  " + shlex.join([helm, *helm_args, *context]))
    say(json.dumps(rendered.user_values, indent=2, sort_keys=True))
    return 0


# ---------------------------------------------------------------- diff


def cmd_diff(args) -> int:
    rendered = _prepare(args)
    helm = helmkit.find_helm(args.helm)

    async def recorded():
        cmd = helmkit.pyhelm3_command(helm, args.kube_context)
        if await _release_status(cmd, args.release, args.namespace, args.kube_context) is None:
            return None
        return await _release_objects(cmd, args.release, args.namespace, args.kube_context)

    old = asyncio.run(recorded())
    if old is None:
        missing = _namespace_missing(args.namespace, args.kube_context)
        say(
            f"{missing}; deploy would create it and:"
            if missing
            else f"release {args.release} is not installed in namespace {args.namespace}; deploy would create:"
        )
        for obj in deploy_helm.manifest_objects(rendered.objects):
            say(f"  + {deploy_helm.object_key(obj)}")
        return 0
    text = deploy_helm.diff_manifests(old, rendered.objects)
    say(text if text else f"no changes: release {args.release} already matches ENV={args.env}")
    return 0


# ---------------------------------------------------------------- status / logs / undeploy


def _resolve_target(args, helm: str):
    """The environment's release and namespace (its overlay's `target` block) for the verbs
    that render nothing; RELEASE= / NAMESPACE= win."""
    overlay = render.overlay_path(args.env, Path(args.values_dir))
    values = render.layer_values(Path(args.chart), [overlay], [], helm)
    target = target_of(values, render.repo_relative(overlay), args.release, args.namespace)
    args.release, args.namespace = target.release, target.namespace
    return target


async def _workers_of_release(args, helm: str) -> tuple[dict, observe.Workers]:
    cmd = helmkit.pyhelm3_command(helm, args.kube_context)
    status = await _release_status(cmd, args.release, args.namespace, args.kube_context)
    if status is None:
        raise _missing_release(args.release, args.namespace, args.kube_context)
    objects = await _release_objects(cmd, args.release, args.namespace, args.kube_context)
    return status, observe.workers_of(objects, args.namespace)


def _run_objects(api: Api, workers: observe.Workers) -> tuple[dict | None, dict | None]:
    """(the worker StatefulSet, the status ConfigMap) as they are now; None for what does not exist
    (the ConfigMap also when the release records no status)."""
    refs = [f"statefulset/{workers.name}"] + (
        [f"configmap/{workers.status_configmap}"] if workers.status_configmap else []
    )
    try:
        found = observe.get_objects(api, workers.namespace, refs)
    except ApiError as err:
        raise _api_failure(err, "reading the worker StatefulSet and status", api) from None
    return found.get(refs[0]), (found.get(refs[1]) if len(refs) > 1 else None)


def cmd_status(args) -> int:
    helm = helmkit.find_helm(args.helm)
    _resolve_target(args, helm)
    status, workers = asyncio.run(_workers_of_release(args, helm))
    api = _api(args.kube_context)
    sts, status_object = _run_objects(api, workers)
    try:
        items = observe.list_pods(api, workers)
    except ApiError as err:
        raise _api_failure(err, "listing the worker pods", api) from None
    reports = []
    for item in items:
        pod = observe.pod_state(item)
        if status_object is not None:
            reports.append(observe.WorkerReport(pod))
            continue
        # No status object (API access off): the logs are the only record of progress.
        log = observe.pod_log(api, workers.namespace, pod.name)
        reports.append(observe.WorkerReport(pod, observe.last_progress(log), observe.completion(log)))
    release = observe.ReleaseInfo(
        args.release, args.namespace, int(status.get("version", 0)), (status.get("info") or {}).get("status", "?")
    )
    for line in observe.status_lines(release, workers, sts, status_object, reports):
        say(line)
    queued = queue.workload_clause(api, sts)
    if queued:
        say(queued)
    return 0


def cmd_logs(args) -> int:
    helm = helmkit.find_helm(args.helm)
    _resolve_target(args, helm)
    _, workers = asyncio.run(_workers_of_release(args, helm))
    api = _api(args.kube_context)
    try:
        pods = observe.list_pods(api, workers)
    except ApiError as err:
        raise _api_failure(err, "listing the worker pods", api) from None
    if not pods:
        sts, status_object = _run_objects(api, workers)
        record = observe.run_record(status_object)
        summary = observe.workers_summary(workers, sts, record)
        mine = observe.current_record(record, workers)
        if mine is not None and mine.terminal and sts is not None and not (sts.get("spec") or {}).get("replicas"):
            # Scaled to 0 at the end of the run: the pods are gone, the logs they kept are not.
            reader, where = observe.log_reader_pod(sts, f"{workers.name}-logs-{secrets.token_hex(3)}")
            if reader is None:
                say(
                    f"no worker pods to follow: {summary}; {observe.run_summary(record, workers)}; "
                    f"their logs went with the pods: {where} (`make status` has the outcome)"
                )
                return 0
            say(
                f"no worker pods to follow: {summary}; {observe.run_summary(record, workers)}; "
                f"their logs as the workers kept them ({where}, logs.keepMiB):"
            )
            return _print_kept_logs(api, workers.namespace, reader)
        raise ToolError(
            f"no worker pods of release {args.release} in namespace {args.namespace}: {summary}; see `make status`",
            exit_code=3,
        )
    try:
        return observe.follow_logs(api, pods, follow=not args.no_follow, tail=args.tail, out=say)
    except KeyboardInterrupt:
        return 130


KEPT_LOGS_TIMEOUT_SECONDS = 180


def _print_kept_logs(api: Api, namespace: str, reader: dict) -> int:
    """Run the log reader pod (observe.log_reader_pod), print what it printed, delete it."""
    name = reader["metadata"]["name"]
    try:
        api.create(ns_path(namespace, "pods"), reader)
    except ApiError as err:
        raise ToolError(f"cannot start pod {name} to read the kept logs: {err}", exit_code=3) from None
    try:
        phase = _wait_for_reader(api, namespace, name)
        sys.stdout.write(api.log(namespace, name))
        sys.stdout.flush()
        return 0 if phase == "Succeeded" else 3
    except ApiError as err:
        raise _api_failure(err, f"reading pod {name}", api) from None
    finally:
        try:
            api.delete(ns_path(namespace, "pods", name))
        except ApiError:
            pass  # best effort: the reader has ended and holds nothing; a later `make logs` names a new one


def _wait_for_reader(api: Api, namespace: str, name: str) -> str:
    """The log reader pod's end phase; ToolError (with why it is waiting) when it does not end."""
    deadline, phase, why = time.monotonic() + KEPT_LOGS_TIMEOUT_SECONDS, "", ""
    while time.monotonic() < deadline:
        status = (api.get_or_none(ns_path(namespace, "pods", name)) or {}).get("status") or {}
        phase = status.get("phase", "")
        if phase in ("Succeeded", "Failed"):
            return phase
        waiting = [((c.get("state") or {}).get("waiting") or {}) for c in status.get("containerStatuses") or []]
        conditions = [c for c in status.get("conditions") or [] if c.get("status") == "False" and c.get("message")]
        why = "; ".join(w.get("message") or w.get("reason", "") for w in waiting if w) or "; ".join(
            c["message"] for c in conditions
        )
        time.sleep(1)
    raise ToolError(
        f"pod {name}, which reads the kept logs, did not finish in {KEPT_LOGS_TIMEOUT_SECONDS}s "
        f"(phase {phase or '?'}{': ' + why if why else ''})",
        exit_code=3,
    )


# ---------------------------------------------------------------- suspend / resume / retry


async def _release_values(cmd, release: str, namespace: str, context: str | None) -> dict:
    """The values the release was deployed with (`helm get values`: the overlay and --set)."""
    import pyhelm3

    try:
        out = await cmd.run(["get", "values", release, "--namespace", namespace, "--output", "json"])
    except pyhelm3.errors.Error as exc:
        raise _helm_failure(exc, "helm get values", context) from None
    values = json.loads(out.decode() or "{}")
    return values if isinstance(values, dict) else {}


def _recorded_run(args, helm: str) -> tuple[observe.Workers, observe.RunRecord | None, dict]:
    """(the workers, the run this release trains as recorded, the release's values)."""

    async def read():
        status, workers = await _workers_of_release(args, helm)
        return workers, await _release_values(
            helmkit.pyhelm3_command(helm, args.kube_context), args.release, args.namespace, args.kube_context
        )

    workers, values = asyncio.run(read())
    _, status_object = _run_objects(_api(args.kube_context), workers)
    return workers, observe.current_record(observe.run_record(status_object), workers), values


def _with_values(args, values: dict, change: dict) -> render.Rendered:
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
    objects = render.render_values(merged, Path(args.chart), args.release, args.namespace, args.helm)
    target = target_of(merged, f"release {args.release}", args.release, args.namespace)
    overlay = render.overlay_path(args.env, Path(args.values_dir))
    return render.Rendered(args.env, overlay, [], merged, merged, objects, target=target)


def _wait_until_suspended(args, workers: observe.Workers, seconds: float) -> observe.RunRecord | None:
    """Until the workers are gone and the chief has recorded Suspended (or `seconds` pass); once
    they are gone, also when there is nothing to record (no run recorded, or it had ended)."""
    api = _api(args.kube_context)
    deadline, record = time.monotonic() + seconds, None
    while time.monotonic() < deadline:
        _, status_object = _run_objects(api, workers)
        record = observe.current_record(observe.run_record(status_object), workers)
        if not observe.list_pods(api, workers) and (record is None or record.phase == "Suspended" or record.terminal):
            return record
        time.sleep(2)
    return record


def cmd_suspend(args) -> int:
    """Stop the group at a checkpoint and remove its workers; the run, its storage and the release stay."""
    helm = helmkit.find_helm(args.helm)
    _check_context(args, _resolve_target(args, helm))
    workers, record, values = _recorded_run(args, helm)
    if record is not None and record.terminal:
        raise ToolError(
            f"run {record.run_id} of release {args.release} already {record.phase}: nothing to suspend "
            "(its workers are released at the end of a run)",
            exit_code=3,
        )
    if values.get("suspend") is True or (record is not None and record.phase == "Suspended"):
        raise ToolError(f"release {args.release} is suspended already: `make resume` continues it", exit_code=3)
    say(f"suspending release {args.release} in namespace {args.namespace}: the group stops at its next checkpoint")
    asyncio.run(_deploy(args, _with_values(args, values, {"suspend": True}), helm, report=False))
    grace = int(((values.get("workers") or {}).get("terminationGracePeriodSeconds")) or 120)
    done = _wait_until_suspended(args, workers, grace + 60)
    if done is None or done.phase != "Suspended":
        raise ToolError(
            f"release {args.release} is at 0 workers, but its run was not recorded Suspended within {grace + 60}s "
            f"({observe.run_summary(done, workers)}); `make status` tells more",
            exit_code=4,
        )
    say(f"suspended: {observe.run_summary(done, workers)}; `make resume` continues it")
    return 0


def cmd_resume(args) -> int:
    """Bring a suspended run's workers back: the group goes on from its checkpoint."""
    helm = helmkit.find_helm(args.helm)
    _check_context(args, _resolve_target(args, helm))
    _, record, values = _recorded_run(args, helm)
    if values.get("suspend") is not True:
        state = f"run {record.run_id} is {record.phase}" if record is not None else "its run is not recorded"
        raise ToolError(f"release {args.release} is not suspended ({state}): nothing to resume", exit_code=3)
    say(f"resuming release {args.release} in namespace {args.namespace}")
    return asyncio.run(_deploy(args, _with_values(args, values, {"suspend": False}), helm))


def cmd_retry(args) -> int:
    """Train a Failed run again from its last checkpoint (a new pod template: training.retry + 1)."""
    helm = helmkit.find_helm(args.helm)
    _check_context(args, _resolve_target(args, helm))
    _, record, values = _recorded_run(args, helm)
    if record is None or record.phase != "Failed":
        state = f"run {record.run_id} is {record.phase}" if record is not None else "its run is not recorded"
        raise ToolError(f"release {args.release} has no Failed run to retry ({state})", exit_code=3)
    retry = int(((values.get("training") or {}).get("retry")) or 0) + 1
    say(
        f"retrying run {record.run_id} ({record.reason}: {observe.shorten(record.message, 160)}) from its last "
        f"checkpoint, step {record.last_checkpoint_step or 0}: training.retry={retry}"
    )
    return asyncio.run(_deploy(args, _with_values(args, values, {"training.retry": retry}), helm))


def cmd_undeploy(args) -> int:
    helm = helmkit.find_helm(args.helm)
    target = _resolve_target(args, helm)
    _check_context(args, target)

    async def uninstall() -> int:
        import pyhelm3

        cmd = helmkit.pyhelm3_command(helm, args.kube_context)
        status = await _release_status(cmd, args.release, args.namespace, args.kube_context)
        if status is None:
            missing = _namespace_missing(args.namespace, args.kube_context)
            if missing:
                raise ToolError(
                    f"{missing}: nothing to uninstall; check NAMESPACE= (`kubectl get namespaces` lists them)",
                    exit_code=3,
                )
            say(f"release {args.release} is not installed in namespace {args.namespace}: nothing to do")
            return 0
        objects = await _release_objects(cmd, args.release, args.namespace, args.kube_context)
        major = helmkit.helm_major(helm)
        try:
            await cmd.run(deploy_helm.uninstall_args(major, args.release, args.namespace, timeout=args.timeout))
        except pyhelm3.errors.Error as exc:
            raise _helm_failure(exc, "helm uninstall", args.kube_context) from None
        say(f"uninstalled release {args.release} from namespace {args.namespace}")
        for line in deploy_helm.storage_after_uninstall(objects, args.namespace):
            say(line)
        return 0

    return asyncio.run(uninstall())


# ---------------------------------------------------------------- CLI


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="tfmw", description=__doc__.split("\n\n")[0])
    sub = top.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--env",
            default=None,
            help="environment: the overlay values/<env>.yaml, whose `target` block names the release, "
            "namespace and kube context (default: local)",
        )
        p.add_argument("--release", default=None, help="helm release name (default: the overlay's target.release)")
        p.add_argument("--namespace", default=None, help="namespace (default: the overlay's target.namespace)")
        p.add_argument("--kube-context", default=None, help="kubeconfig context (default: current)")
        p.add_argument("--helm", default=None, help="helm binary (default: $HELM, .tools/bin/helm, PATH)")
        p.add_argument("--chart", default=str(render.CHART_DIR), help=argparse.SUPPRESS)
        p.add_argument("--values-dir", default=str(render.VALUES_DIR), help=argparse.SUPPRESS)

    def guarded(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--any-context",
            action="store_true",
            help="act on the kube context in use even where the overlay's target.kubeContext names another, "
            "or (no --env) it is not a local cluster",
        )

    def rendering(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--set", action="append", default=[], help="helm --set items, space separated: 'a.b=1 c={x,y}' (repeatable)"
        )
        p.add_argument(
            "--set-file",
            dest="set_file",
            action="append",
            default=[],
            help="helm --set-file key=path items, e.g. 'training.files.main\\.py=main.py' (repeatable)",
        )
        p.add_argument(
            "--kube-version",
            default=render.DEFAULT_KUBE_VERSION,
            help="validate manifests against this Kubernetes version (default %(default)s)",
        )

    p = sub.add_parser("template", help="render ENV into build/<env>/manifests.yaml")
    common(p), rendering(p)
    p.add_argument("--output", default=None, help="write here instead of build/<env>/manifests.yaml")
    p.set_defaults(func=cmd_template)

    p = sub.add_parser("deploy", help="install or upgrade the release, wait for the workers")
    common(p), rendering(p), guarded(p)
    p.add_argument("--timeout", default="15m", help="helm --timeout (default %(default)s)")
    p.add_argument("--no-wait", action="store_true", help="return once submitted (implies --no-rollback)")
    p.add_argument("--no-rollback", action="store_true", help="keep a failed revision for debugging")
    p.add_argument(
        "--dry-run", action="store_true", help="validate and render, print the helm command and values; no cluster call"
    )
    p.add_argument(
        "--unschedulable-grace",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="stop when a worker pod stays Unschedulable this long with no autoscaler adding a node for it "
        "(default %(default)s; 0 waits for --timeout)",
    )
    p.add_argument("--poll-seconds", type=float, default=5.0, help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_deploy)

    p = sub.add_parser("diff", help="rendered manifests vs. the release's recorded manifest")
    common(p), rendering(p)
    p.set_defaults(func=cmd_diff)

    p = sub.add_parser("status", help="release state and per-worker progress")
    common(p)
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("logs", help="every worker's log, prefixed with its pod")
    common(p)
    p.add_argument("--no-follow", action="store_true", help="print what is there and exit")
    p.add_argument("--tail", type=int, default=-1, help="lines per pod to start with (-1: all)")
    p.set_defaults(func=cmd_logs)

    def changing(p: argparse.ArgumentParser) -> None:
        p.add_argument("--timeout", default="15m", help="helm --timeout (default %(default)s)")
        p.add_argument("--unschedulable-grace", type=float, default=120.0, help=argparse.SUPPRESS)
        p.add_argument("--poll-seconds", type=float, default=5.0, help=argparse.SUPPRESS)
        p.set_defaults(no_wait=False, no_rollback=False)

    for name, func, text in (
        ("suspend", cmd_suspend, "stop the group at a checkpoint and remove its workers (suspend: true)"),
        ("resume", cmd_resume, "bring a suspended run's workers back (suspend: false)"),
        ("retry", cmd_retry, "train a Failed run again from its last checkpoint (training.retry + 1)"),
    ):
        p = sub.add_parser(name, help=text)
        common(p), guarded(p), changing(p)
        p.set_defaults(func=func)

    p = sub.add_parser("undeploy", help="uninstall the release (shared storage is kept)")
    common(p), guarded(p)
    p.add_argument("--timeout", default="5m")
    p.set_defaults(func=cmd_undeploy)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    # `make deploy` with no ENV: the local overlay, and only to a local cluster (deploy.context)
    args.env_named, args.env = args.env is not None, args.env or "local"
    args.any_context = getattr(args, "any_context", False)
    try:
        return args.func(args)
    except ToolError as exc:
        print(f"tfmw {args.command}: error: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    except BrokenPipeError:
        # the reader went away (`tfmw status | head`): stop quietly, as a shell tool does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        print(
            f"tfmw {args.command}: interrupted (a helm operation may have been cut short: check `make status`)",
            file=sys.stderr,
        )
        return 130


if __name__ == "__main__":
    sys.exit(main())

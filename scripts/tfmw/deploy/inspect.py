"""The verbs that read a release and change nothing: `tfmw status` (the release, its run and
each worker) and `tfmw logs` (every worker's log; once the run has ended and its pods are gone,
the logs the workers kept on shared storage, read by a short-lived pod).
"""

from __future__ import annotations

import asyncio
import secrets
import sys
import time

from tfmw.chart import helmkit
from tfmw.chart.helmkit import ToolError
from tfmw.deploy import observe, placement, queue, volumes
from tfmw.deploy.release import Release, api, api_failure, resolve, run_objects, say, workers_of_release
from tfmw.k8s.api import Api, ApiError, ns_path

KEPT_LOGS_TIMEOUT_SECONDS = 180


def status(rel: Release) -> int:
    """`tfmw status`: the release's revision, its run and one line per worker pod."""
    helm = helmkit.find_helm(rel.helm)
    rel, _ = resolve(rel, helm)
    recorded, workers = asyncio.run(workers_of_release(rel, helm))
    client = api(rel.kube_context, rel.kubeconfig_env)
    sts, status_object = run_objects(client, workers)
    try:
        items = observe.list_pods(client, workers)
    except ApiError as err:
        raise api_failure(err, "listing the worker pods", client) from None
    # A worker placed on a node that has not started: why, from its Events (its volume).
    states = volumes.looked_up(client, workers.namespace, items, [observe.pod_state(i) for i in items])
    reports = []
    for pod in states:
        if status_object is not None:
            reports.append(observe.WorkerReport(pod))
            continue
        # No status object (API access off): the logs are the only record of progress.
        log = observe.pod_log(client, workers.namespace, pod.name)
        reports.append(observe.WorkerReport(pod, observe.last_progress(log), observe.completion(log)))
    release = observe.ReleaseInfo(
        rel.name, rel.namespace, int(recorded.get("version", 0)), (recorded.get("info") or {}).get("status", "?")
    )
    for line in observe.status_lines(release, workers, sts, status_object, reports):
        say(line)
    placed = placement.status_line(client, sts, items)
    if placed:
        say(placed)
    queued = queue.workload_clause(client, sts)
    if queued:
        say(queued)
    return 0


def logs(rel: Release, follow: bool = True, tail: int = -1) -> int:
    """`tfmw logs`: every worker's log, prefixed with its pod (followed unless not `follow`)."""
    helm = helmkit.find_helm(rel.helm)
    rel, _ = resolve(rel, helm)
    _, workers = asyncio.run(workers_of_release(rel, helm))
    client = api(rel.kube_context, rel.kubeconfig_env)
    try:
        pods = observe.list_pods(client, workers)
    except ApiError as err:
        raise api_failure(err, "listing the worker pods", client) from None
    if not pods:
        return _no_pods(rel, client, workers)
    try:
        return observe.follow_logs(client, pods, follow=follow, tail=tail, out=say)
    except KeyboardInterrupt:
        return 130


def _no_pods(rel: Release, client: Api, workers: observe.Workers) -> int:
    """No worker pod to follow: the kept logs of a run that ended, else one line saying why."""
    sts, status_object = run_objects(client, workers)
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
        return _print_kept_logs(client, workers.namespace, reader)
    raise ToolError(
        f"no worker pods of release {rel.name} in namespace {rel.namespace}: {summary}; see `make status`",
        exit_code=3,
    )


def _print_kept_logs(client: Api, namespace: str, reader: dict) -> int:
    """Run the log reader pod (observe.log_reader_pod), print what it printed, delete it."""
    name = reader["metadata"]["name"]
    try:
        client.create(ns_path(namespace, "pods"), reader)
    except ApiError as err:
        raise ToolError(f"cannot start pod {name} to read the kept logs: {err}", exit_code=3) from None
    try:
        phase = _wait_for_reader(client, namespace, name)
        sys.stdout.write(client.log(namespace, name))
        sys.stdout.flush()
        return 0 if phase == "Succeeded" else 3  # the reader pod's phase (Kubernetes'), not the run's
    except ApiError as err:
        raise api_failure(err, f"reading pod {name}", client) from None
    finally:
        try:
            client.delete(ns_path(namespace, "pods", name))
        except ApiError:
            pass  # best effort: the reader has ended and holds nothing; a later `make logs` names a new one


def _wait_for_reader(client: Api, namespace: str, name: str) -> str:
    """The log reader pod's end phase; ToolError (with why it is waiting) when it does not end."""
    deadline, phase, why = time.monotonic() + KEPT_LOGS_TIMEOUT_SECONDS, "", ""
    while time.monotonic() < deadline:
        pod_status = (client.get_or_none(ns_path(namespace, "pods", name)) or {}).get("status") or {}
        phase = pod_status.get("phase", "")
        if phase in ("Succeeded", "Failed"):
            return phase
        waiting = [((c.get("state") or {}).get("waiting") or {}) for c in pod_status.get("containerStatuses") or []]
        conditions = [c for c in pod_status.get("conditions") or [] if c.get("status") == "False" and c.get("message")]
        why = "; ".join(w.get("message") or w.get("reason", "") for w in waiting if w) or "; ".join(
            c["message"] for c in conditions
        )
        time.sleep(1)
    raise ToolError(
        f"pod {name}, which reads the kept logs, did not finish in {KEPT_LOGS_TIMEOUT_SECONDS}s "
        f"(phase {phase or '?'}{': ' + why if why else ''})",
        exit_code=3,
    )

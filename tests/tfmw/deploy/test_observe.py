"""Pod states, deploy progress lines, training progress and completion from worker logs."""

from __future__ import annotations

import pytest
from chartkit import STAND_IN_DIGEST

from entrypoint.lifecycle import Phase, RunState
from tfmw.chart.helmkit import ToolError
from tfmw.deploy import observe
from tfmw.deploy.observe import PodState, WorkerReport


def pod(
    name,
    phase="Running",
    scheduled=True,
    ready=False,
    restarts=0,
    waiting=None,
    node="node-1",
    unschedulable=None,
    deleting=False,
    message=None,
):
    conditions = [
        {"type": "PodScheduled", "status": "True" if scheduled else "False"},
        {"type": "Ready", "status": "True" if ready else "False"},
    ]
    if unschedulable:
        conditions[0].update(reason="Unschedulable", message=unschedulable)
    state = (
        {"waiting": {"reason": waiting, **({"message": message} if message else {})}} if waiting else {"running": {}}
    )
    meta = {"name": name, **({"deletionTimestamp": "2026-01-01T00:00:00Z"} if deleting else {})}
    return {
        "metadata": meta,
        "spec": {"nodeName": node} if scheduled else {},
        "status": {
            "phase": phase,
            "conditions": conditions,
            "containerStatuses": [{"name": "worker", "restartCount": restarts, "state": state}],
        },
    }


NO_GPU = (
    "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. no new claims to deallocate, "
    "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
)


def test_pod_state_reads_phase_restarts_ready_node_and_reason():
    state = observe.pod_state(pod("w-1", restarts=3, waiting="CrashLoopBackOff", message="back-off 40s"))
    assert state == PodState("w-1", "Running", True, True, False, 3, "CrashLoopBackOff", "node-1", "back-off 40s")


def test_pod_state_takes_the_schedulers_reason_for_an_unscheduled_pod():
    state = observe.pod_state(pod("w-0", phase="Pending", scheduled=False, unschedulable=NO_GPU))
    assert (state.reason, state.message, state.node, state.scheduled) == ("Unschedulable", NO_GPU, "", False)


def test_a_deleted_pod_is_terminating():
    assert observe.pod_state(pod("w-0", ready=True, deleting=True)).phase == "Terminating"


def test_progress_line_counts_scheduled_running_ready_of_n():
    pods = [
        observe.pod_state(p)
        for p in (
            pod("w-0", ready=True),
            pod("w-1"),
            pod("w-2", phase="Pending", waiting="ContainerCreating"),
            pod("w-3", phase="Pending", scheduled=False),
        )
    ]
    line = observe.progress_line(pods, 4)
    assert line.startswith("workers: 3/4 scheduled, 2/4 running, 1/4 ready")
    assert "w-2 Pending: ContainerCreating" in line and "\r" not in line and "\n" not in line


def test_progress_line_groups_pods_that_wait_for_the_same_reason():
    pods = [observe.pod_state(pod(f"w-{i}", phase="Pending", scheduled=False, unschedulable=NO_GPU)) for i in range(2)]
    line = observe.progress_line(pods, 2)
    assert line == f"workers: 0/2 scheduled, 0/2 running, 0/2 ready (w-0, w-1 Pending: Unschedulable: {NO_GPU})"


def test_progress_line_counts_terminating_pods_apart():
    """Workers scaled to 0 at the end of a run are going, not running: counted apart."""
    pods = [observe.pod_state(pod(f"w-{i}", ready=True, deleting=True)) for i in range(2)]
    assert observe.progress_line(pods, 2) == "workers: 0/2 scheduled, 0/2 running, 0/2 ready, 2 terminating"


# ---------------------------------------------------------------- Events


def event(kind, name, reason, message, stamp="2026-11-30T06:55:07Z", type_="Warning"):
    return {
        "type": type_,
        "reason": reason,
        "message": message,
        "lastTimestamp": stamp,
        "involvedObject": {"kind": kind, "name": name},
    }


WORKERS = observe.Workers("w", "ml", 2, "app=w", run_id="r1", status_configmap="w-status")
SINCE = 1796021700.0  # 2026-11-30T06:55:00Z


def test_worker_warnings_keep_this_deploys_warnings_about_the_workers_only():
    events = [
        event("Pod", "w-0", "FailedScheduling", NO_GPU),
        event("Pod", "w-1", "FailedScheduling", NO_GPU, stamp="2026-11-30T06:55:09Z"),
        event("Pod", "w-0", "FailedScheduling", "older attempt", stamp="2026-11-30T06:54:00Z"),
        event("Pod", "w-0", "Scheduled", "assigned", type_="Normal"),
        event("Pod", "w-extra-0", "FailedScheduling", "another StatefulSet's pod"),
        event("PodDisruptionBudget", "w", "CalculateExpectedPodCountFailed", "no controllers"),
        event(
            "StatefulSet",
            "w",
            "FailedCreate",
            "create Pod w-0 in StatefulSet w failed error: "
            'pods "w-0" is forbidden: violates PodSecurity "restricted:latest"',
        ),
    ]
    assert observe.worker_warnings(events, WORKERS, SINCE) == [
        f"w-0, w-1: FailedScheduling: {NO_GPU}",
        "StatefulSet w cannot create pods: FailedCreate: create Pod w-0 in StatefulSet w failed error: "
        'pods "w-0" is forbidden: violates PodSecurity "restricted:latest"',
    ]


def test_not_ready_reasons_prefer_the_pods_and_add_what_only_events_say():
    pending = [observe.pod_state(pod("w-0", phase="Pending", scheduled=False, unschedulable=NO_GPU))]
    events = [
        event("Pod", "w-0", "FailedScheduling", NO_GPU),
        event("StatefulSet", "w", "FailedCreate", "quota exceeded"),
    ]
    assert observe.not_ready_reasons(pending, events, WORKERS, SINCE) == [
        f"w-0 Pending: Unschedulable: {NO_GPU}",
        "StatefulSet w cannot create pods: FailedCreate: quota exceeded",
    ]


def test_not_ready_reasons_after_a_rollback_deleted_the_pods_come_from_events():
    events = [event("Pod", "w-0", "FailedScheduling", NO_GPU)]
    assert observe.not_ready_reasons([], events, WORKERS, SINCE) == [f"w-0: FailedScheduling: {NO_GPU}"]


def test_not_ready_reasons_say_so_when_nothing_explains_missing_pods():
    assert observe.not_ready_reasons([], [], WORKERS, SINCE) == [
        "2 of 2 worker pods do not exist (no Warning Event says why)"
    ]
    running = [observe.pod_state(pod("w-0")), observe.pod_state(pod("w-1", ready=True))]
    assert observe.not_ready_reasons(running, [], WORKERS, SINCE) == ["w-0 not ready yet (no reason reported)"]


# ---------------------------------------------------------------- the run's status ConfigMap


def status_cm(**data):
    return {"kind": "ConfigMap", "metadata": {"name": "w-status"}, "data": data}


SUCCEEDED = status_cm(
    runId="r1",
    phase="Succeeded",
    reason="Completed",
    step="40",
    totalSteps="40",
    loss="1.6561",
    restarts="0",
    lastCheckpointStep="40",
    startedAt="2026-11-30T06:52:15Z",
    finishedAt="2026-11-30T06:52:39Z",
    revision="w-7bc6",
    message="training finished",
)


def sts(spec=2, ready=2, update="w-7bc6"):
    return {
        "kind": "StatefulSet",
        "spec": {"replicas": spec},
        "status": {"readyReplicas": ready, "updateRevision": update},
    }


def test_run_record_reads_the_launchers_keys_and_nothing_before_the_first_write():
    record = observe.run_record(SUCCEEDED)
    state = record.state
    assert (record.run_id, record.phase, state.step, state.total_steps, state.loss, state.revision) == (
        "r1",
        Phase.SUCCEEDED,
        40,
        40,
        "1.6561",
        "w-7bc6",
    )
    assert record.terminal
    assert observe.run_record(status_cm()) is None  # rendered by the chart without data
    assert observe.run_record(None) is None


def test_run_summary_of_a_succeeded_run():
    assert observe.run_summary(observe.run_record(SUCCEEDED), WORKERS) == (
        "run r1 Succeeded, step 40/40, loss 1.6561, 0 restarts, checkpoint at step 40, "
        "started 2026-11-30T06:52:15Z, finished 2026-11-30T06:52:39Z"
    )


def test_run_summary_of_a_resizing_run_says_what_changed():
    resizing = status_cm(
        **{
            **SUCCEEDED["data"],
            "phase": "Resizing",
            "reason": "",
            "finishedAt": "",
            "message": "workers.replicas 2 -> 3: stopping at the next checkpoint to re-form the group at 3 workers",
        }
    )
    assert observe.run_summary(observe.run_record(resizing), WORKERS).startswith(
        "run r1 Resizing (workers.replicas 2 -> 3: stopping at the next checkpoint to re-form the group at 3 "
        "workers), step 40/40"
    )


def test_run_summary_shows_the_evaluators_latest_result():
    evaluated = status_cm(
        **SUCCEEDED["data"],
        evalStep="40",
        evalLoss="1.4560",
        evalAccuracy="0.7236",
        evalUpdatedAt="2026-11-30T06:52:45Z",
    )
    assert observe.run_summary(observe.run_record(evaluated), WORKERS) == (
        "run r1 Succeeded, step 40/40, loss 1.6561, 0 restarts, checkpoint at step 40, "
        "eval at step 40: accuracy 0.7236, loss 1.4560, started 2026-11-30T06:52:15Z, finished 2026-11-30T06:52:39Z"
    )


def test_run_summary_shows_the_recorded_goodput_and_its_largest_badput_first():
    accounted = status_cm(
        **SUCCEEDED["data"],
        goodput="0.8000",
        productiveSeconds="80.0",
        badputSeconds='{"startup":12.0,"peerWait":0.0,"checkpoint":1.0,"restart":7.0,'
        '"lostWork":0.0,"detection":0.0,"export":0.0}',
    )
    assert observe.run_summary(observe.run_record(accounted), WORKERS) == (
        "run r1 Succeeded, step 40/40, loss 1.6561, 0 restarts, checkpoint at step 40, "
        "goodput 80.0% of 100.0s (badput: startup 12.0s, restart 7.0s, checkpoint 1.0s), "
        "started 2026-11-30T06:52:15Z, finished 2026-11-30T06:52:39Z"
    )
    garbled = status_cm(**SUCCEEDED["data"], productiveSeconds="x", badputSeconds="{")
    assert "goodput" not in observe.run_summary(observe.run_record(garbled), WORKERS)


def test_run_summary_of_a_failed_run_names_reason_and_message():
    failed = observe.run_record(
        status_cm(
            runId="r1", phase="Failed", reason="BadConfig", message="training.config: unknown key 'stepz'", restarts="1"
        )
    )
    assert (
        observe.run_summary(failed, WORKERS)
        == "run r1 Failed (BadConfig: training.config: unknown key 'stepz'), 1 restart"
    )


def test_run_summary_of_a_run_not_recorded_yet_or_another_runs_record():
    assert observe.run_summary(None, WORKERS) == "run r1 not recorded yet: worker 0 records it when it starts"
    newer = observe.Workers("w", "ml", 2, "app=w", run_id="r2", status_configmap="w-status")
    assert observe.run_summary(observe.run_record(SUCCEEDED), newer) == (
        "run r2 not recorded yet: worker 0 records it when it starts (the status still holds run r1: Succeeded)"
    )


def test_workers_summary_explains_a_statefulset_at_zero():
    record = observe.run_record(SUCCEEDED)
    assert observe.workers_summary(WORKERS, sts(2, 1), record) == "workers 1/2 ready"
    assert (
        observe.workers_summary(WORKERS, sts(0, 0), record)
        == "workers 0/2: StatefulSet w scaled to 0 after the run Succeeded (pods and GPUs released)"
    )
    running = observe.run_record(status_cm(runId="r1", phase="Running"))
    assert "not by this run's workers" in observe.workers_summary(WORKERS, sts(0, 0), running)
    assert observe.workers_summary(WORKERS, None, record) == "StatefulSet w does not exist"


def test_workers_summary_of_a_revision_rendered_after_the_run_succeeded():
    """The chart asks for no workers once the run is recorded Succeeded (templates/_replicas.tpl):
    the release's own manifest says 0, and the line still says why there are none."""
    rendered_at_zero = observe.Workers("w", "ml", 0, "app=w", run_id="r1", status_configmap="w-status")
    assert (
        observe.workers_summary(rendered_at_zero, sts(0, 0), observe.run_record(SUCCEEDED))
        == "workers 0: StatefulSet w scaled to 0 after the run Succeeded (pods and GPUs released)"
    )
    suspended = observe.run_record(status_cm(runId="r1", phase="Suspended"))
    assert observe.workers_summary(rendered_at_zero, sts(0, 0), suspended) == "workers 0/0 ready"


@pytest.mark.parametrize(
    "data,update,failed",
    [
        ({"runId": "r1", "phase": "Failed", "revision": "w-7bc6"}, "w-7bc6", True),  # this template's run failed
        ({"runId": "r1", "phase": "Failed", "revision": "w-0ld"}, "w-7bc6", False),  # a changed template retries
        ({"runId": "r0", "phase": "Failed", "revision": "w-7bc6"}, "w-7bc6", False),  # another run's record
        ({"runId": "r1", "phase": "Succeeded", "revision": "w-7bc6"}, "w-7bc6", False),
    ],
)
def test_run_failed_here_only_for_this_templates_run(data, update, failed):
    record = observe.run_record(status_cm(**data))
    assert observe.run_failed_here(record, WORKERS, sts(0, 0, update=update)) is failed


# ---------------------------------------------------------------- training progress in logs (no status object)

LOG = """\
tfmw peers resolved n=2
tfmw progress step=10/100 epoch=0 loss=2.1 examples_per_sec=310.5
some other output
tfmw progress step=20/100 epoch=0 loss=1.7 examples_per_sec=322.0
"""


def test_last_progress_is_the_latest_progress_line():
    assert observe.last_progress(LOG) == "step=20/100 epoch=0 loss=1.7 examples_per_sec=322.0"
    assert observe.last_progress("no progress here\n") is None


@pytest.mark.parametrize(
    "line,expected",
    [
        (
            "tfmw done steps=100 final_loss=0.2 examples_per_sec=300 model=/shared/r/model",
            "done steps=100 final_loss=0.2 examples_per_sec=300 model=/shared/r/model",
        ),
        ("tfmw completed run=run-7", "completed run=run-7"),
    ],
)
def test_completion_is_seen_in_done_or_completed_lines(line, expected):
    assert observe.completion(LOG + line + "\n") == expected
    assert observe.completion(LOG) is None


# ---------------------------------------------------------------- make status

RELEASE = observe.ReleaseInfo("rel", "ml", 3, "deployed")
CHART_WORKERS = observe.Workers(
    "rel-w", "ml", 2, "app=w", chart="tf-multiworker-0.1.0", run_id="r1", status_configmap="rel-w-status"
)


def report(name, progress=None, finished=None, ready=True, node="node-1"):
    return WorkerReport(PodState(name, "Running", True, True, ready, 0, "", node), progress, finished)


def test_status_is_one_line_for_the_release_from_the_status_object_and_one_per_worker():
    running = status_cm(
        runId="r1",
        phase="Running",
        step="20",
        totalSteps="40",
        loss="2.15",
        restarts="0",
        lastCheckpointStep="20",
        startedAt="2026-11-30T07:02:07Z",
    )
    lines = observe.status_lines(
        RELEASE, CHART_WORKERS, sts(2, 2), running, [report("rel-w-0"), report("rel-w-1", ready=False)]
    )
    assert lines == [
        "release rel in namespace ml: revision 3 deployed, chart tf-multiworker-0.1.0; run r1 Running, "
        "step 20/40, loss 2.15, 0 restarts, checkpoint at step 20, started 2026-11-30T07:02:07Z; "
        "workers 2/2 ready",
        "worker rel-w-0: Running, ready, 0 restarts, node node-1",
        "worker rel-w-1: Running, not ready, 0 restarts, node node-1",
    ]


def test_status_of_a_big_group_is_a_screen_the_chief_and_the_workers_worth_reading():
    reports = [report(f"rel-w-{i}", node=f"node-{i // 8}") for i in range(1024)]
    reports[7] = report("rel-w-7", ready=False)
    reports[9] = WorkerReport(PodState("rel-w-9", "Running", True, True, True, 2, "", "node-1"))
    lines = observe.worker_lines(reports, CHART_WORKERS)
    assert lines == [
        "workers: 1,024 pods on 128 nodes: 1,022 running and ready with no restart, 1 not running or not ready, "
        "1 restarted",
        "worker rel-w-0: Running, ready, 0 restarts, node node-0",
        "worker rel-w-7: Running, not ready, 0 restarts, node node-1",
        "worker rel-w-9: Running, ready, 2 restarts, node node-1",
    ]
    broken = [report(f"rel-w-{i}", ready=False) for i in range(40)]
    lines = observe.worker_lines(broken, CHART_WORKERS)
    assert len(lines) == 2 + observe.WORKER_LINES_AT_MOST + 1
    assert lines[-1] == (
        f"... and {39 - observe.WORKER_LINES_AT_MOST} more not running, not ready or restarted: "
        f"kubectl get pods -n {CHART_WORKERS.namespace} -l {CHART_WORKERS.selector}"
    )
    small = [report(f"rel-w-{i}") for i in range(observe.WORKER_LINES_AT_MOST)]
    assert observe.worker_lines(small, CHART_WORKERS) == [observe.worker_line(r) for r in small]


def test_status_of_a_finished_run_scaled_to_zero_has_no_worker_lines():
    lines = observe.status_lines(
        RELEASE, CHART_WORKERS, sts(0, 0), {**SUCCEEDED, "data": {**SUCCEEDED["data"], "runId": "r1"}}, []
    )
    assert len(lines) == 1
    assert "run r1 Succeeded, step 40/40, loss 1.6561" in lines[0]
    assert lines[0].endswith("StatefulSet rel-w scaled to 0 after the run Succeeded (pods and GPUs released)")


def test_status_of_a_pending_pod_says_why():
    unscheduled = WorkerReport(
        observe.pod_state(pod("rel-w-0", phase="Pending", scheduled=False, unschedulable=NO_GPU))
    )
    line = observe.status_lines(RELEASE, CHART_WORKERS, sts(2, 0), status_cm(), [unscheduled])[1]
    assert line == f"worker rel-w-0: Pending (Unschedulable: {NO_GPU}), not ready, 0 restarts, node -"


def test_status_without_a_status_object_falls_back_to_the_logs():
    lines = observe.status_lines(
        RELEASE, CHART_WORKERS, sts(2, 2), None, [report("rel-w-0", "step=20/100 loss=1.7"), report("rel-w-1")]
    )
    assert lines[0].endswith(
        "run (from the worker logs: this release records no status): running, "
        "1/2 workers reported progress, rel-w-0: step=20/100 loss=1.7; workers 2/2 ready"
    )
    assert lines[1] == "worker rel-w-0: Running, ready, 0 restarts, node node-1, last log: step=20/100 loss=1.7"
    done = observe.status_lines(
        RELEASE, CHART_WORKERS, sts(2, 2), None, [report("rel-w-0", finished="completed run=r1"), report("rel-w-1")]
    )
    assert "from the worker logs: this release records no status): completed (rel-w-0: completed run=r1)" in done[0]
    before = observe.status_lines(RELEASE, CHART_WORKERS, sts(2, 0), None, [report("rel-w-0", ready=False)])
    assert "not started yet (no progress lines in the worker logs)" in before[0]


STS = {
    "apiVersion": "apps/v1",
    "kind": "StatefulSet",
    "metadata": {"name": "rel-tf-multiworker", "namespace": "ml", "labels": {"helm.sh/chart": "tf-multiworker-0.1.0"}},
    "spec": {
        "replicas": 8,
        "selector": {"matchLabels": {"app.kubernetes.io/name": "tf-multiworker", "app.kubernetes.io/instance": "rel"}},
    },
}


def test_workers_come_from_the_statefulset():
    workers = observe.workers_of([{"kind": "Service", "metadata": {"name": "s"}}, STS], "default")
    assert workers == observe.Workers(
        "rel-tf-multiworker",
        "ml",
        8,
        "app.kubernetes.io/instance=rel,app.kubernetes.io/name=tf-multiworker",
        "tf-multiworker-0.1.0",
    )
    assert (workers.run_id, workers.status_configmap) == ("", "")  # no worker env: no status object


def test_release_without_statefulset_is_refused():
    with pytest.raises(ToolError, match="no StatefulSet of workers"):
        observe.workers_of([{"kind": "Service", "metadata": {"name": "s"}}], "ml")


class ScriptedLogs:
    """Stands in for tfmw.k8s.Api's two log calls: each pod's lines, or an ApiError."""

    def __init__(self, logs: dict):
        self.logs, self.calls = logs, []

    def _lines(self, namespace, pod, container, tail):
        self.calls.append((namespace, pod, container, tail))
        lines = self.logs[(pod, container)]
        if isinstance(lines, Exception):
            raise lines
        return lines

    def follow_log(self, namespace, pod, *, container=None, tail=None):
        return iter(self._lines(namespace, pod, container, tail))

    def log(self, namespace, pod, *, container=None, tail=None):
        return "".join(line + "\n" for line in self._lines(namespace, pod, container, tail))


def _worker_pod(name: str, *containers: str) -> dict:
    return {"metadata": {"name": name, "namespace": "ml"}, "spec": {"containers": [{"name": c} for c in containers]}}


@pytest.mark.parametrize("follow", [True, False])
def test_logs_of_every_worker_container_carry_its_pod_prefix(follow):
    from tfmw.k8s.api import ApiError

    api = ScriptedLogs(
        {
            ("w-0", "worker"): ["step 1", "step 2"],
            ("w-0", "sidecar"): ["up"],
            ("w-1", "worker"): ["step 1"],
            ("w-2", "worker"): ApiError(403, 'pods "w-2" is forbidden'),
        }
    )
    out: list[str] = []
    pods = [_worker_pod("w-0", "worker", "sidecar"), _worker_pod("w-1", "worker"), _worker_pod("w-2", "worker")]
    code = observe.follow_logs(api, pods, follow=follow, tail=5, out=out.append)
    assert code == 1  # w-2's log could not be read at all
    assert [line for line in out if line.startswith("[pod/w-0/worker]")] == [
        "[pod/w-0/worker] step 1",
        "[pod/w-0/worker] step 2",
    ]
    assert "[pod/w-0/sidecar] up" in out and "[pod/w-1/worker] step 1" in out
    assert out[-1] == 'error: cannot read the log of w-2/worker: HTTP 403: pods "w-2" is forbidden'
    assert sorted(api.calls) == sorted(
        [
            ("ml", "w-0", "worker", 5),
            ("ml", "w-0", "sidecar", 5),
            ("ml", "w-1", "worker", 5),
            ("ml", "w-2", "worker", 5),
        ]
    )


def test_worker_statefulset_is_preferred_over_others():
    other = {
        "kind": "StatefulSet",
        "metadata": {"name": "tensorboard", "labels": {}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"x": "y"}}},
    }
    worker = {**STS, "metadata": {**STS["metadata"], "labels": {"app.kubernetes.io/component": "worker"}}}
    assert observe.workers_of([other, worker], "ml").name == "rel-tf-multiworker"


def test_real_chart_workers_selector_matches_its_pod_labels():
    from tfmw.chart import render

    digest = f"image.digest={STAND_IN_DIGEST}"  # prod requires one (image.requireDigest)
    objects = render.render("prod", [digest], release="rel", namespace="ml")
    workers = observe.workers_of(objects, "default")
    sts = next(o for o in objects if o["kind"] == "StatefulSet")
    labels = sts["spec"]["template"]["metadata"]["labels"]
    assert workers.namespace == "ml" and workers.replicas == 4 and workers.name == "rel-tf-multiworker"
    assert all(labels[k] == v for k, v in (kv.split("=") for kv in workers.selector.split(",")))
    assert workers.chart.startswith("tf-multiworker-")
    # The run id and the status ConfigMap come from the worker container's env, as the launcher reads them.
    assert workers.run_id == "rel"
    assert workers.status_configmap == "rel-tf-multiworker-status"
    assert any(o["kind"] == "ConfigMap" and o["metadata"]["name"] == workers.status_configmap for o in objects)
    idle = observe.workers_of(
        render.render(
            "prod", ["completion.onSuccess=idle", "completion.onFailure=idle", digest], release="rel", namespace="ml"
        ),
        "default",
    )
    assert idle.status_configmap == ""  # API access off: status falls back to the logs


def test_unreachable_cluster_is_named_by_the_client(unreachable_kubeconfig, monkeypatch):
    """The real client against the kubeconfig's (closed) server: status 0, naming the server."""
    from tfmw.k8s.api import Api, ApiError

    kubeconfig, _, server = unreachable_kubeconfig
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    workers = observe.workers_of([STS], "ml")
    api = Api.from_kubeconfig(timeout=5)
    with pytest.raises(ApiError) as err:
        observe.list_pods(api, workers)
    assert err.value.status == 0 and f"{server}/api/v1/namespaces/ml/pods" in str(err.value)
    assert "refused" in str(err.value).lower()
    assert observe.namespace_exists(api, "ml") is None  # cannot tell: callers carry on
    assert observe.pod_log(api, "ml", "w-0") == ""


def test_deploy_progress_prints_a_line_only_when_counts_change(monkeypatch, capsys):
    """The watch loop of `tfmw deploy` (the pod list replaced by a scripted sequence)."""
    import asyncio
    import time

    from tfmw.deploy import upgrade

    snapshots = iter(
        [
            [pod("w-0", phase="Pending", scheduled=False), pod("w-1", phase="Pending", scheduled=False)],
            [pod("w-0", phase="Pending", scheduled=False), pod("w-1", phase="Pending", scheduled=False)],
            [pod("w-0"), pod("w-1", phase="Pending", waiting="ContainerCreating")],
            [pod("w-0", ready=True), pod("w-1", ready=True)],
        ]
    )

    def scripted(api, workers):
        try:
            return next(snapshots)
        except StopIteration:
            raise ApiError(0, "GET /api/v1/namespaces/ml/pods: timed out") from None  # later polls fail: ignored

    from tfmw.k8s.api import ApiError

    monkeypatch.setattr(observe, "list_pods", scripted)
    workers = observe.Workers("w", "ml", 2, "app=w")

    seen: list = []

    async def watch_briefly():
        task = asyncio.create_task(upgrade.watch_pods(object(), workers, time.monotonic(), 0.01, seen))
        await asyncio.sleep(0.3)
        task.cancel()

    asyncio.run(watch_briefly())
    out = capsys.readouterr().out
    assert "\r" not in out
    lines = out.splitlines()
    assert [line.split("] ", 1)[1] for line in lines] == [
        "workers: 0/2 scheduled, 0/2 running, 0/2 ready",
        "workers: 2/2 scheduled, 1/2 running, 0/2 ready (w-1 Pending: ContainerCreating)",
        "workers: 2/2 scheduled, 2/2 running, 2/2 ready",
    ]
    # The last pod list that said why a worker was not ready is kept for the failure report
    # (neither later healthy lists nor failed polls replace it).
    assert [(p.name, p.reason) for p in seen] == [("w-0", ""), ("w-1", "ContainerCreating")]


def test_a_worker_image_missing_from_the_node_is_named_with_the_fix():
    pod = {
        "metadata": {"name": "w-0"},
        "spec": {"nodeName": "node-1"},
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {
                    "image": "ghcr.io/tf-multiworker/tf-multiworker:0.0.0-missing",
                    "restartCount": 0,
                    "state": {
                        "waiting": {
                            "reason": "ErrImageNeverPull",
                            "message": 'Container image "x" is not present with pull policy of Never',
                        }
                    },
                }
            ],
        },
    }
    state = observe.pod_state(pod)
    line = observe.worker_line(observe.WorkerReport(state))
    assert "ErrImageNeverPull" in line and "0.0.0-missing" in line
    assert "`make image`" in line and "`make cluster-load`" in line and "\n" not in line
    problems = observe.pod_problems([state])
    assert len(problems) == 1 and "make cluster-load" in problems[0]
    crashing = dict(
        pod,
        status={
            "phase": "Running",
            "containerStatuses": [
                {"image": "i", "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
            ],
        },
    )
    assert observe.pod_state(crashing).hint == ""  # only image problems get the image fix


def _rendered_sts(*sets: str) -> dict:
    from tfmw.chart import render

    objects = render.prepare("local", list(sets), release="ops", namespace="ml").objects
    return next(o for o in objects if o["kind"] == "StatefulSet")


def test_the_log_reader_pod_is_the_workers_image_and_claim_read_only_with_no_token():
    sts = _rendered_sts()
    pod, where = observe.log_reader_pod(sts, "ops-tf-multiworker-logs-abc")
    worker = sts["spec"]["template"]["spec"]
    spec = pod["spec"]
    [container] = spec["containers"]
    assert where == "claim ops-tf-multiworker-shared, /shared/ops/logs"
    assert container["command"] == ["python", "-m", "entrypoint", "logs", "/shared/ops"]
    assert container["image"] == worker["containers"][0]["image"]
    assert container["securityContext"] == worker["containers"][0]["securityContext"]
    assert spec["securityContext"] == worker["securityContext"] and spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False and "serviceAccountName" not in spec
    assert spec["volumes"] == [
        {"name": "shared", "persistentVolumeClaim": {"claimName": "ops-tf-multiworker-shared", "readOnly": True}}
    ]
    assert container["volumeMounts"] == [{"name": "shared", "mountPath": "/shared", "readOnly": True}]
    # Not a worker: the workers' NetworkPolicy (component=worker) never admits it to gRPC.
    assert pod["metadata"]["labels"]["app.kubernetes.io/component"] == "logs-reader"
    assert "ports" not in container


def test_no_log_reader_where_the_run_keeps_no_logs():
    for sets, why in (
        (("logs.keepMiB=0",), "keeps no logs on shared storage"),
        (("storage.type=emptyDir",), "keeps no logs on shared storage"),
    ):
        pod, where = observe.log_reader_pod(_rendered_sts(*sets), "x")
        assert pod is None and why in where, where


# -- a deploy stops at the first worker that cannot start (observe.start_failure) ------------


def _state(name: str, reason: str, message: str = "", phase: str = "Pending", hint: str = "") -> observe.PodState:
    return observe.PodState(name, phase, False, False, False, 0, reason, message=message, hint=hint)


DEPLOYED = observe.Workers("r-tf-multiworker", "ml", 2, "app=x")


@pytest.mark.parametrize(
    "reason",
    ["ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError"],
)
def test_a_worker_that_cannot_start_stops_the_deploy_at_once(reason):
    why = observe.start_failure([_state("r-0", reason, 'secret "x" not found')], {}, 0.0, 120.0, set())
    assert why.startswith(f"worker pod r-0 cannot start: {reason}: ")
    if reason == "CreateContainerConfigError":
        assert "create the Secret or ConfigMap it names" in why


def test_an_unschedulable_worker_stops_the_deploy_only_after_the_grace_and_without_an_autoscaler():
    pods = [_state("r-1", "Unschedulable", "0/2 nodes are available: 2 Insufficient cpu.")]
    assert observe.start_failure(pods, {"r-1": 100.0}, 219.0, 120.0, set()) is None  # 119 s: still waiting
    why = observe.start_failure(pods, {"r-1": 100.0}, 221.0, 120.0, set())
    assert why.startswith("worker pod r-1 could not be scheduled for 121s: 0/2 nodes are available") and (
        "UNSCHEDULABLE_GRACE" in why
    )
    assert observe.start_failure(pods, {"r-1": 100.0}, 1000.0, 120.0, {"r-1"}) is None  # a node is coming


def test_a_queued_or_terminating_pod_never_stops_the_deploy():
    gated = [_state("r-0", "SchedulingGated", "Scheduling is blocked due to non-empty scheduling gates")]
    assert observe.start_failure(gated, {}, 1e9, 1.0, set()) is None
    going = [_state("r-0", "ImagePullBackOff", phase="Terminating")]
    assert observe.start_failure(going, {}, 0.0, 1.0, set()) is None


def test_the_autoscalers_events_say_capacity_is_coming():
    events = [
        {"reason": "TriggeredScaleUp", "involvedObject": {"kind": "Pod", "name": "r-tf-multiworker-1"}},
        {"reason": "Nominated", "regarding": {"kind": "Pod", "name": "r-tf-multiworker-0"}},
        {"reason": "TriggeredScaleUp", "involvedObject": {"kind": "Pod", "name": "someone-else-0"}},
        {"reason": "FailedScheduling", "involvedObject": {"kind": "Pod", "name": "r-tf-multiworker-3"}},
    ]
    assert observe.capacity_coming_for(events, DEPLOYED) == {"r-tf-multiworker-0", "r-tf-multiworker-1"}


@pytest.mark.parametrize(
    "image,gpus,says",
    [
        ("reg/tfmw:0.1.0", True, "`make image IMAGE=reg/tfmw:0.1.0 PUSH=1`"),
        ("reg/tfmw:0.1.0-cpu", True, "`make image IMAGE=reg/tfmw:0.1.0-cpu VARIANT=cpu PUSH=1`"),
        ("reg/tfmw:dev", False, "`make image IMAGE=reg/tfmw:dev VARIANT=cpu PUSH=1`"),
        ("reg/tfmw@sha256:" + "a" * 64, True, "push the image whose digest is sha256:aaaa"),
    ],
)
def test_the_image_fix_builds_exactly_what_the_pod_pulls(image, gpus, says):
    hint = observe.image_hint("ImagePullBackOff", image, gpus)
    assert says in hint and "imagePullSecrets" in hint and "make cluster-load" in hint


def test_an_invalid_image_name_is_a_value_to_fix_not_an_image_to_build():
    hint = observe.image_hint("InvalidImageName", "reg/TFMW:x")
    assert "not a valid image reference" in hint and "make image" not in hint


def test_make_status_says_what_the_chief_says_while_a_pod_waits():
    record = observe.RunRecord(
        RunState(
            run_id="r1",
            phase=Phase.PENDING,
            message="waiting for workers that are not running (r-1: ImagePullBackOff: back-off); training starts ...",
        )
    )
    summary = observe.run_summary(record, observe.Workers("r", "ml", 2, "a=b", run_id="r1"))
    assert summary.startswith("run r1 Pending (waiting for workers that are not running (r-1: ImagePullBackOff")


def test_a_pull_the_registry_refuses_for_credentials_names_the_pull_secret():
    message = (
        'failed to pull and unpack image "r.example:5000/ml/x@sha256:ab": failed to resolve reference: pulling from '
        "host r.example:5000 failed with status code [manifests sha256:ab]: 401 Unauthorized"
    )
    hint = observe.image_hint("ErrImagePull", "r.example:5000/ml/x@sha256:ab", True, message)
    assert hint.startswith("the registry r.example:5000 refused the pull (401 Unauthorized): the pods have no")
    assert "imagePullSecrets: [{name: regcred}]" in hint
    held = observe.image_hint("ErrImagePull", "r.example:5000/ml/x:1", True, message, ("old",))
    assert "the pods' imagePullSecrets (old) hold no credentials it accepts" in held
    tls = observe.image_hint(
        "ErrImagePull", "r.example:5000/x:1", True, "x509: certificate signed by unknown authority"
    )
    assert tls.startswith("the nodes do not trust r.example:5000's TLS certificate")


def test_a_run_record_holds_the_launchers_typed_state():
    """The phase is a lifecycle.Phase (compared as a member, never as text), shown as the same text;
    a value the record has is shown also when it is 0."""
    record = observe.run_record(status_cm(runId="r1", phase="Running", step="0", lastCheckpointStep="0"))
    assert record.phase is Phase.RUNNING and isinstance(record.state, RunState)
    assert observe.run_summary(record, WORKERS) == "run r1 Running, step 0/?, checkpoint at step 0"
    assert f"{observe.run_record(status_cm(runId='r1', phase='Suspended')).phase}" == "Suspended"

"""Pod states, deploy progress lines, training progress and completion from worker logs."""
from __future__ import annotations

import pytest

from scripts import deploy_pods
from scripts.deploy_pods import PodState, WorkerReport
from scripts.render import ToolError


def pod(name, phase="Running", scheduled=True, ready=False, restarts=0, waiting=None):
    conditions = [{"type": "PodScheduled", "status": "True" if scheduled else "False"},
                  {"type": "Ready", "status": "True" if ready else "False"}]
    state = {"waiting": {"reason": waiting}} if waiting else {"running": {}}
    return {"metadata": {"name": name},
            "status": {"phase": phase, "conditions": conditions,
                       "containerStatuses": [{"name": "worker", "restartCount": restarts, "state": state}]}}


def test_pod_state_reads_phase_restarts_ready_and_reason():
    state = deploy_pods.pod_state(pod("w-1", restarts=3, waiting="CrashLoopBackOff"))
    assert state == PodState("w-1", "Running", True, True, False, 3, "CrashLoopBackOff")


def test_progress_line_counts_scheduled_running_ready_of_n():
    pods = [deploy_pods.pod_state(p) for p in (
        pod("w-0", ready=True), pod("w-1"), pod("w-2", phase="Pending", waiting="ContainerCreating"),
        pod("w-3", phase="Pending", scheduled=False))]
    line = deploy_pods.progress_line(pods, 4)
    assert line.startswith("workers: 3/4 scheduled, 2/4 running, 1/4 ready")
    assert "w-2: ContainerCreating" in line and "\r" not in line and "\n" not in line


LOG = """\
tfmw peers resolved n=2
tfmw progress step=10/100 epoch=0 loss=2.1 examples_per_sec=310.5
some other output
tfmw progress step=20/100 epoch=0 loss=1.7 examples_per_sec=322.0
"""


def test_last_progress_is_the_latest_progress_line():
    assert deploy_pods.last_progress(LOG) == "step=20/100 epoch=0 loss=1.7 examples_per_sec=322.0"
    assert deploy_pods.last_progress("no progress here\n") is None


@pytest.mark.parametrize("line,expected", [
    ("tfmw done steps=100 final_loss=0.2 examples_per_sec=300 model=/shared/r/model",
     "done steps=100 final_loss=0.2 examples_per_sec=300 model=/shared/r/model"),
    ("tfmw completed run=run-7", "completed run=run-7"),
])
def test_completion_is_seen_in_done_or_completed_lines(line, expected):
    assert deploy_pods.completion(LOG + line + "\n") == expected
    assert deploy_pods.completion(LOG) is None


def report(name, progress=None, finished=None, ready=True):
    return WorkerReport(PodState(name, "Running", True, True, ready, 0, ""), progress, finished)


def test_status_lines_running_job():
    lines = deploy_pods.status_lines("rel", "ml", 3, "deployed", "tf-multiworker-0.1.0", 2,
                                     [report("rel-0", "step=20/100 loss=1.7"), report("rel-1")])
    assert lines[0] == "release rel (namespace ml): revision 3, deployed, chart tf-multiworker-0.1.0"
    assert "rel-0" in lines[2] and "step=20/100 loss=1.7" in lines[2] and "yes" in lines[2]
    assert lines[-1] == "training: running (1/2 workers reported progress)"


def test_status_lines_completed_job_and_missing_pods():
    lines = deploy_pods.status_lines("rel", "ml", 1, "deployed", "c", 3,
                                     [report("rel-0", finished="completed run=r1"), report("rel-1")])
    assert "(1 of 3 worker pods do not exist yet)" in lines
    assert lines[-1] == "training: completed (rel-0: completed run=r1)"


def test_status_lines_before_training():
    lines = deploy_pods.status_lines("rel", "ml", 1, "deployed", "c", 1, [report("rel-0", ready=False)])
    assert lines[-1].startswith("training: not started yet")


STS = {"apiVersion": "apps/v1", "kind": "StatefulSet",
       "metadata": {"name": "rel-tf-multiworker", "namespace": "ml",
                    "labels": {"helm.sh/chart": "tf-multiworker-0.1.0"}},
       "spec": {"replicas": 8, "selector": {"matchLabels": {"app.kubernetes.io/name": "tf-multiworker",
                                                            "app.kubernetes.io/instance": "rel"}}}}


def test_workers_come_from_the_statefulset():
    workers = deploy_pods.workers_of([{"kind": "Service", "metadata": {"name": "s"}}, STS], "default")
    assert workers == deploy_pods.Workers("rel-tf-multiworker", "ml", 8,
                                          "app.kubernetes.io/instance=rel,app.kubernetes.io/name=tf-multiworker",
                                          "tf-multiworker-0.1.0")


def test_release_without_statefulset_is_refused():
    with pytest.raises(ToolError, match="no StatefulSet of workers"):
        deploy_pods.workers_of([{"kind": "Service", "metadata": {"name": "s"}}], "ml")


def test_logs_follow_every_worker_with_pod_prefix():
    workers = deploy_pods.workers_of([STS], "ml")
    args = deploy_pods.logs_args(workers)
    assert args[:3] == ["logs", "--namespace", "ml"]
    assert "--prefix" in args and "--follow" in args and "--max-log-requests=8" in args
    assert "--tail=-1" in args
    assert "--follow" not in deploy_pods.logs_args(workers, follow=False)


def test_missing_kubectl_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("KUBECTL", "/nonexistent/kubectl")
    with pytest.raises(ToolError, match=r"kubectl not found: /nonexistent/kubectl \(from KUBECTL\)"):
        deploy_pods.find_kubectl()


def test_worker_statefulset_is_preferred_over_others():
    other = {"kind": "StatefulSet", "metadata": {"name": "tensorboard", "labels": {}},
             "spec": {"replicas": 1, "selector": {"matchLabels": {"x": "y"}}}}
    worker = {**STS, "metadata": {**STS["metadata"], "labels": {"app.kubernetes.io/component": "worker"}}}
    assert deploy_pods.workers_of([other, worker], "ml").name == "rel-tf-multiworker"


def test_real_chart_workers_selector_matches_its_pod_labels():
    from scripts import render
    objects = render.render("prod", release="rel", namespace="ml")
    workers = deploy_pods.workers_of(objects, "default")
    sts = next(o for o in objects if o["kind"] == "StatefulSet")
    labels = sts["spec"]["template"]["metadata"]["labels"]
    assert workers.namespace == "ml" and workers.replicas == 4 and workers.name == "rel-tf-multiworker"
    assert all(labels[k] == v for k, v in (kv.split("=") for kv in workers.selector.split(",")))
    assert workers.chart.startswith("tf-multiworker-")


def test_real_kubectl_accepts_the_arguments(unreachable_kubeconfig, monkeypatch):
    """Flags parse: kubectl gets as far as dialling the (closed) server for get, logs and logs -f."""
    import subprocess
    from deploykit import KUBECTL
    kubeconfig, _, server = unreachable_kubeconfig
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    workers = deploy_pods.workers_of([STS], "ml")
    with pytest.raises(subprocess.CalledProcessError) as err:
        deploy_pods.list_pods(KUBECTL, None, workers)
    assert "connection refused" in err.value.stderr and server.split("//")[1] in err.value.stderr
    for follow in (False, True):
        proc = subprocess.run([KUBECTL, *deploy_pods.logs_args(workers, follow=follow), "--request-timeout=5s"],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode != 0 and "connection refused" in proc.stderr, proc.stderr


def test_deploy_progress_prints_a_line_only_when_counts_change(monkeypatch, capsys):
    """The watch loop of `tfmw deploy` (kubectl replaced by a scripted sequence of pod lists)."""
    import asyncio
    import time
    from scripts import tfmw

    snapshots = iter([
        [pod("w-0", phase="Pending", scheduled=False), pod("w-1", phase="Pending", scheduled=False)],
        [pod("w-0", phase="Pending", scheduled=False), pod("w-1", phase="Pending", scheduled=False)],
        [pod("w-0"), pod("w-1", phase="Pending", waiting="ContainerCreating")],
        [pod("w-0", ready=True), pod("w-1", ready=True)],
    ])

    def scripted(kubectl, context, workers):
        try:
            return next(snapshots)
        except StopIteration:
            raise subprocess.CalledProcessError(1, "kubectl")  # later polls fail: ignored

    import subprocess
    monkeypatch.setattr(deploy_pods, "list_pods", scripted)
    workers = deploy_pods.Workers("w", "ml", 2, "app=w")

    async def watch_briefly():
        task = asyncio.create_task(tfmw._watch_pods("kubectl", None, workers, time.monotonic(), 0.01))
        await asyncio.sleep(0.3)
        task.cancel()

    asyncio.run(watch_briefly())
    out = capsys.readouterr().out
    assert "\r" not in out
    lines = out.splitlines()
    assert [line.split("] ", 1)[1] for line in lines] == [
        "workers: 0/2 scheduled, 0/2 running, 0/2 ready",
        "workers: 2/2 scheduled, 1/2 running, 0/2 ready (w-1: ContainerCreating)",
        "workers: 2/2 scheduled, 2/2 running, 2/2 ready",
    ]

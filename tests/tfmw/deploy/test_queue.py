"""`make status` under Kueue (tfmw.deploy.queue): what the Workload says, as one clause. The
objects are shaped as Kueue v0.19.2 wrote them on the local cluster (tests/e2e/cluster/test_cluster_kueue.py
checks the same clause against a real Kueue)."""

from __future__ import annotations

from tfmw.deploy import observe, queue

STS = {"metadata": {"name": "r-tf-multiworker", "namespace": "ns", "uid": "u1", "labels": {queue.QUEUE_LABEL: "tfmw"}}}


def workload(*conditions: dict) -> dict:
    return {"metadata": {"name": "statefulset-r-tf-multiworker-1a2b3"}, "status": {"conditions": list(conditions)}}


def test_not_under_kueue_says_nothing():
    assert queue.queue_of({"metadata": {"labels": {}}}) is None
    assert queue.workload_clause(None, {"metadata": {}}) is None  # no API call either


def test_queued_with_kueues_reason():
    wl = workload(
        {
            "type": "QuotaReserved",
            "status": "False",
            "reason": "Pending",
            "message": "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor "
            "default-flavor, 500m more needed",
        }
    )
    clause = queue.workload_summary("tfmw", wl)
    assert clause.startswith("Kueue: queued in tfmw, not admitted: couldn't assign flavors to pod set main")
    assert clause.endswith("(Workload statefulset-r-tf-multiworker-1a2b3)")


def test_admitted_on_hold_and_evicted():
    admitted = workload({"type": "Admitted", "status": "True"})
    assert queue.workload_summary("tfmw", admitted).startswith("Kueue: admitted through queue tfmw")
    held = workload(
        {
            "type": "QuotaReserved",
            "status": "False",
            "reason": "OnHold",
            "message": "StatefulSet scaled to zero; workload on hold",
        }
    )
    assert "on hold, its quota released (StatefulSet scaled to zero" in queue.workload_summary("tfmw", held)
    evicted = workload(
        {"type": "QuotaReserved", "status": "False", "reason": "Pending"},
        {"type": "Evicted", "status": "True", "reason": "Preempted", "message": "Preempted to accommodate a workload"},
    )
    assert queue.workload_summary("tfmw", evicted).startswith("Kueue: evicted (Preempted: Preempted to accommodate")
    assert "no Workload yet" in queue.workload_summary("tfmw", None)


def test_a_gated_worker_says_it_waits_for_kueues_admission():
    pod = {
        "metadata": {"name": "r-tf-multiworker-1"},
        "spec": {"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}], "containers": []},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "SchedulingGated",
                    "message": "Scheduling is blocked due to non-empty scheduling gates",
                }
            ],
        },
    }
    line = observe.worker_line(observe.WorkerReport(observe.pod_state(pod)))
    assert "Pending (SchedulingGated: held by the scheduling gate kueue.x-k8s.io/admission until Kueue admits" in line

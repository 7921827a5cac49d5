"""A resize on the real cluster, with real TensorFlow: a 2-worker run is grown to 3 workers
mid-training with `helm upgrade --set workers.replicas=3`, then shrunk back to 2. Each is
one group restart: the group stops at a checkpoint, re-forms at the new size and resumes
from exactly that step; the status goes Running -> Resizing -> Running, never Failed; the
running workers are not replaced; the run completes with identical weights on its workers."""

from __future__ import annotations

import re

import pytest
from clusterkit import CHART, REPO, all_running, wait_for

from tfmw.k8s.api import ns_path

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

RELEASE = "grow"
# mlp trains ~50 steps/s here: long enough for two resizes (each ~30 s: a pod's start, the
# group's; the group trains on only until it stops to re-form, so both are done within about
# 1,000 steps), short enough for a test
STEPS = 3000
SETS = (
    "training.config.model.name=mlp",
    f"training.config.steps={STEPS}",
    "training.config.logEverySteps=50",
    "training.config.checkpoint.everySteps=50",
    "completion.onSuccess=idle",  # the pods stay, with their logs (API access stays on: onFailure)
)


def _upgrade(cluster, ns: str, replicas: int) -> None:
    args = ["upgrade", "--install", RELEASE, str(CHART), "-n", ns, "-f", str(REPO / "values" / "local.yaml")]
    for item in (*SETS, f"workers.replicas={replicas}"):
        args += ["--set", item]
    cluster.helm(*args)


def _status(cluster, ns: str) -> dict:
    cm = cluster.api.get_or_none(ns_path(ns, "configmaps", f"{RELEASE}-tf-multiworker-status"))
    return (cm or {}).get("data") or {}


def _events(cluster, ns: str) -> list[str]:
    events = sorted(cluster.events(ns), key=lambda e: e.get("firstTimestamp") or e.get("eventTime") or "")
    return [e["reason"] for e in events if e.get("involvedObject", {}).get("kind") == "StatefulSet"]


def _uids(pods) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}


def _resumes(log: str) -> list[tuple[int | None, int]]:
    """(the last checkpoint saved before each re-forming, the step the next attempt resumed
    from), from one worker's log (only the chief logs its checkpoints: None on the others)."""
    pairs, saved, reforming = [], None, False
    for line in log.splitlines():
        if m := re.search(r"tfmw checkpoint saved step=(\d+)", line):
            saved = int(m.group(1))
        elif "tfmw launcher re-forming the group at" in line:
            reforming = True
        elif reforming and (m := re.search(r"tfmw start .*resume_step=(\d+)", line)):
            pairs.append((saved, int(m.group(1))))
            reforming = False
    return pairs


def test_grow_to_3_and_shrink_to_2_resume_exactly_from_the_group_checkpoint(cluster, namespace):
    ns = namespace
    chief = f"{RELEASE}-tf-multiworker-0"

    def describe():
        story = [
            f"[{pod}] {line}"
            for pod in (chief, f"{RELEASE}-tf-multiworker-1")
            for line in cluster.logs(ns, pod).splitlines()
            if line.startswith(("tfmw launcher", "tfmw lifecycle", "tfmw error"))
        ]
        return cluster.kubectl("get", "pods,sts,events,cm", "-n", ns, "-o", "wide", check=False).stdout + (
            "\n" + "\n".join(story[-80:])
        )

    _upgrade(cluster, ns, 2)
    wait_for(lambda: int(_status(cluster, ns).get("lastCheckpointStep") or 0) >= 100, 300, "a checkpoint", 1, describe)
    before = _uids(cluster.workers(ns, RELEASE))

    _upgrade(cluster, ns, 3)  # grow
    wait_for(
        lambda: "3 workers training, resumed from step" in _status(cluster, ns).get("message", ""),
        300,
        "the group re-formed at 3 workers",
        1,
        describe,
    )
    grown = cluster.workers(ns, RELEASE)
    assert all_running(grown, 3) and {k: v for k, v in _uids(grown).items() if k in before} == before
    at_grow = int(_status(cluster, ns)["lastCheckpointStep"] or 0)
    wait_for(
        lambda: int(_status(cluster, ns).get("lastCheckpointStep") or 0) >= at_grow + 100,
        300,
        "training at 3 workers",
        1,
        describe,
    )

    _upgrade(cluster, ns, 2)  # shrink: worker 2 is removed, the group re-forms at 2
    wait_for(
        lambda: "2 workers training, resumed from step" in _status(cluster, ns).get("message", ""),
        300,
        "the group re-formed at 2 workers",
        1,
        describe,
    )
    wait_for(lambda: _status(cluster, ns).get("phase") == "Succeeded", 600, "the run to succeed", 2, describe)

    status = _status(cluster, ns)
    assert (status["step"], status["restarts"]) == (str(STEPS), "0"), describe()  # a resize is no restart
    reasons = _events(cluster, ns)
    assert reasons.count("Resizing") == 2 and reasons.count("Resized") == 2, reasons
    assert "Failed" not in reasons and "Restarted" not in reasons, reasons
    # Exact resume: each re-formed group started from the checkpoint the old one stopped at,
    # on every worker of it.
    chief_resumes = _resumes(cluster.logs(ns, chief))
    assert len(chief_resumes) == 2 and all(saved == resumed for saved, resumed in chief_resumes), chief_resumes
    worker_resumes = [resumed for _, resumed in _resumes(cluster.logs(ns, f"{RELEASE}-tf-multiworker-1"))]
    assert worker_resumes == [resumed for _, resumed in chief_resumes]
    # Every worker of the final group ended with the same weights.
    digests = {
        re.search(r"weights_digest=(\S+)", line).group(1)
        for worker in (chief, f"{RELEASE}-tf-multiworker-1")
        for line in cluster.logs(ns, worker).splitlines()
        if line.startswith("tfmw done ")
    }
    assert len(digests) == 1, digests


def test_a_grow_that_cannot_be_scheduled_says_why_and_is_undone_by_scaling_back(cluster, namespace):
    """workers.replicas=12 on two 2-CPU nodes: the new workers beyond the nodes' CPU stay
    Pending. The chief's status says Resizing with the scheduler's reason; `helm upgrade`
    back to 2 re-forms the group at 2 from its checkpoint, no Failed."""
    ns = namespace
    chief = f"{RELEASE}-tf-multiworker-0"

    def describe():
        return cluster.kubectl("get", "pods,sts,events,cm", "-n", ns, "-o", "wide", check=False).stdout + (
            "\n" + cluster.logs(ns, chief)[-3000:]
        )

    _upgrade(cluster, ns, 2)
    wait_for(lambda: int(_status(cluster, ns).get("lastCheckpointStep") or 0) >= 100, 300, "a checkpoint", 1, describe)
    _upgrade(cluster, ns, 12)

    def pending_reason() -> str | None:
        status = _status(cluster, ns)
        resizing = status.get("phase") == "Resizing" and "Insufficient cpu" in status.get("message", "")
        return status["message"] if resizing else None

    message = wait_for(
        pending_reason,
        300,
        "the Resizing status to say why a new worker is Pending",
        2,
        describe,
    )
    assert "workers.replicas 2 -> 12: waiting for the new workers (" in message and "Unschedulable" in message
    _upgrade(cluster, ns, 2)  # back: the Pending workers go, the group re-forms at 2
    wait_for(
        lambda: "2 workers training, resumed from step" in _status(cluster, ns).get("message", ""),
        300,
        "the group re-formed at 2 workers",
        1,
        describe,
    )
    assert _status(cluster, ns)["phase"] == "Running"
    reasons = _events(cluster, ns)
    assert "Failed" not in reasons and "Resized" in reasons, reasons

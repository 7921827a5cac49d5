"""A worker waiting on its volume (tfmw.deploy.volumes): named from its Events by `make deploy`'s
fail-fast and by `make status`, with the fix, at a flat number of requests."""

from __future__ import annotations

import asyncio
import time

import pytest

from tfmw.deploy import observe, upgrade, volumes
from tfmw.k8s.api import ApiError

# the attach/detach controller's words for a ReadWriteOnce volume attached to another node
MULTI_ATTACH = 'Multi-Attach error for volume "pvc-0d6b" Volume is already used by pod(s) r-tf-multiworker-0'
MOUNT_TIMEOUT = (
    "Unable to attach or mount volumes: unmounted volumes=[shared], unattached volumes=[shared]: timed out "
    "waiting for the condition"
)  # the kubelet's, on the node the volume could not attach to


def event(reason: str, message: str, at: str = "2026-01-01T00:00:10Z", uid: str = "u-1", kind="Warning") -> dict:
    return {
        "type": kind,
        "reason": reason,
        "message": message,
        "lastTimestamp": at,
        "involvedObject": {"kind": "Pod", "name": "r-tf-multiworker-1", "uid": uid},
    }


def pod(name: str, phase="Pending", scheduled=True, waiting="ContainerCreating", uid="u-1", sandbox=None) -> dict:
    conditions = [{"type": "PodScheduled", "status": "True" if scheduled else "False"}]
    if sandbox is not None:
        conditions.append({"type": "PodReadyToStartContainers", "status": "True" if sandbox else "False"})
    state = {"waiting": {"reason": waiting}} if waiting else {"running": {}}
    return {
        "metadata": {"name": name, "uid": uid},
        "spec": {"nodeName": "node-2"} if scheduled else {},
        "status": {
            "phase": phase,
            "conditions": conditions,
            "containerStatuses": [{"name": "worker", "restartCount": 0, "state": state}],
        },
    }


def test_the_multi_attach_event_is_the_reason_even_before_a_later_mount_timeout():
    events = [
        event("FailedAttachVolume", MULTI_ATTACH, "2026-01-01T00:00:05Z"),
        event("FailedMount", MOUNT_TIMEOUT, "2026-01-01T00:02:05Z"),
        event("Scheduled", "Successfully assigned", kind="Normal"),
    ]
    assert volumes.latest(events, "u-1") == ("FailedAttachVolume", MULTI_ATTACH)
    assert volumes.latest(events[1:], "u-1") == ("FailedMount", MOUNT_TIMEOUT)
    # an earlier pod of the same name (a StatefulSet reuses names): its Events are not this pod's
    assert volumes.latest(events, "u-2") is None
    assert volumes.latest(events[2:], "u-1") is None


def test_a_worker_creating_on_a_volume_event_is_named_with_the_fix():
    state = volumes.waiting_on_volume(
        observe.pod_state(pod("r-tf-multiworker-1")), [event("FailedAttachVolume", MULTI_ATTACH)]
    )
    assert (state.reason, state.message) == ("FailedAttachVolume", MULTI_ATTACH)
    assert state.hint.startswith("its ReadWriteOnce volume is attached to another node already")
    assert volumes.FIX in state.hint
    line = observe.worker_line(observe.WorkerReport(state))  # `make status`
    assert line.startswith(f"worker r-tf-multiworker-1: Pending (FailedAttachVolume: {MULTI_ATTACH}; its ReadWrite")
    assert "use a ReadWriteMany claim" in line and "pin every worker to one node" in line
    assert "FailedAttachVolume" in observe.progress_line([state], 2)  # `make deploy`'s progress line


@pytest.mark.parametrize(
    "raw",
    [pod("w-0", phase="Running", waiting=None), pod("w-0", waiting="ImagePullBackOff"), pod("w-0", scheduled=False)],
    ids=["running", "its-own-reason", "not-placed"],
)
def test_a_worker_that_is_not_creating_keeps_its_own_state(raw):
    state = observe.pod_state(raw)
    assert volumes.waiting_on_volume(state, [event("FailedAttachVolume", MULTI_ATTACH)]) == state


def test_each_volume_message_gets_its_fix():
    assert volumes.FIX in volumes.hint(MULTI_ATTACH)
    other = volumes.hint(MOUNT_TIMEOUT, "node-2")
    assert other.startswith("the volume cannot be attached or mounted on node node-2: check its claim")
    assert other.endswith(f"if the claim is ReadWriteOnce, {volumes.FIX}")
    missing = 'MountVolume.SetUp failed for volume "files" : configmap "r-files" not found'
    assert volumes.hint(missing) == "create the Secret or ConfigMap it names, or fix the value that names it"


class Events:
    """The API as far as Events go: each pod's answer, and the requests made."""

    def __init__(self, answers: dict[str, list[dict] | ApiError]):
        self.answers = answers
        self.asked: list[tuple[str, dict]] = []

    def items(self, path: str, **query) -> list[dict]:
        self.asked.append((path, query))
        name = query["fieldSelector"].split("involvedObject.name=")[1].split(",")[0]
        answer = self.answers.get(name, [])
        if isinstance(answer, ApiError):
            raise answer
        return answer


def test_only_pods_still_creating_are_looked_up_one_request_each_and_few_of_them():
    items = [pod("w-0", phase="Running", waiting=None, uid="a")]
    items += [pod(f"w-{i}", uid=f"u{i}") for i in range(1, 9)]
    items.append(pod("w-9", uid="u9", sandbox=True))  # its sandbox is up: an image pull, not a volume
    api = Events({"w-1": [event("FailedAttachVolume", MULTI_ATTACH, uid="u1")], "w-2": ApiError(500, "boom")})
    states = [observe.pod_state(i) for i in items]
    after = volumes.looked_up(api, "ml", items, states)
    assert len(api.asked) == volumes.LOOKED_UP_AT_MOST == 5
    assert api.asked[0] == (
        "/api/v1/namespaces/ml/events",
        {"fieldSelector": "involvedObject.kind=Pod,involvedObject.name=w-1,involvedObject.uid=u1"},
    )
    assert [p.reason for p in after][:3] == ["", "FailedAttachVolume", "ContainerCreating"]  # w-2 unread: as it was
    assert after[9] == states[9]
    api = Events({})
    volumes.looked_up(api, "ml", items, states, only={"w-3"})
    assert [q["fieldSelector"].split(",")[1] for _, q in api.asked] == ["involvedObject.name=w-3"]


def test_a_worker_waiting_on_its_volume_stops_the_deploy_after_the_grace():
    state = volumes.waiting_on_volume(observe.pod_state(pod("w-1")), [event("FailedAttachVolume", MULTI_ATTACH)])
    assert volumes.failure([state], {"w-1": 100.0}, 219.0, 120.0) is None
    why = volumes.failure([state], {"w-1": 100.0}, 221.0, 120.0)
    assert why == (
        f"worker pod w-1 has waited 121s on node node-2 for its volume: FailedAttachVolume: {MULTI_ATTACH}; "
        f"{state.hint} (UNSCHEDULABLE_GRACE=<seconds> waits longer)"
    )
    plain = observe.pod_state(pod("w-1"))  # creating, no volume Event: waiting is all there is to do
    assert volumes.failure([plain], {"w-1": 0.0}, 1e9, 120.0) is None


def test_the_deploy_watch_stops_on_a_worker_whose_volume_is_attached_elsewhere(monkeypatch):
    items = [pod("w-0", phase="Running", waiting=None, uid="a"), pod("w-1", uid="u-1")]
    monkeypatch.setattr(observe, "list_pods", lambda api, workers: items)
    monkeypatch.setattr(volumes, "LOOK_AFTER_SECONDS", 0.0)
    api = Events({"w-1": [event("FailedAttachVolume", MULTI_ATTACH)]})
    lines: list[str] = []
    workers = observe.Workers("w", "ml", 2, "app=w")

    async def watch():
        return await asyncio.wait_for(
            upgrade.watch_pods(api, workers, time.monotonic(), 0.01, [], 0.05, lines.append), timeout=10
        )

    why = asyncio.run(watch())
    assert why.startswith(
        "worker pod w-1 has waited 0s on node node-2 for its volume: FailedAttachVolume: Multi-Attach"
    )
    assert volumes.FIX in why
    assert "w-1 Pending: FailedAttachVolume: Multi-Attach error" in lines[0]

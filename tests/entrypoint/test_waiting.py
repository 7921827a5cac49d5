"""The chief's one "waiting for workers" message (entrypoint.waiting): composed from what the
launcher knows, whichever part of it read the pods (pure)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from entrypoint.lifecycle import Phase, fresh
from entrypoint.waiting import VOLUME_FIX, Waiting, WaitingNote, pod_waiting_reason, waiting_message
from tfmw.devcluster.fakeapi import unschedulable_pod

UNSCHEDULABLE = unschedulable_pod("train-2", "0/2 nodes are available: 2 Insufficient cpu.")
WHY = "Unschedulable: 0/2 nodes are available: 2 Insufficient cpu."


def waiting(phase: Phase, workers: int = 2, resized_from: int | None = None, in_peer_wait: bool = False) -> Waiting:
    return Waiting(phase, workers, resized_from, in_peer_wait, peer_timeout_seconds=600)


def test_while_resizing_the_message_is_the_resizes_whoever_read_the_pods():
    message = waiting_message(waiting(Phase.RESIZING, 12, 2), {8: WHY}, "grow")
    assert message == (
        f"workers.replicas 2 -> 12: waiting for the new workers (grow-8: {WHY}); after "
        "peers.timeoutSeconds=600 the run fails (PeersNotFound), unless workers.replicas goes back to 2"
    )
    # inside an attempt or in the peer wait: the same words while a resize is in progress
    assert waiting_message(waiting(Phase.RESIZING, 12, 2, in_peer_wait=True), {8: WHY}, "grow") == message


@pytest.mark.parametrize(
    "phase,in_peer_wait,tail",
    [
        (
            Phase.PENDING,
            True,
            "training starts once they run, or the run fails after peers.timeoutSeconds=600 (PeersNotFound)",
        ),
        (
            Phase.RESTARTING,
            True,
            "the group resumes from its last checkpoint once they run, or the run fails "
            "after peers.timeoutSeconds=600 (PeersNotFound)",
        ),
        (Phase.RUNNING, False, "the group resumes from its last checkpoint once they run"),
    ],
)
def test_otherwise_it_names_the_pods_and_what_comes_next(phase, in_peer_wait, tail):
    message = waiting_message(waiting(phase, in_peer_wait=in_peer_wait), {1: WHY}, "train")
    assert message == f"waiting for workers that are not running (train-1: {WHY}); {tail}"


def test_at_most_five_pods_are_named_in_ascending_order_and_the_rest_counted():
    message = waiting_message(waiting(Phase.RUNNING, 9), {o: "x" for o in (8, 3, 1, 7, 2, 5, 4)}, "t")
    assert "(t-1: x; t-2: x; t-3: x; t-4: x; t-5: x; and 2 more)" in message


class Tracker:
    """The part of RunTracker the note uses."""

    is_chief = True

    def __init__(self, message: str):
        self.state = fresh("r1", "rev", "2026-12-03T10:00:00Z")
        self.note(message)

    def note(self, message: str) -> None:
        self.state = replace(self.state, message=message)


def test_the_note_puts_back_what_it_replaced_once_the_group_trains():
    tracker = Tracker("attempt 2")
    note = WaitingNote(tracker, "train")
    note.report(waiting(Phase.RUNNING), {1: WHY})
    note.report(waiting(Phase.RUNNING), {1: "ImagePullBackOff: back-off pulling image"})
    assert tracker.state.message.startswith("waiting for workers that are not running (train-1: ImagePullBackOff")
    note.trains()
    assert tracker.state.message == "attempt 2"


def test_a_transition_meanwhile_is_not_undone():
    tracker = Tracker("attempt 2")
    note = WaitingNote(tracker, "train")
    note.report(waiting(Phase.RUNNING), {1: WHY})
    tracker.note("3 workers training, resumed from step 20")
    note.trains()
    assert tracker.state.message == "3 workers training, resumed from step 20"


def test_nothing_to_say_changes_nothing():
    tracker = Tracker("attempt 2")
    WaitingNote(tracker, "train").report(waiting(Phase.RUNNING), {})
    assert tracker.state.message == "attempt 2"


@pytest.mark.parametrize(
    "pod,why",
    [
        (UNSCHEDULABLE, "Unschedulable: 0/2 nodes are available: 2 Insufficient cpu."),
        (
            {
                "status": {
                    "phase": "Pending",
                    "conditions": [{"type": "PodScheduled", "status": "True"}],
                    "containerStatuses": [
                        {"state": {"waiting": {"reason": "ErrImageNeverPull", "message": "image is not present"}}}
                    ],
                }
            },
            "ErrImageNeverPull: image is not present",
        ),
        (
            {
                "status": {
                    "phase": "Pending",
                    "containerStatuses": [{"state": {"waiting": {"reason": "ContainerCreating"}}}],
                }
            },
            None,
        ),
        ({"status": {"phase": "Running"}}, None),
    ],
)
def test_why_a_pod_is_not_running_is_the_schedulers_or_the_kubelets_word(pod, why):
    assert pod_waiting_reason(pod) == why


# -- a worker placed on a node whose volume does not come ---------------------------------------

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z; the pods below started at 07:58:00, 120 s before


def no_sandbox_pod(ready_to_start="False", claims=("train-shared",), started="2027-01-15T07:58:00Z") -> dict:
    conditions = [{"type": "PodScheduled", "status": "True"}]
    if ready_to_start is not None:
        conditions.append({"type": "PodReadyToStartContainers", "status": ready_to_start})
    return {
        "metadata": {"name": "train-1"},
        "spec": {
            "nodeName": "node-2",
            "volumes": [{"name": "tmp", "emptyDir": {}}]
            + [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)],
        },
        "status": {
            "phase": "Pending",
            "startTime": started,
            "conditions": conditions,
            "containerStatuses": [{"name": "worker", "state": {"waiting": {"reason": "ContainerCreating"}}}],
        },
    }


def test_a_placed_pod_without_its_sandbox_for_a_minute_is_said_to_wait_on_its_claims_volume():
    why = pod_waiting_reason(no_sandbox_pod(), NOW)
    assert why == (
        "ContainerCreating on node node-2 for 120s with no sandbox: the volume of claim train-shared is most "
        "likely not attached or mounted"
    )
    assert pod_waiting_reason(no_sandbox_pod()) is None  # no clock given: the kubelet's words only


@pytest.mark.parametrize(
    "pod",
    [
        no_sandbox_pod(started="2027-01-15T07:59:30Z"),  # 30 s: attaching takes a moment
        no_sandbox_pod(ready_to_start="True"),  # the sandbox is up: an image pull, not a volume
        no_sandbox_pod(ready_to_start=None),  # Kubernetes before 1.29 has no such condition
        no_sandbox_pod(claims=()),  # no claim: something else keeps the sandbox away
    ],
    ids=["recent", "sandbox-up", "no-condition", "no-claim"],
)
def test_otherwise_a_creating_pod_says_nothing(pod):
    assert pod_waiting_reason(pod, NOW) is None


def test_the_volume_fix_is_said_once_however_many_pods_wait_on_it():
    why = pod_waiting_reason(no_sandbox_pod(), NOW)
    message = waiting_message(waiting(Phase.PENDING, 4, in_peer_wait=True), {1: why, 2: why, 3: WHY}, "train")
    assert message.count(VOLUME_FIX) == 1
    assert f"train-2: {why}; train-3: {WHY}; {VOLUME_FIX}); training starts once they run" in message
    assert "use a ReadWriteMany claim, or pin every worker to one node" in VOLUME_FIX


def test_the_note_keeps_the_last_reasons_for_a_run_that_gives_up_until_the_group_trains():
    note = WaitingNote(Tracker("attempt 1"), "train")
    assert note.last_seen() == ""
    note.report(waiting(Phase.PENDING, in_peer_wait=True), {1: "ContainerCreating ... not attached or mounted"})
    assert note.last_seen() == f"train-1: ContainerCreating ... not attached or mounted; {VOLUME_FIX}"
    note.trains()
    assert note.last_seen() == ""

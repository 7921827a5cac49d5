"""`make deploy` says which image digest the workers run (their containers' imageID), warns
when they run different ones (a tag that moved between two nodes' pulls), records it on the
StatefulSet, and `make status` shows it."""

from __future__ import annotations

import dataclasses

from tfmw.deploy import observe, upgrade
from tfmw.deploy.observe import IMAGE_ANNOTATION, PodState, WorkerReport
from tfmw.k8s.api import ApiError

A = "sha256:" + "a" * 64
B = "sha256:" + "b" * 64
WORKERS = observe.Workers("rel-w", "ml", 3, "app=w", chart="tf-multiworker-0.1.0", status_configmap="rel-w-status")


def pod(name: str, image_id: str | None, container: str = "worker") -> dict:
    statuses = [{"name": "sidecar", "imageID": "docker.io/library/busybox@sha256:" + "c" * 64}]
    if image_id is not None:
        statuses.append({"name": container, "imageID": image_id, "ready": True, "state": {"running": {}}})
    return {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "worker", "image": "ghcr.io/x/tfmw:1.2"}, {"name": "sidecar"}]},
        "status": {"phase": "Running", "containerStatuses": statuses},
    }


def states(*pods: dict) -> list[PodState]:
    return [observe.pod_state(p) for p in pods]


def test_the_worker_containers_digest_whatever_the_runtimes_prefix():
    assert observe.worker_image_id(pod("w-0", f"ghcr.io/x/tfmw@{A}")) == A
    assert observe.worker_image_id(pod("w-0", f"docker-pullable://ghcr.io/x/tfmw@{A}")) == A
    assert observe.worker_image_id(pod("w-0", A)) == A  # an imported image: containerd's image id
    assert observe.worker_image_id(pod("w-0", "")) == ""  # not started yet
    assert (
        observe.worker_image_id(pod("w-0", None)) == ""
    )  # no status of the worker container (the sidecar's is not it)


def test_one_digest_for_the_whole_group():
    group = states(pod("w-0", f"r@{A}"), pod("w-1", f"r@{A}"), pod("w-2", None))
    assert observe.image_record(group) == A
    assert observe.image_line(group, 3) == f"image {A} on 2/3 workers"
    assert observe.image_line(group, 3, recorded=A) == f"image {A} on 2/3 workers"  # as deployed: nothing to add


def test_a_split_group_names_which_workers_run_which_digest():
    group = states(pod("w-0", f"r@{A}"), pod("w-1", f"r@{B}"), pod("w-2", f"r@{A}"))
    assert observe.image_record(group) == f"{A}=w-0,w-2 {B}=w-1"
    line = observe.image_line(group, 3)
    assert line.startswith("image SPLIT: the workers run 2 different images (")
    assert f"w-0, w-2 run {A}; w-1 run {B}" in line and "pin image.digest" in line


def test_workers_that_no_longer_run_what_deploy_recorded_say_so():
    group = states(pod("w-0", f"r@{B}"), pod("w-1", f"r@{B}"))
    assert observe.image_line(group, 2, recorded=A) == f"image {B} on 2/2 workers (make deploy recorded {A})"


class FakeApi:
    def __init__(self, pods: list[dict], fail_patch: bool = False):
        self.pods, self.fail_patch, self.calls = pods, fail_patch, []

    def items(self, path: str, **query) -> list[dict]:
        self.calls.append(("GET", path, query))
        return self.pods

    def patch(self, path: str, patch: dict, strategic: bool = False):
        self.calls.append(("PATCH", path, patch))
        if self.fail_patch:
            raise ApiError(403, "statefulsets is forbidden")
        return {}


def test_deploy_prints_and_records_the_digest_in_two_requests_whatever_the_group_size():
    api, said = FakeApi([pod(f"rel-w-{i}", f"r@{A}") for i in range(64)]), []
    upgrade.record_image(api, dataclasses.replace(WORKERS, replicas=64), said.append)
    assert said == [f"image {A} on 64/64 workers"]
    assert api.calls == [
        ("GET", "/api/v1/namespaces/ml/pods", {"labelSelector": "app=w"}),
        (
            "PATCH",
            "/apis/apps/v1/namespaces/ml/statefulsets/rel-w",
            {"metadata": {"annotations": {IMAGE_ANNOTATION: A}}},
        ),
    ]


def test_deploy_warns_of_a_split_group_and_records_both():
    api, said = FakeApi([pod("rel-w-0", f"r@{A}"), pod("rel-w-1", f"r@{B}")]), []
    upgrade.record_image(api, WORKERS, said.append)
    assert said[0].startswith("image SPLIT: the workers run 2 different images")
    assert api.calls[-1][2] == {"metadata": {"annotations": {IMAGE_ANNOTATION: f"{A}=rel-w-0 {B}=rel-w-1"}}}


def test_no_started_worker_records_nothing_and_a_refused_patch_is_one_line():
    api, said = FakeApi([pod("rel-w-0", None)]), []
    upgrade.record_image(api, WORKERS, said.append)
    assert said == [] and [c[0] for c in api.calls] == ["GET"]
    api, said = FakeApi([pod("rel-w-0", f"r@{A}")], fail_patch=True), []
    upgrade.record_image(api, WORKERS, said.append)
    assert said[-1].startswith("image digest not recorded: ") and "forbidden" in said[-1]


def test_status_ends_with_the_image_once_a_worker_started():
    sts = {"kind": "StatefulSet", "metadata": {"annotations": {IMAGE_ANNOTATION: A}}, "spec": {"replicas": 2}}
    release = observe.ReleaseInfo("rel", "ml", 1, "deployed")
    reports = [WorkerReport(s) for s in states(pod("rel-w-0", f"r@{A}"), pod("rel-w-1", f"r@{B}"))]
    lines = observe.status_lines(release, WORKERS, sts, None, reports)
    assert lines[1].startswith("worker rel-w-0: Running") and lines[2].startswith("worker rel-w-1: Running")
    assert lines[3].startswith("image SPLIT: ") and lines[3].endswith(f"(make deploy recorded {A})")
    unstarted = [WorkerReport(s) for s in states(pod("rel-w-0", None))]
    assert len(observe.status_lines(release, WORKERS, sts, None, unstarted)) == 2  # no image line yet

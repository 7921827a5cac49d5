"""The in-cluster API client (entrypoint.kubeapi) and the status recorder (entrypoint.status),
against a real HTTPS server on 127.0.0.1 that can refuse, fail, conflict or hang."""

from __future__ import annotations

import socket
import threading
from dataclasses import replace

import pytest

import entrypoint.kubeapi
from entrypoint.kubeapi import APIError, KubeAPI
from entrypoint.lifecycle import TERMINAL_KEYS, Phase, Reason, advance, fresh, to_data
from entrypoint.status import StatusRecorder
from tfmw.devcluster.fakeapi import make_certificate

T0 = "2026-11-30T10:00:00Z"


def client(fake, timeout=2.0):
    return KubeAPI.from_env(fake.env(), str(fake.api_dir), timeout=timeout)


def recorder(fake, logs, **kw):
    return StatusRecorder(
        client(fake, kw.pop("timeout", 2.0)),
        namespace="ml",
        configmap="train-status",
        statefulset="train",
        pod_name="train-0",
        log=logs.append,
        **kw,
    )


# -- the client ----------------------------------------------------------------------------------
def test_client_reads_and_merge_patches_with_the_current_token(fake_api):
    api = client(fake_api)
    api.patch_configmap_data("ml", "train-status", {"phase": "Running"})
    fake_api.rotate_token("token-2")  # the kubelet rotated the projected token
    assert api.get_configmap("ml", "train-status")["data"] == {"phase": "Running"}
    assert [r.token for r in fake_api.requests] == ["token-1", "token-2"]
    assert fake_api.requests[0].content_type == "application/merge-patch+json"


def test_client_patch_is_conditional_on_the_version_read(fake_api):
    api = client(fake_api)
    version = api.get_configmap("ml", "train-status")["metadata"]["resourceVersion"]
    api.patch_configmap_data("ml", "train-status", {"a": "1"})  # someone else writes in between
    with pytest.raises(APIError) as err:
        api.patch_configmap_data("ml", "train-status", {"a": "2"}, resource_version=version)
    assert err.value.status == 409


@pytest.mark.parametrize("status", [401, 403, 500, 503])
def test_http_errors_carry_the_status_and_the_servers_message(fake_api, status):
    fake_api.fail("GET", "configmaps", status=status, times=2)  # a 401 is asked once more
    with pytest.raises(APIError) as err:
        client(fake_api).get_configmap("ml", "train-status")
    assert err.value.kind == f"HTTP {status}" and err.value.status == status
    assert f"injected {status}" in err.value.detail


def test_one_client_keeps_its_connection_and_reads_the_token_only_when_it_changes(fake_api, monkeypatch):
    api = client(fake_api)
    reads = []
    original = type(fake_api.api_dir).read_text
    monkeypatch.setattr(
        type(fake_api.api_dir), "read_text", lambda self, *a: reads.append(self.name) or original(self, *a)
    )
    for _ in range(10):
        api.get_scale("ml", "train")
    assert api.connections == 1 and fake_api.connections == 1  # one TLS handshake for ten requests
    assert reads == ["token"]
    fake_api.rotate_token("token-2")
    api.get_scale("ml", "train")
    assert reads == ["token", "token"] and fake_api.requests[-1].token == "token-2"


def test_a_401_is_asked_once_more_with_the_token_read_again(fake_api):
    api = client(fake_api)
    api.get_scale("ml", "train")
    fake_api.fail("GET", "scale", status=401)  # the token rotated between the read and the request
    assert api.get_scale("ml", "train")["spec"] == {"replicas": 2}
    assert [r.path.endswith("/scale") for r in fake_api.requests] == [True, True, True]


def test_a_connection_the_server_closed_while_idle_is_replaced(fake_api):
    api = client(fake_api)
    api.get_scale("ml", "train")
    for _, conn in api._idle:  # as the server's idle timeout would
        conn.sock.shutdown(socket.SHUT_RDWR)
    assert api.get_scale("ml", "train")["spec"] == {"replicas": 2}
    assert api.connections == 2


def test_a_connection_idle_for_long_is_not_trusted(fake_api, monkeypatch):
    api = client(fake_api)
    api.get_scale("ml", "train")
    monkeypatch.setattr(entrypoint.kubeapi, "MAX_IDLE_SECONDS", 0.0)  # the API server may have closed it meanwhile
    api.get_scale("ml", "train")
    assert api.connections == 2 and fake_api.connections == 2


def test_pods_are_listed_by_label_selector_in_one_request(fake_api):
    fake_api.pods = {
        "train-0": {"metadata": {"name": "train-0", "labels": {"app": "t", "role": "worker"}}},
        "train-1": {"metadata": {"name": "train-1", "labels": {"app": "t", "role": "worker"}}},
        "other-0": {"metadata": {"name": "other-0", "labels": {"app": "o"}}},
    }
    names = [p["metadata"]["name"] for p in client(fake_api).list_pods("ml", "app=t,role=worker")]
    assert names == ["train-0", "train-1"]
    assert fake_api.requests[-1].path == "/api/v1/namespaces/ml/pods?labelSelector=app%3Dt%2Crole%3Dworker"


def test_a_stale_token_is_401(fake_api):
    fake_api.tokens = {"only-this-one"}
    with pytest.raises(APIError, match="HTTP 401: Unauthorized"):
        client(fake_api).get_scale("ml", "train")


def test_a_server_that_does_not_answer_is_a_timeout(fake_api):
    fake_api.fail("GET", "configmaps", hold=threading.Event())
    with pytest.raises(APIError) as err:
        client(fake_api, timeout=0.3).get_configmap("ml", "train-status")
    assert err.value.kind == "timeout"


def test_nothing_listening_is_connection_refused(fake_api):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: refused
        api = KubeAPI("127.0.0.1", port, fake_api.api_dir, timeout=1)
        with pytest.raises(APIError) as err:
            api.get_configmap("ml", "x")
    assert err.value.kind == "connection refused"


def test_a_server_the_ca_does_not_vouch_for_is_refused(fake_api, tmp_path):
    other, _ = make_certificate(tmp_path, "other")
    (fake_api.api_dir / "ca.crt").write_bytes(other.read_bytes())
    with pytest.raises(APIError) as err:
        client(fake_api).get_configmap("ml", "train-status")
    assert err.value.kind == "TLS error"
    assert fake_api.requests == []


def test_missing_token_or_api_server(fake_api):
    (fake_api.api_dir / "token").unlink()
    with pytest.raises(APIError) as err:
        client(fake_api).get_configmap("ml", "train-status")
    assert err.value.kind == "token unreadable"
    with pytest.raises(APIError) as err:
        KubeAPI.from_env({}, str(fake_api.api_dir)).get_configmap("ml", "x")
    assert err.value.kind == "no API server"
    assert KubeAPI.from_env(fake_api.env(), None) is None  # no API directory: no API access


# -- the recorder --------------------------------------------------------------------------------
def running(step=None, **kw):
    return replace(fresh("r1", "rev-a", T0), phase=Phase.RUNNING, step=step, **kw)


def test_recorder_writes_every_key_as_a_string(fake_api):
    logs = []
    rec = recorder(fake_api, logs)
    state = running(step=20, total_steps=100, loss="0.5000", last_checkpoint_step=20)
    rec.record(state)
    assert rec.flush(10)
    assert fake_api.status("train-status") == to_data(state)
    assert rec.status_ok is True and logs == []


def test_recorder_never_blocks_the_caller_and_coalesces(fake_api):
    # The server holds the first request until the test lets it go: record() must return at
    # once, and the states recorded meanwhile go out as one write, the newest values winning.
    release = threading.Event()
    fake_api.fail("GET", "configmaps", hold=release)
    rec = recorder(fake_api, [], timeout=30)
    for step in range(1, 51):
        rec.record(running(step=step))
    assert not rec.flush(0)  # still held: nothing written yet, and we got here anyway
    release.set()
    assert rec.flush(20)
    applied = fake_api.patches("train-status")
    assert 1 <= len(applied) <= 2 < 50
    assert fake_api.status("train-status")["step"] == "50"


def test_api_errors_are_logged_once_per_kind_and_resent_with_the_next_write(fake_api):
    logs = []
    rec = recorder(fake_api, logs)
    fake_api.fail("PATCH", "configmaps", status=403, times=3)
    for step in (1, 2, 3):
        rec.record(running(step=step, last_checkpoint_step=step))
        rec.flush(10)
    assert rec.status_ok is False
    assert logs == [
        "tfmw launcher status: cannot record the status in configmap/train-status (HTTP 403: "
        "PATCH /api/v1/namespaces/ml/configmaps/train-status: injected 403); training goes on"
    ]
    # The next write carries fewer keys; the ones that failed travel along with it.
    end = advance(running(step=3), Phase.FAILED, now=T0, reason=Reason.TRAINING_FAILED)
    rec.record(end, TERMINAL_KEYS)
    rec.flush(10)
    status = fake_api.status("train-status")
    assert (status["lastCheckpointStep"], status["step"], status["phase"]) == ("3", "3", "Failed")
    fake_api.fail("PATCH", "configmaps", status=500)
    rec.record(fresh("r2", "rev-a", T0))
    rec.flush(10)
    assert len(logs) == 2 and "(HTTP 500:" in logs[1]  # another kind: logged once too


def test_retry_unsent_sends_a_failed_terminal_write_again(fake_api):
    rec = recorder(fake_api, [])
    fake_api.fail("GET", "configmaps", status=503)
    done = advance(running(), Phase.SUCCEEDED, now=T0, reason=Reason.COMPLETED)
    rec.record(done)
    rec.flush(10)
    assert rec.status_ok is False and fake_api.status("train-status") == {}
    rec.retry_unsent()
    rec.flush(10)
    assert rec.status_ok is True and fake_api.status("train-status")["phase"] == "Succeeded"


def test_a_conflicting_write_is_read_again_and_retried(fake_api):
    rec = recorder(fake_api, [])
    fake_api.fail("PATCH", "configmaps", status=409)
    rec.record(running(step=7))
    rec.flush(10)
    assert fake_api.status("train-status")["step"] == "7"
    assert [r.method for r in fake_api.requests] == ["GET", "PATCH", "GET", "PATCH"]


def test_a_terminal_state_recorded_by_a_peer_is_never_overwritten(fake_api):
    peer = advance(running(), Phase.FAILED, now=T0, reason=Reason.TRAINING_FAILED, message="DataError: x")
    fake_api.configmaps["train-status"]["data"] = to_data(peer, TERMINAL_KEYS) | {"startedAt": T0}
    rec = recorder(fake_api, [])
    chief = replace(running(), phase=Phase.RESTARTING, restarts=1)
    rec.record(chief)
    rec.flush(10)
    assert fake_api.status("train-status")["phase"] == "Failed"
    assert fake_api.patches("train-status") == []
    assert rec.superseded.reason == "TrainingFailed"
    # ... while a new run id (or a changed pod template) starts over
    rec.record(fresh("r2", "rev-a", T0))
    rec.flush(10)
    assert fake_api.status("train-status")["runId"] == "r2"


def test_read_returns_the_recorded_state_or_none(fake_api):
    logs = []
    rec = recorder(fake_api, logs)
    assert rec.read() is None  # empty ConfigMap: no run recorded
    fake_api.configmaps["train-status"]["data"] = to_data(running(step=3))
    assert rec.read() == running(step=3)
    fake_api.fail("GET", "configmaps", status=403)
    assert rec.read() is None
    assert logs == [
        "tfmw launcher status: cannot read the status from configmap/train-status (HTTP 403: GET "
        "/api/v1/namespaces/ml/configmaps/train-status: injected 403); training goes on"
    ]


def test_events_name_the_statefulset_by_its_uid(fake_api):
    rec = recorder(fake_api, [])
    rec.event("Restarted", "Warning", "worker 1 lost: UnavailableError: x, resuming from step 20")
    rec.event("Succeeded", "Normal", "done")
    rec.flush(10)
    assert [e["reason"] for e in fake_api.events] == ["Restarted", "Succeeded"]
    event = fake_api.events[0]
    assert event["involvedObject"] == {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "name": "train",
        "namespace": "ml",
        "uid": fake_api.uid,
    }
    assert event["metadata"]["namespace"] == "ml" and event["metadata"]["name"].startswith("train.")
    assert (event["type"], event["count"], event["reportingInstance"]) == ("Warning", 1, "train-0")
    assert event["message"] == "worker 1 lost: UnavailableError: x, resuming from step 20"
    assert event["firstTimestamp"] == event["lastTimestamp"]
    gets = [r for r in fake_api.requests if r.method == "GET" and r.path.endswith("/scale")]
    assert len(gets) == 1  # the uid is read once


def test_an_event_that_cannot_be_created_is_logged_once(fake_api):
    logs = []
    rec = recorder(fake_api, logs)
    fake_api.fail("POST", "events", status=403, times=-1)
    for reason in ("Started", "Restarted", "Succeeded"):
        rec.event(reason, "Normal", "m")
    rec.flush(10)
    assert len(logs) == 1 and logs[0].startswith(
        "tfmw launcher status: cannot record Event Started on statefulset/train (HTTP 403:"
    )


def test_scale_to_zero_releases_the_statefulset(fake_api):
    logs = []
    rec = recorder(fake_api, logs)
    rec.scale_to_zero()
    rec.flush(10)
    assert fake_api.replicas["train"] == 0 and rec.scaled_to_zero
    assert logs == ["tfmw launcher scaled to zero: statefulset/train has 0 replicas"]


def test_a_failed_scale_is_logged_once_and_retried_when_asked(fake_api):
    logs = []
    rec = recorder(fake_api, logs)
    fake_api.fail("PATCH", "/scale", status=500, times=2)
    rec.scale_to_zero()
    rec.flush(10)
    rec.retry_unsent()
    rec.flush(10)
    assert fake_api.replicas["train"] == 2 and not rec.scaled_to_zero
    rec.retry_unsent()
    rec.flush(10)
    assert fake_api.replicas["train"] == 0 and rec.scaled_to_zero
    assert [line.split(" (")[0] for line in logs] == [
        "tfmw launcher status: cannot scale statefulset/train to 0",
        "tfmw launcher scaled to zero: statefulset/train has 0 replicas",
    ]


def test_without_api_access_nothing_is_sent_and_a_release_says_why():
    logs = []
    rec = StatusRecorder(
        None, namespace="ml", configmap="train-status", statefulset="train", pod_name="p", log=logs.append
    )
    rec.record(running())
    rec.event("Started", "Normal", "m")
    rec.scale_to_zero()
    rec.scale_to_zero()
    assert rec.flush(1) and rec.read() is None and not rec.scaled_to_zero
    assert logs == [
        "tfmw launcher status: cannot scale statefulset/train to 0 (no API access: TFMW_API_DIR is "
        "not set: this pod has no API credentials); the pods keep their resources until the StatefulSet is "
        "scaled to 0 or uninstalled"
    ]


def test_with_no_api_server_by_design_a_scale_to_zero_says_nothing():
    """`make local` (TFMW_NO_API_SERVER): there is nothing to scale, and nothing went wrong."""
    logs = []
    rec = StatusRecorder(
        None,
        namespace="ml",
        configmap=None,
        statefulset="train",
        pod_name="p",
        log=logs.append,
        no_api_server=True,
    )
    rec.record(running())
    rec.scale_to_zero()
    assert rec.flush(1) and logs == [] and not rec.scaled_to_zero


# -- fenced: the pod was force-deleted and replaced -------------------------------------------
MY_UID = "5f0c3a52-0000-4000-8000-000000000001"


def own_pod(fake, uid: str) -> None:
    fake.pods["train-0"] = {"metadata": {"name": "train-0", "namespace": "ml", "uid": uid}}


def writes(fake) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in fake.requests if r.method != "GET"]


def failed_and_scaled(rec) -> None:
    rec.record(advance(running(), Phase.FAILED, now=T0, reason=Reason.TRAINING_FAILED, message="x"))
    rec.event("Failed", "Warning", "peers not found")
    rec.scale_to_zero()
    assert rec.flush(10)


@pytest.mark.parametrize("replacement", [None, "5f0c3a52-0000-4000-8000-000000000002"])
def test_a_replaced_pod_writes_no_status_event_or_scale_again(fake_api, replacement):
    """A launcher cut off with its node, back once the network heals: its pod is gone
    (force-deleted) or is the replacement (same name, new UID). Its queued Failed and scale to 0
    would stop the replacement's group: none of them is sent, then or later."""
    if replacement:
        own_pod(fake_api, replacement)
    fake_api.replicas["train"] = 2
    logs = []
    rec = recorder(fake_api, logs, pod_uid=MY_UID)
    failed_and_scaled(rec)
    rec.retry_unsent()
    rec.record(running(step=9))
    assert rec.flush(10)
    assert writes(fake_api) == [] and fake_api.replicas["train"] == 2 and fake_api.events == []
    assert rec.fenced
    now = f"has uid {replacement}" if replacement else "is gone"
    assert [line for line in logs if "fenced" in line] == [
        f"tfmw launcher fenced: pod train-0 {now}, not this pod's {MY_UID} (force-deleted and replaced: its node "
        "was lost or cut off); no status, Event or scale from this launcher again"
    ]
    assert [r.path for r in fake_api.requests].count("/api/v1/namespaces/ml/pods/train-0") == 1  # read once


def test_the_same_pod_writes_as_before(fake_api):
    own_pod(fake_api, MY_UID)
    fake_api.replicas["train"] = 2
    rec = recorder(fake_api, [], pod_uid=MY_UID)
    failed_and_scaled(rec)
    assert not rec.fenced
    assert fake_api.status("train-status")["phase"] == "Failed" and fake_api.replicas["train"] == 0
    assert [e["reason"] for e in fake_api.events] == ["Failed"]


@pytest.mark.parametrize("status", [403, 503])
def test_a_pod_that_cannot_be_read_is_not_fenced(fake_api, status):
    """403: a Role from before the fence (no get on pods); 503: the API server restarting."""
    fake_api.replicas["train"] = 2
    fake_api.fail("GET", "pods", status=status, times=10)
    rec = recorder(fake_api, [], pod_uid=MY_UID)
    failed_and_scaled(rec)
    assert not rec.fenced and fake_api.status("train-status")["phase"] == "Failed" and fake_api.replicas["train"] == 0


def test_without_its_uid_the_recorder_never_reads_its_pod(fake_api):
    fake_api.replicas["train"] = 2
    rec = recorder(fake_api, [])
    failed_and_scaled(rec)
    assert not any("/pods/" in r.path for r in fake_api.requests)
    assert fake_api.replicas["train"] == 0


# -- rights the chart's Role leaves out on purpose (TFMW_RBAC_OFF) ------------------------------
def test_without_the_events_right_no_event_is_asked_for(fake_api):
    """rbac.events=false: the launcher said so at start; the status is still written."""
    fake_api.replicas["train"] = 2
    logs = []
    rec = recorder(fake_api, logs, events=False)
    failed_and_scaled(rec)
    assert fake_api.events == [] and not any("events" in r.path for r in fake_api.requests)
    assert fake_api.status("train-status")["phase"] == "Failed" and fake_api.replicas["train"] == 0
    assert logs == ["tfmw launcher scaled to zero: statefulset/train has 0 replicas"]


def test_without_the_pods_get_right_the_writes_are_not_fenced_and_no_pod_is_read(fake_api):
    """rbac.pods.get=false: the fence would only be refused (403) before every write."""
    fake_api.replicas["train"] = 2
    rec = recorder(fake_api, [], pod_uid=MY_UID, fence=False)
    failed_and_scaled(rec)
    assert not any("/pods/" in r.path for r in fake_api.requests)
    assert not rec.fenced and fake_api.status("train-status")["phase"] == "Failed"

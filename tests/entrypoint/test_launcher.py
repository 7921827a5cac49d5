"""The launcher end to end (entrypoint.launcher): real training commands (small Python scripts
that print what the trainer prints), the real supervisor, the real API client against the
HTTPS server of fakeapi. What the status ConfigMap, the Events and the scale subresource
see at each transition; redeploys; the deadline; API errors that never stop training."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace

import pytest
from kubeletkit import kubelet_expand
from launcherkit import SUCCEEDS, Run, attempts, command, pod_env
from repo import REPO

from entrypoint import envfrom
from entrypoint.launcher import Launcher
from entrypoint.lifecycle import STATUS_KEYS, TERMINAL_KEYS, Phase, Reason, RunState, advance, fresh, rfc3339, to_data

# Attempt 1 loses worker 1 after the checkpoint of step 20; attempt 2 finishes.
LOSES_A_PEER_ONCE = (
    """
    import pathlib, sys
    counter = pathlib.Path(sys.argv[0]).with_name("attempts")
    n = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(n + 1))
    if n == 0:
        print("tfmw start run=r1 worker=0/2 replicas=2 resume_step=0 steps=40", flush=True)
        print("tfmw checkpoint saved step=20 path=/x/ckpt-20", flush=True)
        print("tfmw error retryable=true worker=0 UnavailableError: Collective ops is aborted by: "
              "failed to connect to /job:worker/replica:0/task:1", flush=True)
        sys.exit(75)
"""
    + SUCCEEDS
)


def fails_with(code: int, line: str) -> str:
    return f"""
    import pathlib, sys
    counter = pathlib.Path(sys.argv[0]).with_name("attempts")
    counter.write_text(str(int(counter.read_text()) + 1 if counter.exists() else 1))
    print("tfmw start run=r1 worker=0/1 replicas=1 resume_step=0 steps=40", flush=True)
    print({line!r}, flush=True)
    sys.exit({code})
"""


def wait_for(condition, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.02)


def phases(patches: list[dict]) -> list[str]:
    seen = []
    for data in patches:
        if "phase" in data and (not seen or seen[-1] != data["phase"]):
            seen.append(data["phase"])
    return seen


# -- a chief's run, transition by transition ------------------------------------------------------
def test_chief_records_the_run_and_releases_the_statefulset_on_success(fake_api, tmp_path):
    run = Run(pod_env(fake_api, tmp_path, TFMW_ON_SUCCESS="scaleToZero"), command(tmp_path, SUCCEEDS))
    run.until("tfmw launcher idle:")
    status = fake_api.status("train-status")
    assert {
        k: status[k]
        for k in (
            "runId",
            "phase",
            "reason",
            "step",
            "totalSteps",
            "loss",
            "lastCheckpointStep",
            "restarts",
            "revision",
        )
    } == {
        "runId": "r1",
        "phase": "Succeeded",
        "reason": "Completed",
        "step": "40",
        "totalSteps": "40",
        "loss": "0.2500",
        "lastCheckpointStep": "40",
        "restarts": "0",
        "revision": "rev-a",
    }
    assert tuple(status) == STATUS_KEYS and status["startedAt"] <= status["finishedAt"] == status["updatedAt"]
    # writes are coalesced (at most one in flight): a short run may skip a phase between two
    assert phases(fake_api.patches("train-status")) in (
        ["Pending", "Running", "Succeeded"],
        ["Running", "Succeeded"],
        ["Pending", "Succeeded"],
    )
    assert [(e["reason"], e["type"]) for e in fake_api.events] == [("Started", "Normal"), ("Succeeded", "Normal")]
    assert fake_api.replicas["train"] == 0
    assert "tfmw launcher scaled to zero: statefulset/train has 0 replicas" in run.logs
    assert run.line("tfmw completed run=r1")
    assert "waiting for the StatefulSet controller to delete this pod" in run.line("tfmw launcher idle:")
    assert run.stop() == 0  # SIGTERM while idle (the pod is deleted): exit 0, never a crash loop
    assert (tmp_path / "shared" / "r1" / "COMPLETED").exists()  # the chief records it for a user command


def test_checkpoints_are_recorded_while_training(fake_api, tmp_path):
    body = SUCCEEDS.replace(
        'print("tfmw progress step=40/40', 'import time\n    time.sleep(30)\n    print("tfmw progress step=40/40'
    )
    run = Run(pod_env(fake_api, tmp_path), command(tmp_path, body))
    run.until("tfmw lifecycle phase=Running")
    wait_for(lambda: fake_api.status("train-status").get("lastCheckpointStep") == "20")
    status = fake_api.status("train-status")
    assert (status["phase"], status["lastCheckpointStep"], status["step"], status["loss"]) == (
        "Running",
        "20",
        "20",
        "0.5000",
    )
    assert run.stop() == 143  # SIGTERM mid-training: passed on, not a state of the run


def test_a_lost_peer_is_restarted_in_place_and_says_why(fake_api, tmp_path):
    run = Run(pod_env(fake_api, tmp_path, replicas=2), command(tmp_path, LOSES_A_PEER_ONCE))
    run.until("tfmw launcher idle:")
    assert attempts(tmp_path) == 2
    assert [e["reason"] for e in fake_api.events] == ["Started", "Restarted", "Succeeded"]
    restarted = fake_api.events[1]
    assert restarted["type"] == "Warning"
    assert restarted["message"].startswith("worker 1 lost: UnavailableError: Collective ops is aborted by")
    assert restarted["message"].endswith(", resuming from step 20")
    status = fake_api.status("train-status")
    assert (status["phase"], status["restarts"]) == ("Succeeded", "1")
    # (no "Restarting" write is promised: a restart after progress is immediate, and the
    # recorder's coalescing queue may send the next state, Running, in its place; the
    # Restarted Event and the restart count above carry it)
    assert set(phases(fake_api.patches("train-status"))) <= {"Pending", "Running", "Restarting", "Succeeded"}
    assert fake_api.replicas["train"] == 2  # policy unset: idle, as older manifests expect
    assert "uninstall the release or set a new training.runId" in run.line("tfmw launcher idle:")
    assert run.line("tfmw lifecycle phase=Restarting from=Running run=r1 worker=0 restarts=1")
    assert run.stop() == 0


@pytest.mark.parametrize(
    "code,line,reason",
    [
        (
            4,
            "tfmw error retryable=false worker=0 TrainingError: data.path: /d/a.npz is corrupt or truncated",
            "TrainingFailed",
        ),
        (2, "training config: steps: -1 is less than the minimum of 1", "BadConfig"),
    ],
)
def test_a_permanent_failure_is_recorded_released_and_never_retried(fake_api, tmp_path, code, line, reason):
    run = Run(pod_env(fake_api, tmp_path, TFMW_ON_FAILURE="scaleToZero"), command(tmp_path, fails_with(code, line)))
    run.until("tfmw launcher idle:")
    assert attempts(tmp_path) == 1
    message = line.split("worker=0 ", 1)[-1]
    status = fake_api.status("train-status")
    assert (status["phase"], status["reason"], status["message"]) == ("Failed", reason, message)
    assert [e["reason"] for e in fake_api.events] == ["Started", "Failed"]
    assert fake_api.events[1]["message"] == message  # names the bad key / the corrupt file
    assert fake_api.replicas["train"] == 0
    failed = run.line("tfmw failed run=r1")
    assert f"reason={reason} exit_code={code} " in failed
    assert run.stop() == 0


def test_policy_idle_after_a_failure_keeps_the_pods_and_idles(fake_api, tmp_path):
    run = Run(pod_env(fake_api, tmp_path), command(tmp_path, fails_with(4, "tfmw error retryable=false worker=0 X: y")))
    run.until("tfmw launcher idle:")
    assert fake_api.status("train-status")["phase"] == "Failed"
    assert fake_api.replicas["train"] == 2
    assert "fix the cause, then helm upgrade" in run.line("tfmw launcher idle:")
    assert run.stop() == 0


def test_restart_limit(fake_api, tmp_path):
    run = Run(
        pod_env(fake_api, tmp_path, TFMW_MAX_RESTARTS="1", TFMW_SAME_ERROR_LIMIT="0", TFMW_ON_FAILURE="scaleToZero"),
        command(tmp_path, fails_with(1, "boom")),
    )
    run.until("tfmw launcher idle:")
    assert attempts(tmp_path) == 2
    status = fake_api.status("train-status")
    assert (status["phase"], status["reason"], status["restarts"]) == ("Failed", "RestartLimit", "1")
    assert "training.maxRestarts=1" in status["message"]
    assert [e["reason"] for e in fake_api.events] == ["Started", "Restarted", "Failed"]
    assert run.stop() == 0


def test_the_same_error_twice_is_repeated_error_in_the_status_and_the_events(fake_api, tmp_path):
    run = Run(pod_env(fake_api, tmp_path), command(tmp_path, fails_with(1, "ValueError: dataset too small")))
    run.until("tfmw launcher idle:")
    assert attempts(tmp_path) == 2  # not training.maxRestarts (20) + 1
    status = fake_api.status("train-status")
    assert (status["phase"], status["reason"]) == ("Failed", "RepeatedError")
    assert status["message"] == "training exited with 1: ValueError: dataset too small"
    failed = [e for e in fake_api.events if e["reason"] == "Failed"]
    assert len(failed) == 1 and "ValueError: dataset too small" in failed[0]["message"]
    assert run.stop() == 0


# -- any worker records the terminal Failed it reaches itself -------------------------------------
def test_a_worker_records_only_its_own_failure_and_releases(fake_api, tmp_path):
    run = Run(
        pod_env(fake_api, tmp_path, pod="train-1", replicas=2, TFMW_ON_FAILURE="scaleToZero"),
        command(tmp_path, fails_with(4, "tfmw error retryable=false worker=1 TrainingError: corrupt")),
    )
    run.until("tfmw launcher idle:")
    assert [set(p) for p in fake_api.patches("train-status")] == [set(TERMINAL_KEYS)]
    assert fake_api.status("train-status")["reason"] == "TrainingFailed"
    assert [e["reason"] for e in fake_api.events] == ["Failed"]
    assert fake_api.replicas["train"] == 0
    assert run.stop() == 0


def test_a_worker_that_succeeds_leaves_recording_and_releasing_to_the_chief(fake_api, tmp_path):
    run = Run(
        pod_env(fake_api, tmp_path, pod="train-1", replicas=2, TFMW_ON_SUCCESS="scaleToZero"),
        command(tmp_path, SUCCEEDS),
    )
    run.until("tfmw launcher idle:")
    assert fake_api.patches("train-status") == [] and fake_api.events == []
    assert fake_api.replicas["train"] == 2
    assert "scaled to 0 by the chief" in run.line("tfmw launcher idle:")
    assert not (tmp_path / "shared" / "r1" / "COMPLETED").exists()  # the chief's to write
    assert run.stop() == 0


def test_a_run_a_peer_recorded_as_failed_is_not_restarted(fake_api, tmp_path):
    go = tmp_path / "go"
    body = f"""
    import pathlib, sys, time
    counter = pathlib.Path(sys.argv[0]).with_name("attempts")
    counter.write_text(str(int(counter.read_text()) + 1 if counter.exists() else 1))
    while not pathlib.Path({str(go)!r}).exists():
        time.sleep(0.02)
    print("tfmw error retryable=true worker=0 UnavailableError: peer gone", flush=True)
    sys.exit(75)
    """
    run = Run(pod_env(fake_api, tmp_path, replicas=2), command(tmp_path, body))
    run.until("tfmw launcher starting training (attempt 1)")
    wait_for(lambda: fake_api.status("train-status").get("phase") == "Running")  # the chief's write landed
    peer = to_data(
        advance(
            replace(fresh("r1", "rev-a", "2026-11-30T10:00:00Z"), phase=Phase.RUNNING),
            Phase.FAILED,
            now="2026-11-30T10:01:00Z",
            reason=Reason.TRAINING_FAILED,
            message="DataError: worker 1's shard is corrupt",
        ),
        TERMINAL_KEYS,
    )
    with fake_api.lock:
        fake_api.configmaps["train-status"]["data"].update(peer)
    go.write_text("now")
    run.until("tfmw launcher idle:")
    assert attempts(tmp_path) == 1  # adopted the peer's Failed instead of waiting for a group that is gone
    assert run.line("tfmw lifecycle phase=Failed run=r1 worker=0 reason=TrainingFailed recorded_by=peer")
    status = fake_api.status("train-status")
    assert (status["phase"], status["message"]) == ("Failed", "DataError: worker 1's shard is corrupt")
    assert "Failed" not in [e["reason"] for e in fake_api.events]  # the peer announced it
    assert run.stop() == 0


# -- redeploy (helm upgrade / make deploy brings the workers back) --------------------------------
def test_redeploy_of_a_completed_run_succeeds_again_without_training(fake_api, tmp_path):
    marker = tmp_path / "shared" / "r1" / "COMPLETED"
    marker.parent.mkdir(parents=True)
    marker.write_text(json.dumps({"steps": 40, "finalLoss": 0.25, "model": "/m"}))
    run = Run(pod_env(fake_api, tmp_path, TFMW_ON_SUCCESS="scaleToZero"), command(tmp_path, fails_with(1, "x")))
    run.until("tfmw launcher idle:")
    assert attempts(tmp_path) == 0
    status = fake_api.status("train-status")
    assert (status["phase"], status["reason"]) == ("Succeeded", "Completed")
    assert [e["reason"] for e in fake_api.events] == ["Succeeded"]
    assert "already completed: not training again" in fake_api.events[0]["message"]
    assert fake_api.replicas["train"] == 0
    assert run.line("tfmw completed run=r1 steps=40 final_loss=0.25 model=/m")
    assert run.stop() == 0


def recorded_failure(revision: str) -> dict:
    return to_data(
        advance(
            fresh("r1", revision, "2026-11-30T10:00:00Z"),
            Phase.FAILED,
            now="2026-11-30T10:01:00Z",
            reason=Reason.BAD_CONFIG,
            message="training config: steps: -1 is less than the minimum of 1",
        )
    )


def test_redeploy_of_a_failed_run_at_the_same_revision_fails_again_without_training(fake_api, tmp_path):
    fake_api.configmaps["train-status"]["data"] = before = recorded_failure("rev-a")
    run = Run(pod_env(fake_api, tmp_path, TFMW_ON_FAILURE="scaleToZero"), command(tmp_path, SUCCEEDS))
    run.until("tfmw launcher idle:")
    assert attempts(tmp_path) == 0 and not any(line.startswith("tfmw launcher starting") for line in run.logs)
    assert fake_api.status("train-status") == before  # recorded once, left as it was
    assert [e["reason"] for e in fake_api.events] == ["Failed"]
    assert "already Failed (BadConfig: training config: steps: -1" in fake_api.events[0]["message"]
    assert fake_api.replicas["train"] == 0
    assert "reason=BadConfig exit_code=2" in run.line("tfmw failed run=r1")
    assert run.stop() == 0


def test_redeploy_with_a_changed_pod_template_trains_again(fake_api, tmp_path):
    fake_api.configmaps["train-status"]["data"] = recorded_failure("rev-old")
    run = Run(pod_env(fake_api, tmp_path), command(tmp_path, SUCCEEDS))
    run.until("tfmw launcher idle:")
    status = fake_api.status("train-status")
    assert (status["phase"], status["revision"]) == ("Succeeded", "rev-a")
    assert status["startedAt"] != "2026-11-30T10:00:00Z"  # a new attempt, a new start
    assert run.stop() == 0


# -- the deadline ------------------------------------------------------------------------------
def test_deadline_counts_from_the_recorded_start_across_pod_restarts(fake_api, tmp_path):
    two_hours_ago = rfc3339(time.time() - 7200)
    fake_api.configmaps["train-status"]["data"] = to_data(
        RunState(
            "r1", phase=Phase.RUNNING, started_at=two_hours_ago, revision="rev-a", restarts=1, last_checkpoint_step=40
        )
    )
    run = Run(
        pod_env(fake_api, tmp_path, TFMW_ACTIVE_DEADLINE_SECONDS="3600", TFMW_ON_FAILURE="scaleToZero"),
        command(tmp_path, SUCCEEDS),
    )
    run.until("tfmw launcher idle:")
    assert attempts(tmp_path) == 0 and not any(line.startswith("tfmw launcher starting") for line in run.logs)
    status = fake_api.status("train-status")
    assert (status["phase"], status["reason"], status["startedAt"]) == ("Failed", "DeadlineExceeded", two_hours_ago)
    assert "training.activeDeadlineSeconds=3600 passed" in status["message"]
    assert [e["reason"] for e in fake_api.events] == ["Failed"]
    assert "reason=DeadlineExceeded exit_code=6" in run.line("tfmw failed run=r1")
    assert run.stop() == 0


def test_a_pod_restart_within_the_deadline_resumes_and_says_so(fake_api, tmp_path):
    a_minute_ago = rfc3339(time.time() - 60)
    fake_api.configmaps["train-status"]["data"] = to_data(
        RunState("r1", phase=Phase.RUNNING, started_at=a_minute_ago, revision="rev-a", last_checkpoint_step=20)
    )
    run = Run(pod_env(fake_api, tmp_path, TFMW_ACTIVE_DEADLINE_SECONDS="3600"), command(tmp_path, SUCCEEDS))
    run.until("tfmw launcher idle:")
    assert [e["reason"] for e in fake_api.events] == ["Restarted", "Succeeded"]
    assert fake_api.events[0]["message"] == "worker 0's pod restarted, resuming from step 20"
    status = fake_api.status("train-status")
    assert (status["phase"], status["startedAt"], status["restarts"]) == ("Succeeded", a_minute_ago, "1")
    assert run.stop() == 0


def test_the_deadline_counts_the_recorded_elapsed_time_not_the_recorded_start(fake_api, tmp_path):
    # startedAt says a minute ago, but the chief's launchers had counted 7200 s of this attempt.
    recorded = RunState("r1", phase=Phase.RUNNING, started_at=rfc3339(time.time() - 60), revision="rev-a")
    fake_api.configmaps["train-status"]["data"] = to_data(replace(recorded, elapsed_seconds="7200.0"))
    run = Run(pod_env(fake_api, tmp_path, TFMW_ACTIVE_DEADLINE_SECONDS="3600"), command(tmp_path, SUCCEEDS))
    run.until("tfmw launcher idle:")
    assert attempts(tmp_path) == 0
    status = fake_api.status("train-status")
    assert (status["phase"], status["reason"]) == ("Failed", "DeadlineExceeded")
    assert "(7200s of this attempt elapsed" in status["message"]
    assert run.stop() == 0


def test_elapsed_time_is_carried_across_a_launcher_restart_whatever_the_clocks_say(fake_api, tmp_path):
    # startedAt reads two hours ago on this node's clock (another node's clock was ahead, or
    # stepped): the recorded elapsed time, 60 s, is what counts, so the run resumes and finishes.
    recorded = RunState("r1", phase=Phase.RUNNING, started_at=rfc3339(time.time() - 7200), revision="rev-a")
    fake_api.configmaps["train-status"]["data"] = to_data(replace(recorded, elapsed_seconds="60.0"))
    run = Run(pod_env(fake_api, tmp_path, TFMW_ACTIVE_DEADLINE_SECONDS="3600"), command(tmp_path, SUCCEEDS))
    run.until("tfmw launcher idle:")
    assert any(line.startswith("tfmw launcher starting training") for line in run.logs)
    status = fake_api.status("train-status")
    assert status["phase"] == "Succeeded"
    assert 60.0 <= float(status["elapsedSeconds"]) < 60.0 + 60  # carried, plus this launcher's own time
    assert run.stop() == 0


def test_a_wall_clock_step_during_training_does_not_end_the_run(tmp_path, monkeypatch):
    env = {
        "TF_CONFIG": '{"cluster":{"worker":["localhost:2222"]},"task":{"type":"worker","index":0}}',
        "TFMW_RUN_ID": "r1",
        "TFMW_ACTIVE_DEADLINE_SECONDS": "3600",
        "PATH": os.environ["PATH"],
    }
    # The clock the launcher reads its start from is a day behind the one time goes on with: NTP
    # stepped it forward a day after the start (the supervisor's wall clock was bound before).
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() - 86400)
    sleeps = command(tmp_path, 'import time\nprint("ready", flush=True)\ntime.sleep(1)\n')
    logs = []
    assert Launcher(env, sleeps, log=logs.append).run() == 0, logs
    assert not any("deadline" in line for line in logs)


def test_deadline_stops_training_and_fails_the_run(fake_api, tmp_path):
    body = """
        import pathlib, signal, sys, time
        def stop(*_):
            pathlib.Path(sys.argv[0]).with_name("got-term").write_text("yes")
            sys.exit(143)
        signal.signal(signal.SIGTERM, stop)
        print("tfmw start run=r1 worker=0/1 replicas=1 resume_step=0 steps=40", flush=True)
        time.sleep(120)
    """
    # 3 s: the deadline counts from the launcher's start, and the child must have set its SIGTERM
    # handler by then (with 1 s a loaded machine let the SIGTERM arrive before it)
    run = Run(pod_env(fake_api, tmp_path, TFMW_ACTIVE_DEADLINE_SECONDS="3"), command(tmp_path, body))
    run.until("tfmw launcher idle:", timeout=90)
    assert (tmp_path / "got-term").read_text() == "yes"
    status = fake_api.status("train-status")
    assert (status["phase"], status["reason"]) == ("Failed", "DeadlineExceeded")
    assert run.line("tfmw launcher deadline: training.activeDeadlineSeconds=3 passed")
    assert run.stop() == 0


# -- status is never worth lost training ----------------------------------------------------------
def test_api_refusing_everything_is_logged_once_per_kind_and_training_goes_on(fake_api, tmp_path):
    for method in ("GET", "PATCH", "POST"):
        fake_api.fail(method, ".", status=403, times=-1)
    run = Run(pod_env(fake_api, tmp_path, TFMW_ON_SUCCESS="scaleToZero"), command(tmp_path, LOSES_A_PEER_ONCE))
    run.until("tfmw launcher idle:")
    assert run.line("tfmw completed run=r1")  # trained to the end regardless
    cannot = [line for line in run.logs if line.startswith("tfmw launcher status: cannot")]
    assert [line.split(" (")[0] for line in cannot] == [
        "tfmw launcher status: cannot read the status from configmap/train-status",
        "tfmw launcher status: cannot record the status in configmap/train-status",
        "tfmw launcher status: cannot record Event Started on statefulset/train",
        "tfmw launcher status: cannot scale statefulset/train to 0",
    ]
    assert all("(HTTP 403: " in line for line in cannot)
    # training went on past every refusal but the last: the scale to 0 comes once it is over
    assert all(line.endswith("; training goes on") for line in cannot[:-1])
    assert cannot[-1].endswith("; the pods keep their resources until the StatefulSet is scaled to 0 or uninstalled"), (
        cannot[-1]
    )
    assert fake_api.configmaps["train-status"]["data"] == {} and fake_api.replicas["train"] == 2
    assert run.stop() == 0


def test_an_api_server_that_hangs_does_not_hold_training(fake_api, tmp_path):
    hold = threading.Event()
    for method in ("GET", "PATCH", "POST"):
        fake_api.fail(method, ".", hold=hold, times=-1)
    run = Run(pod_env(fake_api, tmp_path, TFMW_ON_SUCCESS="scaleToZero"), command(tmp_path, SUCCEEDS), api_timeout=0.3)
    run.until("tfmw launcher idle:")
    assert run.line("tfmw completed run=r1")
    assert any("(timeout: no answer from 127.0.0.1" in line for line in run.logs)
    hold.set()
    assert run.stop() == 0


def test_release_is_retried_while_idle_until_the_api_answers(fake_api, tmp_path):
    fake_api.fail("PATCH", "/scale", status=503, times=2)
    run = Run(pod_env(fake_api, tmp_path, TFMW_ON_SUCCESS="scaleToZero"), command(tmp_path, SUCCEEDS))
    run.until("tfmw launcher scaled to zero:", timeout=60)
    assert fake_api.replicas["train"] == 0
    assert sum("cannot scale" in line for line in run.logs) == 1
    assert run.stop() == 0


def test_scale_to_zero_without_api_access_says_so_and_idles(tmp_path):
    env = {
        "TFMW_POD_NAME": "train-0",
        "TFMW_NAMESPACE": "ml",
        "TFMW_STATEFULSET": "train",
        "TFMW_SERVICE": "train-headless",
        "TFMW_REPLICAS": "1",
        "TFMW_LOOPBACK_PORTS": "1",
        "TFMW_RUN_ID": "r1",
        "TFMW_SHARED_DIR": str(tmp_path / "shared"),
        "TFMW_ON_FAILURE": "scaleToZero",
        "PATH": os.environ["PATH"],
    }
    run = Run(env, command(tmp_path, fails_with(4, "tfmw error retryable=false worker=0 X: y")))
    run.until("tfmw launcher idle:")
    assert any(
        line.startswith("tfmw launcher status: cannot scale statefulset/train to 0 (no API access") for line in run.logs
    )
    assert "no API access to scale to 0 (completion.onFailure: scaleToZero)" in run.line("tfmw launcher idle:")
    assert run.stop() == 0


def test_a_local_run_with_no_api_server_by_design_ends_in_one_accurate_line(tmp_path):
    """`make local` (TFMW_NO_API_SERVER=1, no TFMW_API_DIR): a success with onSuccess=scaleToZero
    says neither "cannot scale" nor "training goes on" after training, nor "uninstall the release"."""
    env = {
        "TFMW_POD_NAME": "local-0",
        "TFMW_NAMESPACE": "default",
        "TFMW_STATEFULSET": "local",
        "TFMW_SERVICE": "local",
        "TFMW_REPLICAS": "1",
        "TFMW_LOOPBACK_PORTS": "1",
        "TFMW_RUN_ID": "r1",
        "TFMW_SHARED_DIR": str(tmp_path / "shared"),
        "TFMW_ON_SUCCESS": "scaleToZero",
        "TFMW_ON_FAILURE": "scaleToZero",
        "TFMW_NO_API_SERVER": "1",
        "PATH": os.environ["PATH"],
    }
    run = Run(env, command(tmp_path, SUCCEEDS))
    run.until("tfmw launcher idle:")
    assert run.line("tfmw completed run=r1")
    assert not [line for line in run.logs if "cannot" in line or "API access" in line], run.logs
    assert run.line("tfmw launcher idle:") == (
        "tfmw launcher idle: this run is complete; no API server by design (a local run): nothing is recorded or "
        "scaled to 0"
    )
    assert run.stop() == 0


def test_rights_the_role_leaves_out_are_said_once_and_never_asked_for(fake_api, tmp_path):
    """TFMW_RBAC_OFF (rbac.events/pods.get/pods.delete=false): one line at start naming what is
    off, then no Event, no pod read (no fence) and no pod delete; the status and the scale as ever."""
    env = pod_env(
        fake_api,
        tmp_path,
        TFMW_ON_SUCCESS="scaleToZero",
        TFMW_POD_UID="5f0c3a52-0000-4000-8000-000000000001",
        TFMW_RBAC_OFF="events,pods.get,pods.delete",
    )
    run = Run(env, command(tmp_path, SUCCEEDS))
    run.until("tfmw launcher idle:")
    said = [line for line in run.logs if "the workers' Role leaves out" in line]
    assert said == [
        "tfmw launcher the workers' Role leaves out events (no Events on the StatefulSet: the status ConfigMap "
        "records every transition); pods.get (status writes not fenced; no word on why peers are not running; "
        "peers lost with their node not replaced; a queue's eviction not told from a suspend); pods.delete (a "
        "peer lost with its node waits for an admin's force delete) (rbac.*=false)"
    ]
    assert not [r for r in fake_api.requests if "/pods" in r.path or "/events" in r.path]
    assert fake_api.status("train-status")["phase"] == "Succeeded" and fake_api.replicas["train"] == 0
    assert not [line for line in run.logs if "cannot" in line], run.logs
    assert run.stop() == 0


# -- where a platform owns the lifecycle: exit codes, no API, no idling ---------------------------
def test_platform_tf_config_exits_with_the_reasons_code_and_never_calls_the_api(fake_api, tmp_path):
    env = dict(
        pod_env(fake_api, tmp_path, TFMW_ON_FAILURE="scaleToZero"),
        TF_CONFIG='{"cluster":{"worker":["localhost:2222"]},"task":{"type":"worker","index":0}}',
    )
    launcher = Launcher(
        env, command(tmp_path, fails_with(4, "tfmw error retryable=false worker=0 X: y")), log=lambda line: None
    )
    assert launcher.run() == 4
    env.pop("TF_CONFIG")
    env.update(JOB_COMPLETION_INDEX="0", HOSTNAME="job-0")  # an Indexed Job pod
    assert Launcher(env, command(tmp_path, SUCCEEDS), log=lambda line: None).run() == 0
    assert fake_api.requests == []


def test_platform_exit_codes_for_restart_limit_and_deadline(tmp_path):
    env = {
        "TF_CONFIG": '{"cluster":{"worker":["localhost:2222"]},"task":{"type":"worker","index":0}}',
        "TFMW_RUN_ID": "r1",
        "PATH": os.environ["PATH"],
    }
    logs = []
    assert (
        Launcher(dict(env, TFMW_MAX_RESTARTS="0"), command(tmp_path, fails_with(1, "boom")), log=logs.append).run() == 5
    )
    assert "reason=RestartLimit exit_code=5" in next(line for line in logs if line.startswith("tfmw failed"))
    logs.clear()
    raises = command(tmp_path, "raise ValueError('dataset too small')\n")
    assert Launcher(dict(env), raises, log=logs.append).run() == 4  # the same error twice: RepeatedError
    assert "reason=RepeatedError exit_code=4" in next(line for line in logs if line.startswith("tfmw failed"))
    sleeps = command(tmp_path, 'import time\nprint("ready", flush=True)\ntime.sleep(120)\n')
    logs.clear()
    assert Launcher(dict(env, TFMW_ACTIVE_DEADLINE_SECONDS="1"), sleeps, log=logs.append).run() == 6
    assert "reason=DeadlineExceeded exit_code=6" in next(line for line in logs if line.startswith("tfmw failed"))


def test_cli_in_the_statefulset_idles_after_failure_and_exits_0_on_sigterm(fake_api, tmp_path):
    env = pod_env(fake_api, tmp_path, TFMW_ON_FAILURE="scaleToZero")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "entrypoint",
            "run",
            "--",
            *command(tmp_path, fails_with(2, "training config: steps: -1 is bad")),
        ],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in proc.stdout:
        if line.startswith("tfmw launcher idle:"):
            break
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert err.strip() == "tfmw: BadConfig: training config: steps: -1 is bad"
    assert fake_api.replicas["train"] == 0 and fake_api.status("train-status")["reason"] == "BadConfig"


def test_redeploy_of_a_recorded_success_says_so_again_and_leaves_the_status(fake_api, tmp_path):
    done = to_data(
        advance(
            replace(fresh("r1", "rev-a", "2026-11-30T10:00:00Z"), phase=Phase.RUNNING),
            Phase.SUCCEEDED,
            now="2026-11-30T10:30:00Z",
            reason=Reason.COMPLETED,
        )
    )
    fake_api.configmaps["train-status"]["data"] = dict(done)
    run = Run(
        pod_env(fake_api, tmp_path, TFMW_ON_SUCCESS="scaleToZero", TFMW_POD_REVISION="rev-b"),
        command(tmp_path, SUCCEEDS),
    )
    run.until("tfmw launcher idle:")
    assert not any(line.startswith("tfmw launcher starting") for line in run.logs)  # trained nothing
    assert fake_api.status("train-status") == done
    assert [e["reason"] for e in fake_api.events] == ["Succeeded"] and fake_api.replicas["train"] == 0
    assert run.stop() == 0


def test_a_refused_environment_is_recorded_as_failed_naming_the_variable(fake_api, tmp_path):
    env = pod_env(fake_api, tmp_path, pod="train-1", replicas=2, TFMW_PORT="70000", TFMW_ON_FAILURE="scaleToZero")
    run = Run(env, command(tmp_path, SUCCEEDS))
    run.until("tfmw launcher idle:")
    assert not any(line.startswith("tfmw launcher starting") for line in run.logs)
    status = fake_api.status("train-status")
    assert (status["phase"], status["reason"], status["revision"]) == ("Failed", "BadConfig", "rev-a")
    assert status["message"] == "TFMW_PORT='70000' must be a TCP port 1-65535 (workers.port)"
    assert [(e["reason"], e["message"]) for e in fake_api.events] == [("Failed", status["message"])]
    assert fake_api.replicas["train"] == 0
    assert run.line("tfmw lifecycle phase=Failed from=Pending run=r1 worker=1 reason=BadConfig")
    assert run.stop() == 0


def test_a_reserved_key_of_an_envfrom_secret_is_the_first_line_and_fails_the_run(fake_api, tmp_path):
    """The chart's probe as the kubelet expands it for a Secret holding TF_CONFIG and TFMW_PORT:
    the Secret's TF_CONFIG is in the environment too (the chart never sets one), yet the pod is
    not taken for a platform's; the refusal names the keys, never the values."""
    secret = {"TF_CONFIG": '{"cluster": {"worker": ["evil:1"]}, "task": {"type": "worker", "index": 0}}'}
    secret["TFMW_PORT"] = "s3cr3t"
    probe = kubelet_expand(envfrom.probe_value(["TFMW_PORT", "TF_CONFIG", "TFMW_RUN_ID"]), secret)
    env = pod_env(
        fake_api, tmp_path, TFMW_ENVFROM_PROBE=probe, TF_CONFIG=secret["TF_CONFIG"], TFMW_ON_FAILURE="scaleToZero"
    )
    run = Run(env, command(tmp_path, SUCCEEDS))
    run.until("tfmw launcher idle:")
    assert run.logs[0] == f"tfmw launcher refused: {envfrom.refusal(['TFMW_PORT', 'TF_CONFIG'])}"
    assert not any("s3cr3t" in line or "evil" in line for line in run.logs)
    status = fake_api.status("train-status")
    assert (status["phase"], status["reason"]) == ("Failed", "BadConfig")
    assert "keys TFMW_PORT, TF_CONFIG, reserved by the chart" in status["message"]
    assert not any(line.startswith("tfmw launcher starting") for line in run.logs)
    assert fake_api.replicas["train"] == 0
    assert run.stop() == 0


SIGNAL_WHILE_WAITING = r"""
import os, signal, sys
from entrypoint.launcher import Launcher
launcher = Launcher({}, ["true"], log=lambda line: None)
launcher._install_signals()
with launcher.stopping._cond:          # where the main thread is on entering or leaving wait()
    os.kill(os.getpid(), signal.SIGTERM)   # the handler runs here, in this thread
print("handler returned", flush=True)
sys.exit(0 if launcher.stopping.wait(10) else 1)
"""


def test_sigterm_while_the_main_thread_holds_the_stop_events_lock_does_not_deadlock():
    """The handler interrupts the main thread wherever it is, also inside Event.wait() with the
    Event's lock held; setting that Event from the handler would hang the launcher for good
    (seen as a SIGTERM in idle that never ended the pod)."""
    proc = subprocess.run(
        [sys.executable, "-c", SIGNAL_WHILE_WAITING],
        cwd=REPO,
        env={**os.environ},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and "handler returned" in proc.stdout, proc.stderr

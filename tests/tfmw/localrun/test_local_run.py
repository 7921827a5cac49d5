"""`make local`'s kubelet and summary: how a run ends (carried as data, not re-read from text),
and whether it trained, from the run's recorded state whatever the training command is.

The kubelet tests run real processes (`sh`) under a network stub; the end-to-end tests here run
the rendered chart's launcher with a user command that is not the built-in trainer (no
TensorFlow: seconds, but several processes, so marked slow; tests/e2e has the real training).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from repo import REPO

from entrypoint.errors import EXIT_BAD_CONFIG, EXIT_OK, EXIT_PEERS_NOT_FOUND, EXIT_RETRIES_EXHAUSTED
from tfmw.localrun import cli as local_cli
from tfmw.localrun import run as local_run
from tfmw.localrun.kubelet import LocalCluster, LocalRunResult, PodFailure
from tfmw.localrun.podspec import LocalPod, LocalRunError
from tfmw.localrun.run import run_dir_of, summary


class NoNetwork:
    """The network layer's interface, doing nothing: these pods talk to no one."""

    def setup(self, pods):
        pass

    def wrap(self, pod, argv):
        return argv

    def set_link(self, ordinal, up):
        pass

    def teardown(self):
        pass


def pods_running(tmp_path: Path, *scripts: str) -> list[LocalPod]:
    return [
        LocalPod(
            name=f"w-{i}",
            ordinal=i,
            argv=["sh", "-c", script],
            env={},
            pod_dir=tmp_path / f"w-{i}",
            hostname=f"w-{i}",
            fqdn=f"w-{i}.local",
        )
        for i, script in enumerate(scripts)
    ]


def wait_for(tmp_path: Path, *scripts: str, timeout: float = 20) -> tuple[LocalRunResult, LocalCluster]:
    cluster = LocalCluster(
        pods_running(tmp_path, *scripts), NoNetwork(), {"PATH": "/usr/bin:/bin"}, grace_seconds=2, out=lambda line: None
    )
    try:
        cluster.start()
        return cluster.wait(timeout), cluster
    finally:
        cluster.shutdown()


IDLE = "; exec sleep 60"  # what the launcher does after the run's end: stay up


def test_every_pod_completed_is_success(tmp_path):
    result, _ = wait_for(tmp_path, "echo 'tfmw completed run=r'" + IDLE, "echo 'tfmw completed run=r'" + IDLE)
    assert result == LocalRunResult(True, "every worker completed", EXIT_OK)


def test_a_failed_line_ends_the_run_with_its_exit_code_and_reason(tmp_path):
    failed = "echo 'tfmw failed run=r reason=RestartLimit exit_code=5 message=\"3 restarts without progress\"'"
    result, cluster = wait_for(tmp_path, "echo 'tfmw completed run=r'" + IDLE, failed + IDLE)
    assert result.exit_code == EXIT_RETRIES_EXHAUSTED
    assert result.reason == "w-1: RestartLimit (training retries exhausted): 3 restarts without progress"
    assert cluster.states[1].failure == PodFailure("w-1", 5, "RestartLimit", "3 restarts without progress")


def test_a_fatal_process_exit_ends_the_run_without_a_restart(tmp_path):
    result, cluster = wait_for(tmp_path, f"exit {EXIT_PEERS_NOT_FOUND}", "echo waiting" + IDLE)
    assert (result.ok, result.exit_code, result.reason) == (
        False,
        EXIT_PEERS_NOT_FOUND,
        "w-0 exited 3 (peers not found)",
    )
    assert cluster.states[0].starts == 1


def test_a_container_that_cannot_start_fails_the_run_instead_of_hanging_it(tmp_path):
    """A program that is not there: the pod fails with why, and the run ends within the wait."""
    pods = pods_running(tmp_path, "echo 'tfmw completed run=r'" + IDLE)
    pods[0].argv = [str(tmp_path / "no-such-program")]
    cluster = LocalCluster(pods, NoNetwork(), {"PATH": "/usr/bin:/bin"}, grace_seconds=2, out=lambda line: None)
    try:
        cluster.start()
        result = cluster.wait(20)
    finally:
        cluster.shutdown()
    assert not result.ok and result.reason.startswith("w-0: ContainerCannotRun (failed): FileNotFoundError"), result
    assert cluster.states[0].lines[-1].startswith("(local kubelet) cannot start the container: FileNotFoundError")


def test_a_retryable_exit_is_restarted(tmp_path):
    marker = tmp_path / "started-once"
    again = f"if [ -e {marker} ]; then echo 'tfmw completed run=r'{IDLE}; else touch {marker}; exit 1; fi"
    result, cluster = wait_for(tmp_path, again)
    assert result.ok and cluster.states[0].starts == 2, cluster.states[0].lines


# ---------------------------------------------------------------- the summary (pure)


def Pods(*lines_per_pod: list[str], evaluator: list[str] | None = None) -> SimpleNamespace:
    """What summary() reads of a LocalCluster: each pod's name, lines and starts (and the
    evaluator Job's pod, restartPolicy Never, after the workers)."""
    states = {
        i: SimpleNamespace(
            pod=SimpleNamespace(name=f"w-{i}", ordinal=i, restart_policy="Always"), lines=lines, starts=1
        )
        for i, lines in enumerate(lines_per_pod)
    }
    if evaluator is not None:
        n = len(lines_per_pod)
        states[n] = SimpleNamespace(
            pod=SimpleNamespace(name="w-evaluator-1a2b3c4d", ordinal=n, restart_policy="Never"),
            lines=evaluator,
            starts=1,
        )
    return SimpleNamespace(states=states)


OK = LocalRunResult(True, "every worker completed", EXIT_OK)
USER_COMMAND = [
    "tfmw launcher starting training (attempt 1): python train.py",
    "epoch 2 loss 0.3",
    "tfmw completed run=r",
]


def test_a_user_command_that_trained_is_not_called_already_completed():
    text = "\n".join(summary(Pods(USER_COMMAND, USER_COMMAND), OK, 3.0, Path("/runs/r"), completed_before=False))
    assert "already completed" not in text
    assert "trained: the training command ran to the end on every worker" in text


def test_a_run_completed_before_the_start_says_nothing_was_trained():
    idle = ["tfmw launcher run=r revision=x: run already completed (COMPLETED marker)", "tfmw completed run=r"]
    text = "\n".join(summary(Pods(idle, idle), OK, 0.5, Path("/runs/r"), completed_before=True))
    assert "this run had already completed: nothing was trained again" in text
    assert "trained:" not in text


def test_the_built_in_trainers_report_adds_steps_and_compares_every_workers_weights():
    def trainer(digest):
        return [
            "tfmw progress step=30/30 epoch=0 loss=0.5 examples_per_sec=10",
            f"tfmw done steps=30 final_loss=0.4 examples_per_sec=99 model=/runs/r/model weights_digest={digest}",
            "tfmw completed run=r steps=30",
        ]

    same = summary(Pods(trainer("abc"), trainer("abc")), OK, 9.0, Path("/runs/r"), completed_before=False)
    assert "  steps=30 final_loss=0.4 examples_per_sec(chief)=99" in same
    assert "  weights identical on every worker: yes (abc)" in same
    assert "already completed" not in "\n".join(same)
    differ = summary(Pods(trainer("abc"), trainer("def")), OK, 9.0, Path("/runs/r"), completed_before=False)
    assert "  weights identical on every worker: NO (abc, def)" in differ


def test_the_evaluators_last_evaluation_is_reported_beside_the_workers():
    trainer = [
        "tfmw done steps=30 final_loss=0.4 examples_per_sec=99 model=/runs/r/model weights_digest=abc",
        "tfmw completed run=r steps=30",
    ]
    evaluator = [
        "tfmw eval run=r evaluator started",
        "tfmw eval step=20 loss=0.9 accuracy=0.5 final=false",
        "tfmw eval step=30 loss=0.7 accuracy=0.6 final=true",
    ]
    text = summary(Pods(trainer, trainer, evaluator=evaluator), OK, 9.0, Path("/runs/r"), completed_before=False)
    assert text[0].endswith("(2 workers)")  # the evaluator is not a worker
    assert "  weights identical on every worker: yes (abc)" in text
    assert "  evaluator: step=30 loss=0.7 accuracy=0.6 (the final checkpoint; 2 evaluated)" in text
    nothing = summary(Pods(trainer, evaluator=["tfmw eval waiting"]), OK, 9.0, Path("/runs/r"), completed_before=False)
    assert "  evaluator: no checkpoint evaluated" in nothing


def test_a_failed_run_says_why_and_claims_neither():
    failed = LocalRunResult(False, "w-0: BadConfig (bad configuration): no such file", EXIT_BAD_CONFIG)
    text = "\n".join(summary(Pods(["x"], ["y"]), failed, 1.0, Path("/runs/r"), completed_before=False))
    assert text.startswith("tf-multiworker local run FAILED: w-0: BadConfig (bad configuration): no such file")
    assert "already completed" not in text and "trained" not in text


def test_the_run_directory_is_the_one_the_pods_launchers_use():
    pod = LocalPod("w-0", 0, [], {"TFMW_SHARED_DIR": "/runs/rel/shared", "TFMW_RUN_ID": "r7"}, Path("/p"), "w-0", "w-0")
    assert run_dir_of([pod]).completed == "/runs/rel/shared/r7/COMPLETED"
    pod.env["TFMW_SHARED_DIR"] = "gs://bucket/runs"
    assert run_dir_of([pod]) is None  # not on this machine: the summary does not guess


# ---------------------------------------------------------------- make local, with a user command


def make_local(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    argv = [
        sys.executable,
        "-m",
        "tfmw.localrun",
        "--runs-dir",
        str(tmp_path),
        "--release",
        "user",
        "--network",
        "loopback",
        "--timeout",
        "120",
        "--set",
        "training.command={python,-c,print(1)}",
        *extra,
    ]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300, env={"PATH": "/usr/bin:/bin"})


@pytest.mark.slow
def test_make_local_with_a_user_command_says_trained_then_already_completed(tmp_path):
    first = make_local(tmp_path, "--fresh")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    assert "starting training (attempt 1)" in first.stdout
    assert "  trained: the training command ran to the end" in first.stdout
    assert "already completed: nothing was trained again" not in first.stdout
    assert (tmp_path / "user" / "shared" / "user" / "COMPLETED").is_file()

    again = make_local(tmp_path)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-2000:]
    assert "starting training" not in again.stdout
    assert "this run had already completed: nothing was trained again" in again.stdout

    fresh = make_local(tmp_path, "--fresh")  # FRESH=1 forgets the completion and trains anew
    assert "  trained: the training command ran to the end" in fresh.stdout, fresh.stdout[-3000:]


def test_bad_values_are_refused_in_one_line_with_their_exit_code(tmp_path, capsys):
    assert local_cli.main(["--runs-dir", str(tmp_path), "--set", "workers.replicas=-1"]) == EXIT_BAD_CONFIG
    err = capsys.readouterr().err
    assert err.startswith("make local: ") and err.count("\n") == 1, err


def test_a_pod_that_cannot_run_here_is_refused_with_the_bad_config_code(tmp_path, capsys, monkeypatch):
    def refuse(*_args, **_kwargs):
        raise LocalRunError("env X reads a Kubernetes Secret; the local run cannot provide one")

    monkeypatch.setattr(local_run.render, "prepare", refuse)
    assert local_cli.main(["--runs-dir", str(tmp_path)]) == EXIT_BAD_CONFIG
    assert capsys.readouterr().err == "make local: env X reads a Kubernetes Secret; the local run cannot provide one\n"


def test_a_marker_that_cannot_be_read_is_not_known_here_never_a_traceback(tmp_path):
    from entrypoint.rundir import RunDir

    record = RunDir(str(tmp_path / "r1"))
    assert local_run.completed_before_start(None) is None
    assert local_run.completed_before_start(record) is False
    (tmp_path / "r1" / "COMPLETED").mkdir(parents=True)  # EISDIR: unreadable
    assert local_run.completed_before_start(record) is None

"""Issue 12, the launcher's half: bad input never breaks, weakens or loses.

Every row is an input a careless or hostile user (or platform) can give. Each must end in one
line naming the key, the documented exit code (2 BadConfig, 4 for CompletionNotRecorded), the
usual terminal handling, and never a traceback nor a finished run trained again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from entrypoint import rundir as rundir_module
from entrypoint import startchecks as startchecks_module
from entrypoint.cli import main
from entrypoint.launcher import Launcher
from entrypoint.rundir import MarkerUnreadable, marker_exists
from entrypoint.startchecks import command_problem, shared_dir_problem

POD = {
    "TFMW_POD_NAME": "train-0",
    "TFMW_NAMESPACE": "ml",
    "TFMW_STATEFULSET": "train",
    "TFMW_SERVICE": "train-headless",
    "TFMW_REPLICAS": "2",
}
PRESET = '{"cluster":{"worker":["localhost:2222"]},"task":{"type":"worker","index":0}}'


def tf_config(workers=("a:2222", "b:2222"), index=1, **extra) -> str:
    return json.dumps({"cluster": {"worker": list(workers)}, "task": {"type": "worker", "index": index}, **extra})


def refused(capsys, argv, env) -> str:
    """Run the CLI in-process; it must refuse with exit 2 and exactly one line on stderr."""
    code = main(argv, env)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert out == "" or argv[0] == "run"
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# -- 3, 5, 7: the pod environment ------------------------------------------------------------------
BAD_ENV = [
    # a trailing newline, any whitespace or control character in a name (case 3)
    *[
        ({key: value + tail}, f"{key}=")
        for key, value in [
            ("TFMW_NAMESPACE", "ml"),
            ("TFMW_POD_NAME", "train-0"),
            ("TFMW_RUN_ID", "r1"),
            ("TFMW_STATEFULSET", "train"),
            ("TFMW_SERVICE", "train-headless"),
            ("TFMW_CLUSTER_DOMAIN", "cluster.local"),
        ]
        for tail in ("\n", " ", "\t", "\r", "\x7f")
    ],
    ({"TFMW_NAMESPACE": " ml"}, "TFMW_NAMESPACE="),
    ({"TFMW_NAMESPACE": "m\nl"}, "TFMW_NAMESPACE="),
    ({"TFMW_SHARED_DIR": "/shared\n"}, "TFMW_SHARED_DIR="),
    ({"TFMW_SHARED_DIR": "/sha\x1bred"}, "TFMW_SHARED_DIR="),
    ({"TFMW_POD_REVISION": "abc\n"}, "TFMW_POD_REVISION="),
    ({"TFMW_STATUS_CONFIGMAP": "train-status\n"}, "TFMW_STATUS_CONFIGMAP="),
    ({"TFMW_API_DIR": "/var/run/api\n"}, "TFMW_API_DIR="),
    # loopback ports past 65535 (case 5)
    ({"TFMW_LOOPBACK_PORTS": "1", "TFMW_PORT": "65535"}, "needs ports up to 65536, over 65535"),
    (
        {"TFMW_LOOPBACK_PORTS": "1", "TFMW_PORT": "65000", "TFMW_REPLICAS": "600", "TFMW_POD_NAME": "train-0"},
        "set workers.port to at most 64936",
    ),
    # numbers, policies and the rest (case 7)
    ({"TFMW_REPLICAS": "two"}, "TFMW_REPLICAS="),
    ({"TFMW_REPLICAS": "2\n"}, "TFMW_REPLICAS="),
    ({"TFMW_REPLICAS": "1.5"}, "TFMW_REPLICAS="),
    ({"TFMW_REPLICAS": "-1"}, "TFMW_REPLICAS="),
    ({"TFMW_REPLICAS": "0"}, "TFMW_REPLICAS="),
    ({"TFMW_REPLICAS": "999999"}, "TFMW_REPLICAS="),
    ({"TFMW_PORT": "abc"}, "TFMW_PORT="),
    ({"TFMW_PORT": "0"}, "TFMW_PORT="),
    ({"TFMW_PORT": "65536"}, "TFMW_PORT="),
    ({"TFMW_PORT": "22 22"}, "TFMW_PORT="),
    ({"TFMW_PEER_TIMEOUT_SECONDS": "-5"}, "TFMW_PEER_TIMEOUT_SECONDS="),
    ({"TFMW_PEER_TIMEOUT_SECONDS": "1e3"}, "TFMW_PEER_TIMEOUT_SECONDS="),
    ({"TFMW_HANG_TIMEOUT_SECONDS": "-1"}, "TFMW_HANG_TIMEOUT_SECONDS="),
    ({"TFMW_HANG_TIMEOUT_SECONDS": "inf"}, "TFMW_HANG_TIMEOUT_SECONDS="),
    ({"TFMW_ACTIVE_DEADLINE_SECONDS": "-1"}, "TFMW_ACTIVE_DEADLINE_SECONDS="),
    ({"TFMW_ACTIVE_DEADLINE_SECONDS": "nan"}, "TFMW_ACTIVE_DEADLINE_SECONDS="),
    ({"TFMW_MAX_RESTARTS": "x"}, "TFMW_MAX_RESTARTS="),
    ({"TFMW_SAME_ERROR_LIMIT": "-1"}, "TFMW_SAME_ERROR_LIMIT='-1' must be a whole number (training.sameErrorLimit"),
    ({"TFMW_ON_SUCCESS": "garbage"}, "TFMW_ON_SUCCESS="),
    ({"TFMW_ON_SUCCESS": "idle\n"}, "TFMW_ON_SUCCESS="),
    ({"TFMW_ON_FAILURE": "Idle"}, "TFMW_ON_FAILURE="),
    ({"TFMW_LOOPBACK_PORTS": "maybe"}, "TFMW_LOOPBACK_PORTS="),
    ({"TFMW_API_DIR": "relative/dir"}, "TFMW_API_DIR="),
]


@pytest.mark.parametrize("override,needle", BAD_ENV, ids=[repr(o)[:60] for o, _ in BAD_ENV])
def test_bad_environment_is_one_line_exit_2_for_tf_config_and_a_platform_run(capsys, override, needle):
    line = refused(capsys, ["tf-config"], dict(POD, **override))
    assert line.startswith("tfmw: ") and needle in line
    # `run` where a platform owns the lifecycle (an Indexed Job pod): the same line, exit 2
    job = dict(POD, **override, JOB_COMPLETION_INDEX="0", HOSTNAME="train-0")
    assert refused(capsys, ["run", "--", "true"], job) == line


@pytest.mark.parametrize(
    "override",
    [
        {"TFMW_LOOPBACK_PORTS": "1", "TFMW_PORT": "65534"},  # the last worker gets 65535: fine
        {"TFMW_CLUSTER_DOMAIN": "corp.example"},
        {"TFMW_SHARED_DIR": "gs://bucket/prefix with space"},
    ],
)
def test_valid_edges_are_still_accepted(capsys, override):
    assert main(["tf-config"], dict(POD, **override)) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["task"] == {"type": "worker", "index": 0}
    if "TFMW_LOOPBACK_PORTS" in override:
        assert printed["cluster"]["worker"] == ["127.0.0.1:65534", "127.0.0.1:65535"]


@pytest.mark.parametrize("hostname", ["train-0\n", "train-0 ", "Train-0", "tr ain-0"])
def test_an_indexed_job_hostname_must_be_a_dns_label(capsys, hostname):
    env = {k: v for k, v in POD.items() if k != "TFMW_POD_NAME"}
    line = refused(capsys, ["tf-config"], dict(env, JOB_COMPLETION_INDEX="0", HOSTNAME=hostname))
    assert "hostname" in line


# -- 4: a preset TF_CONFIG ----------------------------------------------------------------------
BAD_TF_CONFIG = [
    (tf_config(index=1.0), "TF_CONFIG['task']['index']=1.0 must be a JSON integer"),
    (tf_config(index=0.0), "TF_CONFIG['task']['index']=0.0 must be a JSON integer"),
    (tf_config(index=True), "TF_CONFIG['task']['index']"),
    (tf_config(index="1"), "TF_CONFIG['task']['index']"),
    (tf_config(index=None), "TF_CONFIG['task']['index']"),
    (tf_config(index=-1), "TF_CONFIG['task']['index']"),
    (tf_config(index=2), "TF_CONFIG['task']['index']=2 is out of range"),
    (tf_config(index=10**30), "is out of range"),
    (tf_config(("a:0", "b:2222")), "port 0 is not a TCP port 1-65535"),
    (tf_config(("a:99999", "b:2222")), "port 99999 is not a TCP port 1-65535"),
    (tf_config(("a:65536", "b:2222")), "port 65536 is not a TCP port"),
    (tf_config(("a:123456", "b:2222")), "must be 'host:port'"),
    (tf_config(("a:2222", "a:2222")), "TF_CONFIG['cluster']['worker'][1]='a:2222' is also"),
    (
        json.dumps({"cluster": {"chief": ["a:1"], "worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}),
        "is also TF_CONFIG['cluster']['chief'][0]",
    ),
    (tf_config((":2222", "b:2222")), "TF_CONFIG['cluster']['worker'][0]=':2222' must be 'host:port'"),
    (tf_config(("a:2222\n", "b:2222")), "must be 'host:port'"),
    (tf_config(("a b:2222", "b:2222")), "must be 'host:port'"),
    (tf_config(("a\x00:2222", "b:2222")), "must be 'host:port'"),
    (tf_config(("a", "b:2222")), "must be 'host:port'"),
    (tf_config(("a:-1", "b:2222")), "must be 'host:port'"),
    (
        '{"cluster":{"worker":["a:1"]},"task":{"type":"worker","index":0},"task":{"type":"worker","index":0}}',
        "TF_CONFIG has the key 'task' twice",
    ),
    ("[" * 5000 + "]" * 5000, "TF_CONFIG"),
    ("[" * 60000 + "]" * 60000, "nested too deeply"),
    ('{"cluster":', "TF_CONFIG is not valid JSON"),
    ("[1]", "TF_CONFIG"),
    (
        json.dumps({"cluster": {"ps": ["a:1"]}, "task": {"type": "ps", "index": 0}}),
        "TF_CONFIG has 'ps' tasks: parameter-server training is not MultiWorkerMirroredStrategy",
    ),
    (
        json.dumps({"cluster": {"worker": ["a:1"], "ps": ["p:1"]}, "task": {"type": "worker", "index": 0}}),
        "TF_CONFIG has 'ps' tasks",
    ),
    (
        json.dumps({"cluster": {"chief": ["c:1", "d:1"], "worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}),
        "TF_CONFIG['cluster']['chief'] has 2 tasks; TensorFlow allows one chief",
    ),
    (
        json.dumps({"cluster": {"master": ["m:1"], "chief": ["c:1"]}, "task": {"type": "chief", "index": 0}}),
        "both 'master' and 'chief'",
    ),
    (
        json.dumps(
            {"cluster": {"worker": ["a:1"], "evaluator": ["e:1", "f:1"]}, "task": {"type": "evaluator", "index": 0}}
        ),
        "TensorFlow allows one evaluator",
    ),
    (
        json.dumps({"cluster": {"worker": ["a:1"], "evaluator": ["e:1"]}, "task": {"type": "evaluator", "index": 1}}),
        "TF_CONFIG['task']['index']=1 is out of range: cluster has 1 'evaluator' task(s)",
    ),
    (json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "chief", "index": 0}}), "has no list"),
]


@pytest.mark.parametrize("raw,needle", BAD_TF_CONFIG, ids=[n[:40] for _, n in BAD_TF_CONFIG])
def test_bad_preset_tf_config_is_one_line_exit_2(capsys, raw, needle):
    line = refused(capsys, ["tf-config"], {"TF_CONFIG": raw})
    assert needle in line
    assert refused(capsys, ["run", "--", "true"], {"TF_CONFIG": raw, "PATH": os.environ["PATH"]}) == line


def test_a_valid_preset_tf_config_at_the_edges_is_kept(capsys):
    raw = tf_config(("a:1", "a:65535", "127.0.0.1:2222"), index=2, rpc_layer="grpc")
    assert main(["tf-config"], {"TF_CONFIG": raw}) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(raw)


# -- 6: tf-config applies every check run does, the size limit too --------------------------------
def test_tf_config_refuses_a_huge_tf_config_with_the_same_line_as_run(capsys):
    env = dict(POD, TFMW_REPLICAS="60000", TFMW_NAMESPACE="n" * 60)  # ~6 MB of TF_CONFIG
    line = refused(capsys, ["tf-config"], env)
    assert "over Linux's" in line
    job = {k: v for k, v in env.items() if k != "TFMW_POD_NAME"}
    assert refused(capsys, ["run", "--", "true"], dict(job, JOB_COMPLETION_INDEX="0", HOSTNAME="train-0")) == line
    # and in the chart's StatefulSet `run` records exactly that line as the run's failure
    logs = []
    launcher = Launcher(env, ["true"], log=logs.append, idle_retry=(0.05, 0.05))
    threading.Timer(0.5, launcher.request_stop).start()
    assert launcher.run() == 0
    assert capsys.readouterr().err.strip() == line.replace("tfmw: ", "tfmw: BadConfig: ", 1)


# -- 1: a training command that cannot be started ----------------------------------------------------
def _commands(tmp_path: Path) -> dict[str, tuple[list[str], dict, str]]:
    plain = tmp_path / "plain.sh"
    plain.write_text("#!/bin/sh\necho hi\n")
    plain.chmod(0o644)
    no_shebang = tmp_path / "no-shebang"
    no_shebang.write_bytes(b"\x7fELF garbage, not a program\n")
    no_shebang.chmod(0o755)
    bad_interp = tmp_path / "bad-interp"
    bad_interp.write_text("#!/nope/interpreter\n")
    bad_interp.chmod(0o755)
    path = os.environ["PATH"]
    return {
        "missing": (["/nope/train"], {"PATH": path}, "'/nope/train' does not exist; fix training.command"),
        "not-executable": ([str(plain)], {"PATH": path}, "is not executable"),
        "a-directory": ([str(tmp_path)], {"PATH": path}, "is a directory"),
        "exec-format": ([str(no_shebang)], {"PATH": path}, "Exec format error"),
        "missing-interpreter": ([str(bad_interp)], {"PATH": path}, "cannot start"),
        "not-on-path": (["no-such-trainer", "x"], {"PATH": path}, "'no-such-trainer' is not on PATH="),
        "python-not-on-path": (
            ["python", "-m", "entrypoint.training"],
            {"PATH": str(tmp_path / "empty")},
            "'python' is not on PATH=",
        ),
        "empty": ([""], {"PATH": path}, "training.command is empty"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "missing",
        "not-executable",
        "a-directory",
        "exec-format",
        "missing-interpreter",
        "not-on-path",
        "python-not-on-path",
        "empty",
    ],
)
def test_a_command_that_cannot_start_is_bad_config_exit_2_never_retried(tmp_path, capsys, case):
    command, extra, needle = _commands(tmp_path)[case]
    logs = []
    env = dict(extra, TF_CONFIG=PRESET, TFMW_RUN_ID="r1", TFMW_MAX_RESTARTS="5")
    assert Launcher(env, command, log=logs.append).run() == 2
    failed = [line for line in logs if line.startswith("tfmw failed ")]
    assert len(failed) == 1 and failed[0].startswith("tfmw failed run=r1 reason=BadConfig exit_code=2 message=")
    assert needle in failed[0] and "training.command" in failed[0]
    assert sum(line.startswith("tfmw launcher starting training") for line in logs) <= 1  # not retried
    assert not any(line.startswith("tfmw launcher restarting") for line in logs)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tfmw: BadConfig: training.command")


def test_command_problem_follows_the_childs_path(tmp_path):
    (tmp_path / "bin").mkdir()
    tool = tmp_path / "bin" / "trainer"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    assert command_problem(["trainer"], {"PATH": str(tmp_path / "bin")}) is None
    assert "is not on PATH" in command_problem(["trainer"], {"PATH": "/nonexistent"})
    assert command_problem([sys.executable, "-c", "pass"], {}) is None


@pytest.mark.parametrize("command", [["/nope/train"], ["no-such-trainer"]])
def test_cli_run_with_a_missing_command_prints_no_traceback(tmp_path, command):
    # the real `python -m entrypoint run` (a platform's pod: it exits with the code)
    env = {"TF_CONFIG": PRESET, "TFMW_RUN_ID": "r1", "PATH": os.environ["PATH"]}
    proc = subprocess.run(
        [sys.executable, "-m", "entrypoint", "run", "--", *command],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"tfmw: BadConfig: training.command: {command[0]!r}")
    assert f'tfmw failed run=r1 reason=BadConfig exit_code=2 message="training.command: {command[0]!r}' in proc.stdout


def test_cli_run_in_the_statefulset_records_a_missing_command_and_idles(fake_api, tmp_path):
    env = dict(
        POD,
        TFMW_REPLICAS="1",
        TFMW_LOOPBACK_PORTS="1",
        TFMW_RUN_ID="r1",
        TFMW_ON_FAILURE="scaleToZero",
        TFMW_STATUS_CONFIGMAP="train-status",
        TFMW_POD_REVISION="rev-a",
        TFMW_SHARED_DIR=str(tmp_path),
        PATH=os.environ["PATH"],
        **fake_api.env(),
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "entrypoint", "run", "--", "/nope/train"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("tfmw launcher idle:"):
            break
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "Traceback" not in "".join(lines) + out + err
    status = fake_api.status("train-status")
    assert (status["phase"], status["reason"]) == ("Failed", "BadConfig")
    assert "'/nope/train' does not exist" in status["message"]
    assert [e["reason"] for e in fake_api.events] == ["Failed"] and fake_api.replicas["train"] == 0
    assert any(line.startswith("tfmw failed run=r1 reason=BadConfig exit_code=2") for line in lines)


# -- 2: the chief cannot write COMPLETED -------------------------------------------------------------
def _succeeds(tmp_path: Path, breaks_storage: Path | None = None) -> list[str]:
    """A user command that trains (counts its attempts) and exits 0; `breaks_storage`: first it
    puts a regular file where the shared directory was (storage gone mid-run): nothing can be
    created under it, not even by root, so the test fails for real whoever runs it."""
    script = tmp_path / "train.py"
    script.write_text(
        "import pathlib, shutil, sys\n"
        "counter = pathlib.Path(sys.argv[0]).with_name('attempts')\n"
        "counter.write_text(str(int(counter.read_text()) + 1 if counter.exists() else 1))\n"
        + (
            f"shared = pathlib.Path({str(breaks_storage)!r})\n"
            "shutil.rmtree(shared, ignore_errors=True)\n"
            "shared.write_text('not a directory any more')\n"
            if breaks_storage
            else ""
        )
        + "print('tfmw done steps=1 final_loss=0.5 examples_per_sec=1.0 model=- weights_digest=x')\n"
    )
    return [sys.executable, str(script)]


def _attempts(tmp_path: Path) -> int:
    counter = tmp_path / "attempts"
    return int(counter.read_text()) if counter.exists() else 0


def test_completed_that_cannot_be_written_fails_the_run_and_is_never_trained_again(tmp_path, capsys):
    shared = tmp_path / "shared"
    shared.mkdir()
    env = {"TF_CONFIG": PRESET, "TFMW_RUN_ID": "r1", "TFMW_SHARED_DIR": str(shared), "PATH": os.environ["PATH"]}
    logs = []
    started = time.monotonic()
    assert (
        Launcher(env, _succeeds(tmp_path, breaks_storage=shared), log=logs.append, marker_retry_seconds=1.5).run() == 4
    )
    assert 1.5 <= time.monotonic() - started < 30  # retried for the bounded time, then gave up
    marker = shared / "r1" / "COMPLETED"
    failed = next(line for line in logs if line.startswith("tfmw failed "))
    assert failed.startswith("tfmw failed run=r1 reason=CompletionNotRecorded exit_code=4 message=")
    assert str(marker) in failed and "Not a directory" in failed
    assert not any(line.startswith("tfmw completed") for line in logs)
    assert sum("cannot write COMPLETED" in line for line in logs) == 1  # the retry is said once
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"tfmw: CompletionNotRecorded: training finished but COMPLETED could not be written to {marker}"
    )
    assert _attempts(tmp_path) == 1


def test_completed_write_is_retried_until_the_storage_is_back(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()

    def storage_comes_back():
        deadline = time.monotonic() + 60
        while not shared.is_file() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)
        shared.unlink()
        shared.mkdir()

    threading.Thread(target=storage_comes_back, daemon=True).start()
    env = {"TF_CONFIG": PRESET, "TFMW_RUN_ID": "r1", "TFMW_SHARED_DIR": str(shared), "PATH": os.environ["PATH"]}
    logs = []
    assert (
        Launcher(env, _succeeds(tmp_path, breaks_storage=shared), log=logs.append, marker_retry_seconds=30).run() == 0
    )
    assert json.loads((shared / "r1" / "COMPLETED").read_text())["by"] == "launcher"
    assert any("cannot write COMPLETED" in line for line in logs)
    assert any(line.startswith("tfmw completed run=r1") for line in logs)


def test_in_the_statefulset_completion_not_recorded_is_recorded_and_not_retrained(fake_api, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    env = dict(
        POD,
        TFMW_REPLICAS="1",
        TFMW_LOOPBACK_PORTS="1",
        TFMW_RUN_ID="r1",
        TFMW_ON_FAILURE="scaleToZero",
        TFMW_STATUS_CONFIGMAP="train-status",
        TFMW_POD_REVISION="rev-a",
        TFMW_SHARED_DIR=str(shared),
        PATH=os.environ["PATH"],
        **fake_api.env(),
    )
    for _ in range(2):  # the pod restarts: the same revision must not train the finished run again
        logs = []
        launcher = Launcher(
            env,
            _succeeds(tmp_path, breaks_storage=shared),
            log=logs.append,
            marker_retry_seconds=0.5,
            flush_seconds=10,
            idle_retry=(0.2, 1),
            api_timeout=2.0,
        )
        thread = threading.Thread(target=launcher.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 60
        while not any(line.startswith("tfmw launcher idle:") for line in logs):
            assert time.monotonic() < deadline, "\n".join(logs)
            time.sleep(0.05)
        launcher.request_stop()
        thread.join(30)
        status = fake_api.status("train-status")
        assert (status["phase"], status["reason"]) == ("Failed", "CompletionNotRecorded")
        assert fake_api.replicas["train"] == 0
    assert _attempts(tmp_path) == 1


def test_shared_storage_that_can_never_hold_the_marker_is_refused_before_training(tmp_path, monkeypatch):
    blocker = tmp_path / "shared"
    blocker.write_text("a regular file where the shared directory should be")
    env = {"TF_CONFIG": PRESET, "TFMW_RUN_ID": "r1", "TFMW_SHARED_DIR": str(blocker), "PATH": os.environ["PATH"]}
    logs = []
    assert Launcher(env, _succeeds(tmp_path), log=logs.append).run() == 2
    failed = next(line for line in logs if line.startswith("tfmw failed "))
    assert "reason=BadConfig" in failed and f"{blocker} is not a directory" in failed
    assert _attempts(tmp_path) == 0  # nothing trained that could never be recorded
    # a read-only mount (access(2) says EROFS even to root; simulated: tests cannot mount)
    assert shared_dir_problem(tmp_path / "ro" / "r1") is None
    monkeypatch.setattr(startchecks_module.os, "access", lambda path, mode: False)
    monkeypatch.setattr(startchecks_module.os, "statvfs", lambda path: type("V", (), {"f_flag": os.ST_RDONLY})())
    assert shared_dir_problem(tmp_path / "ro" / "r1") == (
        f"TFMW_SHARED_DIR: cannot record the run under {tmp_path / 'ro' / 'r1'}: {tmp_path} is on a read-only "
        "file system; fix storage.* (a writable, shared volume)"
    )
    # a worker other than the chief writes no marker: not its check
    worker = dict(
        env, TF_CONFIG=tf_config(("localhost:2222", "localhost:2223"), index=1), TFMW_PEER_TIMEOUT_SECONDS="0"
    )
    logs.clear()
    monkeypatch.undo()
    assert Launcher(worker, _succeeds(tmp_path), log=logs.append).run() == 0
    assert _attempts(tmp_path) == 1


def test_a_marker_whose_presence_cannot_be_told_never_means_train(tmp_path, monkeypatch, capsys):
    (tmp_path / "file").write_text("x")
    assert marker_exists(tmp_path / "file" / "r1" / "COMPLETED") is False  # ENOTDIR: simply not there
    assert marker_exists(tmp_path / "nothing" / "r1" / "COMPLETED") is False

    def denied(path, *args, **kwargs):
        if str(path).endswith("COMPLETED"):
            raise PermissionError(13, "Permission denied", str(path))
        return open(path, *args, **kwargs)

    monkeypatch.setattr(rundir_module, "open", denied, raising=False)
    with pytest.raises(MarkerUnreadable, match="Permission denied"):
        marker_exists(tmp_path / "r1" / "COMPLETED")
    env = {"TF_CONFIG": PRESET, "TFMW_RUN_ID": "r1", "TFMW_SHARED_DIR": str(tmp_path), "PATH": os.environ["PATH"]}
    logs = []
    # Retried (a storage hiccup clears) for marker_retry_seconds, said once, then failed closed.
    assert Launcher(env, _succeeds(tmp_path), log=logs.append, marker_retry_seconds=0.6).run() == 2
    assert _attempts(tmp_path) == 0
    assert len([line for line in logs if "retrying for up to 0.6s" in line and "Permission denied" in line]) == 1
    assert "reason=BadConfig" in next(line for line in logs if line.startswith("tfmw failed "))


# -- 7: the rest of the audit ----------------------------------------------------------------------
def test_odd_values_elsewhere_never_raise():
    from entrypoint.kubeapi import KubeAPI
    from entrypoint.restarts import signal_name

    assert KubeAPI.from_env({"KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": "²"}, "/api").port == 0
    assert signal_name(signal.SIGKILL) == "SIGKILL"
    assert signal_name(signal.SIGRTMIN + 3) == str(int(signal.SIGRTMIN) + 3)  # no name in Python

"""Real MultiWorkerMirroredStrategy training across two local processes (slow: real TensorFlow)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
from workers import REPO, base_env, parse_line, start_group, trainer_cmd

pytestmark = pytest.mark.slow

MIN_DIGITS_ACCURACY = 0.90  # held-out 20% of sklearn's digits; measured 0.958 with this config

DIGITS_CONFIG = """
model: {name: mlp, args: {hidden: 64}}
data: {source: files, path: data/train, format: npz, numClasses: 10}
batchSizePerReplica: 32
epochs: 14
learningRate: 0.01
checkpoint: {everySteps: 100, keep: 2}
logEverySteps: 50
gpuMemory: growth
"""


def wait_for_line(group, worker: int, predicate, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for row in parse_line(group.read(worker), "progress"):
            if predicate(row):
                return row
        if any(p.poll() is not None for p in group.procs):
            break
        time.sleep(0.05)
    group.kill()
    raise AssertionError("expected progress line never came:\n" + group.read_all())


def step_of(row: dict) -> int:
    return int(row["step"].split("/")[0])


@pytest.mark.beside  # nothing timed: it runs beside the cluster tests
def test_digits_two_workers_train_export_and_reach_accuracy(tmp_path):
    data = tmp_path / "data"
    prep = subprocess.run(
        [sys.executable, "-m", "entrypoint.training.prepare_digits", str(data), "--shards", "4"],
        cwd=REPO,
        env=base_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert prep.returncode == 0, prep.stderr
    config = tmp_path / "training.yaml"
    config.write_text(DIGITS_CONFIG)
    env = {"TFMW_SHARED_DIR": str(tmp_path), "TFMW_RUN_ID": "digits", "TFMW_TRAINING_CONFIG": str(config)}
    group = start_group(trainer_cmd(), 2, str(tmp_path), env=env)
    codes = group.wait(240)
    assert codes == [0, 0], group.read_all()

    done = [parse_line(out, "done") for out in group.outputs]
    assert all(len(d) == 1 for d in done), group.read_all()
    done = [d[0] for d in done]
    # epochs: 14 over 1438 training examples at a global batch of 2 x 32: ceil(14 * 1438 / 64) steps
    assert [d["steps"] for d in done] == ["315", "315"]
    assert done[0]["weights_digest"] == done[1]["weights_digest"]  # every worker ended with the same weights
    assert len(done[0]["weights_digest"]) == 64
    # no GPU here: gpuMemory is said and changes nothing; auto is RING on CPU
    assert [parse_line(out, "gpus") for out in group.outputs] == [[{"visible": "0", "memory": "growth"}]] * 2
    assert all(parse_line(out, "start")[0]["collective"] == "ring" for out in group.outputs)
    # each worker read whole files, two of the four
    assert "data=npz(files=2/4,shard_by=file) " in group.outputs[1]

    progress = parse_line(group.outputs[0], "progress")
    assert [r["step"] for r in progress] == [f"{s}/315" for s in [*range(50, 301, 50), 315]]
    losses = [float(r["loss"]) for r in progress]
    assert losses[-1] < losses[0] / 4, losses

    run = tmp_path / "digits"
    completed = json.loads((run / "COMPLETED").read_text())
    assert completed["steps"] == 315 and completed["model"] == str(run / "model")
    assert completed["weightsDigest"] == done[0]["weights_digest"]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [
        "checkpoint",
        "ckpt-300.data-00000-of-00001",
        "ckpt-300.index",
        "ckpt-315.data-00000-of-00001",
        "ckpt-315.index",
    ]  # keep: 2, chief only, no worker temp files
    assert any(p.name.startswith("events.out.tfevents") for p in (run / "tensorboard").iterdir())

    # A fresh process reloads the exported model and predicts the held-out digits.
    evaluation = subprocess.run(
        [
            sys.executable,
            "-m",
            "entrypoint.training.evaluate",
            str(run / "model"),
            str(data / "test"),
            "--min-accuracy",
            str(MIN_DIGITS_ACCURACY),
        ],
        cwd=REPO,
        env=base_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert evaluation.returncode == 0, evaluation.stdout + evaluation.stderr
    result = parse_line(evaluation.stdout, "eval")[0]
    assert float(result["accuracy"]) >= MIN_DIGITS_ACCURACY and result["examples"] == "359"

    # The COMPLETED marker: a restarted worker idles instead of training again.
    again = subprocess.run(
        trainer_cmd(), cwd=REPO, capture_output=True, text=True, timeout=60, env=base_env({**env, "TF_CONFIG": ""})
    )
    assert again.returncode == 0 and again.stdout.strip() == "tfmw completed run=digits", again.stderr


def test_sigterm_to_one_worker_stops_the_group_at_a_checkpoint_and_restart_resumes(tmp_path):
    total = 600
    hb = tmp_path / "heartbeat"
    env = {"TFMW_SHARED_DIR": str(tmp_path), "TFMW_RUN_ID": "resume"}
    args = [
        "--set",
        "model.name=mlp",
        "--set",
        f"steps={total}",
        "--set",
        "checkpoint.everySteps=50",
        "--set",
        "logEverySteps=10",
        "--set",
        "data.synthetic.inputShape=[8,8]",
        "--set",
        "export.enabled=false",
    ]
    group = start_group(trainer_cmd(*args), 2, str(tmp_path), env={**env, "TFMW_HEARTBEAT_FILE": str(hb)}, tag="first")
    wait_for_line(group, 0, lambda r: step_of(r) >= 120, timeout=120)
    group.procs[1].send_signal(signal.SIGTERM)  # only one worker is told to stop
    codes = group.wait(120)
    assert codes == [143, 143], group.read_all()
    stopped = [parse_line(out, "stopped") for out in group.outputs]
    stop_steps = {s[0]["step"] for s in stopped if s}
    assert len(stop_steps) == 1 and all(stopped), group.read_all()  # both stopped, at the same step
    stop_step = int(stop_steps.pop().split("/")[0])
    assert stop_step % 50 == 0 and 120 <= stop_step < total
    assert (tmp_path / "resume" / "checkpoints" / f"ckpt-{stop_step}.index").exists()
    assert hb.read_text().split() == [str(stop_step), "finish"]  # final heartbeat written on the way out
    assert not (tmp_path / "resume" / "COMPLETED").exists()

    again = start_group(trainer_cmd(*args), 2, str(tmp_path), env=env, tag="second")
    codes = again.wait(180)
    assert codes == [0, 0], again.read_all()
    for out in again.outputs:
        assert f"resume_step={stop_step} " in out
        first_progress = parse_line(out, "progress")[0]
        assert step_of(first_progress) == stop_step + 10  # continued, did not start over
        done = parse_line(out, "done")[0]
        assert done["steps"] == str(total)
    digests = {parse_line(out, "done")[0]["weights_digest"] for out in again.outputs}
    assert len(digests) == 1
    assert json.loads((tmp_path / "resume" / "COMPLETED").read_text())["steps"] == total


def test_a_killed_peer_makes_the_survivor_exit_retryable_and_a_restart_resumes(tmp_path):
    total = 400
    env = {"TFMW_SHARED_DIR": str(tmp_path), "TFMW_RUN_ID": "peerloss"}
    args = [
        "--set",
        "model.name=mlp",
        "--set",
        f"steps={total}",
        "--set",
        "logEverySteps=10",
        "--set",
        "checkpoint.everySteps=50",
        "--set",
        "data.synthetic.inputShape=[8,8]",
        "--set",
        "timeoutSeconds=30",
        "--set",
        "export.enabled=false",
    ]
    group = start_group(trainer_cmd(*args), 2, str(tmp_path), env=env, tag="first")
    wait_for_line(group, 0, lambda r: step_of(r) >= 120, timeout=120)
    group.procs[1].kill()  # a crash: no chance to checkpoint
    killed_at = time.monotonic()
    code = group.procs[0].wait(timeout=90)
    elapsed = time.monotonic() - killed_at
    out = group.read(0)
    assert code == 75, out
    errors = [line for line in out.splitlines() if line.startswith("tfmw error ")]
    assert len(errors) == 1 and "retryable=true" in errors[0], out
    assert elapsed < 60, elapsed
    assert not any(line.startswith("tfmw done") for line in out.splitlines())

    state = (tmp_path / "peerloss" / "checkpoints" / "checkpoint").read_text()
    saved = int(state.split('model_checkpoint_path: "ckpt-')[1].split('"')[0])
    assert saved >= 100 and saved % 50 == 0
    again = start_group(trainer_cmd(*args), 2, str(tmp_path), env=env, tag="second")
    assert again.wait(180) == [0, 0], again.read_all()
    for output in again.outputs:
        assert f"resume_step={saved} " in output
        assert parse_line(output, "done")[0]["steps"] == str(total)
    assert len({parse_line(o, "done")[0]["weights_digest"] for o in again.outputs}) == 1


@pytest.mark.beside  # nothing timed: it runs beside the cluster tests
def test_workers_that_restore_different_steps_refuse_to_train(tmp_path):
    # What a per-pod emptyDir "shared" volume looks like: only the chief sees the checkpoints.
    chief_dir, worker_dir = tmp_path / "chief", tmp_path / "worker"
    args = [
        "--set",
        "model.name=mlp",
        "--set",
        "steps=10",
        "--set",
        "checkpoint.everySteps=5",
        "--set",
        "data.synthetic.inputShape=[8,8]",
        "--set",
        "export.enabled=false",
    ]
    first = subprocess.run(
        trainer_cmd(*args),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env=base_env({"TFMW_SHARED_DIR": str(chief_dir), "TFMW_RUN_ID": "r", "TF_CONFIG": ""}),
    )
    assert first.returncode == 0, first.stdout + first.stderr
    (chief_dir / "r" / "COMPLETED").unlink()

    group = start_group(
        trainer_cmd(*args, "--set", "steps=20"),
        2,
        str(tmp_path),
        env={"TFMW_RUN_ID": "r"},
        per_worker_env=[{"TFMW_SHARED_DIR": str(chief_dir)}, {"TFMW_SHARED_DIR": str(worker_dir)}],
    )
    assert group.wait(120) == [2, 2], group.read_all()
    for out in group.outputs:
        refusal = [line for line in out.splitlines() if line.startswith("shared storage:")]
        assert len(refusal) == 1 and "workers restored different checkpoints" in refusal[0], out
    assert "step 10 from" in group.outputs[0] and "step 0 from" in group.outputs[1]

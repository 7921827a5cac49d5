"""Permanent means permanent, and a platform's TF_CONFIG ends with an exit code (slow: real
TensorFlow, the real launcher and trainer as processes)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from workers import REPO, base_env, free_ports, parse_line, start_group, tf_config

from entrypoint.errors import EXIT_TRAINING_FAILED

pytestmark = [pytest.mark.slow, pytest.mark.beside]  # nothing timed: it runs beside the cluster tests

LAUNCHER = [sys.executable, "-m", "entrypoint", "run", "--"]
TRAINER = [sys.executable, "-m", "entrypoint.training"]
SMALL = ["--set", "model.name=mlp", "--set", "data.synthetic.inputShape=[8,8]", "--set", "export.enabled=false"]


def files_args(path, fmt):
    return [
        "--set",
        "model.name=mlp",
        "--set",
        "data.source=files",
        "--set",
        f"data.path={path}",
        "--set",
        f"data.format={fmt}",
        "--set",
        "data.numClasses=10",
        "--set",
        "export.enabled=false",
        "--set",
        "steps=20",
    ]


def run_single(cmd, tmp_path, run_id, timeout=240):
    """One worker with a platform-style preset TF_CONFIG: the launcher exits with a code."""
    env = base_env({"TFMW_SHARED_DIR": str(tmp_path), "TFMW_RUN_ID": run_id, "TF_CONFIG": tf_config(free_ports(1), 0)})
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def test_corrupt_npz_is_exit_4_after_one_try(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    good = data / "part-0.npz"
    np.savez(good, x=np.zeros((64, 8, 8), np.float32), y=np.zeros(64, np.int64))
    raw = good.read_bytes()
    good.write_bytes(raw[: len(raw) // 2])  # truncated, as by a copy that died half way
    proc = run_single([*LAUNCHER, *TRAINER, *files_args(data, "npz")], tmp_path, "corrupt")
    out = proc.stdout
    assert proc.returncode == EXIT_TRAINING_FAILED, out + proc.stderr
    assert out.count("tfmw launcher starting training (attempt") == 1  # not retried
    errors = [line for line in out.splitlines() if line.startswith("tfmw error ")]
    assert (
        len(errors) == 1
        and errors[0].startswith("tfmw error retryable=false worker=0 TrainingError: data.path: ")
        and "is corrupt or truncated" in errors[0]
    )
    assert "Traceback" not in out  # a known condition: its one line says it all
    failed = parse_line(out, "failed")
    assert failed and failed[0]["reason"] == "TrainingFailed" and failed[0]["exit_code"] == "4"
    assert proc.stderr.strip().startswith("tfmw: TrainingFailed: TrainingError: data.path:")
    assert not (tmp_path / "corrupt" / "COMPLETED").exists()


def test_truncated_tfrecord_is_exit_4(tmp_path):
    data = tmp_path / "digits"
    prep = subprocess.run(
        [
            sys.executable,
            "-m",
            "entrypoint.training.prepare_digits",
            str(data),
            "--shards",
            "1",
            "--format",
            "tfrecord",
        ],
        cwd=REPO,
        env=base_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert prep.returncode == 0, prep.stderr
    shard = next((data / "train").iterdir())
    raw = shard.read_bytes()
    shard.write_bytes(raw[: len(raw) - 100])  # the last record is cut short
    proc = run_single([*TRAINER, *files_args(data / "train", "tfrecord")], tmp_path, "tfrecord")
    assert proc.returncode == EXIT_TRAINING_FAILED, proc.stdout + proc.stderr
    assert "TrainingError: data.path: a TFRecord file of " in proc.stdout
    assert "retryable=false" in proc.stdout and "tfmw progress" not in proc.stdout


def test_an_absurd_learning_rate_is_refused_before_training(tmp_path):
    # Issue 12: 1e30 used to train into NaN; it is now a config refusal (exit 2, one line, no
    # TensorFlow). A diverging run with a sane config: tests/entrypoint/training/test_divergence.py.
    proc = run_single(
        [*LAUNCHER, *TRAINER, *SMALL, "--set", "steps=50", "--set", "optimizer=sgd", "--set", "learningRate=1.0e+30"],
        tmp_path,
        "nan",
        timeout=60,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "training config: learningRate: 1e+30 is greater than the maximum of 10.0" in proc.stdout + proc.stderr
    assert "tfmw progress" not in proc.stdout and "Traceback" not in proc.stdout + proc.stderr
    assert not (tmp_path / "nan" / "COMPLETED").exists()


def test_tfjob_style_preset_tf_config_exits_0_after_training(tmp_path):
    # Two real workers, each with the TF_CONFIG a TFJob would inject: the platform owns the
    # lifecycle, so both launchers exit 0 once the run is complete (no idling, no scaling).
    group = start_group(
        [
            *LAUNCHER,
            *TRAINER,
            *SMALL,
            "--set",
            "export.enabled=true",
            "--set",
            "steps=20",
            "--set",
            "checkpoint.everySteps=10",
        ],
        2,
        str(tmp_path),
        env={"TFMW_SHARED_DIR": str(tmp_path), "TFMW_RUN_ID": "tfjob"},
    )
    codes = group.wait(300)
    assert codes == [0, 0], group.read_all()
    for i, out in enumerate(group.outputs):
        assert f"tfmw launcher task=worker:{i} workers=2 identity=preset lifecycle=platform" in out
        done = parse_line(out, "done")[0]
        assert done["steps"] == "20"
        # the end's parts, timed (each trainer then leaves without TensorFlow's teardown)
        assert all(float(done[part]) >= 0 for part in ("export_s", "barrier_s", "completed_s")), done
        assert parse_line(out, "completed"), out
        assert "tfmw launcher idle" not in out
    # a trainer leaving at once loses nothing: the model and the marker are in place
    assert (tmp_path / "tfjob" / "COMPLETED").exists()
    assert (tmp_path / "tfjob" / "model" / "saved_model.pb").exists()
    # A restarted pod of the finished run exits 0 at once, training nothing.
    again = run_single([*LAUNCHER, *TRAINER, *SMALL], tmp_path, "tfjob", timeout=60)
    assert again.returncode == 0 and "starting training" not in again.stdout, again.stdout


def test_indexed_job_pods_train_and_exit_0(tmp_path):
    # What examples/indexed-job.yaml's pods see: JOB_COMPLETION_INDEX and the hostname
    # <job>-<index> from the Job controller, the rest from the manifest. On one machine the
    # workers share the loopback (TFMW_LOOPBACK_PORTS: worker j listens on port + j).
    base = free_ports(1)[0]
    if base > 65000:
        base = 40000
    common = {
        "TFMW_SHARED_DIR": str(tmp_path),
        "TFMW_RUN_ID": "indexed",
        "TFMW_NAMESPACE": "ml",
        "TFMW_SERVICE": "tfmw-indexed",
        "TFMW_REPLICAS": "2",
        "TFMW_PORT": str(base),
        "TFMW_LOOPBACK_PORTS": "1",
        "TF_CONFIG": "",
    }
    procs, logs = [], []
    for index in (0, 1):
        log = tmp_path / f"indexed-{index}.log"
        logs.append(log)
        env = base_env({**common, "JOB_COMPLETION_INDEX": str(index), "HOSTNAME": f"tfmw-indexed-{index}"})
        env.pop("TF_CONFIG")
        with open(log, "w") as fh:
            procs.append(
                subprocess.Popen(
                    [*LAUNCHER, *TRAINER, *SMALL, "--set", "steps=20"],
                    cwd=REPO,
                    env=env,
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                )
            )
    try:
        codes = [p.wait(timeout=300) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    outputs = [log.read_text() for log in logs]
    assert codes == [0, 0], "\n".join(outputs)
    for index, out in enumerate(outputs):
        assert f"task=worker:{index} workers=2 identity=indexed-job lifecycle=platform" in out
        assert parse_line(out, "completed"), out
    assert os.path.exists(tmp_path / "indexed" / "COMPLETED")

"""Issue 12: a non-finite loss or weight at any step fails the run (exit 4, one line) before any
checkpoint or export stores it, and a restart that only re-exports writes a valid COMPLETED
(slow: real TensorFlow, the trainer as a process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from workers import REPO, base_env, parse_line, start_group, trainer_cmd

from entrypoint.errors import EXIT_TRAINING_FAILED

pytestmark = [pytest.mark.slow, pytest.mark.beside]  # nothing timed: it runs beside the cluster tests

# A user model whose loss is finite at the first step but whose first update makes a weight
# non-finite: d/dw sqrt(w) at w = 0 is infinite. The loss of the step that breaks the weights is
# computed before the update, so only a check of the weights themselves catches it.
POISON_MODEL = """
import tensorflow as tf
import tf_keras as keras

class Poison(keras.layers.Layer):
    def build(self, shape):
        self.w = self.add_weight(name="w", shape=(), initializer="zeros")

    def call(self, x):
        return x + tf.sqrt(self.w)

def build(input_shape, num_classes):
    inputs = keras.Input(input_shape)
    x = keras.layers.Flatten()(inputs)
    x = Poison()(x)
    return keras.Model(inputs, keras.layers.Dense(num_classes)(x))

def linear(input_shape, num_classes):
    # No ReLU: a NaN input makes that step's loss NaN (ReLU may turn NaN into 0 on CPU, which
    # leaves the loss finite and only the weights NaN; the weights check covers that).
    inputs = keras.Input(input_shape)
    return keras.Model(inputs, keras.layers.Dense(num_classes)(keras.layers.Flatten()(inputs)))
"""

SMALL = ["--set", "data.synthetic.inputShape=[8,8]", "--set", "data.synthetic.examples=512"]


def strict_json(text: str):
    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def run_trainer(tmp_path, run_id, *args, extra_env=None):
    env = base_env({"TFMW_SHARED_DIR": str(tmp_path), "TFMW_RUN_ID": run_id, **(extra_env or {})})
    env.pop("TF_CONFIG", None)
    return subprocess.run(trainer_cmd(*args), cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def poison_env(tmp_path):
    (tmp_path / "poison_model.py").write_text(POISON_MODEL)
    return {"PYTHONPATH": str(tmp_path)}


def assert_failed_without_trace(proc, run_dir, message):
    out = proc.stdout
    assert proc.returncode == EXIT_TRAINING_FAILED, out + proc.stderr
    errors = [line for line in out.splitlines() if line.startswith("tfmw error ")]
    assert len(errors) == 1 and errors[0].startswith("tfmw error retryable=false worker=0 TrainingError: " + message), (
        out
    )
    assert "Traceback" not in out + proc.stderr
    assert not (run_dir / "COMPLETED").exists() and not (run_dir / "model").exists()
    assert parse_line(out, "done") == []


@pytest.mark.parametrize("steps,every", [(1, 50), (5, 1)], ids=["last-step", "checkpoint-every-step"])
def test_weights_broken_by_the_last_update_are_never_saved_or_exported(tmp_path, steps, every):
    # Before issue 12: steps=1 exported the NaN model and wrote COMPLETED (exit 0); with a
    # checkpoint every step, ckpt-1 held the NaN weights before the NaN loss of step 2 failed.
    proc = run_trainer(
        tmp_path,
        "poison",
        *SMALL,
        "--set",
        "model.name=poison_model:build",
        "--set",
        f"steps={steps}",
        "--set",
        f"checkpoint.everySteps={every}",
        "--set",
        "logEverySteps=100",
        extra_env=poison_env(tmp_path),
    )
    assert_failed_without_trace(
        proc, tmp_path / "poison", "weights are not finite (NaN or infinite) after step 1: training diverged"
    )
    assert parse_line(proc.stdout, "checkpoint") == []  # not even "writing"
    assert not list((tmp_path / "poison" / "checkpoints").glob("ckpt-*"))


def test_a_nan_loss_between_log_lines_fails_before_the_next_checkpoint(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((640, 8, 8)).astype(np.float32)
    x[64 * 3 + 5, 2, 2] = np.nan  # in the 4th batch (no shuffling): step 4's loss is NaN
    np.savez(data / "part-0.npz", x=x, y=rng.integers(0, 10, 640))
    proc = run_trainer(
        tmp_path,
        "nandata",
        "--set",
        "model.name=poison_model:linear",
        "--set",
        "data.source=files",
        "--set",
        f"data.path={data}",
        "--set",
        "data.numClasses=10",
        "--set",
        "data.shuffleBuffer=0",
        "--set",
        "batchSizePerReplica=64",
        "--set",
        "steps=30",
        "--set",
        "logEverySteps=100",
        "--set",
        "checkpoint.everySteps=10",
        extra_env=poison_env(tmp_path),
    )
    assert_failed_without_trace(proc, tmp_path / "nandata", "loss is nan at or before step 10: training diverged")
    assert not list((tmp_path / "nandata" / "checkpoints").glob("ckpt-*"))


def test_two_workers_fail_together_on_a_diverged_model(tmp_path):
    env = {"TFMW_SHARED_DIR": str(tmp_path), "TFMW_RUN_ID": "pair", **poison_env(tmp_path)}
    group = start_group(
        trainer_cmd(
            *SMALL, "--set", "model.name=poison_model:build", "--set", "steps=3", "--set", "checkpoint.everySteps=1"
        ),
        2,
        str(tmp_path),
        env=env,
    )
    codes = group.wait(240)
    assert codes == [EXIT_TRAINING_FAILED] * 2, group.read_all()
    for i, out in enumerate(group.outputs):
        errors = [line for line in out.splitlines() if line.startswith("tfmw error ")]
        assert len(errors) == 1 and f"retryable=false worker={i} TrainingError: weights are not finite" in errors[0], (
            out
        )
    assert not list((tmp_path / "pair" / "checkpoints").glob("ckpt-*"))


def test_a_restart_that_only_exports_writes_a_valid_completed(tmp_path):
    args = ["--set", "model.name=mlp", *SMALL, "--set", "steps=20", "--set", "checkpoint.everySteps=10"]
    first = run_trainer(tmp_path, "final", *args)
    assert first.returncode == 0, first.stdout + first.stderr
    run_dir = tmp_path / "final"
    record = strict_json((run_dir / "COMPLETED").read_text())
    # The crash between the last checkpoint and the export: no model, no marker.
    os.remove(run_dir / "COMPLETED")
    import shutil

    shutil.rmtree(run_dir / "model")
    again = run_trainer(tmp_path, "final", *args)
    out = again.stdout
    assert again.returncode == 0, out + again.stderr
    assert parse_line(out, "start")[0]["resume_step"] == "20" and parse_line(out, "progress") == []
    done = parse_line(out, "done")[0]
    assert done["examples_per_sec"] == "-" and done["final_loss"] == f"{record['finalLoss']:.4f}"
    text = (run_dir / "COMPLETED").read_text()
    assert "NaN" not in text and "Infinity" not in text
    redo = strict_json(text)
    assert redo["steps"] == 20 and redo["examplesPerSec"] is None
    assert redo["finalLoss"] == pytest.approx(record["finalLoss"], rel=1e-6)  # recorded in the checkpoint
    assert redo["weightsDigest"] == record["weightsDigest"] and os.path.isdir(redo["model"])
    # And the marker still means "done": a further start trains nothing.
    third = run_trainer(tmp_path, "final", *args)
    assert third.returncode == 0 and third.stdout.strip() == "tfmw completed run=final", third.stdout


def test_an_older_checkpoint_without_a_recorded_loss_is_evaluated(tmp_path):
    args = ["--set", "model.name=mlp", *SMALL, "--set", "steps=10", "--set", "export.enabled=false"]
    first = run_trainer(tmp_path, "old", *args)
    assert first.returncode == 0, first.stdout + first.stderr
    ckpt = tmp_path / "old" / "checkpoints" / "ckpt-10"
    # Rewrite ckpt-10 as the trainer before issue 12 wrote it: model, optimizer, step, no loss.
    script = f"""
import os
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import tensorflow as tf, tf_keras as keras
from entrypoint.training.models import build_model
model = build_model("mlp", (8, 8), 10, {{}})
opt = keras.optimizers.Adam(0.001)
new = tf.train.Checkpoint(model=model, optimizer=opt, step=tf.Variable(0, dtype=tf.int64),
                          loss=tf.Variable(0.0))
new.restore({str(ckpt)!r}).expect_partial()
old = tf.train.Checkpoint(model=model, step=new.step)
old.write({str(ckpt)!r})
"""
    rewrite = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=base_env(), capture_output=True, text=True, timeout=120
    )
    assert rewrite.returncode == 0, rewrite.stderr
    os.remove(tmp_path / "old" / "COMPLETED")
    again = run_trainer(tmp_path, "old", *args)
    assert again.returncode == 0, again.stdout + again.stderr
    redo = strict_json((tmp_path / "old" / "COMPLETED").read_text())
    assert redo["examplesPerSec"] is None
    assert isinstance(redo["finalLoss"], float) and 0 < redo["finalLoss"] < 10  # one global batch's loss

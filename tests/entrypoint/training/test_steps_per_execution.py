"""`stepsPerExecution` through the real trainer (one worker, its own process): K steps per call
train the very weights K = 1 does, the log and checkpoint steps land on multiples of K (each
rounding said once), a resume with another K realigns and still ends on the same weights; and
`jitCompile` on a model XLA cannot compile is one line and exit 2; the start line says the
precision policy, XLA and K. Slow: real TensorFlow; nothing timed, so it runs beside the cluster
tests."""

from __future__ import annotations

import subprocess
import textwrap

import pytest
from workers import REPO, base_env, parse_line, trainer_cmd

from entrypoint import loglines

pytestmark = [pytest.mark.slow, pytest.mark.beside]

COMMON = [
    "--set",
    "model.name=mlp",
    "--set",
    "model.args={hidden: 16}",
    "--set",
    "logEverySteps=5",
    "--set",
    "checkpoint.everySteps=10",
    "--set",
    "export.enabled=false",
    "--set",
    "tensorboard.enabled=false",
]


def train(shared, *args: str, extra_env: dict | None = None) -> subprocess.CompletedProcess:
    env = base_env({"TFMW_SHARED_DIR": str(shared), "TFMW_RUN_ID": "r", **(extra_env or {})})
    env.pop("TF_CONFIG", None)  # one worker
    env.pop("TFMW_TRAINING_CONFIG", None)
    return subprocess.run(trainer_cmd(*COMMON, *args), cwd=REPO, env=env, capture_output=True, text=True, timeout=240)


def finished(result: subprocess.CompletedProcess) -> dict:
    assert result.returncode == 0, result.stdout + result.stderr
    return {
        "start": parse_line(result.stdout, "start")[0],
        "warnings": [w.text for w in loglines.find(result.stdout.splitlines(), loglines.WARNING)],
        "progress": [row["step"] for row in parse_line(result.stdout, "progress")],
        "saved": [int(row["step"]) for row in parse_line(result.stdout, "checkpoint") if "path" in row],
        "digest": parse_line(result.stdout, "done")[0]["weights_digest"],
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("spe")
    out = {}
    for k in (1, 4):
        (tmp / f"k{k}").mkdir()
        out[k] = finished(train(tmp / f"k{k}", "--set", "steps=22", "--set", f"stepsPerExecution={k}"))
    # A run stopped at step 12 (as a restart finds it: its last checkpoint) and resumed to 22 with
    # K = 5: 12 is not a multiple of 5, so the first call runs 3 steps, then 5 each, the last 2.
    shared = tmp / "resumed"
    shared.mkdir()
    out["first"] = finished(train(shared, "--set", "steps=12", "--set", "stepsPerExecution=4"))
    (shared / "r" / "COMPLETED").unlink()  # the same run continued to a later last step
    out["resumed"] = finished(train(shared, "--set", "steps=22", "--set", "stepsPerExecution=5"))
    return out


def test_k_steps_per_call_train_the_same_weights_as_one(runs):
    one, four = runs[1], runs[4]
    assert (one["start"]["steps_per_execution"], four["start"]["steps_per_execution"]) == ("1", "4")
    assert one["digest"] == four["digest"]


def test_log_and_checkpoint_steps_land_on_multiples_of_k_and_the_rounding_is_said(runs):
    assert runs[1]["warnings"] == []
    assert runs[1]["progress"] == ["5/22", "10/22", "15/22", "20/22", "22/22"]
    assert runs[1]["saved"] == [10, 20, 22]
    assert runs[4]["warnings"] == [
        "logEverySteps 5 is used as 8, the next multiple of stepsPerExecution 4",
        "checkpoint.everySteps 10 is used as 12, the next multiple of stepsPerExecution 4",
    ]
    assert runs[4]["progress"] == ["8/22", "16/22", "22/22"]
    assert runs[4]["saved"] == [12, 22]  # the last step ends a call too


def test_a_resume_with_another_k_realigns_and_ends_on_the_same_weights(runs):
    first, resumed = runs["first"], runs["resumed"]
    assert first["saved"] == [12]
    assert resumed["start"]["resume_step"] == "12"
    assert resumed["progress"] == ["15/22", "20/22", "22/22"]  # logEverySteps 5 is a multiple of 5
    assert resumed["saved"] == [20, 22]
    assert resumed["digest"] == runs[1]["digest"]


def test_a_model_xla_cannot_compile_is_refused_in_one_line_with_exit_2(tmp_path):
    (tmp_path / "pyfuncmodel.py").write_text(
        textwrap.dedent(
            """
            import tensorflow as tf
            import tf_keras as keras

            def build(input_shape, num_classes):
                inputs = keras.Input(shape=input_shape)
                flat = keras.layers.Flatten()(inputs)
                doubled = keras.layers.Lambda(lambda t: tf.numpy_function(lambda a: a * 2, [t], tf.float32))(flat)
                doubled = keras.layers.Lambda(lambda t: tf.ensure_shape(t, flat.shape))(doubled)
                return keras.Model(inputs, keras.layers.Dense(num_classes)(doubled))
            """
        )
    )
    result = train(
        tmp_path,
        "--set",
        "model.name=pyfuncmodel:build",
        "--set",
        "model.args={}",
        "--set",
        "jitCompile=true",
        "--set",
        "steps=4",
        extra_env={"PYTHONPATH": f"{tmp_path}:{REPO}"},
    )
    # A config error: exit 2 (never retried), its one line on stderr, no traceback.
    assert result.returncode == 2, result.stdout + result.stderr
    (refusal,) = [line for line in result.stderr.splitlines() if line.startswith("training config:")]
    assert refusal.startswith("training config: jitCompile: true: TensorFlow cannot compile this model's training step")
    assert "PyFunc" in refusal and "set jitCompile: false" in refusal
    assert "Traceback" not in result.stdout + result.stderr


def test_the_start_line_says_the_precision_policy_and_xla(runs, tmp_path):
    assert (runs[1]["start"]["precision"], runs[1]["start"]["jit"]) == ("float32", "false")  # the defaults
    fast = finished(
        train(
            tmp_path,
            "--set",
            "steps=2",
            "--set",
            "precision=mixed_bfloat16",
            "--set",
            "jitCompile=true",
            "--set",
            "stepsPerExecution=2",
        )
    )
    assert {k: fast["start"][k] for k in ("precision", "jit", "steps_per_execution")} == {
        "precision": "mixed_bfloat16",
        "jit": "true",
        "steps_per_execution": "2",
    }

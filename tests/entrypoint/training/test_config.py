"""Training config refusals: one line naming the key, exit 2, before TensorFlow is imported."""

from __future__ import annotations

import json

import pytest
from workers import run_trainer

from entrypoint.training.config import ConfigError, apply_override, merge_defaults, resolve, run_env, validate
from entrypoint.training.schema import DEFAULTS

# (config as YAML text, the exact one-line message on stderr)
BAD_CONFIGS = [
    ("steps: -1", "training config: steps: -1 is less than the minimum of 1"),
    ("heartbeatTimeoutSeconds: 0", "training config: heartbeatTimeoutSeconds"),
    (
        "stepz: 10",
        "training config: stepz: unknown key (allowed here: allReduceDtype, batchSizePerReplica, checkpoint, "
        "collective, data, epochs, evaluation, export, gpuMemory, gradientAccumulationSteps, heartbeatTimeoutSeconds, "
        "jitCompile, learningRate, logEverySteps, "
        "model, optimizer, precision, seed, steps, stepsPerExecution, "
        "tensorboard, timeoutSeconds)",
    ),
    (
        "model: {name: resnet50}",
        "training config: model.name: 'resnet50' is neither a built-in model "
        "(cnn, mlp, resnet) nor 'package.module:function'",
    ),
    ("data: {source: files}", "training config: data.path: is required when data.source is files"),
    ("data: {source: files, path: d}", "training config: data.numClasses: is required when data.source is files"),
    ("batchSizePerReplica: '64'", "training config: batchSizePerReplica: '64' is not of type 'integer'"),
    (
        "checkpoint: {everySteps: 0}",
        "training config: checkpoint.everySteps and checkpoint.everySeconds are both 0: no checkpoint would be "
        "written before the end; set one of them above 0, or checkpoint.interval: auto",
    ),
    (
        "checkpoint: {interval: auto, maxSeconds: null}",
        "training config: checkpoint.maxSeconds: null with interval auto: the interval would have no upper bound",
    ),
    (
        "checkpoint: {interval: auto, minSeconds: 60, maxSeconds: 30}",
        "training config: checkpoint.minSeconds: 60 is above checkpoint.maxSeconds (30); set minSeconds <= maxSeconds",
    ),
    ("checkpoint: {everySeconds: -1}", "training config: checkpoint.everySeconds: -1 is less than the minimum of 0"),
    ("checkpoint: {interval: often}", "training config: checkpoint.interval: 'often' is not one of ['fixed', 'auto']"),
    (
        "checkpoint: {every: 5}",
        "training config: checkpoint.every: unknown key (allowed here: async, everySeconds, everySteps, interval, "
        "keep, maxSeconds, minSeconds)",
    ),
    ("collective: grpc", "training config: collective: 'grpc' is not one of ['auto', 'ring', 'nccl']"),
    (
        "allReduceDtype: int8",
        "training config: allReduceDtype: 'int8' is not one of ['float32', 'bfloat16', 'float16']",
    ),
    (
        "allReduceDtype: bf16",
        "training config: allReduceDtype: 'bf16' is not one of ['float32', 'bfloat16', 'float16']",
    ),
    ("allReduceDtype: 16", "training config: allReduceDtype: 16 is not one of ['float32', 'bfloat16', 'float16']"),
    (
        "precision: float16",
        "training config: precision: 'float16' is not one of ['float32', 'mixed_float16', 'mixed_bfloat16']",
    ),
    ("jitCompile: 'yes'", "training config: jitCompile: 'yes' is not of type 'boolean'"),
    ("stepsPerExecution: 0", "training config: stepsPerExecution: 0 is less than the minimum of 1"),
    ("stepsPerExecution: 1001", "training config: stepsPerExecution: 1001 is greater than the maximum of 1000"),
    ("stepsPerExecution: 2.5", "training config: stepsPerExecution: 2.5 is not an integer"),
    ("learningRate: 0", "training config: learningRate: 0 is less than or equal to the minimum of 0"),
    ("optimizer: rmsprop", "training config: optimizer: 'rmsprop' is not one of ['sgd', 'adam']"),
    (
        "model: {name: mlp, args: {depth: 3}}",
        "training config: model.args.depth: unknown argument of model 'mlp' (allowed: hidden, layers)",
    ),
    ("model: {name: mlp, args: {hidden: 0}}", "training config: model.args.hidden: 0 must be a positive integer"),
    ("tensorboard: {enabled: 'yes'}", "training config: tensorboard.enabled: 'yes' is not of type 'boolean'"),
    ("timeoutSeconds: -5", "training config: timeoutSeconds: -5 must be null (no timeout) or a number of seconds > 0"),
    ("data: {synthetic: {inputShape: []}}", "training config: data.synthetic.inputShape: [] should be non-empty"),
    ("steps: 10\nepochs: 2", "training config: epochs: set either steps or epochs, not both"),
    ("epochs: 0", "training config: epochs: 0 is less than the minimum of 1"),
    (
        "gradientAccumulationSteps: 0",
        "training config: gradientAccumulationSteps: 0 is less than the minimum of 1",
    ),
    (
        "gradientAccumulationSteps: 1025",
        "training config: gradientAccumulationSteps: 1025 is greater than the maximum of 1024",
    ),
    ("data: {shuffleBuffer: -1}", "training config: data.shuffleBuffer: -1 is less than the minimum of 0"),
    (
        "data: {shuffleBuffer: 1048577}",
        "training config: data.shuffleBuffer: 1048577 is greater than the maximum of 1048576",
    ),
    ("data: {readParallelism: 0}", "training config: data.readParallelism: 0 is less than the minimum of 1"),
    ("data: {cache: 'yes'}", "training config: data.cache: 'yes' is not of type 'boolean'"),
    (
        # the input batch holds every micro-batch of a step: 64 x 2049 x 4096 float32 = 2 GiB + 64 examples
        "batchSizePerReplica: 2049\ngradientAccumulationSteps: 64\n"
        "data: {synthetic: {examples: 64, inputShape: [4096]}}",
        "training config: batchSizePerReplica x gradientAccumulationSteps (64 micro-batches): 131136 examples of "
        "shape [4096] are 2148532224 bytes per replica batch, more than the limit of 2147483648 (2 GiB); use a "
        "smaller batch or shape or fewer gradientAccumulationSteps",
    ),
    ("- steps\n- 10", "must hold a mapping, got list"),
    ("steps: [1, 2", "is not valid YAML/JSON"),
]


@pytest.mark.parametrize(
    "text,message", BAD_CONFIGS, ids=[t.split(":")[0].strip("- ") + str(i) for i, (t, _) in enumerate(BAD_CONFIGS)]
)
def test_bad_config_exits_2_with_one_line_naming_the_key(tmp_path, text, message):
    path = tmp_path / "training.yaml"
    path.write_text(text)
    result = run_trainer(["--config", str(path)], tmp_path=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr  # one line, no traceback, and TensorFlow never imported
    assert message in lines[0]
    assert result.stdout == ""


@pytest.mark.parametrize(
    "env_extra,args,message",
    [
        ({"TF_CONFIG": "{not json"}, [], "TF_CONFIG is not valid JSON"),
        (
            {"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 3}})},
            [],
            "TF_CONFIG['task']['index']=3 is out of range: cluster has 1 'worker' task(s)",
        ),
        (
            {
                "TF_CONFIG": json.dumps(
                    {"cluster": {"worker": ["a:1"], "ps": ["b:1"]}, "task": {"type": "worker", "index": 0}}
                )
            },
            [],
            "TF_CONFIG has 'ps' tasks",
        ),
        (
            {"TF_CONFIG": json.dumps({"cluster": {"evaluator": ["b:1"]}, "task": {"type": "evaluator", "index": 0}})},
            [],
            "no 'chief' or 'worker' task",
        ),
        ({"TFMW_SHARED_DIR": ""}, [], "TFMW_SHARED_DIR is not set"),
        ({"TFMW_RUN_ID": "../escape"}, [], "TFMW_RUN_ID: '../escape' must be a plain name"),
        ({}, ["--set", "steps"], "--set 'steps': expected key=value"),
        ({}, ["--set", "steps=0"], "training config: steps: 0 is less than the minimum of 1"),
        ({}, ["--config", "/nonexistent/training.yaml"], "training config: cannot read /nonexistent/training.yaml"),
    ],
)
def test_bad_environment_exits_2_with_one_line(tmp_path, env_extra, args, message):
    result = run_trainer(args, env_extra=env_extra, tmp_path=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr


def test_completed_marker_short_circuits_without_tensorflow(tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "COMPLETED").write_text('{"steps": 5}')
    result = run_trainer([], env_extra={"TFMW_RUN_ID": "r"}, tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "tfmw completed run=r"
    assert "TF_IMPORTED" not in result.stderr


def test_a_marker_that_cannot_be_read_is_a_retryable_start_never_done(tmp_path):
    (tmp_path / "r" / "COMPLETED").mkdir(parents=True)  # EISDIR: the marker is there or not, nobody can tell
    result = run_trainer([], env_extra={"TFMW_RUN_ID": "r"}, tmp_path=tmp_path)
    assert result.returncode == 75, result.stdout + result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfmw error retryable=true worker=0 "), result.stdout
    assert "COMPLETED (IsADirectoryError: Is a directory)" in lines[0]
    assert "tfmw completed" not in result.stdout and "TF_IMPORTED" not in result.stderr
    assert (tmp_path / "r" / "COMPLETED").is_dir()  # nothing written over it


def test_check_prints_the_effective_config(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"steps": 7, "checkpoint": {"keep": 1}}))
    result = run_trainer(["--config", str(path), "--check", "--set", "model.name=mlp"], tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    effective = json.loads(result.stdout)
    assert effective["steps"] == 7
    assert effective["checkpoint"] == {**DEFAULTS["checkpoint"], "keep": 1}
    assert effective["model"]["name"] == "mlp"


def test_defaults_validate_and_merge_keeps_nested_defaults():
    validate(DEFAULTS)
    merged = merge_defaults({"data": {"source": "files", "path": "p", "numClasses": 3}})
    assert merged["data"]["shuffleBuffer"] == DEFAULTS["data"]["shuffleBuffer"]
    assert merged["data"]["path"] == "p"
    assert merged["steps"] == DEFAULTS["steps"]


def test_override_parses_yaml_values_and_creates_maps():
    out = apply_override({}, "checkpoint.everySteps=5")
    out = apply_override(out, "timeoutSeconds=null")
    out = apply_override(out, "model.name=my.pkg:build")
    assert out == {"checkpoint": {"everySteps": 5}, "timeoutSeconds": None, "model": {"name": "my.pkg:build"}}


def test_resolve_accepts_a_user_model_with_its_own_args(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model: {name: 'my_models.vision:build', args: {depth: 50}}\n")
    assert resolve(str(path), [])["model"] == {"name": "my_models.vision:build", "args": {"depth": 50}}


def test_run_env_defaults_run_id():
    env = run_env({"TFMW_SHARED_DIR": "/s"})
    assert (env.shared_dir, env.run_id, env.heartbeat_file) == ("/s", "default", None)
    with pytest.raises(ConfigError):
        run_env({})

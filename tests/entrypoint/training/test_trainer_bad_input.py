"""Issue 12, trainer config: numbers that are not what they claim (NaN, infinity, 6.0 for an
integer), duplicate YAML keys and absurd sizes are refused with one line naming the key and
the fix, exit 2, before TensorFlow is imported (fast: no TensorFlow)."""

from __future__ import annotations

import pytest
from workers import run_trainer

from entrypoint.training import schema
from entrypoint.training.config import ConfigError, resolve

# (config file text, [--set overrides], the one-line message, or its start)
REFUSED = [
    ("steps: 6.0", [], "training config: steps: 6.0 is not an integer; write a whole number without a decimal point"),
    ("steps: true", [], "training config: steps: True is not an integer"),
    ("batchSizePerReplica: 32.0", [], "training config: batchSizePerReplica: 32.0 is not an integer"),
    (
        "data: {synthetic: {inputShape: [8.0, 8]}}",
        [],
        "training config: data.synthetic.inputShape.0: 8.0 is not an integer",
    ),
    (
        "model: {name: mlp, args: {hidden: 64.0}}",
        [],
        "training config: model.args.hidden: 64.0 must be a positive integer <= 65536",
    ),
    ("steps: 10\nseed: 1\nsteps: 20", [], "line 3: duplicate key 'steps' (first on line 1); keep only one"),
    (
        "checkpoint:\n  everySteps: 5\n  keep: 2\n  everySteps: 6",
        [],
        "line 4: duplicate key 'everySteps' (first on line 2)",
    ),
    (
        "",
        ["model.args={hidden: 1, hidden: 2}"],
        "training config: --set model.args: duplicate key 'hidden' in the value",
    ),
    (
        "learningRate: .nan",
        [],
        "training config: learningRate: nan is not a finite number; set a finite value (default: 0.001)",
    ),
    ("", ["learningRate=.nan"], "training config: learningRate: nan is not a finite number"),
    ("learningRate: .inf", [], "training config: learningRate: inf is not a finite number"),
    ("learningRate: 1.0e+30", [], "training config: learningRate: 1e+30 is greater than the maximum of 10.0"),
    (
        "timeoutSeconds: .nan",
        [],
        "training config: timeoutSeconds: nan is not a finite number; set a finite value (default: null)",
    ),
    ("heartbeatTimeoutSeconds: .inf", [], "training config: heartbeatTimeoutSeconds: inf is not a finite number"),
    (
        "timeoutSeconds: 1.0e+300",
        [],
        "training config: timeoutSeconds: 1e+300 must be null (no timeout) or a number of seconds > 0 and <= 86400",
    ),
    ("heartbeatTimeoutSeconds: 100000", [], "training config: heartbeatTimeoutSeconds: 100000 must be null"),
    (
        "data: {synthetic: {inputShape: [28, .inf]}}",
        [],
        "training config: data.synthetic.inputShape.1: inf is not a finite",
    ),
    (
        "model: {name: 'my.models:build', args: {scale: .nan}}",
        [],
        "training config: model.args.scale: nan is not a finite",
    ),
    (
        "batchSizePerReplica: 1000000000",
        [],
        "training config: batchSizePerReplica: 1000000000 is greater than the maximum "
        f"of {schema.MAX_BATCH_PER_REPLICA}",
    ),
    (
        "data: {synthetic: {inputShape: [100000, 100000]}}",
        [],
        "training config: data.synthetic.inputShape: [100000, 100000] is 10000000000 values per example, more than "
        "the limit of 16777216; use a smaller shape",
    ),
    (
        "data: {synthetic: {inputShape: [20000000]}}",
        [],
        "training config: data.synthetic.inputShape.0: 20000000 is greater than the maximum of 16777216",
    ),
    (
        "data: {synthetic: {inputShape: [10000, 10000]}}",
        [],
        "training config: data.synthetic.inputShape: [10000, 10000] is 100000000 values per example, more than "
        "the limit "
        "of 16777216; use a smaller shape",
    ),
    (
        "batchSizePerReplica: 4096\ndata: {synthetic: {examples: 64, inputShape: [1024, 1024]}}",
        [],
        "training config: batchSizePerReplica: 4096 examples of shape [1024, 1024] are 17179869184 bytes per replica "
        "batch, more than the limit of 2147483648 (2 GiB)",
    ),
    (
        "data: {synthetic: {examples: 10000000, inputShape: [28, 28, 1]}}",
        [],
        "training config: data.synthetic.examples: 10000000 examples of shape [28, 28, 1] are 31360000000 bytes, more "
        "than the limit of 4294967296 (4 GiB)",
    ),
    ("seed: 99999999999", [], "training config: seed: 99999999999 is greater than the maximum of 4294967295"),
    (
        "model: {name: resnet, args: {stages: 40}}",
        [],
        "training config: model.args.stages: 40 must be a positive integer <= 8",
    ),
    (
        "data: {synthetic: {numClasses: 100000000}}",
        [],
        "training config: data.synthetic.numClasses: 100000000 is greater than the maximum of 1000000",
    ),
]


@pytest.mark.parametrize(
    "text,overrides,message", REFUSED, ids=[f"{i}-{t[:30] or o[0]}" for i, (t, o, _) in enumerate(REFUSED)]
)
def test_refused_in_process(tmp_path, text, overrides, message):
    path = tmp_path / "training.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        resolve(str(path), overrides)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "text,overrides,message",
    [REFUSED[0], REFUSED[5], REFUSED[8], REFUSED[13], REFUSED[19]],
    ids=["float-steps", "duplicate", "nan-lr", "inf-heartbeat", "huge-shape"],
)
def test_check_refuses_with_exit_2_and_one_line(tmp_path, text, overrides, message):
    path = tmp_path / "training.yaml"
    path.write_text(text)
    args = ["--check", "--config", str(path)] + [a for o in overrides for a in ("--set", o)]
    result = run_trainer(args, tmp_path=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr  # no traceback, TensorFlow not imported
    assert result.stdout == ""


ACCEPTED = [
    ("learningRate: 10", []),  # the bound itself
    ("learningRate: 1.0e-7", []),
    ("timeoutSeconds: 86400", []),
    ("heartbeatTimeoutSeconds: 1.5", []),
    ("batchSizePerReplica: 1048576\ndata: {synthetic: {examples: 8, inputShape: [8, 8]}}", []),
    ("data: {synthetic: {inputShape: [512, 512, 3], examples: 1024}}\nbatchSizePerReplica: 256", []),
    ("", ["checkpoint={<<: {everySteps: 5, keep: 1}, keep: 2}"]),  # a YAML merge key is not a duplicate
]


@pytest.mark.parametrize("text,overrides", ACCEPTED)
def test_sensible_values_stay_accepted(tmp_path, text, overrides):
    path = tmp_path / "training.yaml"
    path.write_text(text)
    resolve(str(path), overrides)

"""The training step's one all-reduce: `allReduceDtype` (gradients all-reduced in bfloat16/float16
train like float32, the all-reduce really runs in the chosen dtype, and the loss is not
all-reduced on every step) and `gradientAccumulationSteps` (k micro-batches, one all-reduce,
the same update as one batch of the same size). Slow: real TensorFlow, two trainer processes
as one MWMS group on loopback."""

from __future__ import annotations

import json

import pytest
from workers import parse_line, start_group, trainer_cmd

pytestmark = [pytest.mark.slow, pytest.mark.beside]  # nothing timed: it runs beside the cluster tests

# Final loss (mean of steps 41-50, the cnn default model, synthetic data, seed 42) relative to
# float32's, measured on this machine (TF 2.21, CPU; the runs are deterministic, so the margin is
# for another CPU or TensorFlow build, not for noise):
#   Adam (the default): bfloat16 9.6e-5, float16 7.3e-5 (the experiment: bfloat16 5.7e-5);
#   SGD, momentum 0.9, learning rate 0.01 (the loss falls steeply, deviations grow): bfloat16 7.0e-4.
# A wrong gradient scale (the all-reduce as MEAN instead of SUM, i.e. half the gradient) gave
# 7.6e-3 with Adam and 1.1e-1 with SGD: each tolerance sits between the two, about 10x above the
# measured deviation and 7x or more below the bug.
TOLERANCE = {"adam": 1e-3, "sgd": 1e-2}
SGD = ["--set", "optimizer=sgd", "--set", "learningRate=0.01"]

STEPS = 50
ARGS = [
    "--set",
    f"steps={STEPS}",
    "--set",
    "logEverySteps=10",
    "--set",
    "checkpoint.everySteps=25",
    "--set",
    "export.enabled=false",
    "--set",
    "tensorboard.enabled=false",
]


# gradientAccumulationSteps: 2 micro-batches of 32 per replica against SGD's one batch of 64 (the
# same examples make up each step: the pipeline batches 64 per replica either way), so only the
# order of float sums differs. Final loss relative to one batch, measured on this machine (TF
# 2.21, CPU, deterministic): 1.3e-6. k times the gradient (each micro-batch's loss divided by its
# own batch instead of the step's) gave 2.1e-1: the tolerance sits about 80x above the first and
# 2,000x below the second.
ACCUMULATION_TOLERANCE = 1e-4
# Every run here uses TensorFlow's own CPU kernels: on a CPU with AVX512_VNNI, AVX512_BF16 or AMX,
# TensorFlow turns oneDNN's kernels on by default, and those sum in an order that depends on the
# batch size, so 2 x 32 against 64 differed by up to 6.2e-4 at a window and 9e-5 to 1.5e-4 at the
# end (AMD EPYC with AVX-512, 2026-12-07; 1e-7 with oneDNN off). That is rounding too, but the
# tolerances above were measured with TensorFlow's kernels; pinning them keeps the comparison one
# of this trainer's arithmetic, not of which kernels a machine picks.
KERNELS = {"TF_ENABLE_ONEDNN_OPTS": "0"}
ACCUMULATED = ["--set", "batchSizePerReplica=32", "--set", "gradientAccumulationSteps=2"]


def train(tmp_path, dtype: str, name: str, extra=()) -> dict:
    shared = tmp_path / name
    shared.mkdir()
    group = start_group(
        trainer_cmd(*ARGS, *extra, "--set", f"allReduceDtype={dtype}"),
        2,
        str(shared),
        env={"TFMW_SHARED_DIR": str(shared), "TFMW_RUN_ID": "r", "TFMW_DEBUG_COLLECTIVES": "1", **KERNELS},
        tag=name,
    )
    codes = group.wait(300)
    assert codes == [0, 0], group.read_all()
    done = [parse_line(out, "done")[0] for out in group.outputs]
    collectives = [parse_line(out, "debug")[0]["train_step_collectives"] for out in group.outputs]
    progress = [row["loss"] for row in parse_line(group.outputs[0], "progress")]
    completed = json.loads((shared / "r" / "COMPLETED").read_text())
    start = parse_line(group.outputs[0], "start")[0]
    return {
        "done": done,
        "collectives": collectives,
        "progress": progress,
        "loss": completed["finalLoss"],
        "start": start,
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dtype")
    runs = {dtype: train(tmp, dtype, dtype) for dtype in ("float32", "bfloat16", "float16")}
    runs.update({f"{dtype}-sgd": train(tmp, dtype, f"{dtype}-sgd", SGD) for dtype in ("float32", "bfloat16")})
    runs["float32-sgd-2x32"] = train(tmp, "float32", "float32-sgd-2x32", SGD + ACCUMULATED)
    return runs


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_the_step_all_reduces_only_the_gradients_in_the_chosen_dtype(runs, dtype):
    # The traced training step holds exactly one all-reduce (the gradients, packed into one op)
    # and it is of the chosen dtype: a float32 all-reduce here would mean an uncast gradient,
    # a second one the per-step loss reduce that only log steps may do.
    assert runs[dtype]["collectives"] == [dtype, dtype]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "bfloat16-sgd"])
def test_low_precision_all_reduce_trains_like_float32(runs, dtype):
    base, run = runs["float32-sgd" if dtype.endswith("-sgd") else "float32"], runs[dtype]
    tolerance = TOLERANCE["sgd" if dtype.endswith("-sgd") else "adam"]
    # Both workers end with the same weights: the cast-back gradients are applied identically.
    assert len({d["weights_digest"] for d in run["done"]}) == 1
    # The gradients really travelled in another dtype: the weights differ from float32's ...
    assert run["done"][0]["weights_digest"] != base["done"][0]["weights_digest"]
    # ... and the loss still falls like float32's, window by window, and ends within TOLERANCE.
    assert float(run["progress"][-1]) < float(run["progress"][0])
    assert len(run["progress"]) == len(base["progress"]) == STEPS // 10
    for window, (low, full) in enumerate(
        zip(run["progress"], base["progress"], strict=True)
    ):  # printed with 4 decimals
        assert abs(float(low) - float(full)) <= tolerance * float(full) + 1e-4, (dtype, window, low, full)
    deviation = abs(run["loss"] - base["loss"]) / base["loss"]
    assert deviation <= tolerance, f"{dtype}: final loss {run['loss']} vs float32 {base['loss']}: {deviation:.2e}"


def test_accumulated_micro_batches_update_like_one_batch_of_the_same_size(runs):
    base, run = runs["float32-sgd"], runs["float32-sgd-2x32"]
    # The step is the whole effective batch (2 workers x 64, whatever the split) ...
    assert run["start"]["global_batch"] == base["start"]["global_batch"] == "128"
    assert (run["start"]["micro_batches"], base["start"]["micro_batches"]) == ("2", "1")
    # ... with one all-reduce, of the float32 gradients, as with one batch.
    assert run["collectives"] == base["collectives"] == ["float32", "float32"]
    # Both workers hold the same weights, and the split changed them (the micro-batch path ran) ...
    assert len({d["weights_digest"] for d in run["done"]}) == 1
    assert run["done"][0]["weights_digest"] != base["done"][0]["weights_digest"]
    # ... by float rounding only: every window's loss and the final loss agree.
    assert len(run["progress"]) == len(base["progress"]) == STEPS // 10
    for window, (split, whole) in enumerate(zip(run["progress"], base["progress"], strict=True)):
        assert abs(float(split) - float(whole)) <= ACCUMULATION_TOLERANCE * float(whole) + 1e-4, (window, split, whole)
    deviation = abs(run["loss"] - base["loss"]) / base["loss"]
    assert deviation <= ACCUMULATION_TOLERANCE, f"final loss {run['loss']} vs {base['loss']}: {deviation:.2e}"

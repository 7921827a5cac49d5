"""`gradientAccumulationSteps`: k micro-batches per optimizer step, one all-reduce per step, the
same update as one batch of the same size (slow: real TensorFlow, two trainer processes as one
MWMS group on loopback)."""

from __future__ import annotations

import json

import pytest
from workers import parse_line, start_group, trainer_cmd

pytestmark = pytest.mark.slow

STEPS = 30
# SGD, not Adam: Adam's update hardly depends on the gradient's scale, so a micro-batch loss
# divided by the wrong batch (k times the gradient) would pass unseen; SGD's moves with it.
ARGS = [
    "--set",
    f"steps={STEPS}",
    "--set",
    "logEverySteps=10",
    "--set",
    "checkpoint.everySteps=15",
    "--set",
    "export.enabled=false",
    "--set",
    "tensorboard.enabled=false",
    "--set",
    "optimizer=sgd",
    "--set",
    "learningRate=0.01",
]
# Final loss relative to one batch of 64 per replica, measured on this machine (TF 2.21, CPU; the
# runs are deterministic): 2 x 32: 0.0 (the same loss, other weights), 4 x 16: 1.6e-7. The same
# examples make up each step in both runs (the pipeline batches 64 per replica either way), so
# only the order of float sums differs. k times the gradient (each micro-batch's loss divided by
# its own batch instead of the step's) gave 2.0e-2 (k=2) and 2.6e-2 (k=4): the tolerance sits
# about 600x above the measured deviation and 200x below the bug.
TOLERANCE = 1e-4


def train(tmp_path, name: str, per_replica: int, micro_batches: int) -> dict:
    shared = tmp_path / name
    shared.mkdir()
    group = start_group(
        trainer_cmd(
            *ARGS,
            "--set",
            f"batchSizePerReplica={per_replica}",
            "--set",
            f"gradientAccumulationSteps={micro_batches}",
        ),
        2,
        str(shared),
        env={"TFMW_SHARED_DIR": str(shared), "TFMW_RUN_ID": "r", "TFMW_DEBUG_COLLECTIVES": "1"},
        tag=name,
    )
    codes = group.wait(300)
    assert codes == [0, 0], group.read_all()
    return {
        "start": parse_line(group.outputs[0], "start")[0],
        "done": [parse_line(out, "done")[0] for out in group.outputs],
        "collectives": [parse_line(out, "debug")[0]["train_step_collectives"] for out in group.outputs],
        "progress": [float(row["loss"]) for row in parse_line(group.outputs[0], "progress")],
        "loss": json.loads((shared / "r" / "COMPLETED").read_text())["finalLoss"],
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("accumulation")
    return {
        "one batch of 64": train(tmp, "k1", 64, 1),
        "2 x 32": train(tmp, "k2", 32, 2),
        "4 x 16": train(tmp, "k4", 16, 4),
    }


@pytest.mark.parametrize("name", ["2 x 32", "4 x 16"])
def test_accumulated_micro_batches_update_like_one_batch_of_the_same_size(runs, name):
    base, run = runs["one batch of 64"], runs[name]
    micro = int(name.split()[0])
    # The step is the whole effective batch: 2 workers x 64, whatever the split.
    assert run["start"]["global_batch"] == base["start"]["global_batch"] == "128"
    assert run["start"]["micro_batches"] == str(micro)
    # One all-reduce per optimizer step, of the float32 gradients, as with one batch.
    assert run["collectives"] == base["collectives"] == ["float32", "float32"]
    # Both workers hold the same weights, and the split changed them (the micro-batch path ran) ...
    assert len({d["weights_digest"] for d in run["done"]}) == 1
    assert run["done"][0]["weights_digest"] != base["done"][0]["weights_digest"]
    # ... by float rounding only: every window's loss and the final loss agree.
    assert len(run["progress"]) == len(base["progress"]) == STEPS // 10
    for window, (split, whole) in enumerate(zip(run["progress"], base["progress"], strict=True)):
        assert abs(split - whole) <= TOLERANCE * whole + 1e-4, (name, window, split, whole)
    deviation = abs(run["loss"] - base["loss"]) / base["loss"]
    assert deviation <= TOLERANCE, f"{name}: final loss {run['loss']} vs {base['loss']}: {deviation:.2e}"

"""Background checkpoints and the non-chief workers' scratch, across two real worker processes
(slow: real TensorFlow). Each worker gets its own TMPDIR, so what a non-chief writes is seen."""

from __future__ import annotations

import pytest
from workers import parse_line, start_group, trainer_cmd

pytestmark = pytest.mark.slow


def run_two(tmp_path, *sets: str):
    tmps = [tmp_path / "tmp0", tmp_path / "tmp1"]
    for path in tmps:
        path.mkdir()
    args = [
        a
        for s in ("steps=60", "checkpoint.everySteps=20", "logEverySteps=10", "data.shuffleBuffer=0", *sets)
        for a in ("--set", s)
    ]
    group = start_group(
        trainer_cmd(*args),
        2,
        str(tmp_path),
        env={"TFMW_SHARED_DIR": str(tmp_path), "TFMW_RUN_ID": "r"},
        per_worker_env=[{"TMPDIR": str(path)} for path in tmps],
    )
    assert group.wait(180) == [0, 0], group.read_all()
    return group, tmps


def files_under(path) -> list[str]:
    """The files a worker left in its TMPDIR, TensorFlow's own (autograph's generated code) aside."""
    return sorted(
        str(p.relative_to(path)) for p in path.rglob("*") if p.is_file() and not p.name.startswith("__autograph")
    )


def test_without_on_read_variables_a_non_chief_writes_nothing_and_the_chief_publishes_in_the_background(tmp_path):
    group, tmps = run_two(tmp_path, "model.name=mlp", "data.synthetic.inputShape=[8,8]")
    saved = parse_line(group.outputs[0], "checkpoint")
    published = [row for row in saved if "write_seconds" in row]
    assert [row["step"] for row in published] == ["20", "40", "60"], group.outputs[0]
    for row in published:  # the stall is the copy, part of the whole save
        assert 0 <= float(row["seconds"]) <= float(row["write_seconds"]) and float(row["age_seconds"]) >= 0
    state = (tmp_path / "r" / "checkpoints" / "checkpoint").read_text()
    assert 'model_checkpoint_path: "ckpt-60"' in state
    assert (tmp_path / "r" / "model" / "saved_model.pb").exists()
    assert files_under(tmps[1]) == [], "the non-chief wrote scratch files"


def test_with_batchnorm_a_non_chief_takes_part_in_every_save_and_export_through_one_fixed_scratch(tmp_path):
    group, tmps = run_two(
        tmp_path,
        "model.name=resnet",
        "model.args.width=4",
        "model.args.blocks=1",
        "model.args.stages=1",
        "data.synthetic.inputShape=[8,8,1]",
    )
    assert 'model_checkpoint_path: "ckpt-60"' in (tmp_path / "r" / "checkpoints" / "checkpoint").read_text()
    assert (tmp_path / "r" / "model" / "saved_model.pb").exists()
    scratch = files_under(tmps[1])
    # keep=1 at one fixed path: only the last save's files, no export left behind
    assert scratch and all(name.startswith("tfmw-scratch/checkpoints/") for name in scratch), scratch
    assert {name.split("/")[-1].split(".")[0] for name in scratch} <= {"ckpt-60", "checkpoint"}, scratch


def test_an_auto_interval_checkpoints_by_time_at_steps_the_whole_group_agreed_on(tmp_path):
    """interval auto, bounded to 0.2-0.4 s: saves at logging steps chosen by the group's vote (a
    disagreement would deadlock the boundary's all-reduce), and the interval is logged. The bounds
    are a small fraction of the run's training time on any machine here (800 mlp steps: about 3 s
    on a fast one, 9 s loaded), so more than the last step's save comes whatever its speed (with
    1-2 s, 600 steps on a fast machine trained in two intervals and saved only at 100 and 600)."""
    group, _ = run_two(
        tmp_path,
        "model.name=mlp",
        "data.synthetic.inputShape=[8,8]",
        "steps=800",
        "checkpoint.interval=auto",
        "checkpoint.minSeconds=0.2",
        "checkpoint.maxSeconds=0.4",
    )
    chief = group.outputs[0]
    steps = [int(row["step"]) for row in parse_line(chief, "checkpoint") if "write_seconds" in row]
    assert len(steps) >= 3 and all(step % 10 == 0 for step in steps), chief  # more than the last step's
    intervals = [row for row in parse_line(chief, "checkpoint") if "bound" in row]
    assert intervals and 0.2 <= float(intervals[-1]["seconds"]) <= 0.4, chief
    assert intervals[0]["source"] == "prior" and "tfmw checkpoint interval" not in group.outputs[1]

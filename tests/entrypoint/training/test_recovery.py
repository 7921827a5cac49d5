"""Issue 12: a damaged `checkpoint` state file never costs the run its checkpoints (slow: real
TensorFlow restores, in process and through the trainer and launcher as processes)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import tensorflow as tf
from workers import REPO, base_env, free_ports, parse_line, tf_config

from entrypoint.cluster import Cluster
from entrypoint.rundir import RunDir
from entrypoint.training.failures import TrainingError

pytestmark = pytest.mark.slow

GARBAGE_999 = 'garbage {{ model_checkpoint_path: "ckpt-999"\n\x00\x17'


def write_checkpoints(tmp_path, steps=(10, 20, 30)):
    """ckpt-10/20/30 written by the trainer's own CheckpointWriter; v holds the step."""
    from entrypoint.training.trainer import CheckpointWriter

    run = RunDir(str(tmp_path / "run"))
    os.makedirs(run.checkpoints, exist_ok=True)
    v = tf.Variable(0.0)
    ckpt = tf.train.Checkpoint(v=v, step=tf.Variable(0, dtype=tf.int64))
    writer = CheckpointWriter(ckpt, run, Cluster(1, 0), keep=5, kept=[])
    for step in steps:
        v.assign(float(step))
        writer.save(step)
    v.assign(-1.0)
    return run.checkpoints, ckpt, v


def state_path(directory):
    return os.path.join(directory, "checkpoint")


def truncate(directory, step):
    data = os.path.join(directory, f"ckpt-{step}.data-00000-of-00001")
    with open(data, "rb") as f:
        raw = f.read()
    with open(data, "wb") as f:
        f.write(raw[:3])


def write_state(text):
    def damage(directory):
        with open(state_path(directory), "w", encoding="utf-8") as f:
            f.write(text)

    return damage


def remove_state(directory):
    os.remove(state_path(directory))


def garbage_and_truncated_30(directory):
    write_state(GARBAGE_999)(directory)
    truncate(directory, 30)


def names_999_without_index_30(directory):
    write_state('model_checkpoint_path: "ckpt-999"\nall_model_checkpoint_paths: "ckpt-999"\n')(directory)
    os.remove(os.path.join(directory, "ckpt-30.index"))


# (damage, step restored, the reason in the one `tfmw recovered` line (None: no line))
CASES = [
    (lambda d: None, 30, None),
    (write_state(GARBAGE_999), 30, "state file is unparsable (line 1)"),
    (
        write_state('model_checkpoint_path: "ckpt-999"\n'),
        30,
        "state file names ckpt-999, which is missing or incomplete",
    ),
    (write_state(""), 30, "state file is empty"),
    (remove_state, 30, "state file is missing"),
    (lambda d: truncate(d, 30), 20, "state file names ckpt-30, which does not restore"),
    (garbage_and_truncated_30, 20, "state file is unparsable (line 1)"),
    (names_999_without_index_30, 20, "state file names ckpt-999, which is missing or incomplete"),
]


@pytest.mark.parametrize("is_chief", [True, False], ids=["chief", "worker"])
@pytest.mark.parametrize(
    "damage,expected,reason",
    CASES,
    ids=[
        "intact",
        "garbage-naming-999",
        "names-999",
        "empty",
        "missing",
        "newest-truncated",
        "garbage-and-truncated",
        "names-999-and-newest-without-index",
    ],
)
def test_restores_the_newest_intact_checkpoint(tmp_path, capsys, damage, expected, reason, is_chief):
    from entrypoint.training.trainer import restore_latest

    directory, ckpt, v = write_checkpoints(tmp_path)
    damage(directory)
    before = open(state_path(directory), "rb").read() if os.path.exists(state_path(directory)) else None
    restored = restore_latest(ckpt, directory, is_chief=is_chief)
    assert restored.step == expected and float(v.numpy()) == float(expected)
    assert restored.path == os.path.join(directory, f"ckpt-{expected}")
    recovered = [line for line in capsys.readouterr().out.splitlines() if line.startswith("tfmw recovered ")]
    if reason is None:
        assert recovered == []
        return
    assert len(recovered) == 1, recovered
    assert recovered[0].startswith(
        f'tfmw recovered checkpoint={directory}/ckpt-{expected} step={expected} reason="{reason}'
    )
    if is_chief:  # the chief rewrote the state file: TensorFlow's own reader follows it again
        state = tf.train.get_checkpoint_state(directory)
        assert state.model_checkpoint_path == os.path.join(directory, f"ckpt-{expected}")
        assert list(state.all_model_checkpoint_paths)[-1] == state.model_checkpoint_path
        assert all(int(p.rsplit("-", 1)[1]) <= expected for p in state.all_model_checkpoint_paths)
    else:  # only the chief writes in the shared directory
        after = open(state_path(directory), "rb").read() if os.path.exists(state_path(directory)) else None
        assert after == before


def test_complete_checkpoints_none_of_which_restores_are_a_permanent_error(tmp_path):
    from entrypoint.training.trainer import restore_latest

    directory, ckpt, _ = write_checkpoints(tmp_path)
    for step in (10, 20, 30):
        truncate(directory, step)
    with pytest.raises(
        TrainingError,
        match=r"checkpoint: none of the 3 complete checkpoints in .* restores "
        r"\(newest ckpt-30\).*new training.runId",
    ):
        restore_latest(ckpt, directory, is_chief=True)


def test_a_state_file_without_any_checkpoint_starts_at_zero_and_says_so(tmp_path, capsys):
    from entrypoint.training.trainer import restore_latest

    directory = tmp_path / "checkpoints"
    directory.mkdir()
    (directory / "checkpoint").write_text('model_checkpoint_path: "ckpt-999"\n')
    ckpt = tf.train.Checkpoint(step=tf.Variable(0, dtype=tf.int64))
    assert restore_latest(ckpt, str(directory), is_chief=True).step == 0
    out = capsys.readouterr().out
    assert (
        'tfmw recovered checkpoint=- step=0 reason="state file names ckpt-999, which is missing or incomplete; '
        "no complete checkpoint in"
    ) in out


SMALL = [
    "--set",
    "model.name=mlp",
    "--set",
    "data.synthetic.inputShape=[8,8]",
    "--set",
    "export.enabled=false",
    "--set",
    "checkpoint.everySteps=10",
    "--set",
    "checkpoint.keep=5",
]


def run(cmd, tmp_path, run_id, steps, preset=False):
    env = base_env({"TFMW_SHARED_DIR": str(tmp_path), "TFMW_RUN_ID": run_id})
    env.pop("TF_CONFIG", None)
    if preset:  # the launcher with a platform's TF_CONFIG answers with an exit code
        env["TF_CONFIG"] = tf_config(free_ports(1), 0)
    return subprocess.run(
        [*cmd, *SMALL, "--set", f"steps={steps}"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )


TRAINER = [sys.executable, "-m", "entrypoint.training"]
LAUNCHER = [sys.executable, "-m", "entrypoint", "run", "--", *TRAINER]


@pytest.mark.parametrize(
    "state,via", [(GARBAGE_999, TRAINER), ("", LAUNCHER)], ids=["garbage-trainer", "empty-launcher"]
)
def test_a_damaged_state_file_resumes_from_the_newest_checkpoint(tmp_path, state, via):
    first = run(TRAINER, tmp_path, "r", 30)
    assert first.returncode == 0, first.stdout + first.stderr
    run_dir = tmp_path / "r"
    os.remove(run_dir / "COMPLETED")  # the run goes on: 10 more steps
    (run_dir / "checkpoints" / "checkpoint").write_text(state)
    again = run(via, tmp_path, "r", 40, preset=via is LAUNCHER)
    out = again.stdout
    assert again.returncode == 0, out + again.stderr
    assert "Traceback" not in out + again.stderr
    assert parse_line(out, "start")[0]["resume_step"] == "30"
    recovered = [line for line in out.splitlines() if line.startswith("tfmw recovered ")]
    assert len(recovered) == 1 and "checkpoint=" + str(run_dir / "checkpoints" / "ckpt-30") in recovered[0]
    assert parse_line(out, "done")[0]["steps"] == "40"
    if via is LAUNCHER:
        assert out.count("starting training (attempt") == 1  # not retried into exit 5 any more
    assert tf.train.get_checkpoint_state(str(run_dir / "checkpoints")).model_checkpoint_path.endswith("ckpt-40")

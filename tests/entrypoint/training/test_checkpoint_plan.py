"""Issue 12: which checkpoint a restart tries, from the state file and the directory listing
alone (fast: no TensorFlow; tests/entrypoint/training/test_recovery.py restores for real)."""

from __future__ import annotations

import pytest

from entrypoint.training import checkpoints

GOOD_STATE = (
    'model_checkpoint_path: "ckpt-30"\nall_model_checkpoint_paths: "ckpt-10"\n'
    'all_model_checkpoint_paths: "ckpt-20"\nall_model_checkpoint_paths: "ckpt-30"\n'
    "all_model_checkpoint_timestamps: 1796032773.5\nlast_preserved_timestamp: 1796032700.25\n"
)
FILES = [f"ckpt-{n}.{ext}" for n in (10, 20, 30) for ext in ("index", "data-00000-of-00001")]


def make_plan(state, files=FILES):
    return checkpoints.plan("/run/checkpoints", lambda _: list(files) + ["checkpoint"], lambda _: state)


# (state file text or None (missing), the problem reported, the checkpoints tried in order)
CASES = [
    (GOOD_STATE, None, [30, 20, 10]),
    (None, "state file is missing", [30, 20, 10]),
    ("", "state file is empty", [30, 20, 10]),
    ("  \n\n", "state file is empty", [30, 20, 10]),
    ('garbage {{ model_checkpoint_path: "ckpt-999"', "state file is unparsable (line 1)", [30, 20, 10]),
    ('model_checkpoint_path: "ckpt-999"\n', "state file names ckpt-999, which is missing or incomplete", [30, 20, 10]),
    ('all_model_checkpoint_paths: "ckpt-10"\n', "state file names no checkpoint", [30, 20, 10]),
    ("model_checkpoint_path: ckpt-30\n", "state file is unparsable (line 1)", [30, 20, 10]),
    (
        'model_checkpoint_path: "ckpt-30"\nlast_preserved_timestamp: soon\n',
        "state file is unparsable (line 2)",
        [30, 20, 10],
    ),
    ("\x00\x01\x02binary", "state file is unparsable (line 1)", [30, 20, 10]),
    # The state file wins over a newer, complete but unpublished checkpoint (a kill between
    # writing ckpt-20's files and publishing it): the published one is the agreed latest.
    ('model_checkpoint_path: "ckpt-20"\nall_model_checkpoint_paths: "ckpt-20"\n', None, [20, 30, 10]),
    # An absolute path from another mount point: the name is looked up in this directory.
    ('model_checkpoint_path: "/elsewhere/ckpt-30"\n', None, [30, 20, 10]),
]


@pytest.mark.parametrize("state,problem,order", CASES, ids=[str(i) for i in range(len(CASES))])
def test_candidates_and_problem(state, problem, order):
    plan = make_plan(state)
    assert plan.state_problem() == problem
    assert plan.candidates() == [f"/run/checkpoints/ckpt-{n}" for n in order]


def test_only_complete_checkpoints_are_candidates():
    files = [
        "ckpt-10.index",
        "ckpt-10.data-00000-of-00001",
        "ckpt-20.index",
        "ckpt-20.data-00000-of-00002",  # a shard missing
        "ckpt-30.data-00000-of-00001",  # no index yet (killed mid-write)
        "ckpt-40.index",  # no data
        "ckpt-50.index",
        "ckpt-50.data-00000-of-00002",
        "ckpt-50.data-00001-of-00002",
        "ckpt-60.index",
        "ckpt-60.data-00000-of-00001",
        "ckpt-60.data-00000-of-00002",  # mixed shard counts
        "ckpt-70_temp",
        "ckpt-x.index",
        "model.ckpt-80.index",
        "checkpoint",
        ".tmp-123",
    ]
    assert checkpoints.complete_checkpoints(files) == {"ckpt-10": 10, "ckpt-50": 50}
    plan = make_plan('model_checkpoint_path: "ckpt-30"\n', files)
    assert plan.state_problem() == "state file names ckpt-30, which is missing or incomplete"
    assert plan.candidates() == ["/run/checkpoints/ckpt-50", "/run/checkpoints/ckpt-10"]


def test_no_checkpoints_and_no_state_is_a_fresh_start():
    plan = make_plan(None, [])
    assert plan.candidates() == [] and plan.state.problem == "is missing"


def test_kept_list_after_recovery_skips_the_broken_and_the_newer():
    plan = make_plan(None, FILES + ["ckpt-40.index", "ckpt-40.data-00000-of-00001"])
    kept = plan.kept_until("/run/checkpoints/ckpt-30", failed=["/run/checkpoints/ckpt-40", "/run/checkpoints/ckpt-20"])
    assert kept == ["/run/checkpoints/ckpt-10", "/run/checkpoints/ckpt-30"]


def test_object_store_directory():
    plan = checkpoints.plan("gs://bucket/run/checkpoints", lambda _: FILES, lambda _: None)
    assert plan.candidates()[0] == "gs://bucket/run/checkpoints/ckpt-30"


def test_unlistable_directory_is_empty():
    def listdir(_):
        raise OSError("gone")

    assert checkpoints.plan("/nope", listdir, lambda _: None).candidates() == []

"""One owner per run directory (entrypoint.runowner): the pure policy, OWNER's file, and the
launcher's start with it (in-process launchers over a real user command, no cluster)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from entrypoint import runowner
from entrypoint.launcher import Launcher
from entrypoint.runowner import Action, Owner, Recorded, decide

PRESET = '{"cluster":{"worker":["localhost:2222"]},"task":{"type":"worker","index":0}}'
ME = Owner("ml", "train-tf-multiworker")
OTHER = Owner("team-b", "train-tf-multiworker")


def test_the_policy():
    kwargs = dict(path="/s/r/OWNER", adopt=False)
    assert decide(Recorded.NONE, ME, run_exists=False, **kwargs).action is Action.CLAIM
    assert decide(ME, ME, run_exists=True, **kwargs) == runowner.Decision(Action.KEEP)
    ownerless = decide(Recorded.NONE, ME, run_exists=True, **kwargs)
    assert ownerless.action is Action.ADOPT and ownerless.say == (
        "run directory /s/r has no OWNER: adopted by statefulset/train-tf-multiworker in namespace ml"
    )
    refused = decide(OTHER, ME, run_exists=True, **kwargs)
    assert refused.action is Action.REFUSE
    assert refused.say == (
        "run directory /s/r is not this release's: it belongs to statefulset/train-tf-multiworker in namespace "
        "team-b, this is statefulset/train-tf-multiworker in namespace ml; set a distinct training.runId for this "
        "release, or training.adoptRunDir=true to take that run over on purpose"
    )
    taken = decide(OTHER, ME, run_exists=True, path="/s/r/OWNER", adopt=True)
    assert (
        taken.action is Action.ADOPT and "belongs to statefulset/train-tf-multiworker in namespace team-b" in taken.say
    )
    unknown = decide(Recorded.UNREADABLE, ME, run_exists=True, detail="/s/r/OWNER names no namespace", **kwargs)
    assert unknown.action is Action.REFUSE and "cannot tell its owner (/s/r/OWNER names no namespace)" in unknown.say


def test_owner_file_roundtrip_and_what_cannot_be_read(tmp_path):
    path = tmp_path / "OWNER"
    assert runowner.read_owner(path) == (Recorded.NONE, "")
    runowner.write_owner(path, ME, "train-tf-multiworker-0", now=1_800_000_000)
    assert json.loads(path.read_text())["claimedAt"] == "2027-01-15T08:00:00Z"
    assert runowner.read_owner(path) == (ME, "")
    path.write_text("[]")
    assert runowner.read_owner(path)[0] is Recorded.UNREADABLE
    path.unlink()
    path.mkdir()  # an I/O error reading it: unknown, never "nobody's"
    recorded, detail = runowner.read_owner(path)
    assert recorded is Recorded.UNREADABLE and "IsADirectoryError" in detail
    assert runowner.look(None, "ml", "s", False) is None  # an object store: not kept
    assert runowner.look(tmp_path, None, "s", False) is None  # no release known (a platform's TF_CONFIG)


def _command(tmp_path: Path) -> list[str]:
    """A user command that counts its attempts and exits 0 (the chief's launcher writes COMPLETED)."""
    script = tmp_path / "train.py"
    script.write_text(
        "import pathlib, sys\n"
        "counter = pathlib.Path(sys.argv[0]).with_name('attempts')\n"
        "counter.write_text(str(int(counter.read_text()) + 1 if counter.exists() else 1))\n"
    )
    return [sys.executable, str(script)]


def _attempts(tmp_path: Path) -> int:
    counter = tmp_path / "attempts"
    return int(counter.read_text()) if counter.exists() else 0


def _env(shared: Path, owner: Owner, **extra) -> dict:
    return {
        "TF_CONFIG": PRESET,
        "TFMW_RUN_ID": "r1",
        "TFMW_SHARED_DIR": str(shared),
        "TFMW_NAMESPACE": owner.namespace,
        "TFMW_STATEFULSET": owner.statefulset,
        "TFMW_POD_NAME": f"{owner.statefulset}-0",
        "PATH": os.environ["PATH"],
        **extra,
    }


@pytest.fixture
def shared(tmp_path):
    path = tmp_path / "shared"
    path.mkdir()
    return path


def test_the_first_start_claims_and_the_same_owner_comes_back(tmp_path, shared):
    logs = []
    assert Launcher(_env(shared, ME), _command(tmp_path), log=logs.append).run() == 0
    assert runowner.read_owner(shared / "r1" / "OWNER") == (ME, "")
    assert _attempts(tmp_path) == 1 and not [line for line in logs if "OWNER" in line]  # a claim is not news
    again = []
    assert Launcher(_env(shared, ME), _command(tmp_path), log=again.append).run() == 0
    assert _attempts(tmp_path) == 1  # its own finished run: found complete, not trained again
    assert any(line.startswith("tfmw completed") for line in again)


def test_another_release_is_refused_in_one_line_and_never_reads_the_others_completed(tmp_path, shared):
    assert Launcher(_env(shared, OTHER), _command(tmp_path), log=[].append).run() == 0  # team-b's run, finished
    logs = []
    assert Launcher(_env(shared, ME), _command(tmp_path), log=logs.append).run() == 2
    assert _attempts(tmp_path) == 1  # nothing trained, and not "succeeded" on team-b's COMPLETED
    failed = [line for line in logs if line.startswith("tfmw failed ")]
    assert len(failed) == 1 and "reason=BadConfig" in failed[0], logs
    for words in ("namespace team-b", "namespace ml", "training.runId", "training.adoptRunDir=true"):
        assert words in failed[0]
    assert not any(line.startswith("tfmw completed") for line in logs)
    assert runowner.read_owner(shared / "r1" / "OWNER") == (OTHER, "")  # still team-b's


def test_adoption_takes_the_run_over_and_rewrites_owner(tmp_path, shared):
    (shared / "r1").mkdir()
    runowner.write_owner(shared / "r1" / "OWNER", OTHER, "x-0")
    logs = []
    assert Launcher(_env(shared, ME, TFMW_ADOPT_RUN_DIR="true"), _command(tmp_path), log=logs.append).run() == 0
    assert _attempts(tmp_path) == 1
    assert runowner.read_owner(shared / "r1" / "OWNER") == (ME, "")
    taken = [line for line in logs if "taken over by" in line]
    assert len(taken) == 1 and "namespace team-b" in taken[0] and "training.adoptRunDir=true" in taken[0]
    assert Launcher(_env(shared, OTHER), _command(tmp_path), log=[].append).run() == 2  # the former owner now


def test_a_run_directory_from_before_owners_is_adopted_once(tmp_path, shared):
    (shared / "r1" / "checkpoints").mkdir(parents=True)  # an older launcher's run, mid-training
    logs = []
    assert Launcher(_env(shared, ME), _command(tmp_path), log=logs.append).run() == 0
    assert runowner.read_owner(shared / "r1" / "OWNER") == (ME, "")
    adopted = [line for line in logs if "has no OWNER" in line]
    assert adopted == [f"tfmw launcher run directory {shared / 'r1'} has no OWNER: adopted by {ME}"]


def test_a_bad_adoption_value_is_refused_in_one_line(capsys):
    from entrypoint.cli import main

    env = _env(Path("/nonexistent"), ME, TFMW_ADOPT_RUN_DIR="maybe")
    assert main(["run", "--", "true"], env) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "TFMW_ADOPT_RUN_DIR='maybe' must be true or false (training.adoptRunDir)" in err[0]

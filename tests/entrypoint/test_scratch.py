"""Training scratch (entrypoint.scratch): what is scratch (a rule over names), its removal at
each attempt's start, before the command runs (with a warm standby too), and a real group of two
TensorFlow workers SIGKILLed mid-save that leaks nothing into its next attempt."""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

from entrypoint import scratch
from entrypoint.lifecycle import Phase
from entrypoint.supervisor import Supervisor, SupervisorConfig


# -- the rule ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name,is_scratch",
    [
        ("tfmw-scratch", True),  # a non-chief's one fixed scratch
        ("tfmw-ckpt-k2j1x_", True),  # older builds: one per attempt
        (".model-tmp-8a7f", True),  # older builds: a non-chief's export copy
        ("tfmw-heartbeat-12", False),  # the launcher's own heartbeat file
        ("tfmw-scratchy", False),
        ("model-tmp-1", False),
        ("user-data", False),
    ],
)
def test_what_is_scratch_in_the_pods_tmp(name, is_scratch):
    assert scratch.is_tmp_scratch(name) is is_scratch


@pytest.mark.parametrize(
    "name,is_scratch",
    [
        ("ckpt-200_temp", True),  # TensorFlow's sharded save staging, never merged
        ("ckpt-200.index.tempstate8392", True),  # BundleWriter's write-then-rename
        ("ckpt-200.data-00000-of-00001.tempstate1", True),
        ("checkpoint.tmp3f2a9c", True),  # the state file's write-then-rename
        ("ckpt-200.index", False),  # a published checkpoint
        ("ckpt-200.data-00000-of-00001", False),
        ("checkpoint", False),  # the state file
        ("ckpt-x_temp", False),
        ("my_temp", False),  # a user's own directory
    ],
)
def test_what_is_scratch_in_the_checkpoints(name, is_scratch):
    assert scratch.is_checkpoint_scratch(name) is is_scratch


def test_leftovers_of_the_run_directory_only_for_the_chief():
    tmp, run = "/tmp", "/shared/r"
    names = dict(tmp_names=["tfmw-scratch", "x"], run_names=[".model-tmp-1", "model", "COMPLETED"])
    ckpts = ["ckpt-1_temp", "ckpt-1.index", "checkpoint", "checkpoint.tmpab"]
    assert scratch.leftovers(tmp, **names, checkpoint_names=ckpts) == ["/tmp/tfmw-scratch"]  # not the chief
    assert scratch.leftovers(tmp, **names, run_dir=run, checkpoint_names=ckpts) == [
        "/shared/r/.model-tmp-1",
        "/shared/r/checkpoints/checkpoint.tmpab",
        "/shared/r/checkpoints/ckpt-1_temp",
        "/tmp/tfmw-scratch",
    ]


def test_the_scratch_paths_the_trainer_writes():
    assert scratch.scratch_checkpoints("/t") == "/t/tfmw-scratch/checkpoints"
    assert scratch.scratch_export("/t") == "/t/tfmw-scratch/export"


# -- the removal -------------------------------------------------------------------------------
def tree(root: Path, files: dict[str, int]) -> None:
    for rel, size in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * size)


PUBLISHED = ["checkpoints/checkpoint", "checkpoints/ckpt-100.index", "checkpoints/ckpt-100.data-00000-of-00001"]


def test_clean_removes_scratch_says_how_much_and_keeps_published_checkpoints(tmp_path):
    tmp, run = tmp_path / "tmp", tmp_path / "run"
    tree(tmp, {"tfmw-scratch/checkpoints/ckpt-9.data-00000-of-00001": 1 << 20, "tfmw-ckpt-a/x": 10, "keep": 1})
    tree(
        run,
        {
            **{p: 5 for p in PUBLISHED},
            "checkpoints/ckpt-200_temp/part-00000-of-00001.data-00000-of-00001": 2 << 20,
            "checkpoints/checkpoint.tmp77": 3,
            ".model-tmp-q/saved_model.pb": 7,
            "model/saved_model.pb": 7,
        },
    )
    said = []
    removed = scratch.clean(str(tmp), str(run), said.append)
    assert sorted(os.listdir(tmp)) == ["keep"]
    assert sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.is_file()) == sorted(
        [*PUBLISHED, "model/saved_model.pb"]
    )
    assert removed.bytes == (1 << 20) + 10 + (2 << 20) + 3 + 7
    assert len(said) == 1 and said[0].startswith("scratch: removed 5 left by an earlier attempt (3.0 MiB): ")
    assert "and 2 more" in said[0]  # five paths, three named


def test_clean_of_a_non_chief_never_touches_the_run_directory(tmp_path):
    run = tmp_path / "run"
    tree(run, {"checkpoints/ckpt-200_temp/part": 1, ".model-tmp-q/x": 1})
    scratch.clean(str(tmp_path / "tmp"), None, lambda line: None)
    assert (run / "checkpoints/ckpt-200_temp/part").exists() and (run / ".model-tmp-q/x").exists()


def test_clean_with_nothing_to_remove_says_nothing(tmp_path):
    said = []
    removed = scratch.clean(str(tmp_path / "absent"), str(tmp_path / "absent-run"), said.append)
    assert said == [] and removed.paths == ()


def test_a_path_that_cannot_be_removed_is_said_and_training_goes_on(tmp_path, monkeypatch):
    tree(tmp_path, {"tfmw-ckpt-a/x": 1})

    def refuse(path):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(scratch.shutil, "rmtree", refuse)
    said = []
    removed = scratch.clean(str(tmp_path), None, said.append)
    assert removed.paths == () and len(removed.failed) == 1
    assert said == [f"scratch: could not remove {tmp_path}/tfmw-ckpt-a: Permission denied (training goes on)"]


# -- at each attempt's start, before the command -----------------------------------------------
# Attempt 1 writes scratch and is SIGKILLed (no finally runs); attempt 2 reports what it found.
KILLED_THEN_LOOK = """
import os, pathlib, signal, sys, time
tmp = pathlib.Path(os.environ["TMPDIR"])
counter = tmp.parent / "attempts"
n = int(counter.read_text()) if counter.exists() else 0
counter.write_text(str(n + 1))
if n == 0:
    (tmp / "tfmw-scratch" / "checkpoints").mkdir(parents=True)
    (tmp / "tfmw-scratch" / "checkpoints" / "ckpt-50.data-00000-of-00001").write_bytes(b"x" * 4096)
    time.sleep(float(os.environ.get("SLEEP", "0")))
    os.kill(os.getpid(), signal.SIGKILL)
(tmp.parent / "found").write_text(" ".join(sorted(os.listdir(tmp))))
"""


@pytest.mark.parametrize("standby", [None, ("json",)], ids=["cold", "warm-standby"])
def test_the_next_attempt_starts_with_no_scratch_of_a_killed_one(tmp_path, standby):
    """The standby for attempt 2 is started while attempt 1 runs; it is told to run the command
    only after the scratch is removed, so it finds none either."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    (tmp_path / "cmd.py").write_text(textwrap.dedent(KILLED_THEN_LOOK))
    logs = []
    cfg = SupervisorConfig(
        command=[sys.executable, str(tmp_path / "cmd.py")],
        env=dict(os.environ, TMPDIR=str(tmp), SLEEP="0.6" if standby else "0"),
        run_dir=None,
        heartbeat_file=tmp_path / "hb",
        poll_seconds=0.05,
        backoff_first_seconds=0.01,
        log=logs.append,
        standby_preload=standby,
        standby_delay_seconds=0.1,
        clean_scratch=lambda: scratch.clean(str(tmp), None, logs.append),
    )
    assert Supervisor(cfg).run().phase is Phase.SUCCEEDED
    assert (tmp_path / "attempts").read_text() == "2"
    assert (tmp_path / "found").read_text() == ""  # nothing of attempt 1's scratch
    assert any(line.startswith(f"scratch: removed 1 left by an earlier attempt (0.0 MiB): {tmp}") for line in logs)
    if standby:
        assert any("start standby=yes" in line for line in logs), logs


# -- wired in the launcher: every worker its own tmp, the chief also the run directory --------------
LEFT_IN_TMP = ("tfmw-scratch/checkpoints/ckpt-20.index", "tfmw-ckpt-x1/ckpt-20.index", ".model-tmp-y/saved_model.pb")
LEFT_IN_RUN = ("checkpoints/ckpt-40_temp/part-00000-of-00001.index", ".model-tmp-z/saved_model.pb")


@pytest.mark.parametrize("pod,chief", [("train-0", True), ("train-1", False)])
def test_the_launcher_cleans_before_the_command_the_run_directory_only_on_the_chief(fake_api, tmp_path, pod, chief):
    from launcherkit import SUCCEEDS, Run, command, pod_env

    tmp, run_dir = Path(tempfile.gettempdir()), tmp_path / "shared" / "r1"  # the test's own (conftest)
    tree(tmp, dict.fromkeys(LEFT_IN_TMP, 100))
    tree(run_dir, {**dict.fromkeys(LEFT_IN_RUN, 100), **dict.fromkeys(PUBLISHED, 5)})
    looks = """
    import os
    tmp = os.environ["TMPDIR"]
    mine = ("tfmw-heartbeat-",)  # the launcher's own files for this attempt (heartbeat, MTBF estimate)
    left = [name for name in os.listdir(tmp) if not name.startswith(mine)]
    open(os.path.join(tmp, os.pardir, "found"), "w").write(" ".join(sorted(left)))
"""
    env = pod_env(fake_api, tmp_path, pod=pod, replicas=2, TMPDIR=str(tmp))
    run = Run(env, command(tmp_path, looks + SUCCEEDS))
    run.until("tfmw launcher idle:")
    assert not [p for p in tmp.iterdir() if scratch.is_tmp_scratch(p.name)]
    assert all((run_dir / p).exists() for p in PUBLISHED)
    assert all((run_dir / p).exists() is not chief for p in LEFT_IN_RUN)
    removed = run.line("tfmw launcher scratch: removed")
    assert removed.startswith(f"tfmw launcher scratch: removed {3 + 2 * chief} left by an earlier attempt")
    assert (tmp.parent / "found").read_text() == ""  # the command found none of it: removed before it ran
    run.stop()


# -- real TensorFlow: a group SIGKILLed mid-save -----------------------------------------------
def worker_config(tmp_path: Path, i: int, tf_config: str, seen: list, lines: list) -> SupervisorConfig:
    from workers import base_env, trainer_cmd

    tmp = tmp_path / f"tmp{i}"  # each worker's own pod /tmp
    tmp.mkdir()
    run = tmp_path / "shared" / "r"
    # A tiny resnet: its BatchNormalization variables are ON_READ, so a non-chief writes its copy
    # of every checkpoint (TensorFlow's save all-reduces them on every worker).
    sets = [
        "model.name=resnet", "model.args.width=4", "model.args.blocks=1", "model.args.stages=1",
        "data.synthetic.inputShape=[8,8,1]", "data.synthetic.examples=256", "steps=200", "logEverySteps=50",
        "checkpoint.everySteps=100",
    ]  # fmt: skip
    overrides = [arg for item in sets for arg in ("--set", item)]
    env = base_env(
        {
            "TMPDIR": str(tmp),
            "TFMW_SHARED_DIR": str(tmp_path / "shared"),
            "TFMW_RUN_ID": "r",
            "TF_CONFIG": tf_config,
            "TFMW_FAULT_CHECKPOINT_PAUSE_SECONDS": "3",  # the chief, between a save's files and its publishing
        }
    )
    chief = i == 0

    def clean() -> None:  # as the launcher wires it, and what each attempt then starts with
        before = sorted(n for n in os.listdir(tmp) if scratch.is_tmp_scratch(n))
        scratch.clean(str(tmp), str(run) if chief else None, lines.append)
        seen.append((before, sorted(n for n in os.listdir(tmp) if scratch.is_tmp_scratch(n))))

    return SupervisorConfig(
        command=trainer_cmd(*overrides),
        env=env,
        run_dir=run,
        heartbeat_file=tmp_path / f"hb{i}",
        is_chief=chief,
        poll_seconds=0.1,
        backoff_first_seconds=0.1,
        log=lines.append,
        on_output=lines.append,
        clean_scratch=clean,
    )


@pytest.mark.slow
def test_a_group_sigkilled_mid_save_leaks_no_scratch_and_resumes_from_the_last_published(tmp_path):
    from workers import free_ports, tf_config

    ports = free_ports(2)
    seen: list[list] = [[], []]
    lines: list[list] = [[], []]
    sups = [Supervisor(worker_config(tmp_path, i, tf_config(ports, i), seen[i], lines[i])) for i in (0, 1)]
    endings: list = [None, None]
    threads = [threading.Thread(target=lambda i=i: endings.__setitem__(i, sups[i].run())) for i in (0, 1)]
    for t in threads:
        t.start()
    try:
        # The chief holds step 200's checkpoint unpublished; worker 1 has written its copy of it.
        deadline = time.monotonic() + 120
        while not (
            any("tfmw checkpoint writing step=200" in line for line in lines[0])
            and any(p.name == "ckpt-200.index" for p in (tmp_path / "tmp1").rglob("*"))
        ):
            assert time.monotonic() < deadline and all(t.is_alive() for t in threads), lines
            time.sleep(0.05)
        for sup in sups:  # the next attempts hold no pause
            sup.cfg.env = {k: v for k, v in sup.cfg.env.items() if k != "TFMW_FAULT_CHECKPOINT_PAUSE_SECONDS"}
        for sup in sups:  # as an OOM kill or the watchdog would: no finally runs
            sup._process.signal(signal.SIGKILL)
        for t in threads:
            t.join(timeout=150)
    finally:
        for sup in sups:
            sup.request_stop(signal.SIGKILL)
        for t in threads:
            t.join(timeout=10)
    assert [e.phase if e else None for e in endings] == [Phase.SUCCEEDED, Phase.SUCCEEDED], lines
    # worker 1's second attempt: attempt 1 left its checkpoint copy, the launcher removed it first
    assert len(seen[1]) == 2 and seen[1][1][0] != [] and seen[1][1][1] == [], seen
    assert any(line.startswith("scratch: removed") for line in lines[1])
    starts = [line for line in lines[0] if line.startswith("tfmw start")]
    assert len(starts) == 2 and "resume_step=100" in starts[1], starts  # step 200 was never published
    assert not any(scratch.is_checkpoint_scratch(p.name) for p in (tmp_path / "shared" / "r").rglob("*"))

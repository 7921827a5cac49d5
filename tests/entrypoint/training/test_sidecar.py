"""The evaluator (entrypoint/training/sidecar.py): which checkpoint to evaluate when, and the
waiting and ending rules, pure; then as a real process (slow) on a run with no checkpoint."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
from workers import REPO, base_env

from entrypoint.errors import EXIT_SIGTERM, EXIT_TRAINING_FAILED
from entrypoint.training import checkpoints
from entrypoint.training.sidecar import Decision, Notice, decide


def plan(*steps: int, state: int | None = None) -> checkpoints.Plan:
    names = [n for s in steps for n in (f"ckpt-{s}.index", f"ckpt-{s}.data-00000-of-00001")]
    text = None if state is None else f'model_checkpoint_path: "ckpt-{state}"\n'
    return checkpoints.plan("/r/checkpoints", lambda _: names, lambda _: text)


def test_nothing_to_evaluate_is_never_done():
    assert decide(plan(), None, completed=False) == Decision(None, None, False)
    assert decide(plan(), None, completed=True).done is False  # never exits 0 without evaluating


def test_the_newest_complete_checkpoint_is_evaluated_once():
    first = decide(plan(10, 20, state=20), None, completed=False)
    assert (first.checkpoint, first.step, first.done) == ("/r/checkpoints/ckpt-20", 20, False)
    assert decide(plan(10, 20, state=20), 20, completed=False) == Decision(None, None, False)
    newer = decide(plan(10, 20, 30, state=30), 20, completed=False)
    assert newer.step == 30


def test_a_half_written_checkpoint_is_not_evaluated():
    names = ["ckpt-10.index", "ckpt-10.data-00000-of-00001", "ckpt-20.index"]  # ckpt-20's data missing
    half = checkpoints.plan("/r/checkpoints", lambda _: names, lambda _: 'model_checkpoint_path: "ckpt-20"\n')
    assert decide(half, None, completed=False).step == 10


def test_the_run_is_done_when_complete_and_its_newest_is_evaluated():
    # completed before the newest was evaluated: evaluate it, and that is the final one
    assert decide(plan(20, 40, state=40), 20, completed=True) == Decision("/r/checkpoints/ckpt-40", 40, True)
    # completed after: nothing new, done (the last result is published again as final)
    assert decide(plan(20, 40, state=40), 40, completed=True) == Decision(None, None, True)


def test_waiting_is_said_at_most_once_a_minute():
    lines, now = [], [0.0]
    notice = Notice(lines.append, clock=lambda: now[0])
    for t in (0, 1, 30, 59.9, 60, 61, 119, 121):
        now[0] = t
        notice.say("waiting")
    assert len(lines) == 3 and lines[0] == "tfmw eval waiting"


# -- a real evaluator process (TensorFlow imported) --------------------------------------------------
def evaluator(tmp_path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "entrypoint.training",
            "--evaluate",
            "--shared-dir",
            str(tmp_path),
            "--run-id",
            "r",
            "--set",
            "evaluation.pollSeconds=0.2",
            *extra,
        ],
        cwd=REPO,
        env=base_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.slow
def test_an_evaluator_without_checkpoints_waits_saying_so_once(tmp_path):
    proc = evaluator(tmp_path)
    time.sleep(8)  # dozens of polls
    assert proc.poll() is None, proc.stdout.read()
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == EXIT_SIGTERM, out
    waiting = [line for line in out.splitlines() if line.startswith("tfmw eval waiting for the first checkpoint")]
    assert len(waiting) == 1, out
    assert "step=" not in out and not (tmp_path / "r" / "eval.json").exists()


@pytest.mark.slow
def test_a_run_completed_without_checkpoints_is_exit_4_not_0(tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "COMPLETED").write_text(json.dumps({"runId": "r", "steps": 10}))
    proc = evaluator(tmp_path)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_TRAINING_FAILED, out
    assert "the run completed with no complete checkpoint" in out

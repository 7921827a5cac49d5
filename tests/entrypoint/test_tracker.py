"""The run tracker (entrypoint.tracker): the trainer's lines it follows, what it records, and
who records (the chief everything, any worker its own Failed)."""

from __future__ import annotations

import pytest

from entrypoint.lifecycle import TERMINAL_KEYS, Phase, Reason, fresh
from entrypoint.tracker import RunTracker, followed


class Recorder:
    def __init__(self):
        self.records, self.events = [], []

    def record(self, state, keys):
        self.records.append((state, keys))

    def event(self, reason, event_type, message):
        self.events.append((reason, event_type, message))


def tracker(is_chief=True, index=0):
    rec, logs = Recorder(), []
    return (
        RunTracker(
            fresh("r1", "rev-a", "2026-11-30T10:00:00Z"),
            rec,
            is_chief=is_chief,
            worker_index=index,
            log=logs.append,
            clock=lambda: 1_800_000_000.0,
        ),
        rec,
        logs,
    )


@pytest.mark.parametrize(
    "line,expected",
    [
        ("tfmw start run=r worker=0/2 replicas=2 resume_step=20 steps=100", ("start", {"resume_step": "20"})),
        ("tfmw progress step=30/100 epoch=1 loss=0.5 examples_per_sec=9", ("progress", {"step": "30/100"})),
        ("tfmw checkpoint saved step=40 path=/c/ckpt-40", ("checkpoint", {"step": "40"})),
        ("tfmw error retryable=true worker=0 UnavailableError: a=b c", ("error", {"worker": "0"})),
        ("tfmw done steps=100 final_loss=0.1 model=-", ("done", {"final_loss": "0.1"})),
    ],
)
def test_lines_it_follows(line, expected):
    parsed = followed(line)
    assert parsed.kind == expected[0] and expected[1].items() <= parsed.fields.items()


@pytest.mark.parametrize(
    "line",
    [
        "tfmw checkpoint writing step=40",
        "[pod] tfmw progress step=1/2",
        "tfmw launcher starting",
        "progress step=1/2",
        "",
    ],
)
def test_lines_it_ignores(line):
    assert followed(line) is None


def test_progress_and_checkpoints_update_the_state_and_the_chief_records_checkpoints():
    t, rec, _ = tracker()
    t.on_line("tfmw start run=r1 worker=0/2 replicas=2 resume_step=20 steps=100")
    t.on_line("tfmw progress step=30/100 epoch=1 loss=0.4321 examples_per_sec=9")
    assert rec.records == []  # progress alone is not written (checkpoints and transitions are)
    t.on_line("tfmw checkpoint saved step=40 path=/c/ckpt-40")
    state = t.state
    assert (state.step, state.total_steps, state.loss, state.last_checkpoint_step) == (40, 100, "0.4321", 40)
    assert [r[0].last_checkpoint_step for r in rec.records] == [40]
    t.on_line("tfmw done steps=100 final_loss=0.1000 model=- weights_digest=x")
    assert (t.state.step, t.state.loss) == (100, "0.1000")


def test_a_worker_records_only_its_own_failure_with_the_terminal_keys():
    t, rec, logs = tracker(is_chief=False, index=1)
    t.on_line("tfmw checkpoint saved step=40 path=x")  # (only the chief prints these anyway)
    t.transition(Phase.RUNNING)
    t.transition(Phase.RESTARTING, message="lost")
    assert rec.records == [] and rec.events == []
    t.transition(Phase.RUNNING)
    t.transition(Phase.FAILED, Reason.TRAINING_FAILED, "DataError: corrupt")
    assert [(s.phase, keys) for s, keys in rec.records] == [(Phase.FAILED, TERMINAL_KEYS)]
    assert rec.events == [("Failed", "Warning", "DataError: corrupt")]
    assert logs[-1] == (
        "tfmw lifecycle phase=Failed from=Running run=r1 worker=1 reason=TrainingFailed "
        'restarts=1 message="DataError: corrupt"'
    )


def test_the_chief_records_every_transition_and_its_event():
    t, rec, _ = tracker()
    t.transition(Phase.RUNNING, message="2 workers training")
    t.transition(Phase.RESTARTING, message="lost")
    t.transition(Phase.RUNNING)
    t.transition(Phase.SUCCEEDED, Reason.COMPLETED, "done")
    assert [s.phase for s, _ in rec.records] == [Phase.RUNNING, Phase.RESTARTING, Phase.RUNNING, Phase.SUCCEEDED]
    assert [e[0] for e in rec.events] == ["Started", "Restarted", "Succeeded"]


def test_restart_message_names_the_lost_worker_and_the_resume_step():
    t, _, _ = tracker(index=0)
    t.on_line("tfmw checkpoint saved step=20 path=x")
    t.on_line("tfmw error retryable=true worker=0 UnavailableError: from /job:worker/replica:0/task:1: socket closed")
    assert (
        t.restart_message("a peer failed (exit 75)")
        == "worker 1 lost: UnavailableError: from /job:worker/replica:0/task:1: socket closed, resuming from step 20"
    )
    t.on_line(
        "tfmw error retryable=true worker=0 UnavailableError: Collective ops is aborted by: Error reported "
        "from /job:worker/task:2: The following tasks are unhealthy"
    )
    assert t.restart_message("exit 75").startswith("worker 2 lost: UnavailableError: Collective ops is aborted")
    t.attempt_started()  # a new attempt forgets the old error
    assert t.restart_message("killed by signal SIGKILL") == "killed by signal SIGKILL, resuming from step 20"
    t.on_line("tfmw error retryable=true worker=0 DeadlineExceededError: collective timed out")
    assert t.restart_message("exit 75") == "exit 75: DeadlineExceededError: collective timed out, resuming from step 20"

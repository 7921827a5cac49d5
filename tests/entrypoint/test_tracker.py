"""The run tracker (entrypoint.tracker): the trainer's lines it follows, what it records, and
who records (the chief everything, any worker its own Failed)."""

from __future__ import annotations

import pytest

from entrypoint.goodput import Ledger
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


# -- readiness: Ready means "in a group that trains" (entrypoint.readiness) ------------------


def test_a_worker_is_ready_only_while_its_group_trains():
    t, _, _ = tracker(is_chief=False, index=1)
    assert t.ready() == (False, "the group is not training: Pending")
    t.transition(Phase.RUNNING, message="run r1: 2 workers training")
    t.attempt_started()
    assert t.ready() == (False, "the group is forming: no training step in this attempt yet")
    t.beat(1, "start")
    assert t.ready()[0] is False  # restoring, tracing: not a step yet
    t.beat(5, "train")
    assert t.ready() == (True, "the group trains")
    assert t.ready(seconds_without_progress=61) == (False, "no training progress for 61s")
    t.transition(Phase.RESTARTING, message="worker 0 lost")
    assert t.ready() == (False, "the group is not training: Restarting")
    t.attempt_started()
    t.transition(Phase.RUNNING, message="attempt 2")
    assert t.ready()[0] is False  # a new attempt: not until it steps
    t.beat(20, "train")
    assert t.ready()[0] is True
    t.transition(Phase.SUCCEEDED, Reason.COMPLETED, "done")
    assert t.ready() == (True, "the run has ended (Succeeded): nothing to guard")


def test_a_user_command_without_a_heartbeat_is_ready_once_its_attempt_runs():

    t = RunTracker(
        fresh("r1", "a", "2026-11-30T10:00:00Z"),
        Recorder(),
        is_chief=True,
        worker_index=0,
        log=lambda _: None,
        ledger=Ledger(0.0, beats=False),
    )
    t.transition(Phase.RUNNING)
    t.attempt_started()
    assert t.ready() == (True, "the group trains")


# -- where a restart resumes, as far as the launcher knows --------------------------------------


def test_a_restart_says_where_it_resumes_and_never_step_0_for_a_script_of_its_own():

    t, _, _ = tracker()
    assert t.resume_point() == "resuming from the start (no checkpoint yet)"
    t.on_line("tfmw checkpoint saved step=40 path=/c/ckpt-40")
    assert t.resume_point() == "resuming from step 40"
    script = RunTracker(
        fresh("r1", "a", "2026-11-30T10:00:00Z"),
        Recorder(),
        is_chief=True,
        worker_index=0,
        log=lambda _: None,
        ledger=Ledger(0.0, beats=False),
    )
    assert script.restart_message("exit 1") == (
        "exit 1, the training command resumes from its own checkpoint, if it keeps one"
    )


# -- the grace period covers a whole checkpoint interval ------------------------------------------


def grace_tracker(grace: int):
    now = [1000.0]
    rec, logs = Recorder(), []
    t = RunTracker(
        fresh("r1", "a", "2026-11-30T10:00:00Z"),
        rec,
        is_chief=True,
        worker_index=0,
        log=logs.append,
        clock=lambda: now[0],
        grace_seconds=grace,
    )
    t.transition(Phase.RUNNING)
    t.attempt_started()
    return t, rec, logs, now


def test_a_grace_period_shorter_than_a_checkpoint_interval_is_said_once_with_the_value_to_raise():
    t, rec, logs, now = grace_tracker(120)
    t.on_line("tfmw checkpoint saved step=20 path=/c/ckpt-20 seconds=2.0")
    now[0] += 130.0  # 20 steps and a save took 130 s: a stop right after step 20 waits that long
    t.on_line("tfmw checkpoint saved step=40 path=/c/ckpt-40 seconds=3.5")
    now[0] += 130.0
    t.on_line("tfmw checkpoint saved step=60 path=/c/ckpt-60 seconds=3.5")
    warnings = [e for e in rec.events if e[0] == "GracePeriodTooShort"]
    assert len(warnings) == 1 and warnings[0][1] == "Warning"
    message = warnings[0][2]
    assert message.startswith(
        "workers.terminationGracePeriodSeconds=120 is shorter than a checkpoint interval (130s from step 20 to "
        "40, its write 3.5s)"
    )
    assert "lose up to 20 steps; raise it to at least 145" in message
    assert sum("warning: workers.terminationGracePeriodSeconds=120" in line for line in logs) == 1
    assert "warning: workers.terminationGracePeriodSeconds=120" in t.state.message


def test_a_grace_period_that_covers_the_interval_says_nothing():
    t, rec, _, now = grace_tracker(120)
    for step in (20, 40, 60):
        t.on_line(f"tfmw checkpoint saved step={step} path=/c/ckpt-{step} seconds=1.0")
        now[0] += 90.0
    assert not [e for e in rec.events if e[0] == "GracePeriodTooShort"]


def test_the_auto_checkpoint_interval_reaches_the_status_and_the_next_attempt_gets_the_failure_rate(tmp_path):
    t, rec, _ = tracker()
    path = str(tmp_path / "mtbf")
    assert t.attempt_env(path) == {"TFMW_MTBF_FILE": path}
    assert open(path).read() == "86400.0 prior\n"
    t.on_line("tfmw checkpoint interval seconds=131.4 stall=0.100 mtbf=86400 source=prior bound=young-daly")
    assert t.state.checkpoint_interval_seconds == "131.4"
    assert t.observed.checkpoint_interval_seconds == 131.4
    t.on_line("tfmw checkpoint saved step=40 path=/c/ckpt-40 seconds=0.100 write_seconds=1.5 age_seconds=1.4")
    assert rec.records[-1][0].checkpoint_interval_seconds == "131.4"  # recorded with the checkpoint
    t.transition(Phase.RUNNING)
    t.transition(Phase.RESTARTING)
    t.attempt_env(path)
    assert t.state.restarts == 1 and open(path).read().split()[1].startswith("observed:1/")

"""The run's state machine (entrypoint.lifecycle): transitions, the redeploy decisions, the
deadline, the status object's keys, and docs/lifecycle.md generated from the module."""

from __future__ import annotations

import itertools
import re
from dataclasses import replace

import pytest
from repo import REPO

from entrypoint.errors import (
    EXIT_BAD_CONFIG,
    EXIT_DEADLINE_EXCEEDED,
    EXIT_PEERS_NOT_FOUND,
    EXIT_RETRIES_EXHAUSTED,
    EXIT_TRAINING_FAILED,
)
from entrypoint.lifecycle import (
    EDGES,
    EXIT_CODE,
    FAILED_ALREADY,
    STATUS_KEYS,
    SUCCEEDED_ALREADY,
    TERMINAL_KEYS,
    TRAIN,
    IllegalTransition,
    Phase,
    Reason,
    RunClock,
    RunState,
    advance,
    event_for,
    exit_code,
    fresh,
    from_data,
    markdown_table,
    parse_rfc3339,
    plan_start,
    reasons_table,
    recorded_final,
    rfc3339,
    run_clock,
    to_data,
)

T0, T1, T2 = "2026-11-30T10:00:00Z", "2026-11-30T10:05:00Z", "2026-11-30T11:00:00Z"


def test_the_machine_is_the_designs():
    allowed = {(src, dst) for src, dst in EDGES}
    assert allowed == {
        (Phase.PENDING, Phase.RUNNING),
        (Phase.RUNNING, Phase.RESTARTING),
        (Phase.RESTARTING, Phase.RUNNING),
        # a resize: the group stops at a checkpoint and re-forms at the new size
        (Phase.RUNNING, Phase.RESIZING),
        (Phase.RESTARTING, Phase.RESIZING),
        (Phase.RESIZING, Phase.RUNNING),
        (Phase.RESIZING, Phase.RESTARTING),
        # a worker is not running (preempted, evicted, replaced): the group waits, then trains again
        (Phase.RUNNING, Phase.WAITING),
        (Phase.RESTARTING, Phase.WAITING),
        (Phase.WAITING, Phase.RUNNING),
        (Phase.WAITING, Phase.RESTARTING),
        (Phase.WAITING, Phase.RESIZING),
        # suspend: true from any phase of a run under way; suspend: false resumes it
        *{
            (src, Phase.SUSPENDED)
            for src in (Phase.PENDING, Phase.RUNNING, Phase.RESTARTING, Phase.RESIZING, Phase.WAITING)
        },
        (Phase.SUSPENDED, Phase.PENDING),
        *{
            (src, end)
            for src in (Phase.PENDING, Phase.RUNNING, Phase.RESTARTING, Phase.RESIZING, Phase.WAITING)
            for end in (Phase.SUCCEEDED, Phase.FAILED)
        },
    }
    # a suspended run is not over: it ends only after it resumed
    assert not {(Phase.SUSPENDED, end) for end in (Phase.SUCCEEDED, Phase.FAILED)} & set(EDGES)
    # nothing leaves a terminal phase
    assert not any(src in (Phase.SUCCEEDED, Phase.FAILED) for src, _ in EDGES)


@pytest.mark.parametrize("src,dst", [(s, d) for s, d in itertools.product(Phase, Phase) if (s, d) not in EDGES])
def test_every_other_transition_is_refused(src, dst):
    reason = Reason.COMPLETED if dst is Phase.SUCCEEDED else Reason.TRAINING_FAILED if dst is Phase.FAILED else None
    with pytest.raises(IllegalTransition, match=f"{src} -> {dst} is not a transition"):
        advance(RunState("r", phase=src), dst, now=T1, reason=reason)


def test_terminal_transitions_need_an_allowed_reason():
    running = RunState("r", phase=Phase.RUNNING)
    with pytest.raises(IllegalTransition, match="cannot have reason None"):
        advance(running, Phase.FAILED, now=T1)
    with pytest.raises(IllegalTransition, match="cannot have reason PeersNotFound"):
        advance(running, Phase.FAILED, now=T1, reason=Reason.PEERS_NOT_FOUND)  # peers are waited for before
    with pytest.raises(IllegalTransition, match="takes no reason"):
        advance(running, Phase.RESTARTING, now=T1, reason=Reason.RESTART_LIMIT)


def test_a_whole_run():
    state = fresh("r1", "rev-a", T0)
    assert (state.phase, state.started_at, state.restarts) == (Phase.PENDING, T0, 0)
    state = advance(state, Phase.RUNNING, now=T0)
    state = advance(state, Phase.RESTARTING, now=T1, message="worker 1 lost:\n UnavailableError")
    assert state.restarts == 1 and state.message == "worker 1 lost: UnavailableError"  # one line
    state = advance(state, Phase.RUNNING, now=T1)
    state = advance(state, Phase.SUCCEEDED, now=T2, reason=Reason.COMPLETED)
    assert (state.reason, state.finished_at, state.started_at, state.restarts) == ("Completed", T2, T0, 1)
    assert state.terminal and exit_code(state) == 0


def test_a_resize_is_no_restart_and_never_a_failure_of_its_own():
    state = advance(advance(fresh("r1", "rev-a", T0), Phase.RUNNING, now=T0), Phase.RESIZING, now=T1)
    assert (state.phase, state.restarts, state.reason) == (Phase.RESIZING, 0, "")
    state = advance(state, Phase.RUNNING, now=T1, message="3 workers training, resumed from step 40")
    assert state.restarts == 0 and not state.terminal
    # what can end a resize: new workers that never appear, the deadline, the restart limit
    assert set(EDGES[(Phase.RESIZING, Phase.FAILED)]) == {
        Reason.PEERS_NOT_FOUND,
        Reason.DEADLINE_EXCEEDED,
        Reason.RESTART_LIMIT,
        Reason.REPEATED_ERROR,
    }
    assert event_for(Phase.RUNNING, Phase.RESIZING) == ("Resizing", "Normal")
    assert event_for(Phase.RESIZING, Phase.RUNNING) == ("Resized", "Normal")
    # a pod restarted mid-resize continues the same attempt
    plan = plan_start(RunState("r1", phase=Phase.RESIZING, started_at=T0), "r1", "rev-a", False, T2)
    assert plan.resumed and plan.state.started_at == T0


def test_events_name_the_transitions():
    assert event_for(Phase.PENDING, Phase.RUNNING) == ("Started", "Normal")
    assert event_for(Phase.RUNNING, Phase.RESTARTING) == ("Restarted", "Warning")
    assert event_for(Phase.RESTARTING, Phase.RUNNING) is None  # the restart was announced already
    assert {event_for(s, Phase.SUCCEEDED) for s in (Phase.PENDING, Phase.RUNNING, Phase.RESTARTING)} == {
        ("Succeeded", "Normal")
    }
    assert {event_for(s, Phase.FAILED) for s in (Phase.PENDING, Phase.RUNNING, Phase.RESTARTING)} == {
        ("Failed", "Warning")
    }


@pytest.mark.parametrize(
    "reason,code",
    [
        (Reason.BAD_CONFIG, EXIT_BAD_CONFIG),
        (Reason.PEERS_NOT_FOUND, EXIT_PEERS_NOT_FOUND),
        (Reason.TRAINING_FAILED, EXIT_TRAINING_FAILED),
        (Reason.RESTART_LIMIT, EXIT_RETRIES_EXHAUSTED),
        (Reason.DEADLINE_EXCEEDED, EXIT_DEADLINE_EXCEEDED),
    ],
)
def test_each_failure_reason_has_its_exit_code(reason, code):
    assert exit_code(RunState("r", phase=Phase.FAILED, reason=str(reason))) == code


def test_status_data_round_trips_as_strings():
    state = RunState(
        "r1",
        phase=Phase.RUNNING,
        step=40,
        total_steps=100,
        loss="0.1234",
        restarts=2,
        last_checkpoint_step=40,
        started_at=T0,
        revision="abc",
        updated_at=T1,
    )
    data = to_data(state)
    assert tuple(data) == STATUS_KEYS and all(isinstance(v, str) for v in data.values())
    assert data["step"] == "40" and data["lastCheckpointStep"] == "40" and data["finishedAt"] == ""
    assert from_data(data) == state
    assert tuple(to_data(state, TERMINAL_KEYS)) == TERMINAL_KEYS


@pytest.mark.parametrize("data", [None, {}, {"runId": ""}, {"runId": "r", "phase": "Sleeping"}])
def test_unreadable_status_is_no_status(data):
    assert from_data(data) is None


# -- redeploy: what a starting launcher does ---------------------------------------------------
def failed(rev="rev-a", reason=Reason.BAD_CONFIG, run="r1"):
    return advance(
        replace(fresh(run, rev, T0), phase=Phase.RUNNING),
        Phase.FAILED,
        now=T1,
        reason=reason,
        message="training config: steps: -1",
    )


def test_first_start_trains_a_new_attempt():
    plan = plan_start(None, "r1", "rev-a", completed=False, now=T0)
    assert (plan.action, plan.state.phase, plan.state.started_at, plan.resumed) == (TRAIN, Phase.PENDING, T0, False)


def test_completed_marker_means_succeeded_again_whatever_the_status_says():
    for recorded in (None, failed(), RunState("r1", phase=Phase.RUNNING, started_at=T0, restarts=3)):
        plan = plan_start(recorded, "r1", "rev-b", completed=True, now=T2)
        assert plan.action == SUCCEEDED_ALREADY
        assert (plan.state.phase, plan.state.reason, plan.state.finished_at) == (Phase.SUCCEEDED, "Completed", T2)
    recorded = advance(
        RunState("r1", phase=Phase.RUNNING, started_at=T0), Phase.SUCCEEDED, now=T1, reason=Reason.COMPLETED
    )
    assert plan_start(recorded, "r1", "rev-b", completed=True, now=T2).state == recorded  # nothing to rewrite


def test_succeeded_status_without_a_marker_is_succeeded_again():
    recorded = advance(RunState("r1", phase=Phase.RUNNING), Phase.SUCCEEDED, now=T1, reason=Reason.COMPLETED)
    assert plan_start(recorded, "r1", "rev-b", completed=False, now=T2).action == SUCCEEDED_ALREADY


def test_failed_at_the_same_revision_is_failed_again():
    plan = plan_start(failed("rev-a"), "r1", "rev-a", completed=False, now=T2)
    assert plan.action == FAILED_ALREADY and plan.state == failed("rev-a")
    assert "already Failed (BadConfig) at revision rev-a" in plan.why


def test_failed_at_another_revision_trains_again_from_a_new_start():
    plan = plan_start(failed("rev-a", Reason.DEADLINE_EXCEEDED), "r1", "rev-b", completed=False, now=T2)
    assert plan.action == TRAIN
    assert (plan.state.phase, plan.state.started_at, plan.state.restarts, plan.state.revision) == (
        Phase.PENDING,
        T2,
        0,
        "rev-b",
    )  # a new startedAt: the deadline counts from the retry


def test_an_unknown_revision_never_matches():
    assert plan_start(failed(""), "r1", "", completed=False, now=T2).action == TRAIN


def test_another_run_id_trains():
    assert plan_start(failed(run="old"), "r1", "rev-a", completed=False, now=T2).action == TRAIN


@pytest.mark.parametrize(
    "phase,resumed,expected,restarts",
    [
        (Phase.RUNNING, True, Phase.RESTARTING, 3),
        (Phase.RESTARTING, True, Phase.RESTARTING, 3),
        (Phase.PENDING, False, Phase.PENDING, 2),
    ],
)
def test_a_pod_restart_continues_the_same_attempt(phase, resumed, expected, restarts):
    recorded = RunState("r1", phase=phase, started_at=T0, restarts=2, last_checkpoint_step=40, revision="rev-a")
    plan = plan_start(recorded, "r1", "rev-a", completed=False, now=T2)
    assert plan.action == TRAIN and plan.resumed is resumed
    assert (plan.state.phase, plan.state.started_at, plan.state.restarts, plan.state.last_checkpoint_step) == (
        expected,
        T0,
        restarts,
        40,
    )


# -- terminal states are recorded once -----------------------------------------------------
def test_a_terminal_state_of_the_same_attempt_is_final():
    peer_failed = failed("rev-a")
    chief_running = RunState("r1", phase=Phase.RESTARTING, started_at=T0, revision="rev-a")
    assert recorded_final(peer_failed, chief_running)
    assert not recorded_final(peer_failed, replace(chief_running, revision="rev-b"))  # a fixed template
    assert not recorded_final(peer_failed, replace(chief_running, run_id="r2"))
    assert not recorded_final(RunState("r1", phase=Phase.RUNNING), chief_running)
    assert not recorded_final(None, chief_running)
    no_revisions = failed("")
    assert recorded_final(no_revisions, replace(chief_running, revision=""))  # same startedAt
    assert not recorded_final(no_revisions, replace(chief_running, revision="", started_at=T2))
    succeeded = advance(RunState("r1", phase=Phase.RUNNING), Phase.SUCCEEDED, now=T1, reason=Reason.COMPLETED)
    assert recorded_final(succeeded, replace(chief_running, revision="rev-z"))


# -- deadline -------------------------------------------------------------------------------
def test_the_deadline_is_elapsed_time_on_this_launchers_monotonic_clock_plus_what_was_recorded():
    clock = RunClock(carried=100.0, since=5000.0)  # 100 s recorded; this launcher started at monotonic 5000
    assert clock.elapsed(5030.0) == 130.0
    assert clock.elapsed(4000.0) == 100.0  # never less than what was recorded
    assert clock.deadline(3600) == 5000.0 + 3500.0 and clock.deadline(0) is None  # 0: no deadline
    assert rfc3339(parse_rfc3339(T1)) == T1


def test_the_recorded_elapsed_time_is_carried_only_by_the_same_attempt():
    running = RunState("r1", phase=Phase.RUNNING, started_at=T0, elapsed_seconds="7200.0")
    assert run_clock(running, running, launched=0.0, since=50.0) == RunClock(7200.0, 50.0)
    # startedAt is never compared with this node's clock: a record a day old counts what it says
    assert run_clock(running, running, launched=parse_rfc3339(T0) + 86400, since=50.0).carried == 7200.0
    assert run_clock(None, running, 0.0, 50.0) == RunClock(0.0, 50.0)  # a new run
    assert run_clock(running, replace(running, started_at=T1), 0.0, 50.0).carried == 0.0  # a new attempt
    failed = replace(running, phase=Phase.FAILED, reason="TrainingFailed")
    assert run_clock(failed, running, 0.0, 50.0).carried == 0.0
    for bad in ("nan", "inf", "-5"):
        assert run_clock(replace(running, elapsed_seconds=bad), running, 0.0, 50.0).carried == 0.0
    # A record from a launcher before elapsedSeconds: counted from startedAt, once, on this node's clock.
    older = replace(running, elapsed_seconds="")
    assert run_clock(older, older, launched=parse_rfc3339(T0) + 90.0, since=50.0).carried == 90.0
    assert from_data(to_data(running)).elapsed_seconds == "7200.0"


# -- docs/lifecycle.md is generated from / checked against the module ---------------------------
def test_documented_exit_codes_are_the_ones_the_launcher_produces():
    doc = (REPO / "docs" / "contracts.md").read_text()
    section = doc.split("## Exit codes of `python -m entrypoint`", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\d+) \| `(\w+)` \|", section, re.M)
    assert {Reason(reason): int(code) for code, reason in rows} == EXIT_CODE
    epilog = __import__("entrypoint.cli", fromlist=["build_parser"]).build_parser().epilog
    assert all(f"{code} " in epilog for code in EXIT_CODE.values())


def test_docs_show_the_machine_as_the_code_has_it():
    doc = (REPO / "docs" / "lifecycle.md").read_text()
    assert markdown_table() in doc, "docs/lifecycle.md: regenerate the transitions table from markdown_table()"
    assert reasons_table() in doc, "docs/lifecycle.md: regenerate the reasons table from reasons_table()"
    documented_keys = re.findall(r"^\| `(\w+)` \|", doc.split("## The status ConfigMap", 1)[1], re.M)
    assert tuple(documented_keys[: len(STATUS_KEYS)]) == STATUS_KEYS

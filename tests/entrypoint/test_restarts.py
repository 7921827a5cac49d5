"""The restart rule (entrypoint.restarts): decide() on every way an attempt can end, and the
words the launcher logs and records for each. Pure: no process, no clock."""

from __future__ import annotations

import signal
from dataclasses import replace

import pytest

from entrypoint.errors import EXIT_OK, EXIT_SIGTERM
from entrypoint.hangwatch import Verdict
from entrypoint.lifecycle import Reason
from entrypoint.restarts import (
    EXIT,
    GROUP,
    GROUP_REASON,
    HANG,
    OOM,
    SIGNAL,
    AttemptOutcome,
    History,
    Next,
    attempt_reason,
    deadline_message,
    decide,
    finished_message,
    found_message,
    may_be_a_resize,
    restart_kind,
)

# sameErrorLimit off: these tests follow the restart limit through identical failures
HISTORY = History(max_restarts=3, backoff_first=1.0, deadline_seconds=500, same_error_limit=0)


def failed(returncode=1, progressed=False, **kw) -> AttemptOutcome:
    reason = kw.pop("reason", attempt_reason(returncode))
    return AttemptOutcome(returncode=returncode, progressed=progressed, reason=reason, **kw)


def test_done_succeeds_and_only_the_recording_chief_records():
    decision = decide(AttemptOutcome(), HISTORY)
    assert (decision.kind, decision.say, decision.record) == (Next.SUCCEED, "training finished", False)
    chief = replace(HISTORY, records_completion=True)
    decision = decide(AttemptOutcome(), chief)
    assert (decision.kind, decision.record, decision.history) == (Next.SUCCEED, True, chief)


@pytest.mark.parametrize(
    "code,reason,say",
    [
        (2, Reason.BAD_CONFIG, "training refused its configuration (exit 2); not retrying: fix training.config"),
        (4, Reason.TRAINING_FAILED, "training failed permanently (exit 4); not retrying"),
    ],
)
def test_permanent_exits_fail_at_once_with_the_commands_last_error(code, reason, say):
    decision = decide(failed(code, last_error="DataError: a.npz is corrupt"), HISTORY)
    assert (decision.kind, decision.reason, decision.say) == (Next.FAIL, reason, say)
    assert decision.message == "DataError: a.npz is corrupt"
    assert decide(failed(code), HISTORY).message == f"training exited with {code}"  # nothing printed


def test_a_permanent_exit_is_no_resize_even_when_one_was_asked():
    decision = decide(failed(2, regroup_why="workers.replicas 2 -> 3"), HISTORY)
    assert (decision.kind, decision.reason) == (Next.FAIL, Reason.BAD_CONFIG)


@pytest.mark.parametrize("code,exits", [(143, EXIT_SIGTERM), (-15, EXIT_SIGTERM), (0, EXIT_OK), (75, EXIT_SIGTERM)])
def test_a_stop_by_signal_ends_supervision_whatever_the_exit(code, exits):
    decision = decide(failed(code, stopped=True, deadline_hit=True), HISTORY)
    assert decision.kind is Next.STOP and decision.returncode == exits
    assert decision.say == f"stopped by signal; training exited with {code}"


def test_a_command_the_kernel_refuses_to_start_is_bad_config_not_retried():
    refused = "training.command: cannot start './x' (Exec format error); a script needs a #! line"
    decision = decide(AttemptOutcome(start_refused=refused, stopped=True), HISTORY)
    assert (decision.kind, decision.reason, decision.message) == (Next.FAIL, Reason.BAD_CONFIG, refused)
    assert decision.say == f"{refused}; not retrying"


def test_the_deadline_fails_the_run_with_how_training_ended():
    decision = decide(failed(143, deadline_hit=True, regroup_why="a resize"), HISTORY)
    assert (decision.kind, decision.reason) == (Next.DEADLINE, Reason.DEADLINE_EXCEEDED)
    assert decision.message == "training.activeDeadlineSeconds=500 passed; training stopped (exit 143)"
    assert decision.say == ""  # the attempt said it when it sent SIGTERM
    assert deadline_message(500, "not restarting training") == (
        "training.activeDeadlineSeconds=500 passed; not restarting training"
    )


def test_a_resize_regroups_without_back_off_and_is_not_counted():
    history = replace(HISTORY, failures_without_progress=3)  # one more failure would give up
    decision = decide(failed(143, regroup_why="workers.replicas 2 -> 3"), history)
    assert decision.kind is Next.REGROUP and decision.history == history
    assert decision.cause == "resize: workers.replicas 2 -> 3"
    assert decision.say == "training stopped (exit 143) for the group to re-form: workers.replicas 2 -> 3"


def test_a_retry_with_progress_restarts_at_once_and_resets_the_count():
    decision = decide(failed(75, progressed=True), replace(HISTORY, failures_without_progress=3))
    assert (decision.kind, decision.delay, decision.history.failures_without_progress) == (Next.RESTART, 0.0, 1)
    assert decision.cause == GROUP_REASON
    assert decision.say == f"restarting training in place in 0s: {GROUP_REASON}"


def test_retries_without_progress_back_off_0_1_2_4_up_to_the_cap():
    history, delays = replace(HISTORY, max_restarts=20), []
    for _ in range(8):
        decision = decide(failed(1), history)
        assert decision.kind is Next.RESTART
        delays.append(decision.delay)
        history = decision.history
    assert delays == [0, 1, 2, 4, 8, 16, 30, 30]
    assert history.failures_without_progress == 8
    assert decide(failed(1), replace(history, backoff_first=0.5)).delay == 30  # the cap holds for any first


def test_past_the_restart_limit_it_gives_up_naming_the_last_failure():
    history = HISTORY
    for _ in range(3):
        history = decide(failed(1), history).history
    decision = decide(failed(1, last_error="ValueError: boom"), history)
    assert (decision.kind, decision.reason) == (Next.GIVE_UP, Reason.RESTART_LIMIT)
    assert decision.say == "giving up: 3 restarts without progress (limit 3); last failure: training exited with 1"
    assert decision.message == (
        "3 restarts without progress (training.maxRestarts=3); last failure: training exited with 1: ValueError: boom"
    )
    assert decide(failed(1), history).message.endswith("last failure: training exited with 1")
    assert decide(failed(1), History(max_restarts=0)).kind is Next.GIVE_UP  # limit 0: the first failure ends it


def test_only_a_plain_retryable_exit_may_be_a_resize():
    assert may_be_a_resize(failed(75)) and may_be_a_resize(failed(-9))
    assert not may_be_a_resize(failed(0))
    assert not may_be_a_resize(failed(2))
    assert not may_be_a_resize(failed(75, stopped=True))
    assert not may_be_a_resize(failed(75, deadline_hit=True))
    assert not may_be_a_resize(failed(75, regroup_why="already known"))
    assert not may_be_a_resize(AttemptOutcome(start_refused="cannot start"))


def test_the_succeeded_messages_show_the_record_or_say_why_there_is_none():
    assert finished_message(" steps=10 final_loss=0.1") == "training finished: steps=10 final_loss=0.1"
    assert finished_message("") == "training finished: exit 0"
    assert found_message(" steps=10") == "COMPLETED marker found: steps=10"
    assert found_message("") == "COMPLETED marker found: the run finished"


def test_attempt_reasons_and_the_kind_each_is_counted_as():
    hung = Verdict(idle=7.0, timeout=6.0, basis="10x p95 step 0.1s")
    oom = "OOMKilled: the trainer was killed by the kernel's OOM killer"
    kill = -signal.SIGKILL
    cases = [
        (attempt_reason(75), GROUP_REASON, GROUP),
        (attempt_reason(1, broken="UnavailableError: x"), "the group broke: UnavailableError: x (exit 1)", GROUP),
        (attempt_reason(kill, broken="AbortedError: y", broken_killed=True), None, GROUP),
        (attempt_reason(kill, hung=hung), "hang: no progress for 6s (10x p95 step 0.1s)", HANG),
        (attempt_reason(kill, oom=oom), oom, OOM),
        (attempt_reason(137, oom=oom), oom, OOM),  # a shell's SIGKILLed child
        (attempt_reason(kill, oom=oom, deadline_hit=True), "killed by signal SIGKILL", SIGNAL),
        (attempt_reason(-15), "killed by signal SIGTERM", SIGNAL),
        (attempt_reason(1), "training exited with 1", EXIT),
    ]
    for reason, words, kind in cases:
        assert words is None or reason == words
        assert restart_kind(reason) == kind, reason
    assert attempt_reason(kill, broken="AbortedError: y", broken_killed=True) == (
        "the group broke: AbortedError: y (ended after the grace)"
    )
    assert attempt_reason(75, broken="UnavailableError: x") == GROUP_REASON  # its own exit says it


# -- the same error in a row (training.sameErrorLimit) -------------------------------------
OUT_OF_RANGE = "tensorflow.python.framework.errors_impl.OutOfRangeError: End of sequence"
REPEATS = replace(HISTORY, max_restarts=20, same_error_limit=2)


def run(outcomes, history=REPEATS):
    decisions = []
    for outcome in outcomes:
        decision = decide(outcome, history)
        decisions.append(decision)
        history = decision.history
    return decisions


def test_the_same_exception_twice_without_progress_ends_the_run_with_that_line():
    first, second = run([failed(1, exception=OUT_OF_RANGE)] * 2)
    assert first.kind is Next.RESTART
    assert (second.kind, second.reason, second.message) == (Next.REPEATED, Reason.REPEATED_ERROR, OUT_OF_RANGE)
    assert second.say == (
        "ending the run: the same error ended 2 attempts in a row with no progress between them "
        f"(training.sameErrorLimit=2; fix the command, or set it higher, 0: off): {OUT_OF_RANGE}"
    )


def test_without_a_traceback_the_fingerprint_is_the_exit_and_the_last_error_line():
    decisions = run([failed(3, error_line="ERROR: cannot open data.csv")] * 2)
    assert decisions[-1].kind is Next.REPEATED
    assert decisions[-1].message == "training exited with 3: ERROR: cannot open data.csv"
    assert run([failed(3)] * 2)[-1].message == "training exited with 3"


def test_an_address_in_the_error_does_not_make_it_another():
    a = failed(1, exception="RuntimeError: bad object at 0x7f00aa")
    b = failed(1, exception="RuntimeError: bad object at 0x7f11bb")
    assert run([a, b])[-1].kind is Next.REPEATED


@pytest.mark.parametrize(
    "between",
    [
        failed(1, exception="KeyError: 'label'"),  # another error
        failed(75, exception=OUT_OF_RANGE),  # a group error in between
    ],
)
def test_another_error_between_two_same_errors_starts_the_count_again(between):
    decisions = run([failed(1, exception=OUT_OF_RANGE), between, failed(1, exception=OUT_OF_RANGE)])
    assert [d.kind for d in decisions] == [Next.RESTART] * 3


@pytest.mark.parametrize("progress", [{"progressed": True}, {"new_output": True}])
def test_an_attempt_that_progressed_starts_a_new_count_from_itself(progress):
    same = failed(1, exception=OUT_OF_RANGE)
    decisions = run([same, failed(1, exception=OUT_OF_RANGE, **progress), same])
    assert [d.kind for d in decisions] == [Next.RESTART, Next.RESTART, Next.REPEATED]
    assert [d.history.same_error_count for d in decisions] == [1, 1, 2]


def test_progress_or_new_output_in_the_second_attempt_itself_is_no_repeat():
    for second in (
        failed(1, exception=OUT_OF_RANGE, progressed=True),
        failed(1, exception=OUT_OF_RANGE, new_output=True),
    ):
        assert run([failed(1, exception=OUT_OF_RANGE), second])[-1].kind is Next.RESTART


@pytest.mark.parametrize(
    "outcome",
    [
        failed(75),  # exit 75: the group failed
        failed(1, exception="tensorflow.python.framework.errors_impl.UnavailableError: Socket closed"),
        failed(1, reason="the group broke: UnavailableError: Socket closed (exit 1)", exception=OUT_OF_RANGE),
        failed(-9, reason="hang: no progress for 600s (static)"),
        failed(-9),  # SIGKILL from outside
        failed(-15),
        failed(-9, reason="OOMKilled: the trainer was killed at the container's memory limit"),
        failed(1, exception=OUT_OF_RANGE, deadline_hit=True),
    ],
)
def test_a_group_error_a_hang_or_a_kill_is_never_counted(outcome):
    decisions = run([outcome] * 3)
    assert Next.REPEATED not in [d.kind for d in decisions]
    assert decisions[-1].history.same_error_count == 0


def test_a_crash_signal_repeats_like_an_exit():
    assert run([failed(-int(signal.SIGSEGV))] * 2)[-1].message == "killed by signal SIGSEGV"


def test_the_limit_is_the_number_of_attempts_and_0_is_off():
    three = replace(REPEATS, same_error_limit=3)
    assert [d.kind for d in run([failed(1, exception=OUT_OF_RANGE)] * 3, three)] == [
        Next.RESTART,
        Next.RESTART,
        Next.REPEATED,
    ]
    off = run([failed(1, exception=OUT_OF_RANGE)] * 5, replace(REPEATS, same_error_limit=0))
    assert Next.REPEATED not in [d.kind for d in off]
    assert run([failed(1, exception=OUT_OF_RANGE)], replace(REPEATS, same_error_limit=1))[0].kind is Next.REPEATED


def test_the_repeat_is_said_before_the_restart_limit():
    history = replace(REPEATS, max_restarts=1)
    assert run([failed(1, exception=OUT_OF_RANGE)] * 2, history)[-1].kind is Next.REPEATED

"""Leaving together (entrypoint.training.leaving): pure, no TensorFlow, no group."""

from __future__ import annotations

import pytest

from entrypoint.training import leaving


class Clock:
    def __init__(self):
        self.now = 0.0
        self.slept = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


def waits(error=None):
    calls = []

    def wait(barrier, timeout_ms):
        calls.append((barrier, timeout_ms))
        if error is not None:
            raise error

    return wait, calls


def test_every_worker_arrived_means_leave():
    wait, calls = waits()
    assert leaving.leave_together(wait, leaving.FINISHED, 5000, is_chief=True) is None
    assert calls == [("tfmw-finished", 5000)]


def test_the_barrier_waits_the_runs_timeout_or_a_day():
    assert leaving.barrier_timeout_ms(None) == 86_400_000
    assert leaving.barrier_timeout_ms(2.5) == 2500
    assert leaving.barrier_timeout_ms(0.0001) == 1


def test_a_broken_barrier_on_the_chief_is_the_groups_failure_named():
    wait, _ = waits(RuntimeError("UNAVAILABLE:\n  task 1 heartbeat timeout"))
    reason = leaving.leave_together(wait, leaving.FINISHED, 10, is_chief=True, completed=lambda: True)
    # the chief writes the marker itself after the barrier: a marker there is an older one
    assert reason == "RuntimeError at barrier tfmw-finished: UNAVAILABLE: task 1 heartbeat timeout"


def test_a_peer_whose_reply_was_cut_by_the_chiefs_exit_leaves_once_the_marker_shows():
    clock = Clock()
    seen = iter([False, False, True])
    wait, _ = waits(RuntimeError("Socket closed"))
    reason = leaving.leave_together(
        wait,
        leaving.FINISHED,
        10,
        is_chief=False,
        completed=lambda: next(seen),
        sleep=clock.sleep,
        clock=clock,
    )
    assert reason is None
    assert clock.slept == [leaving.MARKER_POLL_SECONDS] * 2


def test_a_peer_without_the_marker_reports_the_broken_group_after_the_marker_wait():
    clock = Clock()
    wait, _ = waits(RuntimeError("Socket closed"))
    reason = leaving.leave_together(
        wait, leaving.FINISHED, 10, is_chief=False, completed=lambda: False, sleep=clock.sleep, clock=clock
    )
    assert reason is not None and "Socket closed" in reason
    assert clock.now == pytest.approx(leaving.MARKER_WAIT_SECONDS, abs=leaving.MARKER_POLL_SECONDS)


def test_a_marker_that_cannot_be_read_is_not_seen_and_is_named_in_the_reason():
    from entrypoint.rundir import MarkerUnreadable

    clock = Clock()
    wait, _ = waits(RuntimeError("Socket closed"))
    answers = iter([MarkerUnreadable("cannot read /s/r/COMPLETED (OSError: Input/output error)"), True])

    def completed():
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    kwargs = dict(is_chief=False, sleep=clock.sleep, clock=clock)
    assert leaving.leave_together(wait, leaving.FINISHED, 10, completed=completed, **kwargs) is None  # looked again

    def never():
        raise MarkerUnreadable("cannot read /s/r/COMPLETED (OSError: Input/output error)")

    reason = leaving.leave_together(wait, leaving.FINISHED, 10, completed=never, **kwargs)
    assert reason is not None and "Socket closed" in reason and reason.endswith("(OSError: Input/output error)")


def test_a_stop_has_no_marker_to_look_for():
    wait, _ = waits(RuntimeError("gone"))
    reason = leaving.leave_together(wait, leaving.STOPPED, 10, is_chief=False)
    assert reason == "RuntimeError at barrier tfmw-stopped: gone"

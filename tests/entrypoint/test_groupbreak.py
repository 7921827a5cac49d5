"""A user command's group error, read from its output (entrypoint.groupbreak), and what the
supervisor and the goodput account do with it."""

from __future__ import annotations

import os
import sys
import textwrap
import time

import pytest

from entrypoint.goodput import RESTART, Ledger
from entrypoint.groupbreak import BreakDetector, group_error
from entrypoint.lifecycle import Phase, fresh
from entrypoint.restarts import GROUP, restart_kind
from entrypoint.supervisor import Supervisor, SupervisorConfig
from entrypoint.tracker import RunTracker

FRAMES = [
    "Traceback (most recent call last):",
    '  File "/app/train.py", line 40, in <module>',
    "    model.fit(dataset, epochs=3, callbacks=callbacks)",
    '  File "/usr/lib/python3/site-packages/keras/src/utils/traceback_utils.py", line 122, in error_handler',
    "    raise e.with_traceback(filtered_tb) from None",
]


def feed(lines):
    detector = BreakDetector()
    return [out for out in map(detector.feed, lines) if out is not None]


def test_a_traceback_ending_in_a_group_error_is_reported_once():
    lines = FRAMES + [
        "tensorflow.python.framework.errors_impl.UnavailableError: Socket closed",
        "Additional GRPC error information from remote target /job:worker/replica:0/task:1:",
        *FRAMES,
        "tensorflow.python.framework.errors_impl.AbortedError: again",
    ]
    assert feed(lines) == ["UnavailableError: Socket closed"]


def test_the_last_of_chained_tracebacks_counts():
    lines = FRAMES + [
        "KeyError: 'x'",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        *FRAMES,
        "tensorflow.python.framework.errors_impl.DeadlineExceededError: heartbeat timeout",
    ]
    assert feed(lines) == ["DeadlineExceededError: heartbeat timeout"]


@pytest.mark.parametrize(
    "lines",
    [
        # a log line that mentions the error, outside any traceback: the script may go on
        ["W0000 00:00 collective_ops.cc:1] UnavailableError: peer gone, retrying"],
        ["tensorflow.python.framework.errors_impl.UnavailableError: printed by the script itself"],
        # a traceback of another error: a bug or bad data, not the group
        FRAMES + ["ValueError: Input 0 of layer dense is incompatible"],
        FRAMES + ["tensorflow.python.framework.errors_impl.InternalError: Failed to allocate memory"],
        # the error line of an earlier traceback does not arm a later mention
        FRAMES + ["ValueError: bad", "tensorflow.python.framework.errors_impl.UnavailableError: later"],
    ],
)
def test_anything_else_is_not_a_break(lines):
    assert feed(lines) == []


def test_tensorflows_preamble_is_not_the_message():
    assert group_error("tensorflow.python.framework.errors_impl.UnavailableError: Graph execution error:") == (
        "UnavailableError"
    )


def test_an_internal_error_of_the_collective_is_a_break():
    assert group_error("InternalError: Collective ops is aborted by: peer /job:worker/replica:0/task:1 died") == (
        "InternalError: Collective ops is aborted by: peer /job:worker/replica:0/task:1 died"
    )
    assert group_error("ValueError: collective") is None
    assert restart_kind("the group broke: UnavailableError: Socket closed (exit 1)") == GROUP


# The first attempt: a Keras-like script whose group error is printed as it dies, then a
# teardown that would take a minute; the second attempt finishes.
TEARDOWN = """
    import atexit, pathlib, sys, time
    counter = pathlib.Path(sys.argv[0]).with_name("attempts")
    n = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(n + 1))
    if n == 0:
        atexit.register(time.sleep, {teardown})  # TensorFlow's teardown, after the traceback
        class UnavailableError(Exception):
            pass
        raise UnavailableError("Socket closed")
"""


def run(tmp_path, teardown: float, grace: float):
    path = tmp_path / "child.py"
    path.write_text(textwrap.dedent(TEARDOWN.format(teardown=teardown)))
    logs, causes, broken = [], [], []
    sup = Supervisor(
        SupervisorConfig(
            command=[sys.executable, str(path)],
            env=dict(os.environ, TFMW_RUN_ID="r1"),
            run_dir=tmp_path / "run",
            heartbeat_file=tmp_path / "hb",
            poll_seconds=0.05,
            log=logs.append,
            on_restart=causes.append,
            on_group_broken=broken.append,
            broken_grace_seconds=grace,
        )
    )
    started = time.monotonic()
    ending = sup.run()
    return ending, logs, causes, broken, time.monotonic() - started


def test_a_command_tearing_down_after_a_group_error_is_ended_after_the_grace(tmp_path):
    ending, logs, causes, broken, _ = run(tmp_path, teardown=120, grace=0.3)
    assert ending.phase is Phase.SUCCEEDED and (tmp_path / "attempts").read_text() == "2"
    assert broken == ["UnavailableError: Socket closed"]
    assert causes == ["the group broke: UnavailableError: Socket closed (ended after the grace)"]
    assert restart_kind(causes[0]) == GROUP
    said = [line for line in logs if "the group broke" in line]
    assert "training ends within 0.3s" in said[0]
    assert "did not exit within 0.3s of it (TensorFlow's teardown); ending it" in said[1]


def test_a_command_that_exits_within_the_grace_is_left_to_exit(tmp_path):
    ending, logs, causes, broken, _ = run(tmp_path, teardown=0.1, grace=30)
    assert ending.phase is Phase.SUCCEEDED
    assert broken == ["UnavailableError: Socket closed"]
    assert causes == ["the group broke: UnavailableError: Socket closed (exit 1)"]
    assert not any("ending it" in line for line in logs)


def test_the_teardown_counts_as_the_restart_not_as_training():
    # A user command (no heartbeat) trains from its start; its group breaks at t=100 and it
    # exits at t=118 (the teardown); the next attempt starts at t=120.
    now = [0.0]
    ledger = Ledger(0.0, beats=False)
    t = RunTracker(
        fresh("r1", "a", "2026-11-30T10:00:00Z"),
        None,
        is_chief=False,
        worker_index=1,
        log=lambda _: None,
        clock=lambda: now[0],
        ledger=ledger,
    )
    t.attempt_started()
    now[0] = 100.0
    t.group_broke("UnavailableError: Socket closed")
    now[0] = 118.0
    ledger.failed(now[0])  # the attempt's exit (the supervisor's restart)
    now[0] = 120.0
    t.attempt_started()
    account = ledger.snapshot(130.0)
    assert account.productive == pytest.approx(110.0)  # 0-100 and 120-130
    assert account.badput[RESTART] == pytest.approx(20.0)  # the teardown and the restart

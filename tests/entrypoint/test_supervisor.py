"""Supervisor: restart in place on retryable failures, stop on permanent ones, watchdog,
deadline, completion, signal forwarding. Real child processes (small Python scripts), no TF."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from repo import REPO

from entrypoint.errors import EXIT_BAD_CONFIG, EXIT_RETRYABLE, EXIT_TRAINING_FAILED, EXIT_UNEXPECTED
from entrypoint.lifecycle import Phase, Reason
from entrypoint.restarts import DONE, PERMANENT, PERMANENT_REASONS, RETRY, backoff_seconds, classify_exit
from entrypoint.supervisor import Supervisor, SupervisorConfig

# The supervisor's classification table: what each exit status of the training command means.
CLASSIFICATION = [
    (0, DONE),
    (EXIT_BAD_CONFIG, PERMANENT),  # 2: a bad training config
    (EXIT_TRAINING_FAILED, PERMANENT),  # 4: corrupt data, a non-finite loss, retryable=false
    (EXIT_RETRYABLE, RETRY),  # 75: a lost peer, restarted in place
    (EXIT_UNEXPECTED, RETRY),  # 1: a user script's failure or a crash
    (3, RETRY),
    (5, RETRY),
    (143, RETRY),
    (-9, RETRY),
    (-15, RETRY),  # killed by a signal
]


@pytest.mark.parametrize("code,outcome", CLASSIFICATION)
def test_classify_exit(code, outcome):
    assert classify_exit(code) == outcome


def test_permanent_exits_name_their_terminal_reason():
    assert PERMANENT_REASONS == {2: Reason.BAD_CONFIG, 4: Reason.TRAINING_FAILED}


def test_backoff_is_none_at_first_then_exponential_and_capped():
    assert [backoff_seconds(n) for n in (1, 2, 3, 4, 5, 11)] == [0, 1, 2, 4, 8, 30]


def script(tmp_path: Path, body: str) -> list[str]:
    path = tmp_path / "child.py"
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


def make(tmp_path, command, **kw):
    logs = []
    cfg = SupervisorConfig(
        command=command,
        env=dict(os.environ, TFMW_RUN_ID="r1"),
        run_dir=kw.pop("run_dir", tmp_path / "run"),
        heartbeat_file=tmp_path / "hb",
        poll_seconds=0.05,
        backoff_first_seconds=0.01,
        log=logs.append,
        **kw,
    )
    return Supervisor(cfg), logs


# A child that fails with the given codes on successive attempts (counted in a file).
FLAKY = """
    import pathlib, sys
    counter = pathlib.Path(sys.argv[0]).with_name("attempts")
    n = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(n + 1))
    codes = {codes}
    sys.exit(codes[n] if n < len(codes) else 0)
"""


def attempts(tmp_path):
    return int((tmp_path / "attempts").read_text())


def test_retryable_failures_restart_in_place_until_success(tmp_path):
    causes = []
    sup, logs = make(tmp_path, script(tmp_path, FLAKY.format(codes=[75, 1])), on_restart=causes.append)
    assert sup.run().phase is Phase.SUCCEEDED
    assert attempts(tmp_path) == 3
    assert any("restarting training in place" in line and "exit 75" in line for line in logs)
    assert causes == ["a peer failed or the group broke (exit 75)", "training exited with 1"]


@pytest.mark.parametrize("code,reason", [(2, Reason.BAD_CONFIG), (4, Reason.TRAINING_FAILED)])
def test_permanent_failures_are_not_retried(tmp_path, code, reason):
    body = FLAKY.format(codes=[code]).replace(
        "sys.exit(", "print('training config: steps: -1 is bad', flush=True); sys.exit("
    )
    sup, logs = make(tmp_path, script(tmp_path, body))
    ending = sup.run()
    assert (ending.phase, ending.reason) == (Phase.FAILED, reason)
    assert ending.message == "training config: steps: -1 is bad"  # the command's own last line
    assert attempts(tmp_path) == 1
    assert "not retrying" in logs[-1]


def test_permanent_failure_message_is_the_trainers_error_line(tmp_path):
    body = """
        import sys
        print("Traceback (most recent call last): ...", flush=True)
        print("tfmw error retryable=false worker=0 DataError: data.path: a.npz is corrupt", flush=True)
        print("some later noise", flush=True)
        sys.exit(4)
    """
    ending, _ = make(tmp_path, script(tmp_path, body))[0].run(), None
    assert ending.reason is Reason.TRAINING_FAILED
    assert ending.message == "DataError: data.path: a.npz is corrupt"


def test_retries_exhausted_is_restart_limit_with_reason(tmp_path):
    # sameErrorLimit off: the same failure every time is what this limit is about
    sup, logs = make(tmp_path, script(tmp_path, FLAKY.format(codes=[1] * 10)), max_restarts=2, same_error_limit=0)
    ending = sup.run()
    assert (ending.phase, ending.reason) == (Phase.FAILED, Reason.RESTART_LIMIT)
    assert "training.maxRestarts=2" in ending.message and "training exited with 1" in ending.message
    assert attempts(tmp_path) == 3
    assert "giving up: 2 restarts without progress (limit 2)" in logs[-1]
    assert "training exited with 1" in logs[-1]


def test_completed_run_is_never_trained_again(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "COMPLETED").write_text(json.dumps({"steps": 10, "finalLoss": 0.1, "model": "/m"}))
    sup, logs = make(tmp_path, script(tmp_path, FLAKY.format(codes=[])), run_dir=run_dir)
    ending = sup.run()
    assert (ending.phase, ending.reason) == (Phase.SUCCEEDED, Reason.COMPLETED)
    assert ending.message == "COMPLETED marker found: steps=10 final_loss=0.1 model=/m"
    assert not (tmp_path / "attempts").exists()
    assert logs == []


def test_hang_watchdog_kills_and_restarts(tmp_path):
    body = """
        import pathlib, sys, time
        counter = pathlib.Path(sys.argv[0]).with_name("attempts")
        n = int(counter.read_text()) if counter.exists() else 0
        counter.write_text(str(n + 1))
        if n == 0:
            time.sleep(60)  # silent, no heartbeat: a hang
    """
    sup, logs = make(tmp_path, script(tmp_path, body), hang_timeout_seconds=1, max_restarts=2)
    assert sup.run().phase is Phase.SUCCEEDED
    assert attempts(tmp_path) == 2
    assert any("watchdog: no training progress" in line for line in logs)
    assert any("hang: no progress for 1s" in line for line in logs)


def test_heartbeat_counts_as_progress(tmp_path):
    # Writes a rising step to the heartbeat file, silently, for longer than the timeout.
    body = """
        import os, time, pathlib
        hb = pathlib.Path(os.environ["TFMW_HEARTBEAT_FILE"])
        for step in range(1, 13):
            hb.write_text(str(step)); time.sleep(0.25)
    """
    sup, logs = make(tmp_path, script(tmp_path, body), hang_timeout_seconds=1)
    assert sup.run().phase is Phase.SUCCEEDED
    assert not any("watchdog" in line for line in logs)


def test_progress_resets_the_restart_budget(tmp_path):
    # Every attempt makes progress (heartbeat) then dies: the limit counts only
    # failures without progress, so a long job survives many preemptions.
    body = """
        import os, pathlib, sys, time
        counter = pathlib.Path(sys.argv[0]).with_name("attempts")
        n = int(counter.read_text()) if counter.exists() else 0
        counter.write_text(str(n + 1))
        pathlib.Path(os.environ["TFMW_HEARTBEAT_FILE"]).write_text(str(n + 1))
        time.sleep(0.2)
        sys.exit(75 if n < 4 else 0)
    """
    sup, _ = make(tmp_path, script(tmp_path, body), max_restarts=1)
    assert sup.run().phase is Phase.SUCCEEDED
    assert attempts(tmp_path) == 5


def test_sigterm_is_forwarded_and_nothing_restarts(tmp_path):
    body = """
        import signal, sys, time, pathlib
        def stop(*_):
            pathlib.Path(sys.argv[0]).with_name("got-term").write_text("yes")
            sys.exit(143)
        signal.signal(signal.SIGTERM, stop)
        print("ready", flush=True)
        time.sleep(60)
    """
    sup, logs = make(tmp_path, script(tmp_path, body))
    threading.Timer(1.5, sup.request_stop).start()
    ending = sup.run()
    assert (ending.phase, ending.returncode) == (None, 143)
    assert (tmp_path / "got-term").read_text() == "yes"
    assert sum("starting training" in line for line in logs) == 1


def test_launcher_cli_supervises_and_forwards_sigterm(tmp_path):
    """`python -m entrypoint run`, opted in to the warm standby: the first attempt runs in the
    standby the launcher started before its own imports (its pid is the trainer's), with the
    TF_CONFIG the launcher derived after it (it came with "go"), and takes the SIGTERM passed on."""
    child = tmp_path / "child.py"
    child.write_text(
        "import json,os,time\nprint('pid', os.getpid(), flush=True)\n"
        "print('TF_CONFIG', os.environ['TF_CONFIG'], flush=True)\ntime.sleep(60)\n"
    )
    (tmp_path / "tensorflow.py").write_text("")  # what an opted-in user command's standby imports
    env = {
        "TFMW_POD_NAME": "w-0",
        "TFMW_NAMESPACE": "ns",
        "TFMW_SERVICE": "svc",
        "TFMW_REPLICAS": "1",
        "TFMW_LOOPBACK_PORTS": "1",
        "TFMW_WARM_STANDBY": "true",
        "PYTHONPATH": str(tmp_path),
        "PATH": os.environ["PATH"],
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "entrypoint", "run", "--", sys.executable, str(child)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("TF_CONFIG"):
            break
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 143
    assert json.loads(lines[-1].split(" ", 1)[1])["cluster"]["worker"] == ["127.0.0.1:2222"]
    pid = next(line.split()[1] for line in lines if line.startswith("pid "))
    started = [line for line in lines if "start standby=yes" in line]
    assert len(started) == 1 and f"pid={pid} " in started[0] and "started with the launcher" in started[0], lines


def test_chief_records_completion_for_a_user_command(tmp_path):
    sup, _ = make(tmp_path, script(tmp_path, FLAKY.format(codes=[])), is_chief=True)
    assert sup.run().phase is Phase.SUCCEEDED
    record = json.loads((tmp_path / "run" / "COMPLETED").read_text())
    assert record["by"] == "launcher" and set(record) == {"by", "command", "finishedAt"}  # the trainer's spelling
    # ... and the next start of any pod of this run trains nothing.
    again, logs = make(tmp_path, script(tmp_path, FLAKY.format(codes=[])))
    ending = again.run()
    assert ending.phase is Phase.SUCCEEDED and ending.message.startswith("COMPLETED marker found")
    assert attempts(tmp_path) == 1
    assert logs == []


def test_non_chief_does_not_record_completion(tmp_path):
    sup, _ = make(tmp_path, script(tmp_path, FLAKY.format(codes=[])), is_chief=False)
    assert sup.run().phase is Phase.SUCCEEDED
    assert not (tmp_path / "run" / "COMPLETED").exists()


# -- activeDeadlineSeconds: a wall clock the test moves, never real time ---------------------
class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_deadline_stops_training_with_sigterm_and_fails_the_run(tmp_path):
    body = """
        import pathlib, signal, sys, time
        counter = pathlib.Path(sys.argv[0]).with_name("attempts")
        counter.write_text(str(int(counter.read_text()) + 1 if counter.exists() else 1))
        def stop(*_):
            pathlib.Path(sys.argv[0]).with_name("got-term").write_text("checkpointed")
            sys.exit(143)
        signal.signal(signal.SIGTERM, stop)
        print("ready", flush=True)
        time.sleep(60)
    """
    clock = Clock()

    def passed(line):
        if line == "ready":
            clock.now = 2000.0

    sup, logs = make(
        tmp_path, script(tmp_path, body), deadline=1500.0, deadline_seconds=500, clock=clock, on_output=passed
    )
    ending = sup.run()
    assert (ending.phase, ending.reason) == (Phase.FAILED, Reason.DEADLINE_EXCEEDED)
    assert ending.message.startswith("training.activeDeadlineSeconds=500 passed; training stopped (exit 143)")
    assert (tmp_path / "got-term").read_text() == "checkpointed"  # SIGTERM, so the trainer could save
    assert attempts(tmp_path) == 1
    assert any(line.startswith("tfmw launcher deadline: training.activeDeadlineSeconds=500 passed") for line in logs)


def test_deadline_kills_a_command_that_ignores_sigterm(tmp_path):
    body = """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ready", flush=True)
        time.sleep(60)
    """
    clock = Clock()
    sup, logs = make(
        tmp_path,
        script(tmp_path, body),
        deadline=1500.0,
        deadline_seconds=500,
        clock=clock,
        stop_grace_seconds=0.3,
        on_output=lambda line: setattr(clock, "now", 2000.0),
    )
    ending = sup.run()
    assert ending.reason is Reason.DEADLINE_EXCEEDED and "exit -9" in ending.message
    assert any("did not stop in time; killing it" in line for line in logs)


def test_deadline_passing_during_the_back_off_means_no_restart(tmp_path):
    clock = Clock()
    sup, logs = make(
        tmp_path,
        script(tmp_path, FLAKY.format(codes=[75, 75])),
        deadline=1500.0,
        deadline_seconds=500,
        clock=clock,
        on_restart=lambda cause: setattr(clock, "now", 2000.0),
    )
    ending = sup.run()
    assert ending.reason is Reason.DEADLINE_EXCEEDED and "not restarting training" in ending.message
    assert attempts(tmp_path) == 1


def test_deadline_already_passed_starts_nothing(tmp_path):
    clock = Clock()
    sup, _ = make(tmp_path, script(tmp_path, FLAKY.format(codes=[])), deadline=999.0, clock=clock)
    assert sup.run().reason is Reason.DEADLINE_EXCEEDED
    assert not (tmp_path / "attempts").exists()


def test_attempt_and_output_hooks_see_every_attempt_and_line(tmp_path):
    seen, lines = [], []
    body = FLAKY.format(codes=[75]).replace(
        "    codes = ", "    print('tfmw progress step=1/2 loss=0.5', flush=True)\n    codes = "
    )
    sup, _ = make(tmp_path, script(tmp_path, body), on_attempt=seen.append, on_output=lines.append)
    assert sup.run().phase is Phase.SUCCEEDED
    assert seen == [1, 2]
    assert lines == ["tfmw progress step=1/2 loss=0.5"] * 2


# Trains until SIGTERM (then "checkpoints" and exits 143, as the trainer does), three times;
# each attempt records the TFMW_GROUP it was started with; the fourth finishes.
TRAINS_UNTIL_SIGTERM = """
    import os, pathlib, signal, sys, time
    here = pathlib.Path(sys.argv[0]).parent
    counter = here / "attempts"
    n = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(n + 1))
    with open(here / "groups", "a") as groups:
        groups.write(os.environ.get("TFMW_GROUP", "-") + "\\n")
    if n >= 3:
        sys.exit(0)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(143))
    (here / f"training-{n}").write_text("")
    time.sleep(30)
    sys.exit(1)
"""


def test_a_regroup_restarts_with_the_new_environment_and_is_never_counted_as_a_failure(tmp_path):
    """max_restarts=0: a single failure would end the run; three resizes in a row do not."""
    causes, groups = [], iter(["b", "c", "d"])
    holder = {}

    def regroup():
        return dict(holder["sup"].cfg.env, TFMW_GROUP=next(groups))

    sup, logs = make(
        tmp_path,
        script(tmp_path, TRAINS_UNTIL_SIGTERM),
        max_restarts=0,
        regroup=regroup,
        on_restart=causes.append,
    )
    sup.cfg.env["TFMW_GROUP"] = "a"
    holder["sup"] = sup

    def resize_three_times():
        for n in range(3):
            while not (tmp_path / f"training-{n}").exists():
                threading.Event().wait(0.02)
            sup.request_regroup(f"workers.replicas change {n}")

    threading.Thread(target=resize_three_times, daemon=True).start()
    assert sup.run().phase is Phase.SUCCEEDED
    assert (tmp_path / "groups").read_text().split() == ["a", "b", "c", "d"]
    assert causes == [f"resize: workers.replicas change {n}" for n in range(3)]
    assert not any("restarting training in place" in line for line in logs)
    assert sum("for the group to re-form" in line for line in logs) == 3


# Redraws a progress bar with \r only (no newline, no heartbeat) for 3 s, then exits 0.
PROGRESS_BAR = """
    import sys, time
    for i in range(30):
        sys.stdout.write(f"\\r{i:3d}/30 [" + "=" * i + " " * (30 - i) + "]")
        sys.stdout.flush()
        time.sleep(0.1)
"""


def test_a_progress_bar_redrawn_with_carriage_returns_is_alive_and_relayed_unchanged(tmp_path, capfdbinary):
    lines = []
    sup, logs = make(tmp_path, script(tmp_path, PROGRESS_BAR), hang_timeout_seconds=1, on_output=lines.append)
    assert sup.run().phase is Phase.SUCCEEDED  # 3 s of output with no newline: never killed as hung
    assert not any("watchdog" in line for line in logs)
    expected = "".join(f"\r{i:3d}/30 [" + "=" * i + " " * (30 - i) + "]" for i in range(30)).encode()
    assert capfdbinary.readouterr().out == expected  # as the command wrote it
    assert len(lines) == 30 and lines[-1].startswith("29/30 [")  # each redraw is a line for the tracker


def test_a_line_past_the_cap_is_said_once_and_relayed_whole(tmp_path, capfdbinary):
    body = """
        import sys
        for _ in range(2):
            sys.stdout.write("z" * 200_000 + "\\n")
        sys.stdout.write("tfmw progress step=1/2 loss=0.5\\n")
    """
    lines = []
    sup, logs = make(tmp_path, script(tmp_path, body), on_output=lines.append)
    assert sup.run().phase is Phase.SUCCEEDED
    assert capfdbinary.readouterr().out == (b"z" * 200_000 + b"\n") * 2 + b"tfmw progress step=1/2 loss=0.5\n"
    assert lines == ["z" * 64 * 1024] * 2 + ["tfmw progress step=1/2 loss=0.5"]
    assert sum("longer than 64 KiB" in line for line in logs) == 1


@pytest.fixture
def subreaper():
    """This process adopts orphans, as the launcher's own process does (entrypoint.__main__),
    for this test only: pytest's process must not keep orphans of later tests as zombies."""
    from entrypoint import reaper

    if not reaper.become_subreaper():
        pytest.fail("prctl(PR_SET_CHILD_SUBREAPER) refused: Linux >= 3.4 is required")
    yield
    reaper.become_subreaper(on=False)


def test_a_child_left_running_is_ended_and_said(tmp_path, subreaper):
    body = """
        import subprocess
        child = subprocess.Popen(["sleep", "600"])
        print("child", child.pid, flush=True)
    """
    sup, logs = make(tmp_path, script(tmp_path, body), left_running_grace_seconds=2)
    outcome = sup._process.run_attempt()
    assert outcome.returncode == 0
    (pid,) = [int(e.split("pid ")[1].split(")")[0]) for e in outcome.left_running]
    assert outcome.left_running == (f"sleep (pid {pid}): ended with SIGTERM",)
    assert any(
        f"the command exited 0 while its child sleep (pid {pid}) still ran; ended it with SIGTERM" in line
        for line in logs
    )
    assert not os.path.exists(f"/proc/{pid}")  # ended and reaped: no process, no zombie


def test_a_shell_that_backgrounds_sleep_and_exits_leaves_nothing_behind(tmp_path, subreaper):
    sup, logs = make(
        tmp_path, ["sh", "-c", "sleep 600 & echo $! > " + str(tmp_path / "pid")], left_running_grace_seconds=2
    )
    assert sup.run().phase is Phase.SUCCEEDED
    pid = int((tmp_path / "pid").read_text())
    assert not os.path.exists(f"/proc/{pid}")
    # Named by /proc/<pid>/comm when it is ended: `sleep`, or still `sh` when the shell's fork had
    # not yet exec'd sleep by then (a loaded machine).
    assert any(
        f"while its child sleep (pid {pid}) still ran" in line or f"while its child sh (pid {pid}) still ran" in line
        for line in logs
    ), logs


# Counts its attempts; the error it raises (and what it prints first) per attempt comes from the test.
RAISES = """
    import pathlib, sys
    counter = pathlib.Path(sys.argv[0]).with_name("attempts")
    n = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(n + 1))
    if n >= {succeed_at}:
        sys.exit(0)
    print("Epoch", {epoch}, flush=True)
    raise {error}
"""


def test_the_same_error_twice_without_progress_ends_the_run_after_the_second_attempt(tmp_path):
    body = RAISES.format(succeed_at=10, epoch=1, error='ValueError("dataset too small for steps_per_epoch")')
    restarts = []
    sup, logs = make(tmp_path, script(tmp_path, body), on_restart=restarts.append)
    ending = sup.run()
    assert (ending.phase, ending.reason) == (Phase.FAILED, Reason.REPEATED_ERROR)
    assert ending.message == "ValueError: dataset too small for steps_per_epoch"
    assert attempts(tmp_path) == 2 and len(restarts) == 1
    assert "the same error ended 2 attempts in a row" in logs[-1] and "training.sameErrorLimit=2" in logs[-1]


@pytest.mark.parametrize(
    "epoch,error",
    [
        ("1", "ValueError(f'bad row {n}')"),  # another error each time
        ("n", "ValueError('dataset too small')"),  # the same error, after progress its output shows
    ],
)
def test_a_different_error_or_new_output_keeps_restarting(tmp_path, epoch, error):
    sup, logs = make(tmp_path, script(tmp_path, RAISES.format(succeed_at=3, epoch=epoch, error=error)))
    assert sup.run().phase is Phase.SUCCEEDED
    assert attempts(tmp_path) == 4
    assert not any("the same error" in line for line in logs)


def test_a_heartbeat_between_two_same_errors_keeps_restarting(tmp_path):
    body = RAISES.format(succeed_at=3, epoch=1, error="ValueError('dataset too small')").replace(
        "    print(",
        "    import os; pathlib.Path(os.environ['TFMW_HEARTBEAT_FILE']).write_text(str(n + 1))\n    print(",
    )
    body_with_wait = body.replace("    raise", "    import time; time.sleep(0.3)\n    raise")  # seen by a poll
    sup, _ = make(tmp_path, script(tmp_path, body_with_wait))
    assert sup.run().phase is Phase.SUCCEEDED
    assert attempts(tmp_path) == 4

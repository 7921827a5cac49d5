"""Adaptive hang detection (issue 15): the pure policy (entrypoint/hangwatch.py), and the
supervisor with fake trainers (real child processes writing the trainer's heartbeat format,
no TF): a step 5x slower than the median must not fire the watchdog, a SIGSTOPped trainer
must be caught within the adaptive bound, explicit settings win."""

from __future__ import annotations

import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from entrypoint.errors import ConfigError
from entrypoint.hangwatch import ADAPTIVE, FLOOR_SECONDS, MIN_SAMPLES, MULTIPLIER, STATIC, HangWatch, percentile
from entrypoint.lifecycle import Phase
from entrypoint.rundir import format_beat, parse_beat
from entrypoint.settings import load_settings
from entrypoint.supervisor import Supervisor, SupervisorConfig


def steady(
    watch: HangWatch, step_seconds: float, steps: int, start: float = 0.0, first_step: int = 0, per_beat: int = 1
) -> tuple[float, int]:
    """Feed `steps` train beats, `per_beat` steps apart, each step taking step_seconds."""
    now, step = start, first_step
    for _ in range(steps):
        now += step_seconds * per_beat
        step += per_beat
        watch.observe(step, "train", now)
    return now, step


# -- the policy ---------------------------------------------------------------------


def test_documented_constants():
    # docs/failure-model.md and values.yaml quote these; a 5x slow step needs a multiplier > 5
    assert (FLOOR_SECONDS, MULTIPLIER, MIN_SAMPLES) == (6.0, 10.0, 5)
    assert MULTIPLIER >= 2 * 5


def test_percentile_interpolates():
    assert percentile([1, 2, 3, 4, 5], 0.5) == 3
    assert percentile([1, 2], 0.95) == pytest.approx(1.95)
    assert percentile([7], 0.95) == 7


@pytest.mark.parametrize(
    "text,beat",
    [("12 train\n", (12, "train")), ("3\n", (3, None)), ("0 start", (0, "start")), ("", None), ("x train", None)],
)
def test_parse_beat(text, beat):
    assert parse_beat(text) == beat


def test_the_beat_the_trainer_writes_is_the_beat_the_watchdog_reads():
    assert parse_beat(format_beat(12, "checkpoint")) == (12, "checkpoint")


def test_static_until_enough_steady_steps():
    watch = HangWatch(600)
    watch.observe(0, "start", 0.0)  # restored; the first step traces the graph
    assert watch.timeout() == 600
    watch.observe(1, "train", 40.0)  # the traced step: not a sample
    assert watch.timeout() == 600 and watch.samples == 0
    steady(watch, 1.0, MIN_SAMPLES - 1, start=40.0, first_step=1)
    assert watch.timeout() == 600
    steady(watch, 1.0, 1, start=44.0, first_step=5)
    assert watch.samples == MIN_SAMPLES
    assert watch.timeout() == pytest.approx(MULTIPLIER * 1.0)


def test_floor_for_fast_steps_and_per_step_time_from_throttled_beats():
    watch = HangWatch(600)
    watch.observe(0, "start", 0.0)
    # 70 ms steps, the trainer writes at most one beat every 0.5 s (the test beats each 14 steps)
    steady(watch, 0.07, 20, start=5.0, per_beat=14)
    assert watch.step_seconds() == pytest.approx(0.07)
    assert watch.timeout() == FLOOR_SECONDS


def test_static_value_is_the_ceiling():
    watch = HangWatch(30)
    steady(watch, 10.0, 10)  # 10 x 10 s = 100 s > 30 s
    assert watch.timeout() == 30


def test_high_percentile_follows_the_slow_tail():
    watch = HangWatch(600)
    now, step = steady(watch, 1.0, 90)
    now, step = steady(watch, 2.0, 10, start=now, first_step=step)  # 10% of steps twice as slow
    assert watch.step_seconds() == pytest.approx(2.0)
    assert watch.timeout() == pytest.approx(20.0)


def test_a_5x_slow_step_does_not_fire_a_stop_does():
    watch = HangWatch(600)
    now, _ = steady(watch, 1.0, 20)
    # the 5x step: silent for 5 s (plus a poll); output in between does not matter
    assert watch.check(now + 5.5, last_activity=now) is None
    verdict = watch.check(now + MULTIPLIER * 1.0 + 0.1, last_activity=now)
    assert verdict is not None and verdict.timeout == pytest.approx(10.0)
    assert verdict.basis.startswith("adaptive")


def test_output_does_not_hold_off_the_adaptive_bound():
    # A stopped or cut-off trainer's runtime may still print (retries); only a step counts.
    watch = HangWatch(600)
    now, _ = steady(watch, 1.0, 10)
    assert watch.check(now + 11, last_activity=now + 10.9) is not None


@pytest.mark.parametrize("phase", ["checkpoint", "finish", "start"])
def test_phases_that_are_not_steps_get_the_static_bound(phase):
    watch = HangWatch(120)
    now, step = steady(watch, 0.5, 10)
    watch.observe(step, phase, now + 0.1)
    assert watch.timeout() == 120
    assert watch.check(now + 100, last_activity=now + 0.1) is None  # a 100 s checkpoint is fine
    # the first step after it waits for the slowest peer's save in its all-reduce: static until
    # its beat (written after the step) says it is done
    samples = watch.samples
    watch.observe(step + 1, "train", now + 100)
    # then the steps are steady again: adaptive at once, with the samples kept, and the
    # interval that held the phase is no sample
    assert watch.timeout() == FLOOR_SECONDS
    assert watch.samples == samples
    assert watch.check(now + 100 + FLOOR_SECONDS + 0.1, last_activity=now + 100) is not None


def test_a_beat_without_phase_user_command_is_static():
    watch = HangWatch(60)
    for i in range(20):
        watch.observe(i, None, float(i))
    assert watch.samples == 0 and watch.timeout() == 60


def test_a_lower_step_disarms():
    watch = HangWatch(60)
    now, _ = steady(watch, 1.0, 10, first_step=100)
    watch.observe(3, "train", now + 1)
    assert watch.timeout() == 60


def test_static_mode_and_off_win():
    static = HangWatch(45, STATIC)
    now, _ = steady(static, 0.1, 50)
    assert static.timeout() == 45
    assert static.check(now + 44, last_activity=now) is None
    verdict = static.check(now + 46, last_activity=now)
    assert verdict.timeout == 45 and verdict.basis == "training.hangTimeoutSeconds=45"
    off = HangWatch(0, ADAPTIVE)
    now, _ = steady(off, 0.1, 50)
    assert off.timeout() == 0 and off.check(now + 10_000, last_activity=now) is None


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError):
        HangWatch(10, "smart")


# -- the launcher's setting -----------------------------------------------------------


def test_setting_defaults_to_adaptive_and_explicit_static_is_kept():
    env = {"TFMW_HANG_TIMEOUT_SECONDS": "20"}
    assert load_settings(env, need_derivation=False).hang_detection == ADAPTIVE
    assert load_settings(dict(env, TFMW_HANG_DETECTION="static"), need_derivation=False).hang_detection == STATIC
    with pytest.raises(ConfigError, match="TFMW_HANG_DETECTION='auto' must be adaptive or static"):
        load_settings(dict(env, TFMW_HANG_DETECTION="auto"), need_derivation=False)


# -- the supervisor with fake trainers --------------------------------------------------

STEP = 0.3  # the fake trainer's usual step
FLOOR = 1.0  # lowered for the test: the bound is then 10 x 0.3 s = 3 s
ADAPTIVE_BOUND = MULTIPLIER * STEP

# Writes the trainer's heartbeat through the trainer's own Heartbeat class (every step:
# interval 0, so the observed gaps are the steps), after a "start" phase.
FAKE_TRAINER = """
    import os, pathlib, signal, sys, time
    from entrypoint.rundir import Heartbeat
    counter = pathlib.Path(sys.argv[0]).with_name("attempts")
    n = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(n + 1))
    beat = Heartbeat(os.environ["TFMW_HEARTBEAT_FILE"], interval=0.0)
    if n > 0:                                 # the restarted attempt: done at once
        sys.exit(0)
    beat.beat(0, force=True, phase="start")
    time.sleep(1.0)                           # restore + graph tracing of the first step
    for step in range(1, {steps} + 1):
        time.sleep({slow} if step == {slow_step} else {step_seconds})
        beat.beat(step)
        if step == {checkpoint_step}:
            beat.beat(step, phase="checkpoint")
            time.sleep({checkpoint_seconds})  # longer than the adaptive bound: a checkpoint write
        if n == 0 and step == {stop_step}:
            pathlib.Path(sys.argv[0]).with_name("stopped_at").write_text(repr(time.monotonic()))
            os.kill(os.getpid(), signal.SIGSTOP)   # a hung trainer: never beats again
    beat.beat({steps}, force=True, phase="finish")
"""


def fake_trainer(
    tmp_path: Path, steps=30, slow_step=-1, stop_step=-1, checkpoint_step=-1, checkpoint_seconds=0.0
) -> list[str]:
    path = tmp_path / "trainer.py"
    path.write_text(
        textwrap.dedent(
            FAKE_TRAINER.format(
                steps=steps,
                step_seconds=STEP,
                slow=5 * STEP,
                slow_step=slow_step,
                stop_step=stop_step,
                checkpoint_step=checkpoint_step,
                checkpoint_seconds=checkpoint_seconds,
            )
        )
    )
    return [sys.executable, str(path)]


def supervise(tmp_path, command, **kw):
    logs = []
    env = dict(os.environ, TFMW_RUN_ID="r1")
    cfg = SupervisorConfig(
        command=command,
        env=env,
        run_dir=tmp_path / "run",
        heartbeat_file=tmp_path / "hb",
        poll_seconds=0.05,
        backoff_first_seconds=0.01,
        hang_floor_seconds=FLOOR,
        log=lambda line: logs.append((time.monotonic(), line)),
        **kw,
    )
    return Supervisor(cfg), logs


def watchdog_lines(logs):
    return [(when, line) for when, line in logs if "watchdog" in line]


def test_supervisor_a_5x_slow_step_and_a_long_checkpoint_do_not_fire(tmp_path):
    command = fake_trainer(
        tmp_path, steps=24, slow_step=15, checkpoint_step=20, checkpoint_seconds=ADAPTIVE_BOUND + 1.5
    )
    sup, logs = supervise(tmp_path, command, hang_timeout_seconds=30)
    assert sup.run().phase is Phase.SUCCEEDED
    assert watchdog_lines(logs) == [], logs
    assert (tmp_path / "attempts").read_text() == "1"


def test_supervisor_a_stopped_trainer_fires_within_the_adaptive_bound(tmp_path):
    sup, logs = supervise(tmp_path, fake_trainer(tmp_path, steps=14, stop_step=12), hang_timeout_seconds=30)
    assert sup.run().phase is Phase.SUCCEEDED  # the restarted attempt finishes
    assert (tmp_path / "attempts").read_text() == "2"
    fired = watchdog_lines(logs)
    assert len(fired) == 1 and "adaptive" in fired[0][1], logs
    after = fired[0][0] - float((tmp_path / "stopped_at").read_text())
    # the bound from its last beat (one step before it stopped: ~0), plus polls and slack
    assert ADAPTIVE_BOUND - 0.5 <= after <= ADAPTIVE_BOUND + 1.5, (after, fired)
    assert any("restarting training in place" in line and "hang: no progress" in line for _, line in logs)
    # the launcher said once which bound holds, from the step the 5th sample came with (step 1
    # follows the "start" beat: no sample), before anything fired
    said = [(when, line) for when, line in logs if "launcher hang bound" in line]
    assert len(said) == 1 and " from step 6 (adaptive: " in said[0][1], said
    assert said[0][0] < fired[0][0]


def test_supervisor_explicit_static_wins(tmp_path):
    sup, logs = supervise(
        tmp_path, fake_trainer(tmp_path, steps=14, stop_step=12), hang_timeout_seconds=5, hang_detection=STATIC
    )
    assert sup.run().phase is Phase.SUCCEEDED
    fired = watchdog_lines(logs)
    assert len(fired) == 1 and "training.hangTimeoutSeconds=5" in fired[0][1], logs
    assert not [line for _, line in logs if "hang bound" in line], logs
    after = fired[0][0] - float((tmp_path / "stopped_at").read_text())
    assert 5 <= after <= 6.5, after


def test_supervisor_explicit_low_static_caps_the_adaptive_bound(tmp_path):
    # hangTimeoutSeconds below the adaptive bound (3 s): the explicit value wins
    sup, logs = supervise(tmp_path, fake_trainer(tmp_path, steps=14, stop_step=12), hang_timeout_seconds=2)
    assert sup.run().phase is Phase.SUCCEEDED
    fired = watchdog_lines(logs)
    assert len(fired) == 1, logs
    after = fired[0][0] - float((tmp_path / "stopped_at").read_text())
    assert 2 <= after <= 3.0, after

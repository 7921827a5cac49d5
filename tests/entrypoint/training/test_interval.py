"""The auto checkpoint interval (entrypoint/training/interval.py) and the launcher's MTBF
estimate (entrypoint/mtbf.py): pure functions."""

from __future__ import annotations

import math

import pytest
from pytest import approx

from entrypoint import mtbf
from entrypoint.training import interval
from entrypoint.training.config import resolve


def test_daly_matches_young_to_first_order_and_the_published_numbers():
    assert interval.daly_interval(0.1, 180) == approx(5.93, abs=0.01)
    assert interval.daly_interval(10, 86_400) / 60 == approx(21.8, abs=0.1)  # ~22 min
    for cost, m in ((0.1, 1e6), (1.0, 1e7)):
        assert interval.daly_interval(cost, m) == approx(math.sqrt(2 * cost * m), rel=1e-3)
    assert interval.daly_interval(500, 200) == 200  # C >= 2M: checkpoint every M
    assert interval.daly_interval(0.0, 100) == 0.0


def test_choose_uses_the_median_of_the_recent_stalls_and_names_the_bound_that_decided():
    chosen = interval.choose([9.0, 0.1, 0.1, 0.2, 0.1, 0.1], 86_400, 10, 3600)
    assert chosen.cost == approx(0.1) and chosen.why == "young-daly"  # the old outlier left the window
    assert chosen.seconds == approx(interval.daly_interval(0.1, 86_400))
    assert interval.choose([100.0], 1e9, 10, 600) == interval.Interval(600, 100.0, 1e9, "max")
    assert interval.choose([0.001], 60, 10, 600).why == "min"
    floored = interval.choose([0.001], 60, 10, 600, write_seconds=30.0)
    assert (floored.seconds, floored.why) == (30.0, "write")  # never below the background write
    assert interval.choose([], 60, 10, 600).seconds == 10  # nothing measured yet: the lower bound


def test_a_schedule_counts_from_the_last_save_and_auto_rechooses_after_each():
    fixed, first = interval.schedule_for(
        {"interval": "fixed", "everySteps": 0, "everySeconds": 30}, mtbf=1e6, now=100.0
    )
    assert first is None and not fixed.step_due(50)
    assert not fixed.time_due(129.9) and fixed.time_due(130.0)
    assert fixed.saved(131.0, [0.5], 0.0) is None and not fixed.time_due(160.0)
    checkpoint = {"interval": "auto", "everySteps": 50, "everySeconds": 0, "minSeconds": 5, "maxSeconds": 600}
    auto, first = interval.schedule_for(checkpoint, mtbf=180.0, now=0.0)
    assert first.seconds == 5 and not auto.step_due(50)  # auto replaces everySteps
    chosen = auto.saved(10.0, [0.1], 1.0)
    assert chosen.seconds == approx(interval.daly_interval(0.1, 180.0)) and auto.seconds == chosen.seconds


def test_interval_changes_are_logged_only_when_they_move():
    assert interval.changed(None, 10.0) and interval.changed(10.0, 12.0) and not interval.changed(10.0, 10.5)


def test_the_mtbf_estimate_starts_at_the_prior_and_follows_the_failures():
    assert mtbf.estimate(0, 0.0) == (mtbf.PRIOR_SECONDS, "prior")
    assert mtbf.estimate(0, 2 * mtbf.PRIOR_SECONDS)[0] == 2 * mtbf.PRIOR_SECONDS  # a failure-free run
    m, source = mtbf.estimate(3, 600.0)
    assert m == approx(200.0) and source == "observed:3/600s"
    assert mtbf.estimate(0, float("nan"))[0] == mtbf.PRIOR_SECONDS


def test_the_estimate_travels_in_a_file_the_trainer_reads_when_it_starts(tmp_path):
    path = str(tmp_path / "mtbf")
    env = mtbf.attempt_env(path, 1, 100.0)
    assert mtbf.from_env(env) == (approx(100.0), "observed:1/100s")
    mtbf.attempt_env(path, 2, 300.0)  # the next attempt: a standby started with `env` reads it anew
    assert mtbf.from_env(env) == (approx(150.0), "observed:2/300s")
    assert mtbf.from_env({}) == (mtbf.PRIOR_SECONDS, "prior")
    (tmp_path / "mtbf").write_text("-3 x\n")
    assert mtbf.from_env(env) == (mtbf.PRIOR_SECONDS, "prior")
    assert mtbf.attempt_env(str(tmp_path / "missing" / "mtbf"), 1, 1.0) == {
        mtbf.MTBF_FILE_ENV: str(tmp_path / "missing" / "mtbf")
    }


@pytest.mark.parametrize(
    "sets",
    [
        ["checkpoint.everySteps=0", "checkpoint.everySeconds=30"],
        ["checkpoint.interval=auto", "checkpoint.everySteps=0"],
    ],
)
def test_a_time_or_auto_schedule_alone_is_accepted(sets):
    assert resolve(None, sets)["checkpoint"]["everySteps"] == 0

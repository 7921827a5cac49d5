"""Elastic membership: the pure rule (entrypoint.membership), the deal of a step's micro-batches
(entrypoint.training.positions.deal) and the epoch files (entrypoint.elastic)."""

from __future__ import annotations

import itertools

import pytest

from entrypoint.elastic import EpochFiles, Liveness
from entrypoint.membership import (
    Epoch,
    Kind,
    bounds_problem,
    decide,
    describe,
    member_micro_batches,
    usable_sizes,
)
from entrypoint.training.positions import deal

N, K = 4, 3


def test_usable_sizes_keep_the_global_batch():
    assert usable_sizes(4, 3, 2) == [2, 3, 4]
    assert usable_sizes(4, 1, 2) == [2, 4]
    assert usable_sizes(8, 1, 5) == [8]
    assert member_micro_batches(4, 3, 3) == 4
    with pytest.raises(ValueError):
        member_micro_batches(4, 1, 3)


@pytest.mark.parametrize(
    ("replicas", "micro", "minimum", "says"),
    [
        (4, 1, 0, "must be at least 1"),
        (4, 1, 4, "must be below workers.replicas=4"),
        (4, 1, 5, "must be below workers.replicas=4"),
        (4, 1, 3, "no group of 3 workers keeps the global batch of 4 workers x 1 micro-batches"),
        (8, 1, 5, "set training.config.gradientAccumulationSteps to a multiple of 7"),
    ],
)
def test_bounds_that_cannot_shrink_are_refused_in_one_line(replicas, micro, minimum, says):
    problem = bounds_problem(replicas, micro, minimum)
    assert problem is not None and says in problem and "\n" not in problem
    assert problem.startswith(f"training.elastic.minReplicas={minimum}")


def test_bounds_that_can_shrink_pass():
    assert bounds_problem(4, 3, 3) is None
    assert bounds_problem(4, 1, 2) is None


def test_deal_covers_every_micro_batch_of_a_step_once():
    for replicas, unit in [(4, 3), (4, 1), (3, 2), (8, 2)]:
        for size in usable_sizes(replicas, unit, 1):
            taken = [
                (shard, i)
                for m in range(size)
                for shard, lo, hi in deal(replicas, unit, size, m)
                for i in range(lo, hi)
            ]
            assert taken == list(itertools.product(range(replicas), range(unit)))
    with pytest.raises(ValueError):
        deal(4, 1, 3, 0)


EPOCH = Epoch.first(N)


def test_every_member_running_keeps_the_epoch():
    assert decide(EPOCH, frozenset(range(4)), {}, N, K, 2, 60).kind is Kind.KEEP


def test_a_member_gone_within_the_grace_is_waited_for():
    change = decide(EPOCH, frozenset({0, 1, 2}), {3: 10.0}, N, K, 2, 60)
    assert change.kind is Kind.KEEP and "waiting up to 60s for worker 3" in change.why


def test_a_member_gone_past_the_grace_shrinks_the_group():
    change = decide(EPOCH, frozenset({0, 1, 2}), {3: 61.0}, N, K, 2, 60)
    assert change.kind is Kind.SHRINK and change.members == (0, 1, 2)


def test_the_chief_lost_moves_the_chief_to_the_lowest_running_ordinal():
    change = decide(EPOCH, frozenset({1, 2, 3}), {0: 61.0}, N, K, 2, 60)
    assert change.members == (1, 2, 3) and change.members[0] == 1


def test_a_size_that_cannot_keep_the_batch_is_skipped_and_said():
    change = decide(EPOCH, frozenset({0, 1, 2}), {3: 61.0}, N, 1, 2, 60)
    assert change.kind is Kind.SHRINK and change.members == (0, 1)
    assert "2 wait" in change.why


def test_too_few_running_waits_for_capacity():
    change = decide(EPOCH, frozenset({0}), {1: 99.0, 2: 99.0, 3: 99.0}, N, K, 2, 60)
    assert change.kind is Kind.WAIT and not change.claims and "minReplicas=2" in change.why


def test_a_returning_worker_grows_the_group():
    shrunk = Epoch(1, (0, 1, 2), N, "shrink", 0)
    change = decide(shrunk, frozenset(range(4)), {}, N, K, 2, 60)
    assert change.kind is Kind.GROW and change.members == (0, 1, 2, 3)


def test_a_resize_forms_a_new_epoch_at_the_new_size():
    change = decide(EPOCH, frozenset(range(6)), {}, 6, K, 2, 60)
    assert change.kind is Kind.RESIZE and change.members == tuple(range(6))


def test_describe_says_members_and_micro_batches():
    assert describe(Epoch(1, (0, 1, 2), 4), 3) == "members 3/4 (elastic, micro-batches 4)"


def test_an_epoch_is_claimed_once(tmp_path):
    files = EpochFiles(tmp_path)
    assert files.newest(4) == Epoch.first(4)
    first = Epoch(1, (0, 1, 2), 4, "shrink", 0)
    assert files.claim(first)
    assert not files.claim(Epoch(1, (1, 2, 3), 4, "shrink", 1)), "a second claim of epoch 1 won"
    assert files.newest(4) == first
    assert not list((tmp_path / "membership").glob(".claim-*")), "a claim left its temporary file"


def test_liveness_follows_beats_on_the_observer_clock(tmp_path):
    now = [100.0]
    files = EpochFiles(tmp_path)
    live = Liveness(clock=lambda: now[0], stale=6.0)
    files.beat(1, 1, 0, True)
    files.beat(2, 1, 0, True)
    # first seen: not alive until it changes (a lost worker's file outlives it)
    assert live.observe(files.beats())[0] == set() and not live.settled()
    now[0] += 2
    files.beat(1, 2, 0, True)
    files.beat(2, 2, 0, True)
    assert live.observe(files.beats())[0] == {1, 2}
    now[0] += 4
    files.beat(1, 3, 0, True)
    now[0] += 4
    alive, absent = live.observe(files.beats())
    assert alive == {1} and absent == {2: 8.0} and live.settled()
    assert live.absent_for(3, absent) == 10.0  # never seen: since the observer started


def test_a_lost_workers_old_file_never_looks_alive_to_a_new_observer(tmp_path):
    now = [0.0]
    files = EpochFiles(tmp_path)
    files.beat(3, 41, 1, False)  # written before worker 3 was lost
    live = Liveness(clock=lambda: now[0], stale=6.0)
    for _ in range(5):
        alive, absent = live.observe(files.beats())
        assert 3 not in alive
        now[0] += 2
    assert absent[3] == 8.0


def test_a_resize_below_the_minimum_takes_the_whole_new_group():
    change = decide(EPOCH, frozenset({0, 1}), {}, 2, K, 3, 60)
    assert change.kind is Kind.RESIZE and change.members == (0, 1)


def test_an_epoch_is_claimed_once_without_hard_links(tmp_path, monkeypatch):
    import os

    def no_links(*_):
        raise PermissionError("hard links not supported")

    monkeypatch.setattr(os, "link", no_links)
    files = EpochFiles(tmp_path)
    assert files.claim(Epoch(1, (0, 1), 4, "shrink", 0))
    assert not files.claim(Epoch(1, (2, 3), 4, "shrink", 2))
    assert files.newest(4).members == (0, 1)


def _run(**kw):
    from types import SimpleNamespace

    settings = SimpleNamespace(elastic_min_replicas=2, elastic_micro_batches=1, replicas=4)
    base = {"platform": False, "identity": object(), "run_dir": "/shared/r", "settings": settings, "size": 4}
    base.update(kw)
    return SimpleNamespace(**base)


@pytest.mark.parametrize(
    ("run", "command", "says"),
    [
        (_run(platform=True), ["python", "-m", "entrypoint.training"], "needs the chart's StatefulSet"),
        (_run(identity=None), ["python", "-m", "entrypoint.training"], "needs the chart's StatefulSet"),
        (_run(run_dir=None), ["python", "-m", "entrypoint.training"], "needs shared storage mounted"),
        (_run(), ["python", "train.py"], "needs the built-in trainer"),
    ],
)
def test_the_launcher_refuses_what_cannot_follow_the_members(run, command, says):
    from entrypoint.launcher import elastic_problem

    problem = elastic_problem(run, command)
    assert problem is not None and says in problem and problem.startswith("training.elastic.minReplicas=2")


def test_the_launcher_takes_an_elastic_builtin_run_with_a_claim():
    from entrypoint.launcher import elastic_problem

    assert elastic_problem(_run(), ["python", "-m", "entrypoint.training"]) is None


def test_the_launcher_refuses_elastic_settings_that_cannot_shrink():
    from entrypoint.errors import ConfigError
    from entrypoint.settings import load_settings

    env = {
        "TFMW_POD_NAME": "r-tf-multiworker-0",
        "TFMW_NAMESPACE": "default",
        "TFMW_STATEFULSET": "r-tf-multiworker",
        "TFMW_SERVICE": "r-tf-multiworker",
        "TFMW_REPLICAS": "4",
        "TFMW_ELASTIC_MIN_REPLICAS": "3",
    }
    with pytest.raises(ConfigError, match="no group of 3 workers keeps the global batch"):
        load_settings(env)
    assert load_settings(dict(env, TFMW_ELASTIC_MICRO_BATCHES="3")).elastic_min_replicas == 3
    assert not load_settings({k: v for k, v in env.items() if "ELASTIC" not in k}).elastic

"""The verbs' shared pieces that are pure (tfmw.deploy.release, suspension): which release a
verb acts on once the overlay named it, and when a suspend has nothing left to wait for."""

from __future__ import annotations

import pytest

from entrypoint.lifecycle import Phase, RunState
from tfmw.chart.target import Target
from tfmw.deploy import observe, suspension
from tfmw.deploy.release import Release

WORKERS = observe.Workers("w", "ml", 2, "app=w", run_id="r1", status_configmap="w-status")


def test_a_release_takes_its_name_and_namespace_from_the_target_and_keeps_the_rest():
    rel = Release(env="dev", env_named=True, kube_context="ctx", any_context=True)
    at = rel.at(Target("r", "ml", "", "values/dev.yaml", "values/dev.yaml target"))
    assert (at.name, at.namespace) == ("r", "ml")
    assert (at.env, at.env_named, at.kube_context, at.any_context) == ("dev", True, "ctx", True)
    assert (rel.name, rel.namespace) == (None, None)  # frozen: a new value, the parsed one unchanged


def record(phase: Phase) -> observe.RunRecord:
    return observe.RunRecord(RunState(run_id="r1", phase=phase))


@pytest.mark.parametrize(
    "pods_left,run,done",
    [
        (False, record(Phase.SUSPENDED), True),
        (True, record(Phase.SUSPENDED), False),  # recorded, but the pods are still going
        (False, record(Phase.RUNNING), False),  # gone, but the chief has not recorded it yet
        (False, record(Phase.SUCCEEDED), True),  # the run had ended: nothing to record
        (False, record(Phase.FAILED), True),
        (False, None, True),  # no run recorded (a release without status, or not started)
        (True, None, False),
    ],
)
def test_a_suspend_is_done_once_the_pods_are_gone_and_nothing_is_left_to_record(pods_left, run, done):
    assert suspension.is_done(pods_left, run) is done


def test_the_wait_allows_the_workers_grace_and_a_minute():
    assert suspension.grace_seconds({}) == 120
    assert suspension.grace_seconds({"workers": {"terminationGracePeriodSeconds": 30}}) == 30
    assert suspension.grace_seconds({"workers": None}) == 120


def test_a_suspension_is_suspended_only_when_the_run_says_so():
    assert suspension.Suspension(record(Phase.SUSPENDED), WORKERS, 180).suspended
    assert not suspension.Suspension(record(Phase.RUNNING), WORKERS, 180).suspended
    assert not suspension.Suspension(None, WORKERS, 180).suspended

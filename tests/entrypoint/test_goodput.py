"""entrypoint.goodput: every second in one bucket, the moves at checkpoints and failures, the
carry across a launcher restart, and the status strings."""

from __future__ import annotations

import json

import pytest

from entrypoint.ending import goodput_fields
from entrypoint.goodput import CAUSES, Accounting, Ledger
from entrypoint.launcher import start_ledger
from entrypoint.lifecycle import Phase, RunState, parse_rfc3339


def approx(value):
    return pytest.approx(value, abs=1e-9)


def test_a_clean_run_is_startup_peer_wait_training_and_checkpoints():
    ledger = Ledger(100.0)
    ledger.peer_wait(101.0)  # 1 s of startup before the wait
    ledger.peers_found(103.0)  # 2 s waiting
    ledger.attempt_started(103.5)  # beats expected: still starting
    ledger.beat(104.0, "start")  # restore done, first step not yet: still starting
    ledger.beat(108.0, "train")  # the first step: 1 + 5 s of startup
    ledger.beat(110.0, "train")
    ledger.checkpoint_saved(118.0, 1.5)
    ledger.ended(130.0)
    account = ledger.snapshot(500.0)  # ended: time after the end is not the run's
    assert account.badput == {
        "startup": approx(6.0),
        "peerWait": approx(2.0),
        "checkpoint": approx(1.5),
        "restart": 0.0,
        "lostWork": 0.0,
        "detection": 0.0,
        "export": 0.0,
    }
    assert account.productive == approx(22.0 - 1.5)
    assert account.wall == approx(30.0)
    assert account.goodput == approx(20.5 / 30.0)


def test_a_failure_moves_the_unnoticed_time_and_the_steps_since_the_checkpoint():
    ledger = Ledger(0.0)
    ledger.beat(2.0, "train")  # startup 2
    ledger.checkpoint_saved(12.0, 1.0)  # 10 s training, 1 of them the save
    ledger.beat(20.0, "train")  # the last step before the fault
    ledger.failed(23.0)  # detected 3 s later
    ledger.peer_wait(23.5)
    ledger.peers_found(24.0)
    ledger.beat(30.0, "start")  # restore: still restarting
    ledger.beat(31.0, "train")  # resumed
    account = ledger.snapshot(41.0)
    assert account.badput["detection"] == approx(3.0)
    assert account.badput["lostWork"] == approx(8.0)  # 12 -> 20: trained again
    assert account.badput["restart"] == approx(7.5)  # 23 -> 31 less the 0.5 s peer wait
    assert account.badput["peerWait"] == approx(0.5)
    assert account.productive == approx(9.0 + 10.0)  # 2..12 less the save, then 31..41
    assert account.wall == approx(41.0)


def test_a_background_save_charges_its_stall_and_keeps_the_steps_since_its_copy_at_risk():
    """A background save: `seconds` is the copy's stall (badput), not the write; the steps
    trained while it was written (`age`) are not in it, so a failure loses them."""
    ledger = Ledger(0.0)
    ledger.beat(2.0, "train")
    ledger.checkpoint_saved(12.0, 0.1, 3.0)  # copied at 9.0, published at 12.0
    ledger.beat(14.0, "train")
    ledger.failed(14.0)
    account = ledger.snapshot(14.0)
    assert account.badput["checkpoint"] == approx(0.1)
    assert account.badput["lostWork"] == approx(3.0 + 2.0)  # 9 -> 14: trained again
    assert account.productive == approx(14.0 - 2.0 - 0.1 - 5.0)


def test_a_background_save_older_than_the_training_keeps_no_more_at_risk_than_there_was():
    ledger = Ledger(0.0)
    ledger.beat(1.0, "train")
    ledger.checkpoint_saved(3.0, 0.1, 10.0)  # only 2 s of training in this attempt
    ledger.beat(3.0, "train")
    ledger.failed(3.0)
    assert ledger.snapshot(3.0).badput["lostWork"] == approx(2.0 - 0.1)  # the stall is charged once


def test_a_hang_longer_than_the_steps_at_risk_moves_no_more_than_there_is():
    ledger = Ledger(0.0)
    ledger.beat(1.0, "train")
    ledger.checkpoint_saved(5.0, 0.5)
    ledger.failed(6.0)  # last beat at 1.0, but only 1 s since the checkpoint
    account = ledger.snapshot(6.0)
    assert account.badput["detection"] == approx(1.0) and account.badput["lostWork"] == 0.0
    assert account.productive == approx(3.5)


def test_a_command_without_heartbeats_trains_from_its_start_and_is_never_split():
    ledger = Ledger(0.0, beats=False)
    ledger.attempt_started(2.0)
    ledger.checkpoint_saved(5.0, None)
    ledger.failed(10.0)
    ledger.attempt_started(12.0)
    account = ledger.snapshot(20.0)
    assert account.badput["startup"] == approx(2.0) and account.badput["restart"] == approx(2.0)
    assert account.badput["lostWork"] == 0.0 and account.badput["detection"] == 0.0
    assert account.productive == approx(16.0)


def test_a_restarted_launcher_carries_the_record_and_counts_its_absence_as_restart():
    carried = Accounting(50.0, {**dict.fromkeys(CAUSES, 0.0), "startup": 10.0})
    ledger = Ledger(1000.0, carried=carried, absent_seconds=7.0)
    ledger.beat(1004.0, "train")
    account = ledger.snapshot(1010.0)
    assert account.badput["startup"] == approx(10.0)
    assert account.badput["restart"] == approx(7.0 + 4.0)
    assert account.productive == approx(56.0)


def test_the_status_strings_round_trip_and_refuse_garbage():
    account = Accounting(90.0, {**dict.fromkeys(CAUSES, 0.0), "restart": 7.25, "startup": 2.75})
    fields = account.to_fields()
    assert fields["goodput"] == "0.9000" and fields["productiveSeconds"] == "90.0"
    assert set(json.loads(fields["badputSeconds"])) == set(CAUSES)
    back = Accounting.from_fields(fields["productiveSeconds"], fields["badputSeconds"])
    assert back.productive == 90.0 and back.badput["restart"] == pytest.approx(7.2, abs=0.06)
    for productive, badput in (
        ("", ""),
        ("x", "{}"),
        ("-1", "{}"),
        ("1", "[]"),
        ("1", '{"restart": -2}'),
        ("nan", "{}"),
        ("1", '{"restart": "x"}'),
    ):
        assert Accounting.from_fields(productive, badput) is None, (productive, badput)
    assert Accounting().goodput is None and Accounting().summary() == "goodput -"
    assert account.summary() == "goodput 90.0% of 100.0s (badput: restart 7.2s, startup 2.8s)"


def test_a_non_finite_checkpoint_time_is_ignored():
    ledger = Ledger(0.0)
    ledger.beat(0.0, "train")
    ledger.checkpoint_saved(10.0, float("nan"))
    account = ledger.snapshot(10.0)
    assert account.productive == approx(10.0) and account.badput["checkpoint"] == 0.0


def _recorded(**kw) -> RunState:
    base = dict(
        run_id="r",
        phase=Phase.RUNNING,
        started_at="2026-12-02T10:00:00Z",
        updated_at="2026-12-02T10:05:00Z",
        productive_seconds="250.0",
        badput_seconds=json.dumps({"startup": 50.0}),
    )
    return RunState(**{**base, **kw})


def test_start_ledger_carries_only_the_same_attempt():
    recorded = _recorded()
    launched = parse_rfc3339(recorded.updated_at) + 12.0
    same = start_ledger(recorded, recorded, launched, beats=True).snapshot(launched)
    assert same.productive == 250.0 and same.badput["restart"] == approx(12.0)
    other = RunState(run_id="r", started_at="2026-12-02T11:00:00Z")  # a new attempt
    assert start_ledger(recorded, other, launched, beats=True).snapshot(launched).wall == 0.0
    ended = _recorded(phase=Phase.FAILED)
    assert start_ledger(ended, ended, launched, beats=True).snapshot(launched).wall == 0.0
    assert start_ledger(None, other, launched, beats=True).snapshot(launched).wall == 0.0


def test_the_completed_line_fields_name_the_causes_largest_first():
    state = _recorded(phase=Phase.SUCCEEDED, badput_seconds=json.dumps({"startup": 5.0, "restart": 20.0}))
    assert goodput_fields(state) == {
        "goodput": f"{250 / 275:.4f}",
        "wall_seconds": "275.0",
        "badput": "restart=20.0 startup=5.0",
    }
    assert goodput_fields(RunState(run_id="r")) == {}


def test_the_export_after_the_last_step_is_its_own_cause():
    ledger = Ledger(0.0)
    ledger.beat(1.0, "train")
    ledger.beat(9.0, "finish")  # the steps are over: SavedModel export and COMPLETED
    ledger.ended(12.0)
    account = ledger.snapshot(12.0)
    assert account.badput["export"] == approx(3.0) and account.productive == approx(8.0)
    assert account.badput["startup"] == approx(1.0)

"""Figure 7's pure parts: the marks read from the chief's status and stamped log, the table and
the report's text. No timing assertions: benchmarks are not tests."""

from __future__ import annotations

from tfmw.bench import fig_kueue
from tfmw.k8s.api import time_seconds

R = fig_kueue.QueuedRound


def summary(preemption: fig_kueue.Preemption | None = None) -> fig_kueue.Summary:
    rounds = (R(20.0, 3.0, 24.0), R(22.0, 2.5, 23.1), R(21.0, 2.8, 25.2))
    done = fig_kueue.Preemption(4.2, 12.5, 1.3, 15.0, stopped_at=350, resumed_from=350)
    return fig_kueue.Summary(rounds, preemption or done, "v0.19.2")


def test_the_stopped_step_is_read_from_the_chiefs_waiting_message():
    message = "evicted by Kueue at step 350 (Preempted: preempted by tfmw-high): the group is requeued …"
    assert fig_kueue.stopped_step(message) == 350
    assert fig_kueue.stopped_step("waiting for workers that are not running") is None
    assert fig_kueue.stopped_step("") is None


def test_the_resume_is_the_first_step_after_a_start_that_resumed():
    log = "\n".join(
        [
            "2026-12-04T10:00:00.000000000Z tfmw launcher starting",
            "2026-12-04T10:00:01.000000000Z tfmw progress step=1/10 loss=1",  # before any start line: not it
            "2026-12-04T10:00:05.000000000Z tfmw start workers=2 resume_step=350",
            "2026-12-04T10:00:07.500000000Z tfmw progress step=351/2000 loss=0.5",
        ]
    )
    resumed_from, stamp = fig_kueue.resume_marks(log)
    assert resumed_from == 350 and stamp == time_seconds("2026-12-04T10:00:07.500000000Z")
    assert fig_kueue.resume_marks("\n".join(log.splitlines()[:3])) is None


def test_workload_conditions():
    admitted = {"status": {"conditions": [{"type": "Admitted", "status": "True"}]}}
    on_hold = {"status": {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "OnHold"}]}}
    assert fig_kueue.admitted(admitted) and not fig_kueue.admitted(on_hold) and not fig_kueue.admitted(None)
    assert fig_kueue.quota_released(on_hold) and not fig_kueue.quota_released(admitted)


def test_rows_pair_each_round_and_count_the_steps_trained_twice():
    rows = fig_kueue.table_rows(summary())
    assert rows[0] == ["install -> first step, plain StatefulSet", "21.0", "20.0", "22.0", ""]
    assert rows[2][0] == "install -> first step, under Kueue"
    assert rows[2][4] == "1.20x (1.05-1.20)"  # the paired ratios 24/20, 23.1/22, 25.2/21
    assert rows[-1][:2] == ["steps low trained twice (stopped at 350, resumed from 350)", "0"]
    assert rows[-2][4] == f"{15.0 / 21.0:.2f}x"


def test_an_unmeasured_preemption_is_one_row_and_a_sentence():
    s = summary(fig_kueue.Preemption(problem="low recorded Waiting not within 180s"))
    rows = fig_kueue.table_rows(s)
    assert rows[-1][0] == "preemption: not measured (low recorded Waiting not within 180s)"
    assert "The preemption was not measured: low recorded Waiting not within 180s." in fig_kueue.kueue_text(s)


def test_report_states_the_ratio_and_what_the_preemption_cost():
    s = summary()
    text = fig_kueue.section(s, fig_kueue.table_rows(s), fig_kueue.HEADERS, "1.0 / 1.0 / 1.0")
    assert text.startswith("## Figure 7: the chart under a real Kueue")
    assert "a median ratio of 1.20x" in text and "v0.19.2" in text
    assert "from step 350: steps trained twice: none." in text


def test_plot_draws(tmp_path):
    fig_kueue.plot(summary(), tmp_path / "k.png", "test")
    assert (tmp_path / "k.png").stat().st_size > 1000

"""Figure 9's pure parts: the variants' variables, the cgroup files it writes, the paired ratio
and the report's verdict."""

from __future__ import annotations

import pytest

from tfmw.bench import fig_threads
from tfmw.bench.procs import BenchError


def test_the_sized_variant_is_the_trainers_plan_and_the_default_sets_nothing():
    assert fig_threads.variant_env(fig_threads.SIZED, 1.0, 2) == {
        "TF_NUM_INTRAOP_THREADS": "1",
        "TF_NUM_INTEROP_THREADS": "2",
    }
    assert fig_threads.variant_env(fig_threads.SIZED, 8.0, 96)["TF_NUM_INTRAOP_THREADS"] == "8"
    assert fig_threads.variant_env(fig_threads.DEFAULT, 1.0, 2) == {}


def test_a_v1_cgroup_gets_the_quota_the_process_and_reports_throttling(tmp_path):
    cpu = tmp_path / "cpu"
    cpu.mkdir()
    (cpu / "cpu.cfs_quota_us").write_text("-1")
    group = fig_threads.Cgroup(tmp_path)
    assert group.path.parent == cpu and not group.v2
    group.limit(1.5)
    assert (group.path / "cpu.cfs_quota_us").read_text() == "150000"
    assert (group.path / "cpu.cfs_period_us").read_text() == "100000"
    group.enter()
    assert (group.path / "cgroup.procs").read_text().isdigit()
    (group.path / "cpu.stat").write_text("nr_periods 40\nnr_throttled 31\nthrottled_time 9\n")
    assert group.throttling() == (40, 31)
    for f in group.path.iterdir():
        f.unlink()
    group.close()
    assert not group.path.exists()


def test_a_v2_cgroup_writes_cpu_max_and_one_without_the_cpu_controller_is_refused(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpu memory")
    (tmp_path / "cgroup.subtree_control").write_text("cpu memory")
    group = fig_threads.Cgroup(tmp_path)
    assert group.v2
    group.limit(1.0)
    assert (group.path / "cpu.max").read_text() == "100000 100000"
    (tmp_path / "cgroup.subtree_control").write_text("memory")
    with pytest.raises(BenchError, match="does not delegate the cpu controller"):
        fig_threads.Cgroup(tmp_path)
    with pytest.raises(BenchError, match="no cgroup cpu controller"):
        fig_threads.Cgroup(tmp_path / "nothing")


def test_the_ratio_is_paired_per_round_and_the_report_says_which_is_faster():
    sized, default = fig_threads.SIZED, fig_threads.DEFAULT
    result = fig_threads.Result(
        1.0,
        2,
        {sized: fig_threads.variant_env(sized, 1.0, 2), default: {}},
        [
            fig_threads.Sample(sized, 0.040, 100, 20),
            fig_threads.Sample(default, 0.050, 100, 90),
            fig_threads.Sample(default, 0.060, 120, 100),
            fig_threads.Sample(sized, 0.042, 120, 30),
        ],
    )
    assert fig_threads.ratios(result) == pytest.approx([0.8, 0.7])
    rows = fig_threads.table_rows(result)
    assert rows[0][:2] == [sized, "1/2"] and rows[1][:2] == [default, "unset"]
    assert rows[0][2] == pytest.approx(41.0) and rows[0][4] == "22%" and rows[1][4] == "87%"
    text = fig_threads.section(result, rows, fig_threads.HEADERS, "0.1 / 0.1 / 0.1")
    assert "the step took 0.75x TensorFlow's default's time, 1.33x the steps per second" in text
    assert "faster in every round" in text and "1 thread(s) against TensorFlow's 2" in text

"""The pure parts of `make bench`: parsing, ratio maths, table formatting, refusals.
No timing assertions: benchmarks are not tests."""

from __future__ import annotations

import math
import shlex
import subprocess
import sys
import types

import pytest

from tfmw.bench import fig_control, fig_launcher, fig_overhead, fig_pipeline, fig_recovery, report, stats
from tfmw.bench.cli import parse_figures
from tfmw.bench.figure import one_measurement
from tfmw.bench.machine import cpu_model, memory_gib
from tfmw.bench.parse import bench_cases
from tfmw.bench.procs import BenchError
from tfmw.faults import analysis as fault_analysis
from tfmw.faults import cli as fault_cli
from tfmw.faults import local as fault_local
from tfmw.table import console_table, fmt, markdown_table

# ---------------------------------------------------------------- parsing


def test_pipeline_result_line_round_trips_json_with_spaces():
    result = {"step_alone": 100.0, "sources": {"npz shards": {"describe": "4 NPZ shards, in memory"}}}
    output = "\n".join(["WARNING noise", "tfmw bench case={}", fig_pipeline.result_line(result), ""])
    assert fig_pipeline.parse(output) == result
    with pytest.raises(BenchError, match="no result line"):
        fig_pipeline.parse("tfmw bench case={}\n")


def test_bench_cases_collects_by_id_and_ignores_noise():
    out = "\n".join(
        [
            "WARNING something",
            'tfmw bench case={"id":"tiny","step_seconds":0.01,"cpu_seconds":0.005}',
            'tfmw bench case={"id":"cnn","step_seconds":0.2,"cpu_seconds":0.1}',
            "",
        ]
    )
    cases = bench_cases(out)
    assert sorted(cases) == ["cnn", "tiny"] and cases["cnn"]["step_seconds"] == 0.2


def test_machine_parsers():
    assert cpu_model("processor\t: 0\nmodel name\t: AMD  EPYC 7B13\nflags: x\n") == "AMD EPYC 7B13"
    assert cpu_model("processor: 0\n") == "unknown"
    assert memory_gib("MemTotal:       25165824 kB\nMemFree: 1 kB\n") == pytest.approx(24.0)
    assert memory_gib("") == 0.0


# ---------------------------------------------------------------- ratio maths


def test_paired_ratios_and_efficiency():
    assert stats.paired_ratios([2.0, 3.0], [1.0, 2.0]) == [2.0, 1.5]
    assert stats.scaling_efficiency(0.05, 0.1) == pytest.approx(0.5)
    assert stats.overhead_percent(1.05, 1.0) == pytest.approx(5.0)
    assert stats.overhead_percent(0.9, 1.0) == pytest.approx(-10.0)
    assert stats.median([3.0, 1.0, 2.0]) == 2.0 and stats.median([1.0, 2.0]) == 1.5


def test_ratio_refusals():
    with pytest.raises(ValueError, match="unpaired"):
        stats.paired_ratios([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="non-positive"):
        stats.ratio(1.0, 0.0)
    with pytest.raises(ValueError, match="no values"):
        stats.median([])


def test_overhead_summary_uses_per_round_pairs():
    cases = [fig_overhead.Case("m", "mlp", {}, [8], 1, 10, "model")]
    # Round 2 is twice as slow for both (a busy machine): the paired ratio stays 2.0.
    raw = {"m": {"t1": [0.010, 0.020], "tn": [0.020, 0.040], "c1": [0.01, 0.01], "cn": [0.012, 0.012], "params": 610}}
    (row,) = fig_overhead.summarize(cases, raw)
    assert row.ratio == pytest.approx(2.0) and row.efficiency == pytest.approx(0.5)
    assert (row.ratio_min, row.ratio_max) == (pytest.approx(2.0), pytest.approx(2.0))
    assert row.t1_ms == pytest.approx(15.0) and row.tn_ms == pytest.approx(30.0)
    cells = fig_overhead.table_rows([row])[0]
    assert len(cells) == len(fig_overhead.HEADERS) and cells[8] == pytest.approx(15.0)


def test_overhead_plan_steps_are_multiples_of_k_and_ids_unique():
    for quick in (True, False):
        cases = fig_overhead.plan(quick)
        assert len({c.id for c in cases}) == len(cases)
        assert fig_overhead.MAIN_MODEL in {c.id for c in cases}
        for case in cases:
            assert case.steps % case.k == 0 and case.spec()["calls"] * case.k == case.steps


def test_launcher_summary_pairs_repeats():
    T = fig_launcher.Timing
    results = {
        "by hand": [T(3.0, 4.0), T(3.0, 5.0)],
        "launcher": [T(3.1, 4.2), T(3.1, 5.0)],
        "import tensorflow": [3.0, 3.2],
        "launcher tf-config": [0.1, 0.3],
    }
    s = fig_launcher.summarize(results)
    assert s.overhead_percent == pytest.approx(2.5)  # median of +5% and 0%
    assert (s.overhead_min, s.overhead_max) == (pytest.approx(0.0), pytest.approx(5.0))
    assert s.hand_first_step == 4.5 and s.launcher_alone == pytest.approx(0.2) and s.repeats == 2


def test_control_growth_and_env_limit():
    manifest = (
        "---\n# Source: c/templates/statefulset.yaml\nkind: StatefulSet\n"
        "---\n# Source: c/templates/tests/test-peers.yaml\nargs: [a]\n"
    )
    sizes = fig_control.split_by_source(manifest)
    assert set(sizes) == {"statefulset.yaml", "tests/test-peers.yaml"}
    rows = [{"n": 1, "by_source": {"sts": 100, "test": 80}}, {"n": 101, "by_source": {"sts": 100, "test": 7780}}]
    assert fig_control.growth(rows) == {"sts": 0.0, "test": 77.0}
    # 100 bytes per worker: the 128 KiB budget (minus "TF_CONFIG=" and NUL) holds about 1,310 workers.
    assert fig_control.max_workers_for_env_limit({1: 100, 11: 1100}) == 1310


def test_tf_config_bytes_matches_the_launcher():
    env = {
        "TFMW_STATEFULSET": "tf-multiworker",
        "TFMW_SERVICE": "tf-multiworker",
        "TFMW_PORT": "2222",
        "TFMW_CLUSTER_DOMAIN": "cluster.local",
    }
    one = fig_control.tf_config_bytes(env, 1)
    assert one == len(
        '{"cluster":{"worker":["tf-multiworker-0.tf-multiworker.default.svc.cluster.local:2222"]},'
        '"task":{"type":"worker","index":0}}'
    )


def test_delayed_resolver_answers_from_ready_time():
    now = [0.0]
    slept = []
    resolve = fig_control.delayed_resolver(0.002, ready_at=5.0, clock=lambda: now[0], sleep=slept.append)
    assert resolve("a") is False
    now[0] = 5.0
    assert resolve("a") is True and slept == [0.002, 0.002]


def resumed(scenario: str, seconds: float, completed: bool = True) -> fault_analysis.FaultResult:
    return fault_analysis.FaultResult(
        scenario,
        completed,
        "" if completed else "timeout",
        120,
        20,
        step_at_fault=50,
        resume_step=40,
        seconds_to_resume=seconds,
        digests={"d"},
    )


@pytest.mark.parametrize("config", [fig_recovery.DEFAULTS, fig_recovery.defaults(quick=True), *fig_recovery.VARIANTS])
def test_recovery_command_is_what_the_harness_runs(config):
    # The command the figure prints must reproduce its runs from a shell.
    args = fault_cli.parse_args(shlex.split(config.command())[3:])
    assert args.scenarios == list(config.scenarios or fault_local.SCENARIOS)
    assert tuple(args.sets) == config.sets and args.hang_timeout == config.hang_timeout


def test_recovery_variants_each_change_one_setting_for_the_faults_it_decides():
    assert fig_recovery.defaults(quick=True).scenarios == (fig_recovery.QUICK_SCENARIO,)
    assert all(c.sets and set(c.scenarios) <= set(fault_local.SCENARIOS) for c in fig_recovery.VARIANTS)
    assert any(f"{fig_recovery.STANDBY_VALUE}=false" in c.sets for c in fig_recovery.VARIANTS)


def test_recovery_summary_lists_resume_time_per_configuration(tmp_path):
    runs = [
        fig_recovery.Run(fig_recovery.DEFAULTS, [resumed("kill-worker", 4.0), resumed("hang-worker", 12.9)]),
        fig_recovery.Run(fig_recovery.VARIANTS[1], [resumed("hang-worker", 26.4)]),
        fig_recovery.Run(fig_recovery.Config("broken"), [resumed("kill-worker", float("nan"), completed=False)]),
    ]
    headers, rows = fig_recovery.summary(runs)
    assert headers == ["fault", "defaults: resumed (s)", "static detection (20 s): resumed (s)", "broken: resumed (s)"]
    assert rows[1] == ["hang-worker", 12.9, 26.4, None]
    assert rows[0][:3] == ["kill-worker", 4.0, None] and math.isnan(rows[0][3])
    assert markdown_table(headers, rows).splitlines()[2] == "| kill-worker | 4.00 | - | - |"
    assert fig_recovery.plot(headers, rows, tmp_path / "f.png", "machine") and (tmp_path / "f.png").stat().st_size
    assert fig_recovery.plot(["fault", "x"], [["kill-worker", float("nan")]], tmp_path / "g.png", "m") is False
    assert runs[0].status == "every fault recovered" and runs[2].status == "1 of 1 faults NOT recovered"


def test_recovery_report_publishes_the_harness_results():
    runs = [
        fig_recovery.Run(fig_recovery.defaults(quick=False), [resumed("kill-worker", 4.0)]),
        fig_recovery.Run(fig_recovery.VARIANTS[0], [resumed("kill-worker", 25.8, completed=False)]),
    ]
    summary = fig_recovery.summary(runs)
    text = fig_recovery.section(runs[0], True, runs[1:], summary, quick=False)
    assert text.startswith("## Figure 3:") and "fig3_recovery.png" in text
    assert "*Command:* `python -m tfmw.faults` — **every fault recovered**." in text
    assert "| kill-worker | yes | 50 | 40 | 10 (≤ 20) | nan | 4.0 | 0 | yes |" in text
    assert f"warm standby off: `{fig_recovery.VARIANTS[0].command()}` — **1 of 1 faults NOT recovered**" in text
    assert "| kill-worker | NO: timeout |" in text and "| kill-worker | 4.0 | 25.8 |" in text
    quick = fig_recovery.section(runs[0], False, [], fig_recovery.summary(runs[:1]), quick=True)
    assert "Quick mode runs one fault." in quick and "png" not in quick and "With and without" not in quick
    assert "**Where fault → resumed goes**" in text and "| kill-worker | - | - |" in text  # no parts measured
    saved = fig_recovery.section(
        runs[0],
        False,
        [],
        fig_recovery.summary(runs[:1]),
        quick=True,
        saves=[["cnn", 12.9, 0.082, 0.001, 0.084, "82x"]],
    )
    assert "**Checkpoint saves: synchronous or async.**" in saved
    assert "| cnn | 12.9 | 0.0820 | 0.00100 | 0.0840 | 82x |" in saved


def test_goodput_rows_cost_and_report_against_the_targets(tmp_path):
    from tfmw.bench import fig_goodput

    runs = [
        fig_goodput.GoodputRun(fig_goodput.LOCAL, 40, 0, True, "", 0.47, 14.2, {"startup": 5.0}, end_seconds=0.8),
        fig_goodput.GoodputRun(
            "without faults",
            3520,
            0,
            True,
            "",
            0.962,
            612.0,
            {"startup": 9.1, "export": 4.0},
            scrape_ms=[2.0, 3.0, 4.0],
            end_seconds=0.6,
        ),
        fig_goodput.GoodputRun(
            "with faults",
            3520,
            3,
            True,
            "",
            0.915,
            660.0,
            {"startup": 9.0, "restart": 20.1, "lostWork": 5.2, "detection": 0.3},
        ),
    ]
    assert fig_goodput.steps_for(10) == 9080 and fig_goodput.steps_for(0.01) == 40
    [local, without, with_faults] = fig_goodput.rows(runs)
    assert local[:7] == [fig_goodput.LOCAL, 40, 0, 14.2, "47.0%", "reported", 0.8]
    assert without[:7] == ["without faults", 3520, 0, 612.0, "96.2%", "≥ 97%", 0.6]
    assert with_faults[2] == 3 and with_faults[7 + 3] == 20.1  # the restart column
    assert fig_goodput.metrics_cost(runs) == (3.0, 3.0 / 1e3 / 15, 3)
    text = fig_recovery.section(
        fig_recovery.Run(fig_recovery.DEFAULTS, []), False, [], ([], []), quick=False, goodput=runs
    )
    assert "**Goodput over a long run**" in text and "fig3b_goodput.png" in text
    assert "| with faults | 3,520 | 3 | 660 | 91.5% | ≥ 92% | - | 9.00 | 0 | 0 | 20.1 | 5.20 | 0.300 | 0 |" in text
    assert "(3 scrapes, median 3.0 ms a round trip" in text and "0.020% of the time" in text
    assert (
        f"**Against the targets:** {fig_goodput.LOCAL} 47.0% of its 14 s; without faults 96.2% (MISSED, ≥ 97%); "
        "with faults 91.5% (MISSED, ≥ 92%); the chief's end median 0.70 s, at most 0.80 s in these 2 runs "
        "(met in every run, ≤ 1 s)."
    ) in text
    runs.insert(1, fig_goodput.GoodputRun(fig_goodput.LOCAL, 40, 0, True, "", 0.41, 15.0, {}, end_seconds=3.5))
    runs.insert(1, fig_goodput.GoodputRun(fig_goodput.LOCAL, 40, 0, True, "", 0.52, 12.0, {}, end_seconds=0.6))
    text = "\n".join(fig_goodput.verdicts(runs))
    assert f"{fig_goodput.LOCAL} 47.0% of its 14 s (median of 3 runs, 41.0%-52.0%)" in text
    assert "the chief's end median 0.70 s, at most 3.50 s in these 4 runs (MISSED in 1 of them, ≤ 1 s)" in text
    fig_goodput.plot(runs, tmp_path / "g.png", "machine")
    assert (tmp_path / "g.png").stat().st_size > 0


def test_the_chiefs_end_runs_from_its_last_step_to_its_launchers_completed_line():
    from tfmw.bench import fig_goodput

    lines = [
        "tfmw progress step=39/40 epoch=3 loss=1.0 examples_per_sec=500.0",
        "tfmw progress step=40/40 epoch=3 loss=1.0 examples_per_sec=500.0",
        "tfmw done steps=40",
        "tfmw completed goodput=0.5",
    ]
    assert fig_goodput.chief_end(lines, [1.0, 2.0, 2.5, 2.75]) == 0.75
    assert math.isnan(fig_goodput.chief_end(lines[:2], [1.0, 2.0]))


def test_kill_worker_spread_says_the_median_range_own_path_and_verdict():
    def killed(resumed, reform, cold=4.2, scenario="kill-worker", completed=True):
        result = fault_analysis.FaultResult(scenario, completed, "", 120, 20)
        result.seconds_to_resume, result.seconds_cold_start = resumed, cold
        result.parts = {
            "detection": 0.1,
            "restart": 0.1,
            "process start": 0.2,
            "group re-form": reform,
            "first step": 1.0,
        }
        return result

    runs = [
        fig_recovery.Run(fig_recovery.DEFAULTS, [killed(4.8, 3.2), killed(6.7, 0.4, scenario="kill-chief")]),
        fig_recovery.Run(fig_recovery.KILL_REPEAT, [killed(5.4, 3.9)]),
        fig_recovery.Run(fig_recovery.KILL_REPEAT, [killed(3.9, 2.4), killed(float("nan"), 0, completed=False)]),
    ]
    spread = fig_recovery.kill_worker_spread(runs)
    assert (spread.runs, spread.resumed, spread.low, spread.high) == (3, 4.8, 3.9, 5.4)
    assert spread.parts["group re-form"] == 3.2 and spread.own == pytest.approx(0.4) and not spread.met
    text = "\n".join(fig_recovery.kill_worker_lines(spread))
    assert "fault → resumed median 4.8 s (3.9–5.4); target ≤ 4 s in every run: **MISSED**" in text
    assert "detection 0.1 s, restart 0.1 s, process start 0.2 s, group re-form 3.2 s, first step 1.0 s" in text
    assert "re-forms (3.2 s)" in text and "is 4.2 s" in text
    assert fig_recovery.kill_worker_spread([fig_recovery.Run(fig_recovery.DEFAULTS, [])]) is None
    assert fig_recovery.kill_worker_lines(None) == []
    fast = fig_recovery.kill_worker_spread([fig_recovery.Run(fig_recovery.DEFAULTS, [killed(3.5, 2.0)])])
    assert fast.met and "**met**" in "\n".join(fig_recovery.kill_worker_lines(fast))


def test_one_measurement_shows_plots_and_writes_the_figure(tmp_path, capsys):
    plotted = []
    module = types.SimpleNamespace(
        HEADERS=["a"],
        measure=lambda quick, log: {"quick": quick},
        table_rows=lambda r: [[r["quick"]]],
        plot=lambda r, path, subtitle: plotted.append((r, path, subtitle)),
    )
    args = types.SimpleNamespace(quick=True)
    text = one_measurement(module, "Figure 9: x", "fig9.png", lambda *a: a, args, "machine", tmp_path)
    assert text[:3] == ({"quick": True}, [[True]], ["a"]) and isinstance(text[3], str)
    assert plotted == [({"quick": True}, tmp_path / "fig9.png", "machine")]
    assert "Figure 9: x" in capsys.readouterr().out


def test_time_to_first_step_hands_the_process_to_stop(tmp_path):
    # A stand-in process that keeps printing after its first step: `stop` gets it still
    # running (the pipe drained meanwhile), and whatever stop leaves is killed afterwards.
    script = (
        "import sys, time\nprint('tfmw start run=x', flush=True)\nprint('tfmw progress step=1/2', flush=True)\n"
        "for i in range(100000): print('noise ' * 20)\ntime.sleep(60)\n"
    )
    handed = []
    timing = fig_launcher.time_to_first_step(
        [sys.executable, "-c", script], dict(), timeout=60, stop=lambda proc: handed.append((proc, proc.poll()))
    )
    ((proc, returncode_then),) = handed
    assert returncode_then is None and proc.poll() is not None  # running when handed over, killed after
    assert 0 < timing.start_line <= timing.first_step
    with pytest.raises(fig_launcher.BenchError, match="figure 6: .* without a first step"):
        fig_launcher.time_to_first_step(
            [sys.executable, "-c", "print('tfmw start')"], dict(), timeout=60, figure="figure 6"
        )


def test_partial_run_replaces_only_its_figures():
    existing = "\n".join(
        [
            "# Benchmarks",
            "",
            "Generated by `make bench` (`python -m tfmw.bench`); This file: `make bench`, took 9 min.",
            "",
            "**Machine:** m.",
            "",
            "What each figure costs a user, as ratios: (1) old.",
            "",
            "## Figure 1: one",
            "",
            "one body",
            "",
            "## Figure 3: three",
            "",
            "three body",
            "",
            "## How to reproduce",
            "",
            "old footer",
            "",
        ]
    )
    header, sections = report.split_document(existing)
    assert sorted(sections) == [1, 3] and "three body" in sections[3] and "old footer" not in sections[3]
    merged = report.merge(
        existing,
        {3: "## Figure 3: three\n\nnew three\n", 6: "## Figure 6: six\n\nsix\n"},
        "`python -m tfmw.bench --only 3,6`, started T1",
        quick=False,
    )
    assert "one body" in merged and "new three" in merged and "three body" not in merged
    assert merged.index("## Figure 1") < merged.index("## Figure 3") < merged.index("## Figure 6")
    assert merged.count("## How to reproduce") == 1 and "old footer" not in merged
    assert report.INTRO in merged and "(1) old." not in merged
    assert "**Later partial run:** figure(s) 3,6: `python -m tfmw.bench --only 3,6`, started T1" in merged
    # A later run of the same figures replaces the note; another figure set adds its own.
    again = report.merge(
        merged, {3: "## Figure 3: three\n\nnewer\n", 6: "## Figure 6: six\n\nsix\n"}, "started T2", quick=False
    )
    assert "started T1" not in again and again.count("**Later partial run:**") == 1
    other = report.merge(again, {1: "## Figure 1: one\n\nnew one\n"}, "started T3", quick=False)
    assert other.count("**Later partial run:**") == 2 and "newer" in other
    assert other.index("This file:") < other.index("started T2") < other.index("**Machine:**")
    assert "\n\n\n" not in other.split("## Figure")[0]  # no doubled blank lines where notes were
    # A note keeps only the figures still its own: measured again later, a figure leaves it.
    later = report.merge(other, {3: "## Figure 3: three\n\nnewest\n"}, "started T4", quick=False)
    assert "figure(s) 6: started T2" in later and "figure(s) 3,6:" not in later
    assert "figure(s) 3: started T4" in later and "figure(s) 1: started T3" in later
    last = report.merge(later, {1: "## Figure 1: one\n\n1\n", 6: "## Figure 6: six\n\n6\n"}, "T5", quick=False)
    assert "started T2" not in last and "started T3" not in last and last.count("**Later partial run:**") == 2


# ---------------------------------------------------------------- tables and refusals


def test_fmt_significant_digits():
    assert [fmt(v) for v in (0.000849, 0.026, 1.5, 12.34, 123.4, 1234.5)] == [
        "0.000849",
        "0.0260",
        "1.50",
        "12.3",
        "123",
        "1,234",
    ]
    assert fmt(1000) == "1,000" and fmt(None) == "-" and fmt(float("nan")) == "-" and fmt("x") == "x"


def test_markdown_and_console_tables():
    md = markdown_table(["a", "b"], [[1, 0.5], ["x", None]])
    assert md.splitlines() == ["| a | b |", "|---|---|", "| 1 | 0.500 |", "| x | - |"]
    console = console_table(["name", "v"], [["long name", 2]]).splitlines()
    assert console[0].startswith("name       v") and set(console[1]) == {"-", " "}
    with pytest.raises(ValueError, match="2 columns"):
        markdown_table(["a", "b"], [[1]])


def test_only_refuses_unknown_figures():
    assert parse_figures("4,1,4") == [1, 4]
    assert parse_figures("6") == [6]
    assert parse_figures("10") == [10]  # the opt-in figures, asked for by number
    assert parse_figures("11,10") == [10, 11]
    assert parse_figures("12") == [12]
    assert parse_figures("13") == [13]
    assert parse_figures("14,15") == [14, 15]
    with pytest.raises(ValueError, match="numbers from 1 to 15"):
        parse_figures("1,16")


def test_the_peers_figure_is_measured_only_when_asked():
    from tfmw.bench.cli import FIGURES, parse_args

    assert parse_args([]).figures == list(FIGURES)
    assert parse_args(["--peers"]).figures == sorted([*FIGURES, 10, 11])
    assert parse_args(["--only", "11"]).figures == [11]
    assert parse_args(["--peers", "--only", "10"]).figures == [10, 11]
    assert parse_args(["--peers", "--only", "2"]).figures == [2, 10, 11]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--only", "fig1"], "--only 'fig1': 'fig1' is not a figure number"),
        (["--workers", "1"], "--workers 1: figure 1 compares N >= 2 workers"),
        (["--gpus", "-1"], "--gpus -1: must be 0"),
    ],
)
def test_cli_refusals_are_one_line(repo, args, message):
    result = subprocess.run(
        [sys.executable, "-m", "tfmw.bench", *args], cwd=repo, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "low, median, high, verdict",
    [
        (3.2, 5.2, 7.9, "target: at most 2% later — missed in every repeat"),
        (-1.1, 4.5, 9.0, "target: at most 2% later — missed on the median, not in every repeat"),
        (-18.0, -2.8, 6.0, "target: at most 2% later — met on the median, not in every repeat"),
        (-0.5, 0.4, 1.5, "target: at most 2% later — met in every repeat"),
    ],
)
def test_the_launcher_figure_judges_its_target_by_the_repeats_spread(low, median, high, verdict):
    summary = fig_launcher.Summary(2.87, 3.03, 2.31, 2.47, median, low, high, 2.72, 0.17, 9)
    text = fig_launcher.section(summary, [], fig_launcher.HEADERS, "0 / 0 / 0")
    assert verdict in text
    assert ("the repeats disagree on the sign" in text) == (low < 0 < high)


def test_the_elastic_figure_reads_paired_rounds():
    from tfmw.bench.fig_elastic import table_rows, verdict
    from tfmw.faults.elastic import ElasticRun

    off = ElasticRun(False, ok=True, idle_worker_seconds=200.0, final_loss=0.5000, outage_seconds=60.0)
    on = ElasticRun(True, ok=True, idle_worker_seconds=50.0, final_loss=0.5003, outage_seconds=60.0)
    on.step_at_hold, on.step_at_release = 30, 230
    said = verdict([off, on])
    assert "**0.25x**" in said and "12000 steps/h" in said and "0.0003" in said
    assert [row[1] for row in table_rows([off, on])] == ["off", "on"]
    failed = ElasticRun(True, ok=False, reason="timed out")
    assert verdict([off, failed]).startswith("Not every run succeeded")


def _apiserver_metrics(creates: int, slow_lists: int) -> str:
    """The API server's /metrics as it writes them (a few series), for figure 15's parsing."""
    lines = [
        "# HELP apiserver_request_total Counter of apiserver requests.",
        "# TYPE apiserver_request_total counter",
        f'apiserver_request_total{{code="201",resource="pods",scope="resource",verb="POST"}} {creates}',
        f'apiserver_request_total{{code="200",resource="pods",scope="namespace",verb="LIST"}} {slow_lists}',
        'apiserver_request_total{code="200",resource="pods",scope="namespace",verb="WATCH"} 50',
        "# HELP apiserver_request_duration_seconds Response latency.",
        "# TYPE apiserver_request_duration_seconds histogram",
    ]
    for verb, scope, counts in (
        ("POST", "resource", {"0.05": creates, "0.1": creates, "1": creates, "+Inf": creates}),
        ("LIST", "namespace", {"0.05": 0, "0.1": 0, "1": 0, "+Inf": slow_lists}),
    ):
        for le, count in counts.items():
            series = f'resource="pods",scope="{scope}",verb="{verb}"'
            lines.append(f'apiserver_request_duration_seconds_bucket{{{series},le="{le}"}} {count}')
        lines.append(f'apiserver_request_duration_seconds_count{{resource="pods",scope="{scope}",verb="{verb}"}} 0')
    return "\n".join(lines) + "\n"


def test_the_real_scale_figure_reads_requests_and_p99_from_the_api_servers_metrics():
    from tfmw.bench import fig_release_scale as fig

    before, after = fig.parse_metrics(_apiserver_metrics(10, 0)), fig.parse_metrics(_apiserver_metrics(110, 2))
    assert fig.request_counts(before, after) == {("POST", "pods"): 100.0, ("LIST", "pods"): 2.0}  # no WATCH
    p99 = fig.p99_by_class(before, after)
    assert p99 == {"mutating": 0.05, "list": float("inf")}  # the LISTs took longer than the last bound
    assert fig.call_class({"verb": "GET", "scope": "resource"}) == "read"
    assert fig.call_class({"verb": "LIST", "scope": "cluster"}) is None


def test_the_real_scale_figure_names_each_miss_and_reads_growth():
    from tfmw.bench import fig_release_scale as fig

    small = fig.Point(16, 1.0, 2.0, {("POST", "pods"): 48.0}, {"mutating": 0.05, "list": 0.1})
    big = fig.Point(1024, 2.0, 60.0, {("POST", "pods"): 3072.0}, {"mutating": 2.5, "list": 0.4})
    small.list_bytes, big.list_bytes, big.status_seconds, small.status_seconds = 1000, 64000, 9.0, 1.0
    result = fig.Result([small, big], 128, "v0.8.0")
    assert fig.slo_misses(result) == [
        "1,024 workers: p99 mutating 2.5 s > 1 s",
        "1,024 workers: make status 9.0 s > 5 s",
    ]
    said = fig.reading(result)
    assert said.startswith("**Missed:** 1,024 workers: p99 mutating") and "3.0 at 16, 3.0 at 1,024 (1.00x)" in said
    assert "64x the 16-worker one" in said
    assert fig.table_rows(result)[1][:4] == ["1,024", "2.0", "60.0", "3.0"]
    small.p99, big.p99, big.status_seconds = {"mutating": 0.05}, {"mutating": 0.5}, 2.0
    assert fig.reading(result).startswith("**Every SLO and target met**")
    result.queued = fig.Queued(1024, 4.2, 30.5, 16, 8, 128, 4, 0, 6.5)
    assert fig.reading(result).endswith(
        "one 1,024-worker release admitted 4.2 s after its install, every pod Ready at 30.5 s, in 16 racks; "
        "8 releases of 128 with quota for half of them: 4 admitted at once, 0 of the 8 with some but not all of its "
        "pods bound 5 s after the last admission (Kueue ungates an admitted group's pods one by one; a bound pod of "
        "a release not admitted fails the figure), the others admitted 6.5 s after the first were uninstalled."
    )

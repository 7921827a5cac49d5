"""Figure 13 (checkpoint cost): its pure parts, from made-up measurements."""

from __future__ import annotations

from tfmw.bench import fig_checkpoint
from tfmw.bench.checkpoint_save import parse_model
from tfmw.bench.fig_checkpoint import RunResult, Stall


def result(auto_goodputs, fixed_goodputs, background=(0.004, 0.006, 0.005)):
    runs = []
    for n, (a, f) in enumerate(zip(auto_goodputs, fixed_goodputs, strict=True), start=1):
        runs.append(RunResult("fixed-50", n, goodput=f, wall=100, faults=2, checkpoints=20, badput={"lostWork": 3.0}))
        runs.append(RunResult("auto", n, goodput=a, wall=100, faults=2, checkpoints=60, intervals=[1.0, 2.5]))
    return {"stall": Stall(340.6, [1.2, 1.0, 1.1], list(background), [0.3, 0.2, 0.25]), "runs": runs}


def test_the_targets_are_judged_from_the_measurements():
    stall, goodput = fig_checkpoint.verdicts(result([0.80, 0.82], [0.78, 0.79]))
    assert "**met**, 0.0045x" in stall and "worst background stall 0.0060 s" in stall
    assert "**met** (2 of 2 rounds; auto minus fixed: +2.0 points, +3.0 points)" in goodput
    stall, goodput = fig_checkpoint.verdicts(result([0.80, 0.70], [0.78, 0.79], background=(0.5, 0.5, 0.5)))
    assert "**missed**" in stall and "**missed** (1 of 2 rounds" in goodput


def test_the_table_shows_each_round_and_the_last_interval_chosen():
    rows = fig_checkpoint.table_rows(result([0.8], [0.7]))
    assert rows[0][:3] == [1, "fixed-50", "70.0%"] and rows[0][-1] == 3.0
    assert rows[1][1] == "auto (last 2.5 s)"


def test_a_model_with_arguments_is_named_on_the_command_line():
    assert parse_model("mlp=28,28:hidden=2304,layers=6") == ("mlp", [28, 28], {"hidden": 2304, "layers": 6})
    assert parse_model("cnn=28,28") == ("cnn", [28, 28], {})

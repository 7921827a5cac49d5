"""A checkpoint schedule that never saves, or an auto interval without an upper bound, is refused
when the chart is rendered (tfmw's run of the trainer's own validator), in one line."""

from __future__ import annotations

import chartkit
import pytest

from tfmw.chart import helmkit, render


@pytest.mark.parametrize(
    "sets,says",
    [
        (
            ("training.config.checkpoint.everySteps=0",),
            "training.config.checkpoint.everySteps and checkpoint.everySeconds are both 0",
        ),
        (
            ("training.config.checkpoint.interval=auto", "training.config.checkpoint.maxSeconds=null"),
            "training.config.checkpoint.maxSeconds: null with interval auto",
        ),
    ],
)
def test_a_schedule_that_never_saves_is_refused_at_template_time(sets, says):
    values = render.layer_values(chartkit.CHART, [], list(sets))
    with pytest.raises(helmkit.ToolError) as refused:
        render.validate_training_config(values)
    line = str(refused.value)
    assert line.startswith(says) and "\n" not in line, line
    assert "refused by the built-in trainer's validator" in line


def test_a_time_based_schedule_alone_renders():
    values = render.layer_values(
        chartkit.CHART, [], ["training.config.checkpoint.everySteps=0", "training.config.checkpoint.everySeconds=300"]
    )
    render.validate_training_config(values)

"""The host tools' one install path outside make deploy (tfmw.deploy.install): the values are
checked as make deploy checks them before helm gets them."""

from __future__ import annotations

import pytest

from tfmw.chart import render
from tfmw.chart.helmkit import ToolError
from tfmw.deploy import install


def test_the_arguments_are_the_overlay_the_files_and_the_sets_that_were_checked(tmp_path):
    extra = tmp_path / "more.yaml"
    extra.write_text("training:\n  maxRestarts: 3\n")
    args = install.checked_args("r1", "ns", ["training.config.steps=10"], [extra])
    assert args == [
        "install",
        "r1",
        str(render.CHART_DIR),
        "-n",
        "ns",
        "-f",
        str(render.VALUES_DIR / "local.yaml"),
        "-f",
        str(extra),
        "--set",
        "training.config.steps=10",
    ]
    assert install.checked_args("r1", "ns", verb="upgrade")[0] == "upgrade"


@pytest.mark.parametrize(
    ("sets", "said"),
    [
        (["training.config.stepz=10"], "stepz"),  # the trainer's own config check
        (["workers.replicas=0"], "workers.replicas"),  # the chart's schema
        (["containerSecurityContext.privileged=true"], "containerSecurityContext.privileged"),  # validateValues
    ],
)
def test_values_make_deploy_would_refuse_are_refused_before_helm(sets, said):
    with pytest.raises(ToolError, match=said):
        install.checked_args("r1", "ns", sets)


def test_an_unknown_verb_is_a_programming_error():
    with pytest.raises(ValueError):
        install.checked_args("r1", "ns", verb="delete")

"""stepsPerExecution's plan (entrypoint.training.execution) and the jitCompile refusal's wording
(entrypoint.training.failures.xla_refusal): pure, no TensorFlow."""

from __future__ import annotations

import pytest

from entrypoint.training.config import merge_defaults
from entrypoint.training.execution import chunk, rounded
from entrypoint.training.failures import xla_refusal


def config(**top):
    return merge_defaults(top)


def test_k_1_changes_nothing():
    base = config(logEverySteps=7, checkpoint={"everySteps": 13})
    assert rounded(base) == (base, [])


def test_intervals_round_up_to_multiples_of_k_and_each_rounding_is_said():
    out, notes = rounded(config(stepsPerExecution=8, logEverySteps=10, checkpoint={"everySteps": 50}))
    assert (out["logEverySteps"], out["checkpoint"]["everySteps"]) == (16, 56)
    assert notes == [
        "logEverySteps 10 is used as 16, the next multiple of stepsPerExecution 8",
        "checkpoint.everySteps 50 is used as 56, the next multiple of stepsPerExecution 8",
    ]


def test_multiples_time_only_schedules_and_auto_are_left_alone():
    out, notes = rounded(
        config(stepsPerExecution=5, logEverySteps=20, checkpoint={"everySteps": 0, "everySeconds": 60})
    )
    assert (out["logEverySteps"], out["checkpoint"]["everySteps"], notes) == (20, 0, [])
    out, notes = rounded(
        config(stepsPerExecution=4, logEverySteps=8, checkpoint={"interval": "auto", "everySteps": 50})
    )
    assert (out["checkpoint"]["everySteps"], notes) == (50, [])  # auto ignores everySteps


def test_rounding_leaves_the_callers_config_unchanged():
    given = config(stepsPerExecution=4, logEverySteps=10)
    rounded(given)
    assert given["logEverySteps"] == 10


@pytest.mark.parametrize(
    "step,total,k,n",
    [
        (0, 22, 4, 4),  # to the next multiple
        (20, 22, 4, 2),  # never past the last step
        (12, 22, 5, 3),  # a resume off the multiples realigns first
        (15, 22, 5, 5),
        (7, 100, 1, 1),
    ],
)
def test_each_call_ends_on_a_multiple_of_k_or_the_last_step(step, total, k, n):
    assert chunk(step, total, k) == n


def test_chunks_cover_every_step_once_and_end_on_multiples():
    step, ends = 3, []
    while step < 30:
        step += chunk(step, 30, 8)
        ends.append(step)
    assert ends == [8, 16, 24, 30]


RECORDED = (
    "Detected unsupported operations when trying to compile graph __inference_f_10[_XlaMustCompile=true,"
    "config_proto=1,executor_type=2] on XLA_CPU_JIT: PyFunc (No registered 'PyFunc' OpKernel for XLA_CPU_JIT "
    'devices compatible with node {{node PyFunc}}){{node PyFunc}}\nThe op is created at: \nFile "m.py", line 9\n'
    "\ttf2xla conversion failed while converting __inference_f_10. Run with TF_DUMP_GRAPH_PREFIX=..."
)


def test_an_op_without_an_xla_kernel_is_named_in_one_line():
    refusal = xla_refusal(RECORDED)
    assert refusal == (
        "training config: jitCompile: true: TensorFlow cannot compile this model's training step with XLA "
        "(its op PyFunc has no XLA kernel on XLA_CPU_JIT); set jitCompile: false (the step then runs op by op, "
        "as by default)"
    )


def test_other_errors_are_not_called_xla_refusals():
    assert xla_refusal("tf2xla conversion failed while converting f") is not None
    assert xla_refusal("Collective ops is aborted by: peer lost") is None
    assert xla_refusal("Incompatible shapes: [2,3] vs. [2,4]") is None

"""stepsPerExecution: K training steps per tf.function call, and where the loop may stop.

Pure (no TensorFlow): the loop calls the step function on a chunk of steps and acts only between
calls, so every point where it must act (a log line, a checkpoint, the group's stop vote and
the time-based checkpoint vote, which ride on those) has to fall on a chunk's end. Chunks end on
multiples of K (counted from step 0, whatever step a run resumes at), at the run's last step, and
nowhere else: `log_every` and `checkpoint.everySteps` are rounded up to multiples of K, each
rounding said once at start. Within a chunk each step is the step K = 1 runs, in the same order
on the same data: the weights are the same as with K = 1.
"""

from __future__ import annotations

import copy


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def rounded(config: dict) -> tuple[dict, list[str]]:
    """The config with its step intervals rounded up to multiples of stepsPerExecution, and one
    sentence per value that changed (for the start's warning lines). K = 1 changes nothing."""
    k = config["stepsPerExecution"]
    out = copy.deepcopy(config)
    notes: list[str] = []
    if k == 1:
        return out, notes
    every_log = config["logEverySteps"]
    if every_log % k:
        out["logEverySteps"] = round_up(every_log, k)
        notes.append(
            f"logEverySteps {every_log} is used as {out['logEverySteps']}, the next multiple of stepsPerExecution {k}"
        )
    checkpoint = config["checkpoint"]
    every = checkpoint["everySteps"]
    if checkpoint["interval"] != "auto" and every % k:
        out["checkpoint"]["everySteps"] = round_up(every, k)
        notes.append(
            f"checkpoint.everySteps {every} is used as {out['checkpoint']['everySteps']}, "
            f"the next multiple of stepsPerExecution {k}"
        )
    return out, notes


def chunk(step: int, total: int, k: int) -> int:
    """How many steps the next call runs after `step`: up to the next multiple of K, never past
    `total` (a resume at a step off the multiples, e.g. after K changed, first realigns)."""
    return min(k - step % k, total - step)

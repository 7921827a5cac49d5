"""Map an exception from training to the trainer's exit code (docs/contracts.md).

Two outcomes only: a failure of the group (a peer died, restarted or timed out) is retryable
(exit 75: the launcher restarts training in place from the last checkpoint); anything else
is permanent (exit 4, logged `retryable=false`: corrupt data, a non-finite loss, a bug),
and the launcher does not retry it: the same data and code would fail the same way.

Matched by class name so this module (and its tests) need no TensorFlow import:
tf.errors classes are named UnavailableError, DeadlineExceededError, ... .
"""

from __future__ import annotations

import re

from ..errors import EXIT_RETRYABLE, EXIT_TRAINING_FAILED, retryable_by_name


def _class_names(err: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(err).__mro__}


def is_retryable(err: BaseException) -> bool:
    return retryable_by_name(_class_names(err), str(err))


class TrainingError(Exception):
    """A permanent training failure with a one-line reason (corrupt data, a non-finite loss)."""


def exit_code_for(err: BaseException) -> int:
    return EXIT_RETRYABLE if is_retryable(err) else EXIT_TRAINING_FAILED


def _without_graph_trace(message: str) -> str:
    """Drop TensorFlow's "Graph execution error: Detected at node X defined at (most recent
    call last): File ..." preamble and the trailing "[[{{node X}}]] [Op:...]": what is left
    is the cause, e.g. "Collective ops is aborted by: ... /job:worker/replica:0/task:1 ...",
    which names the lost peer (the Restarted Event quotes it)."""
    lines = message.splitlines()
    if not lines or not lines[0].startswith("Graph execution error"):
        return message
    kept, in_trace = [], False
    for line in lines[1:]:
        if line.startswith("Detected at node"):
            in_trace = True
            continue
        if in_trace and (not line.strip() or line[:1].isspace()):
            continue  # the frames ("  File ...") and the blank lines between them
        in_trace = False
        if line.strip().startswith("[[{{node"):
            continue
        kept.append(line)
    return "\n".join(kept) or message


def error_summary(err: BaseException, limit: int = 300) -> str:
    """'<ErrorType>: <message>': the meaningful part of a (often multi-line) TF error message,
    on one line, the message cut to `limit` characters."""
    text = " ".join(_without_graph_trace(str(err)).split())
    kind = type(err).__name__
    return f"{kind}: {text[:limit]}" if text else kind


# TensorFlow's message when a function marked for XLA holds an op with no XLA kernel
# (tf2xla, TF 2.21): "Detected unsupported operations when trying to compile graph <name> on
# XLA_CPU_JIT: PyFunc (No registered 'PyFunc' OpKernel for XLA_CPU_JIT devices ...)".
_XLA_UNSUPPORTED = re.compile(r"Detected unsupported operations when trying to compile graph \S+ on (\w+): (\w+)")


def xla_refusal(message: str) -> str | None:
    """The one-line refusal for a step XLA cannot compile (jitCompile), or None when the error is
    something else. Permanent: the same model fails to compile the same way on every restart."""
    found = _XLA_UNSUPPORTED.search(message)
    if found:
        device, op = found.groups()
        cause = f"its op {op} has no XLA kernel on {device}"
    elif "tf2xla conversion failed" in message:
        cause = "tf2xla conversion failed"
    else:
        return None
    return (
        f"training config: jitCompile: true: TensorFlow cannot compile this model's training step with XLA "
        f"({cause}); set jitCompile: false (the step then runs op by op, as by default)"
    )

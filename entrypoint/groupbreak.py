"""Does a training command's output say its group broke? (pure: lines in, a verdict out)

A user command (a Keras script under MultiWorkerMirroredStrategy) learns that a peer died the
way TensorFlow tells it: an uncaught UnavailableError (or DeadlineExceeded, Aborted, Cancelled,
an InternalError from the collective or coordination machinery: the errors the built-in trainer
retries, entrypoint/errors.py) ends the script, and
Python prints the traceback. What follows is TensorFlow's teardown in the same process
(coordination-service shutdown, gRPC channel and thread-pool joins), which took 18 s in a
measured Keras run: time in which the group cannot re-form, because this worker is neither
training nor gone. The built-in trainer leaves at once by itself (os._exit after its error
line), so for it nothing here fires.

The detector fires only on the exception line that ends a printed traceback (the first
unindented line after "Traceback (most recent call last):"), never on a log line that merely
mentions an error: a script that prints a caught error and goes on is not ended. The launcher
then gives the process a short grace to exit on its own (entrypoint.attempt) and ends its
process group after it.
"""

from __future__ import annotations

import re

from .errors import retryable_by_name

_TRACEBACK = "Traceback (most recent call last):"
# "tensorflow.python.framework.errors_impl.UnavailableError: Socket closed" (a dotted class name)
_EXCEPTION_LINE = re.compile(r"^(?P<name>[A-Za-z_][\w.]*)(?::\s*(?P<text>.*))?$")
_CHAINING = ("During handling of the above exception", "The above exception was the direct cause")


def group_error(line: str) -> str | None:
    """'<Class>: <message>' when `line` is a traceback's exception line for an error of the
    group (a peer lost, the collective aborted); None for any other exception or line."""
    match = _EXCEPTION_LINE.match(line.strip())
    if match is None:
        return None
    name = match.group("name").rsplit(".", 1)[-1]
    text = (match.group("text") or "").strip()
    if text.startswith("Graph execution error"):
        text = ""  # TensorFlow's preamble: the cause follows on later lines, in the traceback above
    if retryable_by_name({name}, text):
        return f"{name}: {text}"[:300] if text else name
    return None


class BreakDetector:
    """Fed every output line of one attempt in order; `feed` returns the group error once, on
    the exception line of a traceback that reports one, and None for every other line."""

    def __init__(self):
        self._in_traceback = False
        self.error: str | None = None  # the first group error seen in this attempt

    def feed(self, line: str) -> str | None:
        if self.error is not None:
            return None
        if line.strip() == _TRACEBACK:
            self._in_traceback = True
            return None
        if not self._in_traceback or not line.strip() or line[:1].isspace():
            return None  # outside a traceback, or one of its frames
        self._in_traceback = False
        if line.startswith(_CHAINING):
            return None  # between chained tracebacks: the next one follows
        self.error = group_error(line)
        return self.error

"""A failed attempt's fingerprint, read from the command's output (pure: lines in, text out).

A deterministic bug in a user's script (TensorFlow's multi-worker tutorial with a dataset too
small for its steps raises the same OutOfRangeError at the same point every time) would cost
the whole group one restart after another, up to training.maxRestarts, to learn what the first
traceback said. The launcher ends such a loop (entrypoint.restarts.decide, with
training.sameErrorLimit) when the same fingerprint ends attempts in a row and nothing between
them could tell them apart: no new step, no new checkpoint, no output the earlier attempt did
not print. This module reads one attempt's output for that:

- its fingerprint: the exception line that ends the last Python traceback it printed
  (`tensorflow.python.framework.errors_impl.OutOfRangeError: End of sequence`), else the way it
  ended (`training exited with 1`) and its last line that names an error;
- what it printed, as a set of lines with what differs from run to run masked (log timestamps,
  thread ids, addresses, durations, floats, temporary names), so two attempts that printed the
  same are told apart from two that did not. Output too varied to hold is "new": in doubt, the
  launcher restarts, as it always has.
"""

from __future__ import annotations

import re

from . import loglines

_TRACEBACK = "Traceback (most recent call last):"
_CHAINING = ("During handling of the above exception", "The above exception was the direct cause")
# "tensorflow.python.framework.errors_impl.OutOfRangeError: End of sequence" (a dotted class name)
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?::\s*(?P<text>.*))?$")
# TensorFlow's graph errors say their cause on later lines: "...Error: Graph execution error:",
# "Detected at node ... defined at (most recent call last):", the frames, then the cause.
_GRAPH_ERROR = "Graph execution error:"
_DETECTED = "Detected at node"
# "ERROR: ...", "ValueError: ...", "fatal", "Aborted": a line that names an error
_ERROR_STEMS = ("error", "exception", "fatal", "fail", "abort")  # a cheap test before the regex
_ERROR_WORDS = re.compile(r"(?:error|exception)\b|\b(?:fatal|failed|failure|abort|aborted)\b", re.IGNORECASE)
_EXCEPTION_CAP = 300  # characters of the fingerprint kept (the run's status message)
DISTINCT_LINES = 100_000  # masked lines remembered per attempt; past it, its output counts as new

# What differs between two runs of the same code, masked before lines are compared: abseil's
# log prefix (I1206 22:18:34.123456   4242 file.cc:12] , its thread id included), addresses,
# temporary names, pids; then, in one pass, dates and times, durations (12ms/step, ETA 3s) and
# floats (losses, rates, epoch seconds). Whole numbers stay: a step or an epoch is progress.
_PREFIX = re.compile(r"^[IWEF]\d{4} [\d:.]+\s+\d+\s+\S+:\d+\]\s*")
_NAMES = re.compile(r"0x[0-9a-fA-F]++|\btmp[A-Za-z0-9_]{8}\b|\bpid[ =:]*+\d++", re.IGNORECASE)
# one token: digits joined by '.', ':' or '-' (a float, a time, a date), an exponent, a unit
_NUMBERS = re.compile(
    r"(?<![\w.])\d++(?:[-.:]\d++)*+\.?(?:e[+-]?\d++)?(?P<unit>\s?(?:ns|us|µs|ms|s|sec|seconds|min|h)\b(?:/\w+)?)?"
)
_DIGIT = re.compile(r"\d")


def _number(match: re.Match) -> str:
    token = match.group(0)
    if match.group("unit"):
        return "<duration>"
    if ":" in token or "-" in token:
        return "<time>"
    return "<float>" if "." in token or "e" in token else token


def _names_an_error(text: str) -> bool:
    low = text.lower()
    return any(stem in low for stem in _ERROR_STEMS) and _ERROR_WORDS.search(text) is not None


def mask(line: str) -> str:
    """`line` with what differs between two runs of the same code masked."""
    if _DIGIT.search(line) is None:
        return line.strip()
    line = _PREFIX.sub("", line)
    if "0x" in line or "tmp" in line or "pid" in line.lower():  # the names' regex is the slow one: most lines have none
        line = _NAMES.sub("<id>", line)
    return _NUMBERS.sub(_number, line).strip()


def fingerprint(exception: str | None, ended: str, error_line: str = "") -> str:
    """The fingerprint of a failed attempt: its traceback's exception line, else how it ended
    (restarts.attempt_reason's words) and its last error line."""
    if exception:
        return exception
    return f"{ended}: {error_line}"[:_EXCEPTION_CAP] if error_line else ended


def same(a: str | None, b: str | None) -> bool:
    """Are two fingerprints the same error? (an address or a time in them aside)"""
    return a is not None and b is not None and mask(a) == mask(b)


class CrashPrint:
    """Fed one attempt's output lines in order (unstripped: a traceback's frames are indented)."""

    def __init__(self, distinct_lines: int = DISTINCT_LINES):
        self.exception: str | None = None  # the exception line of the last traceback printed
        self.error_line = ""  # the last line that names an error (or the trainer's `tfmw error` text)
        self.checkpointed = False  # a `tfmw checkpoint saved` line: the trainer saved a checkpoint
        self._distinct = distinct_lines
        self._seen: set[int] = set()  # hashes of the masked lines: bounded whatever a line holds
        self._overflow = False
        self._in_traceback = False
        self._cause_of: str | None = None  # a graph error's class: its cause is on a later line

    def feed(self, line: str) -> None:
        text = line.strip()
        if not text:
            return
        self._remember(text)
        self._read_traceback(line, text)
        ours = loglines.PREFIX in text and loglines.parse(text)  # the cheap test first: most lines are not
        if ours and ours.kind == loglines.ERROR:
            self.error_line = loglines.error_text(ours)
        elif _names_an_error(text):
            self.error_line = text[:_EXCEPTION_CAP]
        if ours and ours.kind == loglines.CHECKPOINT and ours.text.startswith("saved"):
            self.checkpointed = True

    def new_since(self, earlier: CrashPrint | None) -> bool:
        """Did this attempt print anything `earlier` did not (masked)? None earlier: yes."""
        if earlier is None or self._overflow or earlier._overflow:
            return True
        return not self._seen <= earlier._seen

    def _remember(self, text: str) -> None:
        if self._overflow:
            return
        self._seen.add(hash(mask(text)))
        if len(self._seen) > self._distinct:
            self._overflow, self._seen = True, set()

    def _read_traceback(self, line: str, text: str) -> None:
        if text == _TRACEBACK:
            self._in_traceback, self._cause_of = True, None
            return
        if self._cause_of is not None:  # after "...Error: Graph execution error:"
            if not line[:1].isspace() and not text.startswith(_DETECTED):
                self.exception, self._cause_of = f"{self._cause_of}: {text}"[:_EXCEPTION_CAP], None
            return
        if not self._in_traceback or line[:1].isspace():
            return  # outside a traceback, or one of its frames
        self._in_traceback = False
        if text.startswith(_CHAINING) or _EXCEPTION_LINE.match(text) is None:
            return  # between chained tracebacks (the next one follows), or not an exception line
        self.exception = text[:_EXCEPTION_CAP]
        if text.endswith(_GRAPH_ERROR):
            self._cause_of = text[: -len(_GRAPH_ERROR)].rstrip(": ")

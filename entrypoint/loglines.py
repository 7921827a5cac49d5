"""The `tfmw <kind> ...` log lines: the one place that formats and parses them (docs/contracts.md).

Every producer (launcher, supervisor, trainer, SIGTERM handler) builds its line with `line()`,
and every reader (the supervisor following the trainer, `make local`'s summary, the fault
harness, the bench, the tests) reads one with `parse()`. A line is

    tfmw <kind> [<head>] key=value key="quoted value" ... [free text]

`kind` is one word (`progress`, `launcher`, `error` ...). Values with spaces, quotes or
nothing in them are double-quoted (inner `"` become `'`), and every line is one line:
newlines and control characters are folded to spaces, so a crafted message cannot forge a
second line. Pure: no I/O, importable from the host tools, the launcher and the trainer.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

PREFIX = "tfmw"

# The kinds, by producer (docs/contracts.md lists each line's fields).
CONNECTING, CONNECTED, START, PROGRESS, CHECKPOINT = "connecting", "connected", "start", "progress", "checkpoint"
RECOVERED, WARNING, DEBUG, STOPPED = "recovered", "warning", "debug", "stopped"
ERROR, DONE, SIGTERM, EVAL, THREADS = "error", "done", "sigterm", "eval", "threads"  # trainer
GPUS = "gpus"  # trainer: the GPUs it sees and how it uses them (entrypoint/training/devices.py)
ELASTIC = "elastic"  # trainer: an elastic group's members and micro-batches (entrypoint/membership.py)
LAUNCHER, LIFECYCLE, COMPLETED, FAILED = "launcher", "lifecycle", "completed", "failed"  # launcher

_KV = re.compile(r'(\w+)=("[^"]*"|\S+)')
_LINE = re.compile(rf"(?:^|(?<=\s)){PREFIX} (\w+):?(?: (.*))?$")
_UNSAFE = re.compile(r"[\x00-\x1f\x7f]+")
_MESSAGE_LIMIT = 500


def one_line(text: object, limit: int = _MESSAGE_LIMIT) -> str:
    """`text` on one line (control characters folded to one space), cut to `limit` chars."""
    flat = _UNSAFE.sub(" ", str(text)).strip()
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def value(raw: object) -> str:
    """One field value: bare when it is one word without quotes, else double-quoted. An `=`
    inside a word stays bare (`data=npz(files=2/4,shard_by=file)`): a value runs to the next
    space, so parse() reads it whole."""
    text = one_line(raw)
    if text and not re.search(r'[\s"]', text):
        return text
    return '"' + text.replace('"', "'") + '"'


def line(kind: str, *head: str, text: str | None = None, **fields: object) -> str:
    """`tfmw <kind> <head...> k=v ... <text>`; `None` fields are left out.

    line("progress", step="3/10", loss="0.5000") == "tfmw progress step=3/10 loss=0.5000"
    line("launcher", text="idle: this run is complete") == "tfmw launcher idle: this run is complete"
    """
    if not re.fullmatch(r"\w+", kind):
        raise ValueError(f"log-line kind {kind!r} is not one word")
    words = [PREFIX, kind, *(one_line(h) for h in head)]
    words += [f"{key}={value(v)}" for key, v in fields.items() if v is not None]
    if text is not None:
        words.append(one_line(text))
    return " ".join(w for w in words if w)


@dataclass(frozen=True)
class LogLine:
    """A parsed `tfmw` line: its kind, its key=value fields (quotes stripped), and the
    whole text after the kind (for launcher lines, which are prose)."""

    kind: str
    fields: dict[str, str] = field(default_factory=dict)
    text: str = ""

    def int_field(self, key: str) -> int | None:
        """`step=3/10` -> 3, `worker=1` -> 1; None when absent or not a number."""
        head = self.fields.get(key, "").split("/", 1)[0]
        return int(head) if head.isdigit() else None

    def float_field(self, key: str) -> float | None:
        try:
            return float(self.fields[key])
        except (KeyError, ValueError):
            return None


def key_values(text: str) -> dict[str, str]:
    """`step=3/10 loss=0.5 message="a b"` -> {"step": "3/10", "loss": "0.5", "message": "a b"}."""
    return {k: v.strip('"') for k, v in _KV.findall(text)}


def parse(raw: str, prefixed: bool = False) -> LogLine | None:
    """The `tfmw` line in `raw`, else None. `prefixed=True` also finds it after a prefix
    (`[worker-0] tfmw progress ...`, a kubectl timestamp); otherwise it must start the line."""
    text = raw.rstrip("\r\n")
    match = _LINE.search(text) if prefixed else _LINE.match(text)
    if not match:
        return None
    kind, rest = match.group(1), match.group(2) or ""
    return LogLine(kind, key_values(rest), rest)


def parse_kind(raw: str, kind: str, prefixed: bool = False) -> LogLine | None:
    """parse(raw) if it is a `tfmw <kind>` line, else None."""
    parsed = parse(raw, prefixed)
    return parsed if parsed is not None and parsed.kind == kind else None


def find(lines, kind: str, prefixed: bool = False) -> list[LogLine]:
    """Every `tfmw <kind>` line among `lines`, in order."""
    return [p for p in (parse_kind(raw, kind, prefixed) for raw in lines) if p is not None]


def progress_step(raw: str, prefixed: bool = True) -> int | None:
    """The step of a `tfmw progress step=<s>/<total> ...` line, else None."""
    parsed = parse_kind(raw, PROGRESS, prefixed)
    return parsed.int_field("step") if parsed else None


def int_field(raw: str, kind: str, key: str, prefixed: bool = False) -> int | None:
    """The number `key` of a `tfmw <kind>` line (`step=60/100` -> 60), else None:
    int_field("tfmw start ... resume_step=40", START, "resume_step") == 40."""
    parsed = parse_kind(raw, kind, prefixed)
    return parsed.int_field(key) if parsed else None


def said(raw: str, kind: str, head: str = "", prefixed: bool = False) -> LogLine | None:
    """The `tfmw <kind> <head>...` line `raw` is, else None: said(l, LAUNCHER, "watchdog") is a
    launcher line whose text starts with "watchdog"; said(l, CHECKPOINT, "saved") a saved checkpoint."""
    parsed = parse_kind(raw, kind, prefixed)
    return parsed if parsed is not None and parsed.text.startswith(head) else None


def error_text(parsed: LogLine) -> str:
    """The error itself of a `tfmw error retryable=... worker=<i> <Type>: <message>` line."""
    match = re.match(r"retryable=\S+ worker=\S+ (.*)$", parsed.text)
    return match.group(1) if match else parsed.text


def notice(kind: str, text: str) -> str:
    """`tfmw <kind>: <text>`, one line of prose about `kind` (`tfmw sigterm: will checkpoint ...`)."""
    return f"{line(kind)}: {one_line(text)}"


BENCH = "bench"  # the bench workers' result lines: `tfmw bench <name>=<json>`


def payload_line(kind: str, name: str, payload: object) -> str:
    """`tfmw <kind> <name>=<compact JSON>`: a machine-read result. Not line(): the JSON may
    hold spaces and be longer than a message may be; json.dumps keeps it on one line."""
    return f"{line(kind)} {name}=" + json.dumps(payload, separators=(",", ":"))


def payloads(lines, kind: str, name: str) -> list:
    """The JSON of every `tfmw <kind> <name>=<json>` line among `lines`, in order."""
    head = f"{name}="
    return [json.loads(p.text[len(head) :]) for p in find(lines, kind) if p.text.startswith(head)]

"""Which checkpoint to restore, decided from file names and the `checkpoint` state file alone
(no TensorFlow import: the trainer passes in how to list a directory and read a file, so the
same code serves a mounted path and an object-store URI, and the unit tests plain files).

The state file normally decides: it names only checkpoints whose files were complete when it
was (atomically) rewritten. When it is missing, empty, unparsable or names a checkpoint that
is missing or does not restore, the trainer does not start again from step 0: it scans the
directory for complete `ckpt-<N>` checkpoints (an `.index` file and every
`.data-<i>-of-<n>` shard) and tries them newest first (docs/training.md, "Recovery").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

STATE_FILE = "checkpoint"

_CKPT = re.compile(r"^ckpt-(?P<step>\d+)\.(?:index|data-(?P<shard>\d+)-of-(?P<shards>\d+))$")
# The text-format CheckpointState proto TensorFlow writes: `field: value` lines.
_FIELD = re.compile(r"^\s*(?P<key>[a-z_]+)\s*:\s*(?P<value>.+?)\s*$")
_STRING = re.compile(r'^"(?P<text>(?:[^"\\]|\\.)*)"$')
_PATH_FIELDS = ("model_checkpoint_path", "all_model_checkpoint_paths")
_NUMBER_FIELDS = ("all_model_checkpoint_timestamps", "last_preserved_timestamp")


def _join(directory: str, name: str) -> str:
    return name if name.startswith("/") or "://" in name else directory.rstrip("/") + "/" + name


def _basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def complete_checkpoints(names: Iterable[str]) -> dict[str, int]:
    """{prefix name: step} of every ckpt-<N> in a directory listing whose index file and all
    data shards are present."""
    index, shards, expected = set(), {}, {}
    for name in names:
        match = _CKPT.match(_basename(name))
        if not match:
            continue
        prefix = f"ckpt-{match['step']}"
        if match["shard"] is None:
            index.add(prefix)
        else:
            shards.setdefault(prefix, set()).add(int(match["shard"]))
            expected.setdefault(prefix, set()).add(int(match["shards"]))
    out = {}
    for prefix in index:
        counts = expected.get(prefix, set())
        if len(counts) == 1 and shards[prefix] == set(range(next(iter(counts)))):
            out[prefix] = int(prefix.split("-")[1])
    return out


@dataclass
class State:
    """What the state file says; `problem` is None when it is usable."""

    latest: str | None = None
    listed: list[str] = field(default_factory=list)
    problem: str | None = None


def parse_state(text: str | None) -> State:
    """Parse the state file's text (None: the file is missing)."""
    if text is None:
        return State(problem="is missing")
    if not text.strip():
        return State(problem="is empty")
    latest, listed = None, []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        match = _FIELD.match(line)
        if not match or match["key"] not in _PATH_FIELDS + _NUMBER_FIELDS:
            return State(problem=f"is unparsable (line {number})")
        value = match["value"]
        if match["key"] in _NUMBER_FIELDS:
            try:
                float(value)
            except ValueError:
                return State(problem=f"is unparsable (line {number})")
            continue
        string = _STRING.match(value)
        if not string or not string["text"]:
            return State(problem=f"is unparsable (line {number})")
        path = string["text"].encode("latin-1", "backslashreplace").decode("unicode_escape")
        if match["key"] == "model_checkpoint_path":
            latest = path
        else:
            listed.append(path)
    if latest is None:
        return State(problem="names no checkpoint")
    if latest not in listed:
        listed.append(latest)
    return State(latest=latest, listed=listed)


@dataclass
class Plan:
    """Checkpoints to try, newest first, and what was wrong with the state file."""

    directory: str
    state: State
    complete: dict[str, int]  # prefix name -> step, from the directory listing

    def candidates(self) -> list[str]:
        """Checkpoints to try in order: the state file's latest when it can be followed, then
        every complete checkpoint in the directory, newest first."""
        first = [] if self.state_problem() else [_join(self.directory, _basename(self.state.latest))]
        return first + self.scanned(exclude=first)

    def scanned(self, exclude: Iterable[str] = ()) -> list[str]:
        """Every complete checkpoint in the directory, newest first, except `exclude`."""
        skip = {_basename(p) for p in exclude}
        ordered = sorted(self.complete.items(), key=lambda item: item[1], reverse=True)
        return [_join(self.directory, name) for name, _ in ordered if name not in skip]

    def state_problem(self) -> str | None:
        """Why the state file cannot be followed as it is (None: it can)."""
        if self.state.problem:
            return f"state file {self.state.problem}"
        latest = _basename(self.state.latest or "")
        if latest not in self.complete:
            return f"state file names {latest}, which is missing or incomplete"
        return None

    def kept_until(self, restored: str, failed: Iterable[str] = ()) -> list[str]:
        """The complete checkpoints up to the restored one, oldest first (the new state file's
        list), without those that failed to restore."""
        step = self.complete[_basename(restored)]
        bad = {_basename(p) for p in failed}
        names = sorted(
            (n for n, s in self.complete.items() if s <= step and n not in bad), key=lambda n: self.complete[n]
        )
        return [_join(self.directory, n) for n in names]


def plan(directory: str, listdir: Callable[[str], list[str]], read: Callable[[str], str | None]) -> Plan:
    """Look at the directory: read(path) returns the file's text or None when it is missing."""
    try:
        names = listdir(directory)
    except OSError:
        names = []
    text = read(_join(directory, STATE_FILE))
    return Plan(directory, parse_state(text), complete_checkpoints(names))

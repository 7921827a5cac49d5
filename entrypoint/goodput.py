"""Where a run's wall time went: goodput and badput by cause (docs/contracts.md, "Goodput").

Pure: no I/O and no clock of its own (callers pass `now`, seconds on one clock). The
launcher feeds it what the supervisor sees (attempts, heartbeats, failures) and what the
trainer prints (checkpoint save times); the status recorder and the metrics endpoint read
`snapshot()`.

Every second of a launcher's life is in exactly one activity, so the buckets add up to the
wall time by construction:

    starting    the first attempt until its first training step (the peer wait aside):
                process start, TensorFlow import, model build, restore, the traced first step
    peerWait    waiting until every peer name resolves
    training    steps running: productive, except what is moved out of it below
    restarting  a failed attempt until the next one's first training step: the back-off,
                the new process, the group re-forming, the restore, the traced first step
    exporting   after the last step (the heartbeat's "finish" phase) until the run's end: the
                chief's SavedModel export and COMPLETED marker

and two moves out of `training` when the facts arrive:

    checkpoint  a save's stall (the trainer's `checkpoint saved seconds=`): training stalls (a
                background save: only its copy to host memory, not its write)
    detection   at a failure, the time since the last training heartbeat: the group made no
                progress while the fault went unnoticed
    lostWork    at a failure, the rest of the training time since the last checkpoint: those
                steps are trained again

A launcher that starts again for the same run (its pod was recreated) carries the recorded
buckets and adds the time since the last record to `restart` (it holds the pod's absence and
any steps after the last checkpoint). Productive is what is left; goodput = productive / wall.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

STARTUP, PEER_WAIT, CHECKPOINT, RESTART, LOST_WORK, DETECTION, EXPORT = (
    "startup",
    "peerWait",
    "checkpoint",
    "restart",
    "lostWork",
    "detection",
    "export",
)
CAUSES = (STARTUP, PEER_WAIT, CHECKPOINT, RESTART, LOST_WORK, DETECTION, EXPORT)

_STARTING, _PEER_WAIT, _TRAINING, _RESTARTING, _EXPORTING, _ENDED = (
    "starting",
    "peerWait",
    "training",
    "restarting",
    "exporting",
    "ended",
)
_BUCKET = {_STARTING: STARTUP, _PEER_WAIT: PEER_WAIT, _RESTARTING: RESTART, _EXPORTING: EXPORT}


@dataclass(frozen=True)
class Accounting:
    """A snapshot: productive seconds and badput seconds by cause (every cause present)."""

    productive: float = 0.0
    badput: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0.0))

    @property
    def wall(self) -> float:
        return self.productive + sum(self.badput.values())

    @property
    def goodput(self) -> float | None:
        """productive / wall; None before any time has passed."""
        return self.productive / self.wall if self.wall > 0 else None

    # -- the status ConfigMap's strings ---------------------------------------------------
    def to_fields(self) -> dict[str, str]:
        """goodput, productiveSeconds, badputSeconds (a JSON object, one key per cause)."""
        ratio = self.goodput
        return {
            "goodput": "" if ratio is None else f"{ratio:.4f}",
            "productiveSeconds": f"{self.productive:.1f}",
            "badputSeconds": json.dumps({c: round(self.badput.get(c, 0.0), 1) for c in CAUSES}, separators=(",", ":")),
        }

    @classmethod
    def from_fields(cls, productive: str, badput: str) -> Accounting | None:
        """The recorded strings back; None when absent or unreadable (then nothing is carried)."""
        try:
            carried = float(productive)
            causes = json.loads(badput)
            if not isinstance(causes, dict) or carried < 0:
                return None
            values = {c: float(causes.get(c, 0.0)) for c in CAUSES}
        except (TypeError, ValueError):
            return None
        if any(v < 0 or v != v for v in values.values()) or carried != carried:
            return None
        return cls(carried, values)

    def largest_causes(self) -> list[tuple[str, float]]:
        """(cause, seconds) of the causes of at least 0.05 s, largest first."""
        return [(c, s) for s, c in sorted(((s, c) for c, s in self.badput.items() if s >= 0.05), reverse=True)]

    def summary(self) -> str:
        """'goodput 87.3% of 120.4s (badput: restart 9.8s, startup 5.1s)' (largest first, >= 0.05 s)."""
        ratio = self.goodput
        if ratio is None:
            return "goodput -"
        badput = ", ".join(f"{c} {s:.1f}s" for c, s in self.largest_causes()) or "none"
        return f"goodput {ratio:.1%} of {self.wall:.1f}s (badput: {badput})"

    # -- the `tfmw completed` line's fields (docs/contracts.md) ---------------------------
    def line_fields(self) -> dict[str, str]:
        """`goodput=0.8731 wall_seconds=120.4 badput="restart=9.8 startup=5.1"`; {} before any time."""
        if self.goodput is None:
            return {}
        return {
            "goodput": f"{self.goodput:.4f}",
            "wall_seconds": f"{self.wall:.1f}",
            "badput": " ".join(f"{c}={s:.1f}" for c, s in self.largest_causes()) or "-",
        }


def read_line_fields(fields: dict[str, str]) -> tuple[float, float, dict[str, float]] | None:
    """(goodput, wall seconds, badput seconds by cause) from a `tfmw completed` line's fields
    (Accounting.line_fields); None when the line carries no account."""
    try:
        return (
            float(fields["goodput"]),
            float(fields.get("wall_seconds", "nan")),
            {c: float(v) for c, v in (w.split("=", 1) for w in fields.get("badput", "").split() if "=" in w)},
        )
    except (KeyError, ValueError):
        return None


class Ledger:
    """The running account of one launcher (see the module docstring).

    `beats`: the command writes the heartbeat file (the built-in trainer). A command that does
    not is counted as training from its start, with no checkpoint, detection or lost-work
    split (the launcher cannot see them)."""

    def __init__(
        self, now: float, *, beats: bool = True, carried: Accounting | None = None, absent_seconds: float = 0.0
    ):
        base = carried or Accounting()
        self._productive = base.productive
        self._badput = {c: base.badput.get(c, 0.0) for c in CAUSES}
        self._badput[RESTART] += max(absent_seconds, 0.0)
        self._beats = beats
        self._activity = _STARTING if carried is None else _RESTARTING
        self._resume = self._activity  # where the peer wait returns to
        self._since = now
        self._at_risk = 0.0  # training seconds since the last checkpoint
        self._last_beat: float | None = None

    @property
    def beats(self) -> bool:
        """Does the command write a heartbeat (the built-in trainer)?"""
        return self._beats

    def _close(self, now: float) -> None:
        spent = max(now - self._since, 0.0)
        if self._activity == _TRAINING:
            self._productive += spent
            self._at_risk += spent
        elif self._activity in _BUCKET:
            self._badput[_BUCKET[self._activity]] += spent
        self._since = max(now, self._since)

    def _enter(self, activity: str, now: float) -> None:
        self._close(now)
        self._activity = activity

    def _move(self, cause: str, seconds: float) -> float:
        if not math.isfinite(seconds):
            return 0.0
        moved = min(max(seconds, 0.0), self._productive)
        self._productive -= moved
        self._badput[cause] += moved
        return moved

    # -- what the launcher sees ------------------------------------------------------------
    def peer_wait(self, now: float) -> None:
        if self._activity in (_STARTING, _RESTARTING):
            self._resume = self._activity
            self._enter(_PEER_WAIT, now)

    def peers_found(self, now: float) -> None:
        if self._activity == _PEER_WAIT:
            self._enter(self._resume, now)

    def attempt_started(self, now: float) -> None:
        """The training command was started: without heartbeats, it counts as training now."""
        if not self._beats and self._activity in (_STARTING, _RESTARTING):
            self._enter(_TRAINING, now)

    def beat(self, now: float, phase: str | None) -> None:
        """A new heartbeat. A "train" beat (or a phase-less one) means a step completed; a
        "finish" beat, that the steps are over and the export runs."""
        if phase == "finish":
            if self._activity == _TRAINING:
                self._enter(_EXPORTING, now)
            return
        if phase not in (None, "train"):
            return
        self._last_beat = now
        if self._activity in (_STARTING, _RESTARTING):
            self._enter(_TRAINING, max(now, self._since))

    def checkpoint_saved(self, now: float, seconds: float | None, age: float | None = None) -> None:
        """A checkpoint was published: its stall (`seconds`: for a background save only the copy,
        not the write) is checkpoint badput, and the steps before its copy are no longer at
        risk; the `age` seconds trained since the copy (a background write's) still are."""
        self._close(now)
        if self._activity == _TRAINING and seconds:
            self._move(CHECKPOINT, seconds)
        kept = age if age is not None and math.isfinite(age) and age > 0 else 0.0
        self._at_risk = min(self._at_risk, kept)

    def failed(self, now: float) -> None:
        """The attempt failed (its process ended, or was killed as hung): the time since the last
        step went unnoticed, the rest since the last checkpoint is trained again."""
        was_training = self._activity == _TRAINING  # a failed export only restarts: at_risk is 0
        self._enter(_RESTARTING, now)
        if was_training and self._beats:
            unnoticed = now - self._last_beat if self._last_beat is not None else self._at_risk
            detected = self._move(DETECTION, min(unnoticed, self._at_risk))
            self._move(LOST_WORK, self._at_risk - detected)
        self._at_risk = 0.0
        self._last_beat = None

    def ended(self, now: float) -> None:
        """The run reached a terminal phase: the account stops."""
        if self._activity != _ENDED:
            self._enter(_ENDED, now)

    def snapshot(self, now: float) -> Accounting:
        """The account up to `now` (the current activity's time included; nothing changes)."""
        productive, badput = self._productive, dict(self._badput)
        spent = max(now - self._since, 0.0)
        if self._activity == _TRAINING:
            productive += spent
        elif self._activity in _BUCKET:
            badput[_BUCKET[self._activity]] += spent
        return Accounting(productive, badput)

"""The hang watchdog's policy: from what the supervisor observed, the current timeout.

Pure (no I/O, no clock of its own): the supervisor (entrypoint.attempt) feeds it every
change of the trainer's heartbeat file (read by entrypoint.rundir.read_beat) and asks, at
each poll, whether training is hung.

Two bounds:
- static: `training.hangTimeoutSeconds` (TFMW_HANG_TIMEOUT_SECONDS) since the last sign of
  life (a heartbeat change or any output line). It is the ceiling, and the only bound for a
  user command (its output is irregular), before enough steps were seen (restore, the first
  step's graph tracing), and in every phase that is not a step: "start", "checkpoint" (the
  boundary vote and the save, which waits for the slowest worker), "finish" (export), and
  the first step after any of them (it waits in its all-reduce for the peers to leave theirs).
- adaptive (`training.hangDetection: adaptive`, the default): while the built-in trainer
  steps ("<step> train" beats following "<step> train" beats), since the last heartbeat change,
      timeout = min(static, max(FLOOR_SECONDS, MULTIPLIER x p95 of the recent per-step times))
  Per-step time = time between two observed train beats / the steps between them (the trainer
  writes at most one beat every 0.5 s, so a fast model's beats cover many steps).

Why these numbers (docs/failure-model.md):
- MULTIPLIER 10: a step 5x slower than usual must never fire. The observed silence during
  such a step is at most the slow step, plus the steps before it that the 0.5 s write throttle
  did not report, plus one poll; with a 10x bound that is a 2x margin over the p95 itself
  (and more over the median the 5x is measured against).
- FLOOR_SECONDS 6: a fast step (cnn: ~0.07 s) would give under a second; the floor must cover
  the heartbeat's 0.5 s write interval, the supervisor's 0.5 s poll and a scheduling stall on a
  loaded node (2 shared CPUs here) with margin, and still leave room for the restart
  (~6-7 s here: back-off, import TensorFlow, re-form the group) within the 15 s goal from a
  hang to training resumed.
- MIN_SAMPLES 5 steady observations before the adaptive bound applies; WINDOW 100 keeps the
  percentile recent (a model that slows down over time raises it).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

ADAPTIVE, STATIC = "adaptive", "static"
MODES = (ADAPTIVE, STATIC)

FLOOR_SECONDS = 6.0
MULTIPLIER = 10.0
PERCENTILE = 0.95
MIN_SAMPLES = 5
WINDOW = 100
STEP_PHASE = "train"


def percentile(values, q: float) -> float:
    """The q-quantile (0..1) of `values` by linear interpolation between order statistics."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    pos = q * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


@dataclass(frozen=True)
class Verdict:
    idle: float  # seconds without the sign of life the firing bound counts
    timeout: float  # the bound that fired
    basis: str  # how it was set, for the log line and the Restarted Event


@dataclass
class HangWatch:
    static_seconds: float  # 0: watchdog off (no adaptive bound either)
    mode: str = ADAPTIVE
    floor_seconds: float = FLOOR_SECONDS
    multiplier: float = MULTIPLIER
    q: float = PERCENTILE
    min_samples: int = MIN_SAMPLES
    window: int = WINDOW
    _samples: deque = field(default_factory=deque, init=False, repr=False)
    _last: tuple | None = field(default=None, init=False, repr=False)  # (step, phase, time)
    _armed: bool = field(default=False, init=False, repr=False)

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"hang detection mode {self.mode!r}: one of {', '.join(MODES)}")
        self._samples = deque(maxlen=self.window)

    def observe(self, step: int, phase: str | None, now: float) -> None:
        """A heartbeat change seen at `now`. A train beat at a higher step than the last beat
        arms the adaptive bound; a sample is taken only between two train beats. Anything else
        (another phase, a repeated or lower step, no phase at all) disarms it until the next
        such beat."""
        last, self._last = self._last, (step, phase, now)
        stepped = last is not None and phase == STEP_PHASE and step > last[0]
        if stepped and last[1] == STEP_PHASE:
            self._samples.append((now - last[2]) / (step - last[0]))
        # A train beat is written after its step: the first one after another phase says the
        # step that waited in its all-reduce for the slowest peer (to leave its checkpoint or
        # its restore) is done, so the steps from here on are steady again. That interval is
        # no sample: it holds the other phase's time.
        self._armed = stepped

    @property
    def samples(self) -> int:
        return len(self._samples)

    def step_seconds(self) -> float | None:
        """The running high percentile of the per-step time; None before MIN_SAMPLES."""
        if len(self._samples) < self.min_samples:
            return None
        return percentile(self._samples, self.q)

    def adaptive_timeout(self) -> float | None:
        """The adaptive bound now, or None when the static one applies."""
        if self.mode != ADAPTIVE or self.static_seconds <= 0 or not self._armed:
            return None
        step = self.step_seconds()
        if step is None:
            return None
        return min(self.static_seconds, max(self.floor_seconds, self.multiplier * step))

    def adaptive_basis(self) -> str:
        """How the adaptive bound is set now, for the launcher's lines and the Restarted Event."""
        step = self.step_seconds()
        return (
            f"adaptive: max({self.floor_seconds:g}s, {self.multiplier:g} x p{self.q * 100:.0f} "
            f"step {step if step is not None else float('nan'):.3g}s), "
            f"at most training.hangTimeoutSeconds={self.static_seconds:g}"
        )

    def timeout(self) -> float:
        """The bound that applies now (0: off)."""
        adaptive = self.adaptive_timeout()
        return self.static_seconds if adaptive is None else adaptive

    def check(self, now: float, last_activity: float) -> Verdict | None:
        """Hung? `last_activity`: the last heartbeat change or output line (the static bound's
        sign of life). The adaptive bound counts heartbeat changes only: a stopped trainer's
        runtime may still print (retry messages), a stepping one always beats."""
        if self.static_seconds <= 0:
            return None
        adaptive = self.adaptive_timeout()
        if adaptive is not None and self._last is not None and now - self._last[2] > adaptive:
            return Verdict(now - self._last[2], adaptive, self.adaptive_basis())
        if now - last_activity > self.static_seconds:
            return Verdict(
                now - last_activity, self.static_seconds, f"training.hangTimeoutSeconds={self.static_seconds:g}"
            )
        return None

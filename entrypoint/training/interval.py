"""The checkpoint interval `checkpoint.interval: auto` chooses: Young/Daly from measurements.

Pure (no TensorFlow, no clock): the trainer passes what it measured and what the launcher told
it; the loop only acts on the result (docs/training.md, "Checkpoint interval").

    C  the checkpoint's cost: the step loop's stall per save (a running median of the last few;
       with background saves, the copy to host memory)
    M  the mean time between failures of the whole group (a group fails when any worker does):
       estimated by the launcher from the run's record and passed in the environment
       (entrypoint/mtbf.py)
    L  a background write's latency (copy to publish): the next save waits for the previous
       write, so an interval below L turns the write back into a stall

Young (1974), "A first order approximation to the optimum checkpoint interval", CACM 17(9):
T = sqrt(2 C M). Daly (2006), "A higher order estimate of the optimum checkpoint interval for
restart dumps", FGCS 22(3): T = sqrt(2 C M) [1 + 1/3 sqrt(C / 2M) + 1/9 (C / 2M)] - C for
C < 2M, else T = M. Both are for the compute time between checkpoints; a step-granular
"checkpoint at the first step past T" keeps Young/Daly as its first-order optimum (Benoit et al.,
"Robustness of the Young/Daly formula for stochastic iterative applications", ICPP 2020).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

STALL_WINDOW = 5  # saves in the running median of C


def daly_interval(cost: float, mtbf: float) -> float:
    """Daly's higher-order optimum compute time between checkpoints (seconds)."""
    if cost <= 0:
        return 0.0
    if cost >= 2 * mtbf:
        return mtbf
    ratio = cost / (2 * mtbf)
    return math.sqrt(2 * cost * mtbf) * (1 + math.sqrt(ratio) / 3 + ratio / 9) - cost


@dataclass(frozen=True)
class Interval:
    seconds: float  # the chosen interval
    cost: float  # C used
    mtbf: float  # M used
    why: str  # "young-daly", "min", "max", "write" (the bound that decided)


def choose(
    stalls: list[float], mtbf: float, min_seconds: float, max_seconds: float, write_seconds: float = 0.0
) -> Interval:
    """The interval for the measured stalls (oldest first), M and the bounds. Before any save
    has been measured C is unknown: the interval is the lower bound (a first save measures it)."""
    recent = [s for s in stalls[-STALL_WINDOW:] if s >= 0 and math.isfinite(s)]
    cost = statistics.median(recent) if recent else 0.0
    if not recent:
        return Interval(min(min_seconds, max_seconds), cost, mtbf, "min")
    ideal = daly_interval(cost, mtbf)
    floor = max(min_seconds, write_seconds if math.isfinite(write_seconds) else 0.0)
    if ideal > max_seconds:
        return Interval(max_seconds, cost, mtbf, "max")
    if ideal < floor:
        return Interval(min(floor, max_seconds), cost, mtbf, "write" if write_seconds > min_seconds else "min")
    return Interval(ideal, cost, mtbf, "young-daly")


def changed(previous: float | None, current: float, tolerance: float = 0.1) -> bool:
    """Worth a log line: the first interval, or one that moved by more than `tolerance`."""
    return previous is None or abs(current - previous) > tolerance * previous


@dataclass
class Schedule:
    """When the step loop checkpoints: every `every_steps` steps, and/or once `seconds` have
    passed since the last save (fixed: checkpoint.everySeconds; auto: chosen by `choose` after
    every save). Pure: the loop passes the clock's readings and acts on the answers."""

    every_steps: int  # 0: no step boundary (always 0 with auto)
    seconds: float  # 0: no time boundary
    last_save: float  # monotonic: when the last save returned (or training started)
    auto: bool = False
    min_seconds: float = 0.0
    max_seconds: float = 0.0
    mtbf: float = 0.0

    def step_due(self, step: int) -> bool:
        return self.every_steps > 0 and step % self.every_steps == 0

    def time_due(self, now: float) -> bool:
        """This worker's clock says a save is due (the group votes on it: every worker must agree
        on the boundary step, and clocks differ)."""
        return self.seconds > 0 and now - self.last_save >= self.seconds

    def saved(self, now: float, stalls: list[float], write_seconds: float) -> Interval | None:
        """A save returned at `now`: the next interval counts from here. Auto: the interval
        chosen from the measurements, which the loop logs when it changed."""
        self.last_save = now
        if not self.auto:
            return None
        chosen = choose(stalls, self.mtbf, self.min_seconds, self.max_seconds, write_seconds)
        self.seconds = chosen.seconds
        return chosen


def schedule_for(checkpoint: dict, mtbf: float, now: float) -> tuple[Schedule, Interval | None]:
    """The schedule of a `checkpoint` config section (validated: entrypoint/training/config.py);
    with auto, the first interval too (the lower bound until a save is measured)."""
    if checkpoint["interval"] != "auto":
        return Schedule(checkpoint["everySteps"], float(checkpoint["everySeconds"]), now), None
    low, high = float(checkpoint["minSeconds"]), float(checkpoint["maxSeconds"])
    first = choose([], mtbf, low, high)
    return Schedule(0, first.seconds, now, True, low, high, mtbf), first

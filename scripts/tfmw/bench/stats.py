"""Ratio maths for the figures (pure): medians, overhead ratios, scaling efficiency."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of no values")
    return float(statistics.median(values))


def spread(values: Sequence[float]) -> tuple[float, float]:
    """(min, max): shown next to a median so a noisy figure looks noisy."""
    return float(min(values)), float(max(values))


def ratio(numerator: float, denominator: float) -> float:
    if denominator <= 0:
        raise ValueError(f"ratio with a non-positive denominator {denominator}")
    return numerator / denominator


def paired_ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """Ratio of each round's pair (measured back to back, so slow drift on a shared machine
    cancels), rather than a ratio of medians taken at different times."""
    if len(numerators) != len(denominators):
        raise ValueError(f"unpaired rounds: {len(numerators)} vs {len(denominators)}")
    return [ratio(n, d) for n, d in zip(numerators, denominators, strict=True)]


def scaling_efficiency(step_seconds_1: float, step_seconds_n: float) -> float:
    """Weak scaling at a fixed per-replica batch: N workers process N times the examples per
    step, so throughput_N / (N * throughput_1) = t_1 / t_N (1.0 = perfect)."""
    return ratio(step_seconds_1, step_seconds_n)


def overhead_percent(measured: float, baseline: float) -> float:
    """How much longer `measured` takes than `baseline`, in percent (negative: faster)."""
    return (ratio(measured, baseline) - 1.0) * 100.0

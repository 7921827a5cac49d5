"""The fault harness's tables: one row a fault, console or markdown (pure)."""

from __future__ import annotations

import math

from tfmw.faults.analysis import RECOVERY_PARTS, FaultResult
from tfmw.table import markdown_table

TABLE_HEADERS = [
    "fault",
    "completed",
    "fault at step",
    "resumed from",
    "steps lost",
    "fault → detected (s)",
    "fault → resumed (s)",
    "trainer restarts",
    "identical weights",
]


def parts_table(results: list[FaultResult]) -> list[str]:
    """fault -> resumed in its parts (recovery_parts), the chief's cold start in the same run and
    the ratio of the two, and the chief's goodput for the whole run: one row a fault (pure)."""

    def cell(value: float) -> str:
        return "-" if value is None or math.isnan(value) else f"{value:.1f}"

    rows = []
    for r in results:
        ratio = r.seconds_to_resume / r.seconds_cold_start if r.seconds_cold_start > 0 else float("nan")
        rows.append(
            [
                r.scenario,
                *(cell(r.parts.get(part, float("nan"))) for part in RECOVERY_PARTS),
                cell(r.seconds_to_resume),
                cell(r.seconds_cold_start),
                "-" if math.isnan(ratio) else f"{ratio:.2f}x",
                "-" if math.isnan(r.goodput) else f"{r.goodput:.1%}",
            ]
        )
    return markdown_table(
        [
            "fault",
            *(f"{p} (s)" for p in RECOVERY_PARTS),
            "fault → resumed (s)",
            "cold start (s)",
            "resumed / cold start",
            "goodput (chief)",
        ],
        rows,
    ).splitlines()


CLUSTER_HEADERS = [
    "fault",
    "pod deleted",
    "recreated as",
    "fault → recreated pod Running (s)",
    "COMPLETED marker digest",
    "fenced side wrote",
    "total (s)",
]


def table(results: list[FaultResult]) -> list[str]:
    """What each fault cost, one markdown row a fault (pure)."""
    return markdown_table(
        TABLE_HEADERS,
        [
            [
                r.scenario,
                "yes" if r.completed else "NO: " + r.reason,
                str(r.step_at_fault),
                str(r.resume_step),
                f"{r.steps_lost} (≤ {r.checkpoint_every})",
                f"{r.seconds_to_detect:.1f}",
                f"{r.seconds_to_resume:.1f}",
                str(r.trainer_restarts),
                "yes" if r.identical_weights else "NO",
            ]
            for r in results
        ],
    ).splitlines()


def cluster_table(results: list[FaultResult]) -> list[str]:
    """What the cluster did about each deleted pod or lost node (cluster mode only; pure)."""

    def marker(r: FaultResult) -> str:
        return ("matches" if r.marker_digest in r.digests else "DIFFERS") if r.marker_digest else "not read"

    return markdown_table(
        CLUSTER_HEADERS,
        [
            [
                r.scenario,
                r.victim or "-",
                r.recreated_pod or "NOT recreated",
                f"{r.seconds_to_pod_running:.1f}",
                marker(r),
                r.fenced_writes or "-",
                f"{r.seconds_total:.1f}",
            ]
            for r in results
        ],
    ).splitlines()

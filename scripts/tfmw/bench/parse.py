"""The bench workers' `tfmw bench case=<json>` lines (pure), read through entrypoint.loglines."""

from __future__ import annotations

from entrypoint import loglines

CASE = "case"  # scripts/tfmw/bench/mwms_step.py prints one `tfmw bench case=<json>` line per case


def case_line(case: dict) -> str:
    return loglines.payload_line(loglines.BENCH, CASE, case)


def bench_cases(output: str) -> dict[str, dict]:
    """Every `tfmw bench case=<json>` line of a worker's output, by case id."""
    return {case["id"]: case for case in loglines.payloads(output.splitlines(), loglines.BENCH, CASE)}


def first_payload(output: str, key: str) -> dict | None:
    """The first `tfmw bench <key>=<json>` line of a worker's output, None if it printed none
    (a figure's one-result worker: pipeline_worker, restart_worker)."""
    return next(iter(loglines.payloads(output.splitlines(), loglines.BENCH, key)), None)

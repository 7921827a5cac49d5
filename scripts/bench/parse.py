"""The bench workers' `tfmw bench case=<json>` lines (pure); every other `tfmw` line is read
with entrypoint.loglines."""
from __future__ import annotations

import json

from entrypoint import loglines
# Re-exported for fig_cluster, fig_launcher and tests/bench until they import entrypoint.loglines.
from entrypoint.loglines import key_values, progress_step  # noqa: F401

BENCH = "bench"  # the kind of the lines scripts/bench/mwms_step.py prints


def log_kind(line: str) -> str | None:
    """"progress" for a `tfmw progress ...` line (prefixes allowed), else None; kept for
    fig_launcher until it uses entrypoint.loglines.parse_kind."""
    parsed = loglines.parse(line, prefixed=True)
    return parsed.kind if parsed else None


def bench_cases(output: str) -> dict[str, dict]:
    """Every `tfmw bench case=<json>` line of a worker's output, by case id."""
    cases = {}
    for parsed in loglines.find(output.splitlines(), BENCH):
        if parsed.text.startswith("case="):
            case = json.loads(parsed.text[len("case="):])
            cases[case["id"]] = case
    return cases

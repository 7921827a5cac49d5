"""Parse the `tfmw ...` lines the trainer, the launcher and the bench workers print (pure)."""
from __future__ import annotations

import json

from scripts.loglines import key_values, log_kind, progress_step  # noqa: F401 - re-exported


def bench_cases(output: str) -> dict[str, dict]:
    """Every `tfmw bench case=<json>` line of a worker's output, by case id."""
    cases = {}
    for line in output.splitlines():
        marker = "tfmw bench case="
        if line.startswith(marker):
            case = json.loads(line[len(marker):])
            cases[case["id"]] = case
    return cases

"""Parse the `tfmw ...` lines the trainer, the launcher and the bench workers print (pure)."""
from __future__ import annotations

import json
import re

_KV = re.compile(r'(\w+)=("[^"]*"|\S+)')


def key_values(line: str) -> dict[str, str]:
    """`tfmw progress step=3/10 loss=0.5` -> {"step": "3/10", "loss": "0.5"} (quotes stripped)."""
    return {k: v.strip('"') for k, v in _KV.findall(line)}


def log_kind(line: str) -> str | None:
    """"progress" for a `tfmw progress ...` line (launcher prefixes allowed), else None."""
    match = re.search(r"\btfmw (\w+)\b", line)
    return match.group(1) if match else None


def progress_step(line: str) -> int | None:
    """The step of a `tfmw progress step=<s>/<total> ...` line, else None."""
    if log_kind(line) != "progress":
        return None
    step = key_values(line).get("step", "")
    head = step.split("/", 1)[0]
    return int(head) if head.isdigit() else None


def bench_cases(output: str) -> dict[str, dict]:
    """Every `tfmw bench case=<json>` line of a worker's output, by case id."""
    cases = {}
    for line in output.splitlines():
        marker = "tfmw bench case="
        if line.startswith(marker):
            case = json.loads(line[len(marker):])
            cases[case["id"]] = case
    return cases

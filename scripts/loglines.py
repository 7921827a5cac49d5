"""Parse the `tfmw ...` lines the launcher and the trainer print (docs/contracts.md); pure.

Shared by `make local`'s summary, the fault harness and `make bench`.
"""
from __future__ import annotations

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

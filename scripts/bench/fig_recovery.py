"""Figure 3: recovery — time from a fault to training resumed, and steps lost.

Measured by the fault-tolerance harness (issue 4), not here: this module runs it if it exists
(`scripts/faults.py` or the package `scripts/faults/`) and publishes its table verbatim, plus a
plot of its numeric columns. Without the harness the figure says so; numbers are never made up.
"""
from __future__ import annotations

import re
import subprocess

from .procs import PY, REPO, base_env

CANDIDATES = ("scripts/faults.py", "scripts/faults/__main__.py")
MODULE = "scripts.faults"


def harness_path():
    for rel in CANDIDATES:
        if (REPO / rel).is_file():
            return REPO / rel
    return None


QUICK_SCENARIO = "kill-worker"
# The faults whose cost the heartbeat and the watchdog decide (a kill is seen at once through
# the closed connection): re-run with a 3 s coordination heartbeat and a 10 s hang timeout.
TUNED_ARGS = ("--scenario", "hang-worker", "--scenario", "partition-worker", "--hang-timeout", "10",
              "--set", "training.config.heartbeatTimeoutSeconds=3")


def harness_args(help_text: str, quick: bool) -> list[str]:
    """Arguments for the harness from its --help: a quick run is one scenario (or its --quick)."""
    if not quick:
        return []
    if "--quick" in help_text:
        return ["--quick"]
    if "--scenario" in help_text and QUICK_SCENARIO in help_text:
        return ["--scenario", QUICK_SCENARIO]
    return []


def run_harness(quick: bool, timeout: float = 600.0, log=print, extra_args=()) -> dict:
    """{"status": "measured"|"missing"|"failed", "output": str, "command": str}"""
    path = harness_path()
    if path is None:
        return {"status": "missing", "output": "", "command": f"python -m {MODULE}"}
    env = base_env(one_thread=True)
    command = [PY, "-m", MODULE]
    try:
        helped = subprocess.run(command + ["--help"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
        command += harness_args(helped.stdout, quick) + list(extra_args)
        log(f"  figure 3: {' '.join(command[1:])} (the fault-tolerance harness)")
        result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": "failed", "output": f"timed out after {timeout:.0f}s",
                "command": "python " + " ".join(command[1:])}
    # A non-zero exit with a table still measured something (e.g. one scenario did not recover):
    # the table is published with the exit code.
    has_table = bool(parse_table(result.stdout)[0])
    status = "measured" if result.returncode == 0 or has_table else "failed"
    output = result.stdout if has_table else (result.stdout + result.stderr)[-3000:]
    return {"status": status, "output": output.strip(), "command": "python " + " ".join(command[1:]),
            "exit_code": result.returncode}


def parse_table(text: str) -> tuple[list[str], list[list[str]]]:
    """The first markdown pipe table in `text`: (headers, rows); ([], []) when there is none."""
    lines = [line.strip() for line in text.splitlines()]
    for i, line in enumerate(lines[:-1]):
        if line.startswith("|") and re.fullmatch(r"\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?", lines[i + 1]):
            headers = [c.strip() for c in line.strip("|").split("|")]
            rows = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                rows.append([c.strip() for c in row.strip("|").split("|")])
            return headers, rows
    return [], []


def number(cell: str) -> float | None:
    """The leading number of a cell: "14.2", "20 s", "10 (≤ 20)" -> 14.2, 20.0, 10.0; else None."""
    match = re.match(r"[~+]?(-?\d+(?:\.\d+)?)(?:\s*(?:s|ms|steps?))?(?:\s*\(.*\))?$", cell.strip())
    return float(match.group(1)) if match else None


PREFERRED = ("resumed (s)", "steps lost")


def plot_columns(headers: list[str], rows: list[list[str]]) -> list[int]:
    """Numeric columns to plot: the recovery time and steps lost when the harness has them."""
    numeric = [j for j in range(1, len(headers))
               if rows and all(j < len(r) and number(r[j]) is not None for r in rows)]
    preferred = [j for j in numeric if any(p in headers[j] for p in PREFERRED)]
    return preferred or numeric


def plot(headers: list[str], rows: list[list[str]], path, subtitle: str) -> bool:
    """Bars of each numeric column per row (row label = first cell). False: nothing to plot."""
    numeric = plot_columns(headers, rows)
    if not numeric:
        return False
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(numeric), figsize=(5 * len(numeric), 2.2 + 0.5 * len(rows)), squeeze=False)
    for ax, j in zip(axes[0], numeric):
        bars = ax.barh([r[0] for r in rows], [number(r[j]) for r in rows], height=0.5)
        ax.bar_label(bars, labels=[r[j] for r in rows], fontsize=8, padding=3)
        ax.set_xlim(0, max(number(r[j]) for r in rows) * 1.35 or 1)
        ax.invert_yaxis()
        ax.set_title(headers[j], fontsize=9)
        ax.tick_params(axis="y", labelsize=8)
    fig.suptitle(f"Figure 3: recovery after a fault (from the fault-tolerance harness)\n{subtitle}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True

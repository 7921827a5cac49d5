"""Figure 3: recovery — time from a fault to training resumed, and steps lost.

Measured by the fault-tolerance harness (issue 4), not here: this module runs it if it exists
(`scripts/faults.py` or the package `scripts/faults/`) at the chart's defaults and publishes its
table verbatim, then re-runs the faults a setting decides with that setting changed (VARIANTS:
the warm standby off, static hang detection, both) and plots fault → resumed per fault and
configuration. Without the harness the figure says so; numbers are never made up.
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
# The warm standby's on/off value (entrypoint/standby.py, charts/tf-multiworker/values.yaml).
STANDBY_VALUE = "training.warmStandby"
# The previous harness default: a hand-tuned static watchdog (the chart's static 600 s would
# make a hang cost ten minutes).
STATIC_SECONDS = 20
DEFAULTS = "defaults"
# Figure 3's variants, each one setting away from the chart's defaults (the main table), for
# the faults it decides: a kill is seen at once (the closed connection), so detection decides
# only a hang and a partition; the standby decides every restart.
VARIANTS = (
    ("warm standby off", ("--scenario", "kill-worker", "--scenario", "hang-worker", "--scenario",
                          "partition-worker", "--set", f"{STANDBY_VALUE}=false")),
    (f"static detection ({STATIC_SECONDS} s)", ("--scenario", "hang-worker", "--scenario", "partition-worker",
                                                "--set", "training.hangDetection=static",
                                                "--hang-timeout", str(STATIC_SECONDS))),
    (f"both off (static {STATIC_SECONDS} s, no standby)", (
        "--scenario", "hang-worker", "--scenario", "partition-worker", "--set", "training.hangDetection=static",
        "--hang-timeout", str(STATIC_SECONDS), "--set", f"{STANDBY_VALUE}=false")),
)
RESUMED = "fault → resumed (s)"


def summary(results: dict[str, dict]) -> tuple[list[str], list[list[str]]]:
    """One row per fault, one column per configuration ({label: run_harness result}, the
    defaults first): its fault → resumed seconds, '-' where that configuration did not run it
    or did not measure it (pure)."""
    columns, cells = [], {}
    for label, result in results.items():
        headers, rows = parse_table(result.get("output", "")) if result.get("status") != "missing" else ([], [])
        columns.append(label)
        if RESUMED not in headers:
            continue
        j = headers.index(RESUMED)
        for row in rows:
            if j < len(row):
                cells.setdefault(row[0], {})[label] = row[j]
    faults = list(cells)
    return (["fault", *(f"{c}: resumed (s)" for c in columns)],
            [[f, *(cells[f].get(c, "-") for c in columns)] for f in faults])


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


def plot(headers: list[str], rows: list[list[str]], path, subtitle: str) -> bool:
    """Grouped bars: per fault (row), one bar per configuration column with a number.
    False: nothing to plot."""
    columns = [j for j in range(1, len(headers)) if any(j < len(r) and number(r[j]) is not None for r in rows)]
    if not columns:
        return False
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    width = 0.8 / len(columns)
    fig, ax = plt.subplots(figsize=(9, 1.6 + 0.9 * len(rows)))
    top = max(number(r[j]) or 0 for r in rows for j in columns if j < len(r))
    for k, j in enumerate(columns):
        ys = [i + k * width for i in range(len(rows))]
        values = [number(r[j]) if j < len(r) and number(r[j]) is not None else 0 for r in rows]
        bars = ax.barh(ys, values, height=width, label=headers[j].replace(": resumed (s)", ""))
        ax.bar_label(bars, labels=[r[j] if j < len(r) and number(r[j]) is not None else "" for r in rows],
                     fontsize=7, padding=2)
    ax.set_yticks([i + width * (len(columns) - 1) / 2 for i in range(len(rows))], [r[0] for r in rows], fontsize=8)
    ax.set_xlim(0, top * 1.25 or 1)
    ax.invert_yaxis()
    ax.set_xlabel("fault → training resumed (s)", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"Figure 3: recovery after a fault (fault-tolerance harness)\n{subtitle}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True

"""Figure 12: what the run's length costs — a restart at step S: the time from building a worker's
input at step S to its first batch, at S = 0, 10,000 and 100,000, synthetic (in memory) and
TFRecord, the trainer's pipeline (position arithmetic) beside the one it replaced (skip S
batches), in one process (restart_worker.py), as ratios to S = 0 within each round."""

from __future__ import annotations

import json
import sys

from entrypoint import loglines

from . import plots, stats
from .figure import BenchRun, measured
from .parse import first_payload
from .procs import BenchError, run_workers
from .report import image, paragraphs, settings_line, table

RESULT = "restart"  # the worker's `tfmw bench restart=<json>` line
STEPS = [0, 10_000, 100_000]
TARGET = 1.1  # a restart at the last step within 1.1x of one at step 0
VARIANTS = {"after": "position arithmetic (the trainer)", "before": "skip S batches (the old pipeline)"}


def measure(quick: bool, log=print) -> dict:
    opts = {
        "steps": STEPS,
        "batch": 8,
        "examples": 4096,
        "shards": 4,
        "rounds": 2 if quick else 3,
        "repeats": 5 if quick else 7,
    }
    log("  figure 12: a restart at step S, time to the first batch (one process)")
    (out,) = run_workers(["tfmw.bench.restart_worker", json.dumps(opts)], 1, 1800)
    return parse(out)


def result_line(result: dict) -> str:
    """The worker's `tfmw bench restart=<json>` line."""
    return loglines.payload_line(loglines.BENCH, RESULT, result)


def parse(output: str) -> dict:
    """The result of the worker's output: its `tfmw bench restart=<json>` line."""
    result = first_payload(output, RESULT)
    if result is None:
        raise BenchError("figure 12: the restart worker printed no result line")
    return result


def cases(result: dict) -> list[tuple[str, str]]:
    """(source, variant) in the order measured (pure)."""
    seen = []
    for key in result["seconds"]:
        source, variant, _ = key.split("|")
        if (source, variant) not in seen:
            seen.append((source, variant))
    return seen


def ratios(result: dict, source: str, variant: str, step: int) -> list[float]:
    """Per round: seconds to the first batch at `step` / at step 0 of the same round (pure)."""
    at_zero = result["seconds"][f"{source}|{variant}|0"]
    return stats.paired_ratios(result["seconds"][f"{source}|{variant}|{step}"], at_zero)


def at_zero(result: dict, source: str, variant: str) -> float:
    """Seconds to the first batch at step 0, median over the rounds (pure)."""
    return stats.median(result["seconds"][f"{source}|{variant}|0"])


HEADERS = ["data source", "pipeline", "restart at step", "s to first batch", "x step 0 (median)", "x step 0 (spread)"]


def table_rows(result: dict) -> list[list]:
    rows = []
    for source, variant in cases(result):
        for step in result["steps"]:
            r = ratios(result, source, variant, step)
            low, high = stats.spread(r)
            rows.append(
                [
                    source,
                    VARIANTS[variant],
                    f"{step:,}",
                    stats.median(result["seconds"][f"{source}|{variant}|{step}"]),
                    stats.median(r),
                    f"{low:.2f}-{high:.2f}",
                ]
            )
    return rows


def verdict(result: dict) -> tuple[bool, dict[str, float]]:
    """(every source's restart at the last step within TARGET of step 0, {source: median ratio}) (pure)."""
    last = result["steps"][-1]
    worst = {s: stats.median(ratios(result, s, v, last)) for s, v in cases(result) if v == "after"}
    return all(r <= TARGET for r in worst.values()), worst


def plot(result: dict, path, subtitle: str) -> None:
    pairs = cases(result)
    fig, axes = plots.subplots(1, 2, figsize=(11, 4.6))
    for ax, variant in zip(axes, ("after", "before"), strict=True):
        for source, v in pairs:
            if v != variant:
                continue
            medians = [stats.median(ratios(result, source, v, s)) for s in result["steps"]]
            ax.plot([f"{s:,}" for s in result["steps"]], medians, marker="o", label=source)
        ax.axhline(TARGET, color="black", ls="--", lw=1, label=f"target {TARGET}x")
        ax.set_yscale("log")
        ax.set_xlabel("restart at step S")
        ax.set_ylabel("time to the first batch, x step 0 (log)")
        ax.set_title(VARIANTS[variant], fontsize=9)
        ax.legend(fontsize=8)
    fig.suptitle(f"Figure 12: what the run's length costs: a restart at step S\n{subtitle}", fontsize=10)
    plots.save(fig, path)


# ---------------------------------------------------------------- the figure

TITLE = "Figure 12: what the run's length costs"


def run_figure(bench: BenchRun) -> str:
    return measured(bench, sys.modules[__name__], TITLE, "fig12_restart.png", section)


def section(result: dict, table_rows, headers, load: str) -> str:
    """Figure 12's section of docs/benchmarks.md (pure)."""
    met, worst = verdict(result)
    last = result["steps"][-1]
    before = {s: stats.median(ratios(result, s, v, last)) for s, v in cases(result) if v == "before"}
    shape = "x".join(map(str, result["shape"]))
    low, high = stats.spread(
        [
            r
            for src, v in cases(result)
            if v == "after"
            for step in result["steps"][1:]
            for r in ratios(result, src, v, step)
        ]
    )
    judged = f"**Target {'met' if met else 'missed'}:** a restart at step {last:,} takes "
    return paragraphs(
        "## Figure 12: what the run's length costs: a restart at step S",
        image("fig12_restart.png", "time to the first batch at step S, as a multiple of step 0"),
        settings_line(
            f"{result['examples']:,} synthetic examples of shape {shape}, in memory and as 4 TFRecord shards "
            "(the trainer's own writer); one worker, batch "
            f"{result['batch']}; each cell: building the worker's input at step S and taking its first batch, "
            f"the fastest of {result['repeats']} tries in alternating order of S (the old pipeline past step 0: one "
            f"try), in "
            f"{result['rounds']} rounds; ratios to step 0 of the same round, median and spread over the rounds. "
            "The old pipeline (shuffle buffer 1024, repeat, batch, `skip(S)`) is rebuilt by the bench as the "
            "reference. The TFRecord count every start makes (`build_input`, the same at every S) is not in "
            "the times.",
            load,
        ),
        table(headers, table_rows),
        judged
        + ", ".join(f"{r:.2f}x of step 0 on {s}" for s, r in worst.items())
        + f" (target: within {TARGET}x), where the old pipeline took "
        + ", ".join(f"{r:,.0f}x on {s}" for s, r in before.items())
        + f". Single rounds of the trainer's input past step 0 range from {low:.2f}x to {high:.2f}x of step 0 on this "
        "shared machine. The trainer's input starts at S by arithmetic: in memory, nothing before the position is "
        "read; "
        "from TFRecord, at most the current epoch of the worker's share up to the position is read, unparsed: "
        "bounded by the share, whatever S (docs/training.md, Data). At step 0 the trainer's input is the slower "
        "one to start: "
        + ", ".join(
            f"{at_zero(result, s, 'after'):.3f} s against {at_zero(result, s, 'before'):.3f} s on {s}"
            for s, v in cases(result)
            if v == "after"
        )
        + " (it builds the permutation's functions); it pays that once per start, the old one paid "
        "for every step before S.",
    )
